"""The per-stage step of `autopar search`: after the enumeration ranks every plan (balanced
layouts, one recompute setting for all stages), the best few *cores* (a plan without its layout
and recompute counts) get their layers and recompute per stage solved exactly
(solvers.stages), within a time budget; the solved plans join the ranking."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from autopar.cost import evaluate, to_estimate
from autopar.cost.context import Batch
from autopar.cost.stages import StageModelError, StageTable, sample_stages
from autopar.cost.table import RECOMPUTE, row_groups, v_shaped
from autopar.specs.plan import Recompute
from autopar.specs.results import PerStageInfo, RankedPlan, StageSolve
from solvers.base import Ranking
from solvers.stages import StageSolution, bounds, core_of, solve_core

# `autopar search`'s defaults (--per-stage-cores, --per-stage-seconds: autopar/cli/search.py spells
# them for a lazy --help, tests/cli/test_lazy.py checks they agree); plan and sweep rank with them
# too (search_defaults), so the three agree on a case's best plan
DEFAULT_CORES = 8
# A wall-clock cap, not the step's budget: cores it does not reach are skipped, so a cap that
# binds makes the ranking depend on how fast (and how loaded) the machine is. The step's work is
# bounded by DEFAULT_CORES and each solve's deterministic limit (solvers.stages.SOLVE_WORK_LIMIT);
# measured 0.5-6 s on 2 cores (LLaMA-3 70B on 256-1,024 H100: 8 cores, ~1.5 s of stage tables and
# 0.2 s of CP-SAT each). A 5 s cap skipped 3 to 4 of 8 cores when the machine was shared.
DEFAULT_SECONDS = 60.0
WALK_ROWS = 100_000  # ranked rows (per group) looked at for distinct cores
_FULL, _NONE = RECOMPUTE.index(Recompute.full), RECOMPUTE.index(Recompute.none)
SOLVED = ("OPTIMAL", "FEASIBLE", "BALANCED")  # statuses with a plan that fits and re-costs as predicted
_LAYOUT_COLUMNS = ("recompute_layers", "first", "last", "layout", "rc_stages")


@dataclass(frozen=True)
class PerStageOptions:
    """How much of the ranking gets a per-stage solve."""

    max_cores: int = DEFAULT_CORES  # distinct cores (pp > 1), best first
    seconds: float = DEFAULT_SECONDS  # wall-clock cap on tables and solves together; later cores are skipped
    pinned_recompute: bool = False  # the user fixed the recompute mode: keep it on every stage


def search_defaults(fixed: Mapping[str, object]) -> PerStageOptions:
    """The per-stage step `autopar search` runs by default for a space with these fixed
    dimensions (--fix): DEFAULT_CORES cores within DEFAULT_SECONDS, a fixed recompute mode kept
    on every stage."""
    return PerStageOptions(DEFAULT_CORES, DEFAULT_SECONDS, "recompute" in fixed)


def candidate_rows(batch: Batch, ranking: Ranking, max_cores: int, pinned_recompute: bool) -> list[int]:
    """Rows (pp > 1) whose cores get a per-stage solve, one row per core, best first: the
    fitting rows, and (a quarter of max_cores) cores whose plans do not fit in memory but
    would beat the best plan if they did (per-stage recompute and layers may make them fit). Plans that cost exactly the same as one already taken (rank
    order or CP variants that leave every term unchanged) are not taken again."""
    extra = ranking.extra
    if "all_objective" in extra:  # the oracle ranked every plan
        values, ok, ranked = extra["all_objective"], extra["all_feasible"], extra["all_order"]
    else:
        values = np.full(len(batch.tab), np.inf)
        values[ranking.rows] = ranking.objective
        ok, ranked = np.isfinite(values), ranking.rows
    tab = batch.tab
    # per-stage layouts are solved for round-robin placement: V-shaped (dualpipev) rows are left
    # as they are (solvers.stages.core_of)
    staged = (tab.pp > 1) & ~v_shaped(tab.schedule)
    # the fitting rows in the solver's rank order (solvers.base.rank_order), not sorted again
    fits = ranked[staged[ranked]]
    best = values[fits[0]] if len(fits) else np.inf
    blocked = np.flatnonzero(~ok & staged & (values < best))
    blocked = blocked[np.argsort(values[blocked], kind="stable")]
    # cores of the best WALK_ROWS rows of each group only: grouping all of a 6M-plan space took
    # 18 s, and the walk below stops after max_cores distinct cores
    fits, blocked = fits[:WALK_ROWS], blocked[:WALK_ROWS]
    walked = np.concatenate([fits, blocked])
    columns = {k: v[walked] for k, v in tab.columns().items() if k not in _LAYOUT_COLUMNS}
    if not pinned_recompute:  # none and full are the two ends of the per-stage recompute counts
        columns["recompute"] = np.where(columns["recompute"] == _NONE, _FULL, columns["recompute"])
    _, core_of_walked = row_groups(*columns.values())
    core = dict(zip(walked.tolist(), core_of_walked.tolist()))
    rows: list[int] = []
    seen_core, seen_value = set(), set()
    blocked_cores = max(1, max_cores // 4)
    for group, limit in ((fits, max_cores - blocked_cores), (blocked, max_cores), (fits, max_cores)):
        for row in group.tolist():
            if len(rows) >= limit:
                break
            if core[row] not in seen_core and values[row] not in seen_value:
                seen_core.add(core[row])
                seen_value.add(values[row])
                rows.append(row)
    return rows


def solve_top_cores(batch: Batch, ranking: Ranking, options: PerStageOptions) -> tuple[list[StageSolution], list[int], int, float]:
    """(solutions, the balanced row each started from, cores skipped by the budget, seconds)."""
    start = time.perf_counter()
    rows = candidate_rows(batch, ranking, options.max_cores, options.pinned_recompute)
    tables: dict[tuple, StageTable | str] = {}
    solutions, started, skipped = [], [], 0
    m, c, t, p = batch.model, batch.cluster, batch.training, batch.params
    for row in rows:
        left = options.seconds - (time.perf_counter() - start)
        if left <= 0:
            skipped += 1
            continue
        sc = core_of(batch.tab.plan(row), options.pinned_recompute)
        key = (sc.core.text(), sc.recompute_free)
        began = time.perf_counter()
        if key not in tables:  # cores that differ only in vpp and schedule share one table
            try:
                tables[key] = sample_stages(m, c, t, p, sc.core, *bounds(m, sc.core.pp), sc.recompute_free)
            except StageModelError as exc:
                tables[key] = str(exc)
        table = tables[key]
        if isinstance(table, str):
            sol = StageSolution(sc, "REFUSED", [], [], None, float("nan"), float("nan"), 0.0, reason=table)
        else:
            try:
                sol = solve_core(m, c, t, p, sc, table, time_limit_seconds=left)
            except StageModelError as exc:
                sol = StageSolution(sc, "REFUSED", [], [], None, float("nan"), float("nan"), 0.0, reason=str(exc))
        sol.solve_seconds = time.perf_counter() - began
        solutions.append(sol)
        started.append(row)
    return solutions, started, skipped, time.perf_counter() - start


def per_stage_plans(batch: Batch, ranking: Ranking, plans: list[RankedPlan], top_k: int,
                    options: PerStageOptions) -> tuple[list[RankedPlan], PerStageInfo]:
    """The ranking with the per-stage plans merged in (fastest first, top_k kept), and what the
    per-stage step did."""
    solutions, rows, skipped, seconds = solve_top_cores(batch, ranking, options)
    balanced = batch.tab.take(np.asarray(rows, dtype=int))
    sub = Batch(batch.model, batch.cluster, batch.training, batch.params, balanced)
    result = evaluate(sub) if rows else None
    solves = []
    for i, sol in enumerate(solutions):
        est = to_estimate(sub, result, i)
        ok = sol.estimate is not None and sol.status in SOLVED
        solves.append(StageSolve(plan=sol.plan.text() if ok else None, balanced_plan=est.plan, balanced_fits=est.feasible,
                                 step_seconds=sol.estimate.step_seconds if ok else None, balanced_step_seconds=est.step_seconds,
                                 status=sol.status, gap=sol.gap if ok else None, seconds=sol.solve_seconds,
                                 agreement=sol.agreement if sol.estimate is not None else None, reason=sol.reason))
    found = [RankedPlan(plan=s.plan, estimate=s.estimate) for s in solutions if s.estimate is not None and s.status in SOLVED]
    merged, seen = [], set()
    for rp in sorted(found + plans, key=lambda rp: rp.estimate.step_seconds):  # stable: per-stage first on ties
        if rp.estimate.plan not in seen:
            seen.add(rp.estimate.plan)
            merged.append(rp)
    best = plans[0].estimate
    info = PerStageInfo(seconds=seconds, cores_skipped=skipped, best_balanced_plan=best.plan,
                        best_balanced_step_seconds=best.step_seconds, solves=solves)
    return merged[:top_k], info
