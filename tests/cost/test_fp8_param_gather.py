"""FP8 parameter gathering (Megatron-LM --fp8-param-gather, on in every Megatron-Bridge FP8 recipe;
torchao enable_fsdp_float8_all_gather): ZeRO / FSDP all-gather each weight as its 1-byte FP8
cast instead of bf16, and the gathered copy the GEMMs read is that cast."""

from __future__ import annotations

import pytest

from autopar.cost import estimate
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.costparams import params_for_cluster
from autopar.specs.training import Precision

MODEL = load_model("llama3-70b")
CLUSTER = load_cluster("dgx-h100-superpod").with_gpus(256)
PLAN = parse_plan("tp=8,pp=1,dp=32,mbs=1,zero=3,recompute=full")


def _estimate(gather: bool, plan=PLAN):
    t = TrainingSpec(seq_len=8192, global_batch_size=256, precision=Precision.fp8, fp8_param_gather=gather)
    return estimate(MODEL, CLUSTER, t, plan, params_for_cluster(CLUSTER))


def test_gathered_copies_are_one_byte():
    # ZeRO-3 with reshard after forward holds the layer in hand and the prefetched next one:
    # 2 x one Llama-3 70B layer / tp 8. Layer: attention 8192 x (8192 + 2 x 1024) + 8192^2 =
    # 151.0e6, gated MLP 3 x 8192 x 28672 = 704.6e6, two norms 16,384: 855.6e6 / 8 = 106.95e6,
    # x 2 = 213.9e6 elements, each 2 bytes in bf16 and 1 byte gathered in FP8
    bf16, fp8 = _estimate(False), _estimate(True)
    saved = bf16.memory_breakdown["working_buffers"] - fp8.memory_breakdown["working_buffers"]
    assert saved == pytest.approx(213.9e6, rel=1e-3)
    assert bf16.memory_breakdown["weights"] == fp8.memory_breakdown["weights"]  # the shards stay as trained


def test_half_the_gather_bytes_shortens_fsdp_comm():
    # 256 H100 over 32 nodes: the FSDP group of 32 spans nodes, so the per-micro-batch gathers
    # (forward and backward) are the step's largest exposed part; halving their bytes must cut
    # fsdp_comm by less than half (the fp32 gradient reduce-scatter is unchanged)
    bf16, fp8 = _estimate(False), _estimate(True)
    before, after = bf16.time_breakdown["fsdp_comm"], fp8.time_breakdown["fsdp_comm"]
    assert 0.5 * before < after < 0.9 * before
    assert fp8.step_seconds < bf16.step_seconds


def test_needs_fp8_and_is_inert_without_sharding():
    with pytest.raises(ValueError, match="fp8_param_gather=True gathers FP8 weights: needs precision fp8"):
        TrainingSpec(seq_len=8192, global_batch_size=256, precision=Precision.bf16, fp8_param_gather=True)
    ddp = parse_plan("tp=8,pp=1,dp=32,mbs=1,zero=0,recompute=full")
    assert _estimate(True, ddp).step_seconds == _estimate(False, ddp).step_seconds
