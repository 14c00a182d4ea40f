"""Per-stage pipeline plans (solvers.stages) against the per-stage oracle (solvers.stage_oracle:
every layer split within the bounds x every recompute count of every stage, each costed as a
whole plan by the cost model) on 21 small spaces (24-32 layers, pp <= 4): dense, GQA, MoE with
a dense prefix and an MTP module, 1F1B / interleaved / zero-bubble / GPipe, ZeRO-0/1/3,
recompute free per stage or pinned (none, selective, full), memory-tight and not."""

from __future__ import annotations

import numpy as np
import pytest

from autopar.cost import estimate
from autopar.cost import stages as cost_stages
from autopar.cost.stages import StageModelError, cover_layouts, pipeline_coefficients, sample_stages
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.costparams import params_for_cluster
from autopar.specs.plan import Recompute, Schedule
from solvers import stages
from solvers.stage_oracle import compositions, oracle
from solvers.stages import AGREEMENT_RTOL, STAGE_QUANTUM_SECONDS, StageCore, bounds, core_of, solve_core, stage_plan

# model, model overrides, cluster, GPUs, seq, global batch (sequences), plan, recompute pinned, flash attention
SPACES = [
    ("llama3-8b", {}, "dgx-a100-40gb", 4, 4096, 16, "tp=2,pp=2,mbs=1,zero=1", False, True),
    ("llama2-7b", {}, "dgx-a100-40gb", 8, 4096, 64, "tp=4,pp=2,mbs=2,zero=1", False, True),
    ("mpt-7b", {}, "pcie-workstation", 4, 2048, 32, "tp=2,pp=2,mbs=1,zero=1", False, True),  # nothing fits
    ("mixtral-8x7b", {}, "dgx-h100", 16, 4096, 32, "tp=2,pp=2,ep=4,mbs=1,zero=1", False, True),
    ("mixtral-8x7b", {"num_layers": 24, "moe_first_k_dense_layers": 2, "mtp_num_layers": 1}, "dgx-h100", 16, 4096, 32,
     "tp=2,pp=2,ep=4,mbs=1,zero=1", False, True),
    ("mixtral-8x7b", {"num_layers": 24, "moe_first_k_dense_layers": 3, "mtp_num_layers": 1}, "dgx-h100", 16, 4096, 32,
     "tp=2,pp=2,ep=4,vpp=3,mbs=1,zero=1", False, True),  # the dense prefix stays in the first of 3 chunks
    ("llama3-8b", {"num_layers": 24}, "dgx-a100-40gb", 4, 8192, 16, "tp=2,pp=2,mbs=1,zero=1,schedule=zero-bubble", False, True),
    ("llama3-8b", {"num_layers": 24}, "dgx-a100-40gb", 4, 8192, 16, "tp=2,pp=2,vpp=2,mbs=1,zero=1", False, True),
    ("llama3-8b", {"num_layers": 28}, "dgx-a100-40gb", 4, 4096, 8, "tp=2,pp=2,mbs=1,zero=1,schedule=gpipe", False, True),
    ("llama3-8b", {"num_layers": 24}, "dgx-a100-40gb", 6, 8192, 32, "tp=2,pp=3,mbs=1,zero=1", False, True),
    ("llama2-7b", {"num_layers": 24}, "dgx-a100-40gb", 3, 4096, 24, "tp=1,pp=3,mbs=1,zero=0", False, True),
    ("llama3-8b", {"num_layers": 24}, "dgx-h100", 6, 8192, 48, "tp=2,pp=3,mbs=1,zero=1,schedule=zero-bubble", False, True),
    ("llama3-8b", {"num_layers": 24}, "dgx-a100-40gb", 6, 8192, 48, "tp=2,pp=3,vpp=2,mbs=1,zero=1", False, True),
    ("llama3-8b", {"num_layers": 24}, "dgx-a100-40gb", 24, 8192, 48, "tp=2,pp=3,mbs=1,zero=3", False, True),
    ("llama3-8b", {"num_layers": 24}, "dgx-a100-40gb", 8, 8192, 32, "tp=2,pp=4,mbs=1,zero=1,recompute=none", True, True),
    ("llama3-8b", {"num_layers": 24}, "dgx-a100-40gb", 8, 8192, 32, "tp=2,pp=4,mbs=1,zero=1,recompute=selective", True, False),
    ("llama3-8b", {"num_layers": 24}, "dgx-a100-40gb", 8, 8192, 32, "tp=2,pp=4,mbs=1,zero=1,recompute=full", True, True),
    ("mpt-7b", {"num_layers": 28}, "dgx-a100", 16, 2048, 64, "tp=4,pp=4,mbs=2,zero=1,recompute=none", True, True),
    ("llama2-7b", {"num_layers": 24}, "dgx-a100-40gb", 16, 4096, 64, "tp=4,pp=4,vpp=2,mbs=1,zero=1,recompute=none", True, True),
    ("mixtral-8x7b", {"num_layers": 24}, "dgx-h100", 16, 4096, 32, "tp=1,pp=4,ep=4,mbs=1,zero=1,recompute=none", True, True),
    ("gpt2-xl", {"num_layers": 24}, "pcie-workstation", 4, 1024, 64, "tp=1,pp=4,mbs=2,zero=0,recompute=none,schedule=zero-bubble", True, True),
]


PP3 = next(s for s in SPACES if s[6] == "tp=2,pp=3,mbs=1,zero=1")  # llama3-8b, 24 layers, 6 A100-40GB


def case(name, overrides, cluster, gpus, seq, gbs, text, pinned, flash):
    m = load_model(name).model_copy(update=overrides)
    c = load_cluster(cluster).with_gpus(gpus)
    return m, c, TrainingSpec(seq_len=seq, global_batch_size=gbs, flash_attention=flash), params_for_cluster(c), parse_plan(text), pinned


def quantum_bound(sc, microbatches: int) -> float:
    """How far apart two solutions' exact steps can be when their integer objectives tie or
    invert: each of max T, sum T and the three once-per-step maxima is rounded to half a quantum per stage."""
    a, b, _ = pipeline_coefficients(microbatches, sc.vpp, sc.schedule, sc.core.pp, 0.0)
    return (a + b * sc.core.pp + 3) * STAGE_QUANTUM_SECONDS


@pytest.mark.parametrize("space", SPACES, ids=[f"{s[0]}{s[1].get('num_layers', '')}-{s[3]}gpu-{s[6]}" for s in SPACES])
def test_cpsat_matches_the_oracle(space):
    m, c, t, p, plan, pinned = case(*space)
    sc = core_of(plan, pinned)
    best = oracle(m, c, t, p, sc)
    sol = solve_core(m, c, t, p, sc)
    if best.step_seconds == float("inf"):
        assert sol.status == "INFEASIBLE" and sol.plan is None
        return
    assert sol.status == "OPTIMAL" and sol.gap == 0.0
    m_count = t.global_batch_size // (plan.data_parallel(c.num_gpus) * plan.mbs)
    assert sol.estimate.step_seconds == pytest.approx(best.step_seconds, abs=quantum_bound(sc, m_count))
    # the cost model re-costing the solved plan agrees with the solver's step, and it fits
    assert sol.agreement <= AGREEMENT_RTOL and sol.estimate.feasible
    assert [s.layers for s in sol.estimate.stages] == sol.layers
    assert [s.recompute_layers for s in sol.estimate.stages] == sol.recomputed
    balanced = estimate(m, c, t, plan, p)
    if balanced.feasible:  # the balanced split is inside the per-stage domain
        assert sol.estimate.step_seconds <= balanced.step_seconds + quantum_bound(sc, m_count)


def test_deterministic():
    m, c, t, p, plan, pinned = case(*PP3)
    a, b = (solve_core(m, c, t, p, core_of(plan, pinned)) for _ in range(2))
    assert (a.layers, a.recomputed, a.step_seconds, a.plan.text()) == (b.layers, b.recomputed, b.step_seconds, b.plan.text())


@pytest.mark.parametrize("total, lo, hi", [(126, [0] + [1] * 14 + [0], [12] * 16), (24, [0, 1, 1, 0], [9] * 4), (61, [3, 0], [46, 46]),
                                           (80, [0, 1, 0], [40, 40, 40])])
def test_cover_layouts_reach_every_value_of_every_rank(total, lo, hi):
    vectors = cover_layouts(total, lo, hi)
    assert all(sum(v) == total and all(a <= x <= b for x, a, b in zip(v, lo, hi)) for v in vectors)
    reachable = [set(col) for col in zip(*compositions(total, lo, hi))] if len(lo) <= 3 else None
    seen = [set(col) for col in zip(*vectors)]
    if reachable is not None:
        assert seen == reachable
    else:  # every rank takes every value its bounds and the others' allow
        assert all(seen[r] == set(range(lo[r], hi[r] + 1)) for r in range(len(lo)))
    widest = max(b - a for a, b in zip(lo, hi)) + 1
    assert len(vectors) <= 2 * widest  # a few layouts per value of the widest rank, not one per split


def test_alternating_moe_layers_are_refused():
    m = load_model("mixtral-8x7b").model_copy(update={"moe_layer_freq": 2})
    with pytest.raises(StageModelError, match="moe_layer_freq=2"):
        bounds(m, 4)


def test_a_stage_cost_that_depends_on_other_stages_is_caught(monkeypatch):
    m, c, t, p, plan, _ = case(*PP3)
    real = cost_stages.evaluate

    def coupled(batch):  # a physics change that makes stage 0 slower when stage 2 holds more layers
        res = real(batch)
        layers = np.asarray([pl.pipeline_layout(m.num_layers).rank_decoders() for pl in (batch.tab.plan(i) for i in range(len(batch.tab)))])
        res.stage_seconds[:, 0] += 1e-3 * layers[:, 2]
        return res

    monkeypatch.setattr(cost_stages, "evaluate", coupled)
    with pytest.raises(StageModelError, match="seconds of stage 0 depends on the other stages"):
        sample_stages(m, c, t, p, core_of(plan).core, *bounds(m, 3), True)


def test_a_plan_the_cost_model_costs_differently_is_refused(monkeypatch):
    m, c, t, p, plan, pinned = case(*PP3)
    real = stages.estimate
    monkeypatch.setattr(stages, "estimate", lambda *a: real(*a).model_copy(update={"step_seconds": real(*a).step_seconds * 1.01}))
    sol = solve_core(m, c, t, p, core_of(plan, pinned))
    assert sol.status == "REFUSED" and "re-costs the plan" in sol.reason and sol.agreement == pytest.approx(0.01, rel=1e-6)


@pytest.mark.parametrize("layers, recomputed, expect", [
    ([27, 27, 26], [0, 0, 0], "recompute=none,sp=on,schedule=1f1b,layout=Et*27|t*27|t*26L"),
    ([26, 28, 26], [26, 28, 26], "recompute=full,sp=on,schedule=1f1b"),  # the balanced split: no layout
    ([26, 28, 26], [3, 3, 3], "recompute=full,sp=on,schedule=1f1b,recompute_num_layers=3"),
    ([26, 28, 26], [4, 1, 0], "recompute=full,sp=on,schedule=1f1b,stage_recompute_layers=4/1/0"),
])
def test_stage_plan_says_it_the_simplest_way(layers, recomputed, expect):
    sc = StageCore(parse_plan("tp=8,pp=3,dp=1,mbs=1,zero=1,recompute=full"), 1, Schedule.one_f_one_b, True)
    assert stage_plan(sc, layers, recomputed, load_model("llama3-70b")).text().endswith(expect)


def test_memory_tight_seed_layout_fits_with_per_stage_recompute():
    """LLaMA-3 405B on 16,384 H100, the seed's TP8 PP16 DP128 (seed 001 'Примеры'), at seq 16,384
    and 32M tokens: without recompute the balanced split needs 88.4e9 bytes of the 85.5e9 an H100
    holds (at seq 8192 it fits, 83.9e9); one recompute count on every stage (recompute_num_layers k)
    fits only by recomputing k layers on all 16 stages; per stage, the solver recomputes only where
    the in-flight micro-batches need it, faster than every k."""
    m, c = load_model("llama3-405b"), load_cluster("dgx-h100-superpod").with_gpus(16384)
    t, p = TrainingSpec(seq_len=16384, global_batch_size=2048), params_for_cluster(c)
    plan = parse_plan("tp=8,pp=16,dp=128,mbs=1,zero=1,recompute=none")
    assert not estimate(m, c, t, plan, p).feasible
    uniform = [estimate(m, c, t, plan.model_copy(update={"recompute": Recompute.full, "recompute_num_layers": k}), p) for k in range(1, 9)]
    fitting = [e for e in uniform if e.feasible]
    assert fitting  # some uniform count fits ...
    sol = solve_core(m, c, t, p, core_of(plan))
    assert sol.status == "OPTIMAL" and sol.agreement <= AGREEMENT_RTOL and sol.estimate.feasible
    assert sol.estimate.step_seconds < min(e.step_seconds for e in fitting)  # ... but per stage is faster
    assert sum(sol.recomputed) < min(sum(s.recompute_layers for s in e.stages) for e in fitting)
