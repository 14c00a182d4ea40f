"""TP traffic of MoE layers (Megatron-Core MoEAlltoAllTokenDispatcher: 'permute -> A2A(EP) ->
AG(TP)'): with sequence parallelism the router and the dispatch work on each rank's sequence
shard, so a MoE layer has the attention half's AllGather + ReduceScatter pair only; its MLP half's
TP traffic is the expert-TP AllGather of what the dispatch brought, charged with the dispatch
(also at ep = 1). Shared experts are a TP-split MLP and keep their pair."""

from __future__ import annotations

import pytest

from autopar.cost import make_batch
from autopar.cost.layer import layer_forward
from autopar.specs import ModelSpec, TrainingSpec, parse_plan

S, H = 4096, 4096
BASE = dict(num_layers=2, hidden_size=H, num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=14336, vocab_size=32000)
DENSE = ModelSpec(name="dense", **BASE)
MOE = ModelSpec(name="moe", num_experts=8, moe_top_k=2, moe_ffn_hidden_size=14336, **BASE)
SHARED = ModelSpec(name="moe-shared", num_experts=8, moe_top_k=2, moe_ffn_hidden_size=14336, moe_shared_expert_ffn_size=14336, **BASE)


def _forward(model, plan, node, params):
    training = TrainingSpec(seq_len=S, global_batch_size=64, flash_attention=True)
    return layer_forward(make_batch(model, node, training, [parse_plan(plan)], params), 0)


def test_moe_layer_has_the_attention_pair_only(h100_node, params):
    plan = "tp=4,ep=2,etp=1,tp_overlap=off"
    dense = _forward(DENSE, plan, h100_node, params)
    moe = _forward(MOE, plan, h100_node, params)
    shared = _forward(SHARED, plan, h100_node, params)
    assert moe["tp"][0] == pytest.approx(dense["tp"][0] / 2, rel=1e-9)
    assert shared["tp"][0] == pytest.approx(dense["tp"][0], rel=1e-9)


def test_expert_tp_gather_is_charged_without_expert_parallelism(h100_node, params):
    folded = _forward(MOE, "tp=4,ep=1,etp=1", h100_node, params)
    expert_tp = _forward(MOE, "tp=4,ep=1,etp=4", h100_node, params)
    assert folded["ep"][0] == 0.0
    assert expert_tp["ep"][0] > 0.0  # AG of the routed copies over the 4 expert-TP ranks (and its RS back)
