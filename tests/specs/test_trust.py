"""Every estimate carries the validated error of its family (issue 9 item 4), read from the
shipped summary profiles/validation/families.json; a family without published runs warns."""

from __future__ import annotations

import json

from autopar.cost import estimate
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.trust import FAMILIES_FILE


def test_estimate_carries_its_family_error():
    table = json.loads(FAMILIES_FILE.read_text())["families"]
    est = estimate(load_model("llama3-8b"), load_cluster("dgx-h100"), TrainingSpec(seq_len=4096, global_batch_size=64), parse_plan("tp=2"))
    v = est.validated
    assert v.family == "dense/megatron-style/bf16/hopper"
    assert v.num_rows == table[v.family]["num_rows"] > 0 and v.mape == table[v.family]["mape"] and v.warning is None


def test_family_without_runs_warns():
    # no published dense BF16 Megatron-style run on Blackwell in tests/data, held out or not (the
    # Megatron-Bridge dense rows are FP8, MXFP8 and NVFP4): the estimate says it is unvalidated
    est = estimate(load_model("llama3-8b"), load_cluster("dgx-b200"), TrainingSpec(seq_len=4096, global_batch_size=64, precision="bf16"),
                   parse_plan("tp=1"))
    assert est.validated.num_rows == 0 and est.validated.mape is None and est.validated.holdout_rows == 0
    assert "no published runs validate dense/megatron-style/bf16/blackwell" in est.validated.warning
