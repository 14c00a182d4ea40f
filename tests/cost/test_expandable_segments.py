"""The allocator's fragmentation slack and PyTorch's expandable segments (TrainingSpec.expandable_segments,
StackSpec.expandable_segments). With fixed segments the caching allocator strands memory between
them (profiles/cost/defaults.yaml memory.fragmentation, 5% of the allocated bytes); with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True it maps physical memory into growable segments in
2 MiB pages (PyTorch PR #96995) and remaps free pages where they are needed, so none is counted."""

from __future__ import annotations

import pytest

from autopar.cost import estimate
from autopar.specs import TrainingSpec, parse_plan
from autopar.specs.model import load_model
from autopar.specs.training import Stack
from autopar.validation.rows import row_inputs

PLAN = "tp=8,pp=4,dp=2,vpp=2,mbs=1,zero=1,recompute=none"


def _memory(node, params, **training) -> tuple[float, dict[str, float]]:
    spec = TrainingSpec(seq_len=8192, global_batch_size=64, **training)
    est = estimate(load_model("llama3-70b"), node.with_gpus(64), spec, parse_plan(PLAN), params)
    return est.memory_bytes_per_gpu, est.memory_breakdown


def test_expandable_segments_drop_the_slack_and_nothing_else(superpod, params):
    """Peak = allocated x (1 + fragmentation) + reserve with fixed segments, allocated + reserve with
    expandable ones: the same allocated bytes, so (peak - reserve) differs by exactly 1.05."""
    caching, parts_c = _memory(superpod, params, expandable_segments=False)
    expandable, parts_e = _memory(superpod, params, expandable_segments=True)
    reserve = params.memory.reserve_bytes
    assert params.memory.fragmentation == pytest.approx(0.05)
    assert (caching - reserve) / (expandable - reserve) == pytest.approx(1.05, rel=1e-9)
    assert parts_e["fragmentation"] == 0.0
    assert parts_c["fragmentation"] == pytest.approx(0.05 * (expandable - reserve), rel=1e-9)
    for k in ("weights", "gradients", "optimizer_states", "activations", "working_buffers"):
        assert parts_c[k] == pytest.approx(parts_e[k], rel=1e-12)


def test_the_stack_sets_the_default(superpod, params):
    """torchtitan's launcher sets expandable segments (run_train.sh), Megatron-LM's does not; a run
    that says otherwise wins."""
    titan, parts_t = _memory(superpod, params, stack=Stack.torchtitan)
    titan_off, parts_off = _memory(superpod, params, stack=Stack.torchtitan, expandable_segments=False)
    assert parts_t["fragmentation"] == 0.0
    assert parts_off["fragmentation"] > 0.0
    reserve = params.memory.reserve_bytes
    assert (titan_off - reserve) / (titan - reserve) == pytest.approx(1.05, rel=1e-9)
    _, parts_m = _memory(superpod, params)  # Megatron-LM keeps the slack
    allocated = sum(v for k, v in parts_m.items() if k not in ("fragmentation", "framework_reserve"))
    assert parts_m["fragmentation"] == pytest.approx(0.05 * allocated, rel=1e-9)


ROW = {"id": "x", "source_group": "g", "model_name": "Llama 3 8B", "num_layers": 32, "hidden_size": 4096,
       "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336, "seq_len": 8192, "num_gpus": 64,
       "global_batch_size": 64, "gpu_normalized": "H100-80GB", "tp": 1, "pp": 1, "tokens_per_sec_per_gpu": 5000.0}


@pytest.mark.parametrize("software, version, fsdp, expected", [
    # Megatron-Bridge perf recipes set expandable_segments:True in their env_vars ...
    ("NeMo / Megatron-Bridge / Megatron-Core", "NeMo 26.02.01 container", 0, True),
    # ... except with Megatron-FSDP's nccl_ub, which Megatron-Core refuses with them before torch 2.11
    ("NeMo / Megatron-Bridge / Megatron-Core", "NeMo 26.02.01 container", 1, None),
    # NeMo 1.0's launcher set no allocator option: the stack's default (none)
    ("NeMo", "nemo:24.07", 0, None),
    # torchtitan from a5e57e4a9 (2024-10-22) on; earlier runs had fixed segments
    ("torchtitan", "2024-12-26", 0, None),
    ("torchtitan", "2024-05-01", 0, False),
])
def test_rows_say_which_allocator_ran(software, version, fsdp, expected):
    row = {**ROW, "software": software, "software_version": version, "fsdp": fsdp}
    assert row_inputs(row).training.expandable_segments is expected
