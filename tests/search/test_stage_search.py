"""The per-stage step inside `autopar search` (solvers.stage_search): the top cores get their
stages solved, the solved plans join the ranking, every plan reports its stages."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.cost import estimate
from autopar.space import SpaceOptions
from autopar.specs import TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import params_for_cluster
from solvers import SearchRequest, run_search
from solvers.stage_search import PerStageOptions
from solvers.stages import AGREEMENT_RTOL

# llama3-8b on 8 A100-40GB, 32 x 8192 tokens, tp pinned to 2: memory-tight, pipelined cores rank high
ARGS = ["--model", "llama3-8b", "--cluster", "dgx-a100-40gb", "--gpus", "8", "--seq-len", "8192", "--global-batch", "32", "--fix", "tp=2"]


def _search(per_stage: PerStageOptions | None, fixed=None):
    m, c = load_model("llama3-8b"), load_cluster("dgx-a100-40gb").with_gpus(8)
    t, p = TrainingSpec(seq_len=8192, global_batch_size=32), params_for_cluster(c)
    req = SearchRequest(m, c, t, top_k=10, params=p, options=SpaceOptions(fixed=fixed or {"tp": 2}), per_stage=per_stage)
    return m, c, t, p, run_search(req)


@pytest.fixture(scope="module")
def solved():
    return _search(PerStageOptions())


def test_solved_cores_beat_or_match_their_balanced_plans(solved):
    m, c, t, p, out = solved
    info = out.results.search.per_stage
    assert info.solves and info.cores_skipped == 0
    found = [s for s in info.solves if s.plan is not None]
    assert found and all(s.status == "OPTIMAL" and s.gap == 0 for s in found)
    fitting = [s for s in found if s.balanced_fits]
    assert fitting and all(s.step_seconds <= s.balanced_step_seconds * (1 + 1e-9) for s in fitting)
    assert any(s.step_seconds < s.balanced_step_seconds * 0.99 for s in fitting)  # some core gains > 1% (stage layers)
    assert any(not s.balanced_fits for s in info.solves)  # cores that would beat the best if they fit are tried too
    assert all(s.agreement <= AGREEMENT_RTOL for s in found)


def test_ranking_merges_per_stage_plans(solved):
    m, c, t, p, out = solved
    plain = _search(None)[4]
    assert plain.results.search.per_stage is None
    steps = [rp.estimate.step_seconds for rp in out.results.plans]
    assert steps == sorted(steps) and len(steps) == 10
    assert steps[0] <= plain.results.plans[0].estimate.step_seconds
    texts = [rp.estimate.plan for rp in out.results.plans]
    assert len(set(texts)) == len(texts)
    for rp in out.results.plans:  # every ranked plan re-costs to its estimate, with one entry per stage
        assert estimate(m, c, t, rp.plan, p).step_seconds == pytest.approx(rp.estimate.step_seconds, rel=1e-12)
        assert [s.layers for s in rp.estimate.stages] == rp.estimate.stage_layers
        assert max(s.memory_bytes for s in rp.estimate.stages) == pytest.approx(rp.estimate.memory_bytes_per_gpu, rel=1e-12)


def test_pinned_recompute_stays_on_every_stage():
    out = _search(PerStageOptions(pinned_recompute=True), {"tp": 2, "recompute": "full"})[4]
    for rp in out.results.plans:
        assert rp.plan.recompute.value == "full" and rp.plan.stage_recompute_layers is None
        assert all(s.recompute_layers == s.layers for s in rp.estimate.stages)


def test_time_budget_skips_cores():
    out = _search(PerStageOptions(max_cores=8, seconds=1e-9))[4]
    info = out.results.search.per_stage
    assert info.cores_skipped == 8 and info.solves == []


def test_cli_json_has_stages_and_the_table_shows_them():
    res = CliRunner().invoke(main, ["search", *ARGS, "--top", "5", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    for plan in data["plans"]:
        stages = plan["estimate"]["stages"]
        assert len(stages) == plan["plan"]["pp"]
        assert all(set(s) == {"layers", "recompute_layers", "memory_bytes", "seconds"} for s in stages)
    assert data["search"]["per_stage"]["solves"]
    text = CliRunner().invoke(main, ["search", *ARGS, "--top", "5"], catch_exceptions=False).output
    assert "stages: layers" in text and "per-stage: " in text and "proved optimal" in text
    off = CliRunner().invoke(main, ["search", *ARGS, "--top", "5", "--no-per-stage", "--json"], catch_exceptions=False)
    assert json.loads(off.output)["search"]["per_stage"] is None


@pytest.mark.parametrize("flag, value", [("--per-stage-cores", "0"), ("--per-stage-seconds", "-1")])
def test_bad_per_stage_options_are_one_line(flag, value):
    res = CliRunner().invoke(main, ["search", *ARGS, flag, value])
    assert res.exit_code == 1
    assert res.output.strip() == f"Error: {flag.lstrip('-')}={float(value) if 'seconds' in flag else int(value)}: must be positive"


def test_mtp_rank_recomputes_its_mtp_layer_too():
    # DeepSeek-V3 (61 layers + 1 MTP) on PP16 with full recompute pinned (--fix recompute=full):
    # a rank holding the MTP layer recomputes it too (up to 6 + 1 = 7 layers where the per-stage
    # tables sample 6 decoder layers on the last rank); the tables once had no row for R = L + 1
    # and the search stopped with an IndexError
    m, c = load_model("deepseek-v3"), load_cluster("hgx-h800").with_gpus(2048)
    t = TrainingSpec(seq_len=4096, global_batch_size=15360, precision="fp8")
    fixed = {"tp": 1, "pp": 16, "ep": 64, "mbs": 1, "zero": 1, "recompute": "full", "order": "tp-cp-ep-dp-pp",
             "dispatcher": "alltoall", "ep_overlap": 0}
    out = run_search(SearchRequest(m, c, t, top_k=3, params=params_for_cluster(c), options=SpaceOptions(fixed=fixed),
                                   per_stage=PerStageOptions(pinned_recompute=True)))
    info = out.results.search.per_stage
    assert info is not None and len(info.solves) > 0
    # full recompute everywhere: every rank recomputes all it holds, the last one its MTP layer too
    # (balanced 61 over 16: 3/4x6/5/4x7/1, the last rank 1 decoder layer + MTP, recomputing 2)
    # (a V-shaped dualpipev plan, which the per-stage step leaves balanced, holds the MTP on rank 0)
    for rp in out.results.plans:
        stages = rp.estimate.stages
        mtp_rank = 0 if rp.plan.pipeline_schedule.value == "dualpipev" else len(stages) - 1
        assert all(s.recompute_layers == s.layers for i, s in enumerate(stages) if i != mtp_rank)
        assert stages[mtp_rank].recompute_layers == stages[mtp_rank].layers + m.mtp_num_layers


def test_a_slow_machine_solves_the_same_cores(monkeypatch, solved):
    """The per-stage step's work is bounded by its core count and CP-SAT's deterministic time, not
    by the wall clock: on a machine 10x slower (every clock read 0.25 s later; the step reads it
    about twice per core) it solves the same cores to the same plans. With the earlier 5 s
    budget such a clock skipped cores, and search's best plan depended on the machine's load."""
    import solvers.stage_search as stage_search

    ticks = iter(range(10**6))
    monkeypatch.setattr(stage_search.time, "perf_counter", lambda: 0.25 * next(ticks))
    slow = _search(PerStageOptions())[4].results.search.per_stage
    fast = solved[4].results.search.per_stage
    assert slow.cores_skipped == fast.cores_skipped == 0
    assert [(s.plan, s.status) for s in slow.solves] == [(s.plan, s.status) for s in fast.solves]
