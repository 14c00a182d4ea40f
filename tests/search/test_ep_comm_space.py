"""The EP communication options the search offers (autopar.space.ep_comm_options): DeepEP with
the AllToAll overlapped where the EP group crosses the network (DeepSeek-V3 report sec. 3.2),
the plain AllToAll everywhere, any pair by --fix."""

from __future__ import annotations

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
    # --fix picks any pair, also within a node; EP 1 has no EP communication to overlap
    assert ep_comm_options(8, 8, {"dispatcher": "allgather"}) == [(GATHER, 0), (GATHER, 1)]
    assert ep_comm_options(8, 8, {"dispatcher": "deepep", "ep_overlap": 1}) == [(DEEP, 1)]
    assert ep_comm_options(1, 8, {"ep_overlap": 1}) == []


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
    from autopar.cli.search import parse_fix

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
