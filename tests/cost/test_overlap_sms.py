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


def test_userbuffers_gemms_run_beside_sixteen_sms():
    # TE initialize_ub: the 'pipeline' (proj and fc2 forward) and 'bulk' (qkv and fc1 dgrad and
    # wgrad) overlaps launch their GEMMs with a 16-SM margin; LLaMA-3 70B layer, TP 8 with SP on H100
    from autopar.cost.context import Batch
    from autopar.cost.layer import gemm_time, layer_forward
    from autopar.cost.table import PlanTable
    model = load_model("llama3-70b")
    cluster = load_cluster("dgx-h100").with_gpus(8)
    params = load_cost_params()
    tab = PlanTable.from_plans([Plan(tp=8, pp=1, dp=1, sp=True, tp_overlap=True), Plan(tp=8, pp=1, dp=1, sp=True, tp_overlap=False)], 8)
    b = Batch(model, cluster, TrainingSpec(seq_len=8192, global_batch_size=8), params, tab)
    f = layer_forward(b, 0)
    T, h, F = 8192, 8192, 28672
    out, fc2 = float(gemm_time(b, T, h, h / 8, "bf16")), float(gemm_time(b, T, h, F / 8, "bf16"))
    qkv, fc1 = float(gemm_time(b, T, (8192 + 2 * 1024) / 8, h, "bf16")), float(gemm_time(b, T, 2 * F / 8, h, "bf16"))
    slow = 16 / (132 - 16)
    hidden = params.comm.tp_overlap
    assert f["tp"][0] - f["tp"][1] * (1 - hidden) == pytest.approx(slow * (out + fc2), rel=1e-6)
    assert f["tp_bwd"][0] - f["tp_bwd"][1] * (1 - hidden) == pytest.approx(slow * 2 * (qkv + fc1), rel=1e-6)
    # by hand: proj 2 x 8192 x 8192 x 1024 + fc2 2 x 8192 x 8192 x 3584 = 6.2e11 FLOP, ~0.8 ms at
    # ~770 TFLOP/s; 16/116 of it is ~0.11 ms per layer and micro-batch in the forward
    assert slow * (out + fc2) == pytest.approx(0.11e-3, rel=0.2)


def test_ep_overlap_leaves_the_warmup_and_cooldown_passes_exposed():
    # Megatron's combined 1F1B pairs a forward with a backward only in the steady state
    # (megatron/core/pipeline_parallel/schedules.py get_pp_rank_microbatches: warmup chunks
    # (pp - rank - 1) x 2 + (vpp - 1) x pp + 1 with the A2A overlap). pp 8, vpp 4, 64 micro-batches:
    # mean over ranks 7 + 24 + 1 = 32 of 256 chunk passes run alone, 0.125; pp 1 (dp 128, mbs 2:
    # 4 micro-batches): the first forward and the last backward, 1 of 4
    from autopar.cost.context import Batch
    from autopar.cost.layer import _paired_ep_exposed, layer_forward, layer_parts
    from autopar.cost.moe import overlap_exposed
    from autopar.cost.table import PlanTable

    model = load_model("qwen3-235b-a22b")
    cluster = load_cluster("dgx-h100").with_gpus(256)
    training = TrainingSpec(seq_len=4096, global_batch_size=1024)
    plans = [Plan(tp=2, pp=8, dp=16, ep=32, vpp=4, mbs=1, zero=1, sp=True, ep_overlap=True),
             Plan(tp=2, pp=1, dp=128, ep=32, mbs=2, zero=1, sp=True, ep_overlap=True),
             Plan(tp=2, pp=8, dp=16, ep=32, vpp=4, mbs=1, zero=1, sp=True)]
    b = Batch(model, cluster, training, load_cost_params(), PlanTable.from_plans(plans, 256))
    assert list(b.ep_unpaired) == pytest.approx([32 / 256, 1 / 4, 0.0])
    f, parts = layer_forward(b, 5), layer_parts(b, 5)
    full = 2 * f["ep"]
    hidden = _paired_ep_exposed(b, f, b.wgrad)
    # at 4,096 tokens over 4 nodes an AllToAll outlasts the forward attention block beside it, so
    # more than the SMs DeepEP holds is paid (what a whole-layer pairing would charge)
    assert hidden[0] > 2 * overlap_exposed(b, full, 10 * full)[0]
    assert parts["ep_comm"][0] == pytest.approx(0.875 * hidden[0] + 0.125 * full[0], rel=1e-9)
    assert parts["ep_comm"][1] == pytest.approx(0.75 * hidden[1] + 0.25 * full[1], rel=1e-9)
    assert parts["ep_comm"][2] == pytest.approx(full[2], rel=1e-9)  # no overlap: all exposed
    assert hidden[0] < parts["ep_comm"][0] < full[0]


def test_ep_overlap_pairs_each_alltoall_with_one_compute_node():
    # Megatron-Core's schedule_layer_1f1b: backward combine | forward attention block, forward
    # dispatch | backward MLP dgrad, backward dispatch | forward MLP + MLP wgrad, forward combine |
    # backward attention block + wgrad. Hand case (seconds, one micro-batch, one layer): each
    # AllToAll 1.0 (dispatch + combine forward 2.0); attention GEMMs 0.2, core 0.1 forward / 0.25
    # backward, attention element-wise 0.1 forward / 0.2 backward; MoE GEMMs 1.5, element-wise
    # 0.1 / 0.2. Nodes: attention forward 0.2 + 0.1 + 0.1 = 0.4; MLP dgrad 1.5 + 0.2 = 1.7; MLP
    # forward + wgrad 1.6 + 1.5 = 3.1; attention backward 0.4 + 0.25 + 0.2 = 0.85. Exposed
    # without SM cost: (1 - 0.4) + (1 - 0.85) = 0.75 s. The whole layer's 6.05 s of compute would
    # have hidden all 4 s.
    import numpy as np

    from autopar.cost.layer import _paired_ep_exposed

    class NoSmCost:  # overlap_exposed reads the GPU's SM count: None charges no SMs
        params = load_cost_params()
        cluster = load_cluster("dgx-h100").model_copy(update={"gpu": load_cluster("dgx-h100").gpu.model_copy(update={"num_sms": None})})

    a = lambda x: np.array([x])  # noqa: E731
    f = {"ep": a(2.0), "gemm": a(1.7), "gemm_moe": a(1.5), "gemm_mlp": a(0.0), "attn": a(0.1), "attn_bwd": a(0.25),
         "elem": a(0.2), "moe_elem": a(0.1), "elem_bwd": a(0.4), "cp_merge": a(0.0), "cp_merge_bwd": a(0.0),
         "tp": a(0.0), "tp_bwd": a(0.0)}
    assert _paired_ep_exposed(NoSmCost(), f, 1.0)[0] == pytest.approx(0.75)
