"""Busiest expert-parallel rank under learned routing (autopar.cost.moe.expert_load_factor).

Wang et al. 2024 (arXiv 2408.15664) Table 2: MaxVio_global 0.52 with an auxiliary loss and 0.04
with the loss-free expert bias, 64 experts top-6 -> per-expert coefficients of variation
0.52 / 2.344 = 0.22 and 0.04 / 2.344 = 0.017 (profiles/cost/defaults.yaml moe)."""

from __future__ import annotations

import pytest

from autopar.cost.context import Batch
from autopar.cost.moe import expected_max_standard_normal, expert_load_factor
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan
from autopar.specs.training import MoeRouting


def _moe(experts: int, bias: bool = False) -> ModelSpec:
    return ModelSpec(name="m", num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
                     num_experts=experts, moe_top_k=8, moe_ffn_hidden_size=512, moe_router_expert_bias=bias)


def _factor(model: ModelSpec, ep: int, **training) -> float:
    cluster = load_cluster("dgx-h100").with_gpus(64)
    t = TrainingSpec(seq_len=4096, global_batch_size=64, **training)
    tab = PlanTable.from_plans([Plan(tp=1, pp=1, dp=64, ep=ep)], 64)
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
