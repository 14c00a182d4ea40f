"""Busiest expert-parallel rank under learned routing (autopar.cost.moe.expert_load_factor).

Wang et al. 2024 (arXiv 2408.15664) Table 2: MaxVio_global 0.52 with an auxiliary loss and 0.04
with the loss-free expert bias, 64 experts top-6 -> per-expert coefficients of variation
0.52 / 2.344 = 0.22 and 0.04 / 2.344 = 0.017 (profiles/cost/defaults.yaml moe)."""

from __future__ import annotations

import pytest

from autopar.cost.context import Batch
from autopar.cost.moe import expected_max_standard_normal, expert_load_factor
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan
from autopar.specs.training import MoeRouting
from autopar.validation import load_rows
from autopar.validation.predict import predict_row


def _moe(experts: int, bias: bool = False, balance: str = "micro_batch") -> ModelSpec:
    return ModelSpec(name="m", num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
                     num_experts=experts, moe_top_k=8, moe_ffn_hidden_size=512, moe_router_expert_bias=bias,
                     moe_router_balance=balance)


def _factor(model: ModelSpec, ep: int, plan: Plan | None = None, **training) -> float:
    cluster = load_cluster("dgx-h100").with_gpus(64)
    t = TrainingSpec(seq_len=4096, global_batch_size=64, **training)
    tab = PlanTable.from_plans([plan or Plan(tp=1, pp=1, dp=64, ep=ep)], 64)
    return float(expert_load_factor(Batch(model, cluster, t, load_cost_params(), tab))[0])


def test_expected_max_of_normals():
    # tabulated expected maxima of n standard normals (e.g. Harter 1961): 0.5642, 1.4236, 2.3443 (n = 2, 8, 64)
    assert [round(expected_max_standard_normal(n), 3) for n in (1, 2, 8, 64)] == [0.0, 0.564, 1.424, 2.344]


def test_aux_loss_router_qwen3_layout():
    # 128 experts on EP 8: 16 experts per rank. 1 + 1.4236 x 0.22 / sqrt(16) = 1.0783
    assert _factor(_moe(128), 8) == pytest.approx(1 + 1.4236 * 0.22 / 4, rel=1e-3)


def test_one_expert_per_rank_is_worst():
    # 8 experts on EP 8: no averaging over a rank's experts: 1 + 1.4236 x 0.22 = 1.313
    assert _factor(_moe(8), 8) == pytest.approx(1.313, abs=1e-3)
    assert _factor(_moe(8), 8) > _factor(_moe(64), 8) > _factor(_moe(128), 8)


def test_loss_free_bias_deepseek_layout():
    # DeepSeek-V3 (noaux_tc): 256 experts on EP 64, 4 per rank: 1 + 2.3443 x 0.017 / 2 = 1.0199
    assert _factor(_moe(256, bias=True), 64) == pytest.approx(1 + 2.3443 * 0.017 / 2, rel=1e-3)


def test_forced_measured_and_capacity():
    assert _factor(_moe(8), 8, moe_routing=MoeRouting.balanced) == 1.0
    assert _factor(_moe(8), 8, moe_routing=MoeRouting.contiguous) == 1.0  # AutoModel's FakeBalancedGate: the mean load
    assert _factor(_moe(8), 8, moe_load_imbalance=1.5) == 1.5
    assert _factor(_moe(8), 8, moe_capacity_factor=1.0) == 1.0  # token drop at c = 1 caps the busiest rank
    assert _factor(_moe(8), 1) == 1.0  # one rank holds every expert


def test_expert_tp_sends_local_tokens_then_gathers():
    # Megatron-LM MoEAlltoAllTokenDispatcher: permute -> A2A(EP) -> AG(expert TP). With tp = 2 on
    # one 8-GPU node and EP 4, expert TP 2 and expert TP 1 put the same T / 2 tokens per rank into
    # the all-to-all (each rank's sequence-parallel share); expert TP 2 adds an all-gather of what
    # arrived over its 2-GPU group. Before, the all-to-all carried the gathered T per rank (2x).
    from autopar.cost.comm import Collective, Group, collective_seconds
    from autopar.cost.moe import dispatch_seconds, routed_tokens
    model = _moe(8)
    cluster = load_cluster("dgx-h100").with_gpus(8)
    t = TrainingSpec(seq_len=4096, global_batch_size=8, moe_routing=MoeRouting.balanced)
    tab = PlanTable.from_plans([Plan(tp=2, pp=1, dp=4, ep=4, etp=2, sp=True),
                                Plan(tp=2, pp=1, dp=4, ep=4, etp=1, sp=True)], 8)
    b = Batch(model, cluster, t, load_cost_params(), tab)
    tokens = routed_tokens(b.tokens, tab.tp, tab.etp, tab.sp == 1)
    assert list(tokens) == [4096, 2048]
    with_etp, without = dispatch_seconds(b, tokens, 1.0)
    arrived = 2048 * model.moe_top_k * 2 * model.hidden_size  # bf16 copies each rank receives
    gather = collective_seconds(Collective.all_gather, arrived * 2, Group(2, 2, 1), cluster, b.params)
    assert with_etp - without == pytest.approx(gather, rel=1e-9)


def test_contiguous_routing_reaches_few_nodes():
    from autopar.cost.moe import destination_nodes, dispatch_seconds

    # Nemotron 3 Super's 512 experts top-22 on EP 64 = 8 DGX nodes (64 experts each). Uniform
    # picks reach 8 (1 - (7/8)^22) = 7.576 nodes; 22 consecutive experts cross a node boundary at
    # each of 21 gaps with probability 8/512: 1 + 21 x 8 / 512 = 1.328 nodes
    m = _moe(512).model_copy(update={"moe_top_k": 22})
    assert float(destination_nodes(m, 8, 22)) == pytest.approx(8 * (1 - (7 / 8) ** 22), rel=1e-12)
    assert float(destination_nodes(m, 8, 22, MoeRouting.contiguous)) == 1.328125
    # DeepEP sends a token once per remote node, so the NIC leg shrinks with them
    cluster = load_cluster("dgx-h100-superpod").with_gpus(64)
    tab = PlanTable.from_plans([Plan(tp=1, pp=1, dp=64, ep=64, dispatcher="deepep")], 64)
    seconds = {r: float(dispatch_seconds(Batch(m, cluster, TrainingSpec(seq_len=4096, global_batch_size=64, moe_routing=r),
                                               load_cost_params(), tab), 8192.0, 1.0)[0])
               for r in (MoeRouting.balanced, MoeRouting.contiguous)}
    assert seconds[MoeRouting.contiguous] < 0.5 * seconds[MoeRouting.balanced]
    # by hand, bf16 tokens of 2 x 1024 B, one latency of NVLink (1 us) and the leaf tier (6 us):
    # uniform picks are NIC-bound, 8192 x 7.576 x 7/8 x 2048 B over 50 GB/s x 0.9; the contiguous
    # blocks then wait on NVLink, 8192 x 22 copies x 7/8 x 2048 B over 450 GB/s x 0.82
    latency = 7e-6
    assert seconds[MoeRouting.balanced] == pytest.approx(8192 * 8 * (1 - (7 / 8) ** 22) * 7 / 8 * 2048 / 45e9 + latency, rel=1e-9)
    assert seconds[MoeRouting.contiguous] == pytest.approx(8192 * 22 * 7 / 8 * 2048 / 369e9 + latency, rel=1e-9)


def test_sequence_cv_from_measured_qwen3_routing():
    # profiles/cost/defaults.yaml moe.expert_load_cv_sequence: Qwen3-30B-A3B over ~8k tokens of
    # one domain, concentration 1 - H / ln 128 = 0.154, top expert 8.1x the mean, 58 of 128
    # experts for 90% of the mass. A gamma law of shape s has KL(p || uniform) = digamma(s + 1) - ln s:
    # 0.747 nats -> s = 0.484, CV = 1 / sqrt(s) = 1.44; the same law gives the other two statistics.
    import math

    import numpy as np
    from scipy.optimize import brentq
    from scipy.special import digamma
    shape = brentq(lambda s: digamma(s + 1) - math.log(s) - 0.154 * math.log(128), 0.05, 50)
    assert 1 / math.sqrt(shape) == pytest.approx(load_cost_params().moe.expert_load_cv_sequence, abs=0.01)
    loads = np.random.default_rng(0).gamma(shape, 1 / shape, size=(4000, 128))
    assert float(np.mean(loads.max(axis=1) / loads.mean(axis=1))) == pytest.approx(8.1, rel=0.06)
    ranked = -np.sort(-loads, axis=1)
    covering = (np.cumsum(ranked, axis=1) / ranked.sum(axis=1, keepdims=True) < 0.9).sum(axis=1) + 1
    assert float(covering.mean()) == pytest.approx(58, abs=3)


def test_global_batch_router_mixes_sequences():
    # Qwen3-style router balanced over the global batch: CV^2 = 0.22^2 + 1.44^2 / n, n the
    # sequences one EP group routes together = mbs x max(1, ep x etp / (tp x cp)).
    qwen3 = _moe(128, balance="global_batch")

    def expected(ep: int, n: float) -> float:
        return 1 + expected_max_standard_normal(ep) * (0.22 ** 2 + 1.44 ** 2 / n) ** 0.5 / (128 / ep) ** 0.5

    # ModelZoo long-context layout: tp 4, ep 8, etp 1 -> 2 sequences; 1 + 1.4236 x 1.041 / 4 = 1.370
    long16k = Plan(tp=4, pp=1, dp=16, ep=8, etp=1, sp=True)
    assert _factor(qwen3, 8, long16k) == pytest.approx(expected(8, 2), rel=1e-3)
    assert _factor(qwen3, 8, long16k) == pytest.approx(1.370, abs=2e-3)
    # cp 2 splits each sequence over the group's tp x cp = 8 ranks: one sequence, 1.519
    assert _factor(qwen3, 8, Plan(tp=4, cp=2, pp=1, dp=8, ep=8, etp=1, sp=True)) == pytest.approx(expected(8, 1), rel=1e-3)
    # EP 32 over tp 2 gathers 16 sequences, yet with 4 experts a rank the busiest of 32 still
    # carries 1 + 2.0697 x 0.422 / 2 = 1.437 (ModelZoo r1: 19.7 s steps)
    assert _factor(qwen3, 32, Plan(tp=2, pp=1, dp=32, ep=32, etp=1, sp=True)) == pytest.approx(expected(32, 16), rel=1e-3)
    # more sequences per dispatch -> more even; the micro-batch-balanced router keeps 0.22 throughout
    assert _factor(qwen3, 8, Plan(tp=1, pp=1, dp=64, ep=8, mbs=4)) < _factor(qwen3, 8, long16k)
    assert _factor(_moe(128), 8, long16k) == pytest.approx(1 + 1.4236 * 0.22 / 4, rel=1e-3)


@pytest.mark.parametrize("seq,forced_tflops,dropless_tflops", [(16384, 295, 237), (32768, 335, 277), (65536, 368, 320), (131072, 389, 357)])
def test_modelzoo_dropless_against_forced_balance(seq, forced_tflops, dropless_tflops):
    """Megatron MoE ModelZoo best_practice/qwen3 readme 'H100 - Long Context' (@e8650517, Qwen3-235B
    from its checkpoint, 256 H100, TP4 PP8 VPP4 EP8, CP = seq / 16k): forced balance against the
    real router, measured 1.24 / 1.21 / 1.15 / 1.09 times faster. The model with the per-micro-batch
    skew alone said 1.04 / 1.04 / 1.03 / 1.02; with Qwen3's per-sequence skew over n = 2, 1, 1, 1
    sequences: 1.16 / 1.20 / 1.14 / 1.09. Within 0.09 of the measured ratio."""
    rows = {r["id"]: r for r in load_rows("tests/data/moe_runs.json")}
    name = {16384: "16k", 32768: "32k", 65536: "64k", 131072: "128k"}[seq]
    forced = predict_row(rows[f"new-modelzoo-qwen3-235b-h100-long{name}-forced"]).predicted_tokens_per_second_per_gpu
    dropless = predict_row(rows[f"new-modelzoo-qwen3-235b-h100-long{name}-dropless"]).predicted_tokens_per_second_per_gpu
    assert forced / dropless == pytest.approx(forced_tflops / dropless_tflops, abs=0.09)
    assert forced / dropless > 1.08


def test_imbalance_slows_the_step_but_adds_no_executed_flops():
    """The busiest expert rank sets the step (load factor > 1), but the other ranks run fewer
    tokens, not idle FLOPs: without recompute, FLOPs executed = model FLOPs, so HFU = MFU (HFU
    came out 0.271 against MFU 0.249 for gpt-oss-120b with EP16 before)."""
    from autopar.cost.estimate import estimate
    model, cluster = load_model("gpt-oss-120b"), load_cluster("dgx-h100").with_gpus(256)
    plan = Plan(tp=1, pp=8, dp=32, ep=16, vpp=2, mbs=1, zero=1, recompute="none")
    t = TrainingSpec(seq_len=4096, global_batch_size=1024)
    learned = estimate(model, cluster, t, plan, load_cost_params())
    balanced = estimate(model, cluster, t.model_copy(update={"moe_routing": MoeRouting.balanced}), plan, load_cost_params())
    assert learned.step_seconds > balanced.step_seconds  # the imbalance costs time
    assert learned.hardware_flops_per_step == pytest.approx(learned.model_flops_per_step, rel=1e-9)
    assert learned.hfu == pytest.approx(learned.mfu, rel=1e-9)
