"""The EP communication options the search offers (autopar.space.ep_comm_options): DeepEP with
the AllToAll overlapped where the EP group crosses the network (DeepSeek-V3 report sec. 3.2),
the plain AllToAll everywhere, any pair by --fix."""

from __future__ import annotations

import numpy as np
import pytest

from autopar.cost import estimate
from autopar.cost.table import DISPATCHER
from autopar.errors import InputError
from autopar.space import SpaceOptions, enumerate_space, ep_comm_options
from autopar.specs import Precision, TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.plan import Dispatcher

A2A, DEEP, GATHER = (DISPATCHER.index(d) for d in (Dispatcher.alltoall, Dispatcher.deepep, Dispatcher.allgather))


def test_options_by_ep_degree():
    # 8 GPUs per node: EP 8 stays in a node (AllToAll only), EP 16 crosses it (DeepEP + overlap too)
    assert ep_comm_options(1, 8, {}) == [(A2A, 0)]
    assert ep_comm_options(8, 8, {}) == [(A2A, 0)]
    assert ep_comm_options(16, 8, {}) == [(A2A, 0), (DEEP, 1)]
    # --fix picks any pair a framework runs, also within a node; EP 1 has no EP communication to
    # overlap, and only the alltoall and deepep (Megatron 'flex') dispatchers overlap it
    # (Megatron-Core TransformerConfig: 'overlap_moe_expert_parallel_comm is supported with
    # alltoall/flex token dispatcher')
    assert ep_comm_options(8, 8, {"dispatcher": "allgather"}) == [(GATHER, 0)]
    assert ep_comm_options(8, 8, {"dispatcher": "deepep", "ep_overlap": 1}) == [(DEEP, 1)]
    assert ep_comm_options(8, 8, {"ep_overlap": 1}) == [(A2A, 1), (DEEP, 1)]
    assert ep_comm_options(1, 8, {"ep_overlap": 1}) == []


def test_fixing_the_allgather_dispatcher_with_overlap_names_the_rule():
    m, c = load_model("mixtral-8x7b"), load_cluster("dgx-h100").with_gpus(64)
    t = TrainingSpec(seq_len=4096, global_batch_size=256, precision=Precision.bf16)
    with pytest.raises(InputError, match="fix.ep_overlap='on'.*alltoall or deepep dispatcher.*not allgather"):
        enumerate_space(m, c, t, SpaceOptions(fixed={"dispatcher": "allgather", "ep_overlap": 1}))


def _space(fixed):
    m, c = load_model("mixtral-8x7b"), load_cluster("dgx-h100").with_gpus(64)
    t = TrainingSpec(seq_len=4096, global_batch_size=256, precision=Precision.bf16)
    return m, c, t, enumerate_space(m, c, t, SpaceOptions(fixed=fixed))


def test_space_holds_deepep_only_for_cross_node_ep():
    # Mixtral has 8 experts: EP <= 8 fits in a node of 8, so the default space has no DeepEP row
    _, _, _, tab = _space({})
    assert set(tab.dispatcher.tolist()) == {A2A} and set(tab.ep_overlap.tolist()) == {0}
    _, _, _, fixed = _space({"dispatcher": "deepep", "ep_overlap": 1, "tp": 1})
    assert len(fixed) > 0 and set(fixed.dispatcher.tolist()) == {DEEP} and set(fixed.ep_overlap.tolist()) == {1}
    assert (fixed.ep > 1).all()


def test_deepseek_space_offers_the_published_ep_communication():
    # DeepSeek-V3 on 2,048 H800 (EP64 PP16, DeepEP + DualPipe overlap): the space holds EP64
    # rows with DeepEP and overlap, and that plan re-costs as the search's table says
    m, c = load_model("deepseek-v3"), load_cluster("hgx-h800").with_gpus(2048)
    t = TrainingSpec(seq_len=4096, global_batch_size=15360, precision=Precision.fp8)
    fixed = {"tp": 1, "pp": 16, "ep": 64, "mbs": 1, "zero": 1, "recompute": "full", "order": "tp-cp-ep-dp-pp", "cp": 1}
    tab = enumerate_space(m, c, t, SpaceOptions(fixed=fixed))
    pairs = set(zip(tab.dispatcher.tolist(), tab.ep_overlap.tolist()))
    assert pairs == {(A2A, 0), (DEEP, 1)}
    # overlap and node de-duplication cut the exposed EP time: the published pair is faster
    plain = estimate(m, c, t, parse_plan("tp=1,pp=16,ep=64,mbs=1,zero=1,recompute=full,schedule=zero-bubble"))
    deep = estimate(m, c, t, parse_plan("tp=1,pp=16,ep=64,mbs=1,zero=1,recompute=full,schedule=zero-bubble,dispatcher=deepep,ep_overlap=on"))
    assert deep.step_seconds < 0.6 * plain.step_seconds  # 21.6 s vs 51.2 s measured on this model


def test_fix_rejects_a_bad_switch():
    from autopar.fix import parse_fix

    assert parse_fix("dispatcher=deepep,ep_overlap=on") == {"dispatcher": "deepep", "ep_overlap": 1}
    with pytest.raises(InputError, match="fix.ep_overlap"):
        parse_fix("ep_overlap=maybe")
    with pytest.raises(InputError, match="fix.dispatcher"):
        parse_fix("dispatcher=nccl")


def test_ep_overlap_on_a_dense_model_names_the_rule():
    m, c = load_model("llama3-8b"), load_cluster("dgx-h100").with_gpus(8)
    t = TrainingSpec(seq_len=4096, global_batch_size=32)
    with pytest.raises(InputError, match="fix.ep_overlap.*has no experts"):
        enumerate_space(m, c, t, SpaceOptions(fixed={"ep_overlap": 1}))


def test_mla_space_offers_deepseek_selective_recompute():
    """On an MLA model the search's selective recompute is DeepSeek-V3's (report sec. 3.2.3:
    RMSNorm, MLA up-projection, the experts' SwiGLU output); elsewhere Megatron's core_attn
    selective is left out under a fused attention kernel, and torchtitan's per-op SAC names no
    modules. Each MLA selective plan costs as the same plan written out with its modules."""
    from autopar.cost.table import RECOMPUTE, modules_code
    from autopar.specs.plan import Recompute, RecomputeModule
    selective = RECOMPUTE.index(Recompute.selective)
    m, c = load_model("deepseek-v2-lite"), load_cluster("dgx-h100").with_gpus(16)
    t = TrainingSpec(seq_len=4096, global_batch_size=64, precision=Precision.bf16)
    tab = enumerate_space(m, c, t, SpaceOptions(fixed={"tp": 1, "pp": 1, "mbs": 1, "zero": 1}))
    code = modules_code((RecomputeModule.layernorm, RecomputeModule.mla_up_proj, RecomputeModule.moe_act))
    sel = tab.recompute == selective
    assert sel.any() and set(tab.rc_modules[sel].tolist()) == {code}
    row = int(np.flatnonzero(sel)[0])
    plan = tab.plan(row)
    assert plan.recompute_modules == (RecomputeModule.layernorm, RecomputeModule.moe_act, RecomputeModule.mla_up_proj)
    one = estimate(m, c, t, parse_plan(plan.text()))
    full = estimate(m, c, t, parse_plan(plan.text().replace("recompute=selective", "recompute=full").split(",recompute_modules")[0]))
    assert one.memory_bytes_per_gpu < estimate(m, c, t, parse_plan(plan.text().split(",recompute_modules")[0].replace(
        "recompute=selective", "recompute=none"))).memory_bytes_per_gpu
    assert one.step_seconds < full.step_seconds
    # a model without MLA names its own output-discarding checkpoints: a MoE layer's pre-MLP norm
    # (a module of its own) and the experts' activation (Megatron-Bridge's GPT-OSS recipe: ["layernorm", "moe_act"])
    from autopar.cost.table import modules_code
    mx, cx = load_model("mixtral-8x7b"), load_cluster("dgx-h100").with_gpus(64)
    tx = TrainingSpec(seq_len=4096, global_batch_size=256, precision=Precision.bf16)
    tab_x = enumerate_space(mx, cx, tx, SpaceOptions(fixed={"tp": 2, "pp": 1}))
    assert (tab_x.recompute == selective).any()
    assert (tab_x.rc_modules[tab_x.recompute == selective] == modules_code((RecomputeModule.layernorm, RecomputeModule.moe_act))).all()
    # torchtitan's per-op SAC: selective rows name no modules
    tt = TrainingSpec(seq_len=4096, global_batch_size=64, precision=Precision.bf16, stack="torchtitan")
    tab_tt = enumerate_space(m, c, tt, SpaceOptions(fixed={"tp": 1, "pp": 1, "mbs": 1, "zero": 1}))
    assert (tab_tt.rc_modules[tab_tt.recompute == selective] < 0).all() or not (tab_tt.recompute == selective).any()


def test_selective_modules_follow_the_model():
    from autopar.cost.table import modules_of
    from autopar.space import selective_modules
    from autopar.specs.plan import RecomputeModule as R
    m = load_model("deepseek-v2-lite")
    fused = TrainingSpec(seq_len=4096, global_batch_size=64, precision=Precision.bf16)
    unfused = TrainingSpec(seq_len=4096, global_batch_size=64, precision=Precision.bf16, flash_attention=False)
    # DeepSeek-V3's recipe (report sec. 3.2.3), plus the score tensors under unfused attention
    assert modules_of(selective_modules(m, fused)) == (R.layernorm, R.moe_act, R.mla_up_proj)
    assert modules_of(selective_modules(m, unfused)) == (R.core_attn, R.layernorm, R.moe_act, R.mla_up_proj)
    assert modules_of(selective_modules(load_model("mixtral-8x7b"), fused)) == (R.layernorm, R.moe_act)
    assert selective_modules(load_model("llama3-8b"), fused) < 0  # NONE: a dense layer's norms are fused into its GEMMs
    titan = TrainingSpec(seq_len=4096, global_batch_size=64, precision=Precision.bf16, stack="torchtitan")
    assert selective_modules(load_model("llama3-8b"), titan) < 0  # NONE: per-op SAC names no modules
