"""torchao's rowwise FP8 recipe moves more bytes than tensorwise scaling (profiles/cost/defaults.yaml
memory.rowwise_*; torchao roofline_utils.py: 8 B per input or output-gradient element, 10 B per
weight element, 4 B per element to rescale a backward GEMM output; the forward runs 5 of an
input's 8 B and 3 of a weight's 10 B)."""

from __future__ import annotations

import pytest

from autopar.cost.context import Batch
from autopar.cost.layer import layer_forward
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan
from autopar.specs.training import Fp8Recipe, Precision, Stack

MODEL = ModelSpec(name="m", num_layers=2, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000)


def _elem(recipe, stack=Stack.megatron) -> tuple[float, float]:
    cluster = load_cluster("dgx-h100").with_gpus(8)
    t = TrainingSpec(seq_len=4096, global_batch_size=8, precision=Precision.fp8, fp8_recipe=recipe, stack=stack)
    b = Batch(MODEL, cluster, t, load_cost_params(), PlanTable.from_plans([Plan(tp=1, pp=1, dp=8)], 8))
    f = layer_forward(b, 0)
    return float(f["elem"][0]), float(f["elem_bwd"][0])


def test_rowwise_casts_hand_count():
    # M = 4096 tokens; GEMMs (N, K): qkv (3072, 1024), out (1024, 1024), gated fc1 (8192, 1024), fc2 (1024, 4096).
    # All casts, rowwise: 8 x 4096 x (1024 + 1024 + 1024 + 4096) + 10 x (1024 x 3072 + 1024 x 1024 + 1024 x 8192 + 4096 x 1024)
    #   = 234.9e6 + 167.8e6 = 402.7e6 B, of which the forward runs the inputs' first kernel (5 B)
    #   and the weights' (3 B): 5 x 29.36e6 + 3 x 16.78e6 = 197.1e6 B; tensorwise: one third of
    #   3 x 4096 x (7168 + 13312) = 83.9e6 B
    hbm = 3.35e12 * load_cost_params().memory.hbm_efficiency
    fwd_t, bwd_t = _elem(Fp8Recipe.tensorwise)
    fwd_r, bwd_r = _elem(Fp8Recipe.rowwise)
    assert fwd_r - fwd_t == pytest.approx((197.13e6 - 83.89e6) / hbm, rel=1e-3)
    # backward, rowwise: the rest of the input and weight casts (402.65e6 - 197.13e6 = 205.5e6), 8 x 4096 x 13312
    # (output gradients) + 4 x (4096 x 7168 + 16.78e6 weights) (rescales) = 205.5e6 + 436.2e6 + 184.5e6
    # = 826.3e6 B; tensorwise: two thirds of 251.7e6 = 167.8e6 B
    assert bwd_r - bwd_t == pytest.approx((826.27e6 - 167.77e6) / hbm, rel=1e-3)


def test_recipe_defaults_to_the_stack():
    t = TrainingSpec(seq_len=4096, global_batch_size=8, precision=Precision.fp8, stack=Stack.torchtitan_compile)
    assert t.fp8_scaling == Fp8Recipe.rowwise  # torchtitan 0.3.0: rowwise recipes only
    assert TrainingSpec(seq_len=4096, global_batch_size=8, precision=Precision.fp8).fp8_scaling == Fp8Recipe.tensorwise
    with pytest.raises(ValueError, match="needs precision fp8"):
        TrainingSpec(seq_len=4096, global_batch_size=8, fp8_recipe=Fp8Recipe.rowwise)
