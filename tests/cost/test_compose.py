"""autopar.cost.compose: costing each core once and composing vpp and schedule gives the same
step time and peak memory as costing every plan (autopar.cost.step.evaluate), row by row."""

from __future__ import annotations

import numpy as np
import pytest

from autopar.cost import evaluate
from autopar.cost.compose import step_and_memory
from autopar.cost.context import Batch
from autopar.space import SpaceOptions, enumerate_space
from autopar.specs import TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import params_for_cluster


@pytest.mark.parametrize("model, gpus, seq, batch, fixed", [
    ("llama3-70b", 64, 8192, 128, {"tp": 8}),
    ("llama3-405b", 256, 8192, 256, {"tp": 8, "pp": 16}),
    ("mixtral-8x7b", 64, 4096, 256, {"tp": 2, "pp": 4}),
    ("deepseek-v3", 256, 4096, 256, {"tp": 1, "pp": 16, "ep": 8}),  # dense prefix + MTP: vpp stays in the core
])
def test_composed_equals_evaluated(model, gpus, seq, batch, fixed):
    m, c = load_model(model), load_cluster("dgx-h100").with_gpus(gpus)
    t = TrainingSpec(seq_len=seq, global_batch_size=batch)
    b = Batch(m, c, t, params_for_cluster(c), enumerate_space(m, c, t, SpaceOptions(fixed=fixed)))
    assert len(np.unique(b.tab.vpp)) > 1  # the space interleaves: there is something to compose
    full = evaluate(b)
    step, memory = step_and_memory(b)
    np.testing.assert_allclose(step, full.step_seconds, rtol=1e-12)
    np.testing.assert_allclose(memory, full.memory_bytes, rtol=1e-12)
