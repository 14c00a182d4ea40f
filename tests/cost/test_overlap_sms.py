"""Communication overlapped with compute still costs the SMs its kernels hold
(autopar.cost.comm.overlapped_seconds; NCCL docs, NCCL_MAX_NCHANNELS: one CUDA block per channel,
'hence the impact on GPU computing resources')."""

from __future__ import annotations

import pytest

from autopar.cost.comm import overlapped_seconds
from autopar.cost.estimate import estimate
from autopar.specs import TrainingSpec, load_cluster
from autopar.specs.costparams import load_cost_params
from autopar.specs.model import load_model
from autopar.specs.plan import Plan
from autopar.specs.training import Stack


def test_hidden_collective_slows_compute_by_the_sms_it_holds():
    # 16 channels on 132 SMs: the compute beside a 1 s collective runs on 116 SMs, so 1 s of its
    # work takes 132/116 s: 16/116 = 0.1379 s lost; what outlasts the compute is exposed in full
    assert overlapped_seconds(1.0, 2.0, 16, 132) == pytest.approx(16 / 116)
    assert overlapped_seconds(3.0, 2.0, 16, 132) == pytest.approx(1.0 + 2.0 * 16 / 116)
    # a GPU without an SM count charges nothing beyond the exposed part
    assert overlapped_seconds(1.0, 2.0, 16, None) == pytest.approx(0.0)


def _fsdp_comm(num_sms):
    # LLaMA-3 8B FSDP over 64 A100 (torchtitan's April 2024 table layout): every layer's gather and
    # reduce-scatter cross nodes and run beside the compute of the next layer
    cluster = load_cluster("dgx-a100").with_gpus(64)
    cluster = cluster.model_copy(update={"gpu": cluster.gpu.model_copy(update={"num_sms": num_sms})})
    training = TrainingSpec(seq_len=8192, global_batch_size=64, stack=Stack.torchtitan)
    plan = Plan(tp=1, pp=1, dp=64, mbs=1, zero=3, recompute="selective")
    return estimate(load_model("llama3-8b"), cluster, training, plan, load_cost_params()).time_breakdown["fsdp_comm"]


def test_fsdp_overlap_cost_scales_with_the_share_of_sms_nccl_holds():
    channels = load_cost_params().comm.nccl.channels
    base, a100, doubled = _fsdp_comm(None), _fsdp_comm(108), _fsdp_comm(216)
    # the hidden seconds are the same in both; only the share of SMs held differs:
    # (c / (108 - c)) / (c / (216 - c)) = (216 - c) / (108 - c) = 2.174 for c = 16
    assert (a100 - base) / (doubled - base) == pytest.approx((216 - channels) / (108 - channels), rel=1e-6)
    # by hand: 32 layers x (two 436 MB bf16 gathers + one 872 MB fp32 reduce-scatter) = 55.8 GB
    # through rings at 8 x 25 GB/s per node (~165 GB/s achieved at 436 MB) = ~0.34 s hidden, of
    # which 16 / (108 - 16) is lost to the compute: ~0.059 s
    assert a100 - base == pytest.approx(0.059, rel=0.25)
