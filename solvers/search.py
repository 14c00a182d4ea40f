"""run_search: space -> solver -> estimates of the top plans, with the diagnosis users need
when nothing fits (the binding constraint, its numbers, and the nearest change that fits)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import numpy as np

from autopar import __version__
from autopar.cost import evaluate, to_estimate
from autopar.cost.context import Batch
from autopar.cost.rules import RULES, legal_mask
from autopar.cost.table import PlanTable
from autopar.errors import AutoparError, InputError, NoCandidate
from autopar.limits import MAX_TOP_K
from autopar.space import SpaceOptions, candidate_space, check_fixed_gpus, enumerate_space, offered_values
from autopar.specs.costparams import CostParams, load_cost_params
from autopar.specs.estimate import Estimate
from autopar.specs.hardware import ClusterSpec, gb_gib
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan
from autopar.specs.results import Inputs, RankedPlan, Results, SearchInfo
from autopar.specs.training import TrainingSpec
from solvers import cpsat, exhaustive
from solvers.base import Objective, Ranking, check_objective
from solvers.stage_search import PerStageOptions, per_stage_plans

EXHAUSTIVE_MAX_ROWS = 2_000_000  # solver=auto: above this the oracle is too slow; use CP-SAT
CHUNK_ROWS = 256  # ranked rows estimated at a time while collecting the top plans
CPSAT_MAX_FETCH = 1024  # CP-SAT finds its top plans one solve each (~0.1-0.5 s): how deep to look
FILTER_MAX_SCAN = 20_000  # ranked plans a plan filter examines (1-30 ms each) before giving up

PlanFilter = Callable[[Plan, Estimate], "str | None"]
"""Why a plan is refused (e.g. the launcher framework cannot run it), or None to accept it."""


class NoFeasiblePlan(AutoparError):
    """No plan of the space fits: the message names the binding constraint and a way out."""


@dataclass
class SearchRequest:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    objective: Objective = Objective.throughput
    top_k: int = 10
    solver: str = "auto"
    options: SpaceOptions = field(default_factory=SpaceOptions)
    params: CostParams | None = None
    plan_filter: PlanFilter | None = field(default=None, repr=False)
    filter_name: str | None = None  # what plan_filter stands for, e.g. "deepspeed" (SearchInfo.framework)
    per_stage: PerStageOptions | None = None  # None: no per-stage solves (solvers.stage_search)
    # a candidate table enumerated once for this GPU count (autopar.space.candidate_space) that
    # holds every candidate of this request; run_search keeps its legal rows instead of
    # enumerating again (autopar plan searches several batches per GPU count)
    candidates: PlanTable | None = None


@dataclass
class SearchOutput:
    results: Results
    ranking: Ranking
    batch: Batch
    seconds: float
    num_refused: int = 0  # ranked plans plan_filter refused before the top plans were found
    first_refusal: str | None = None  # the best refused plan and why


def _batch(req: SearchRequest, cluster: ClusterSpec | None = None) -> Batch:
    if req.candidates is not None and cluster is None:
        space = req.candidates.take(np.flatnonzero(legal_mask(req.model, req.cluster, req.training, req.candidates)))
        return Batch(req.model, req.cluster, req.training, req.params or load_cost_params(), space)
    cluster = cluster or req.cluster
    space = enumerate_space(req.model, cluster, req.training, req.options)
    return Batch(req.model, cluster, req.training, req.params or load_cost_params(), space)


def run_search(req: SearchRequest, progress: Callable[[int, int], None] | None = None) -> SearchOutput:
    """The top_k distinct plans (plans that cost exactly the same as the one above fold into it
    as equal-cost variants), best first, each one plan_filter accepts."""
    if isinstance(req.top_k, bool) or not 0 < req.top_k <= MAX_TOP_K:
        raise InputError("top", req.top_k, f"must be a positive integer at most {MAX_TOP_K}")
    if req.plan_filter is not None:  # every launcher needs the table >= seq_len: refuse now, not after 20,000 plans
        req.model.check_positions(req.training.seq_len, req.filter_name)
    check_objective(req.cluster, req.objective)  # before the search, not after it
    start = time.perf_counter()
    batch = _batch(req)
    if len(batch.tab) == 0:
        raise NoFeasiblePlan(explain_empty(req))
    solver = req.solver
    if solver == "auto":
        solver = "exhaustive" if len(batch.tab) <= EXHAUSTIVE_MAX_ROWS else "cpsat"
    if solver not in ("exhaustive", "cpsat"):
        raise InputError("solver", solver, "must be auto, cpsat or exhaustive")
    fetch = max(4 * req.top_k, 32)
    if solver == "exhaustive":
        ranking = exhaustive.solve(batch, req.objective, fetch, progress)
    else:
        ranking = cpsat.solve(batch, req.objective, fetch)
    if len(ranking.rows) == 0:
        raise NoFeasiblePlan(explain_infeasible(req, batch, ranking))
    walk = _Walk(req)
    for rows in _ranked_chunks(req, batch, ranking):
        if walk.take(batch, rows):
            break
    if not walk.groups:
        raise NoFeasiblePlan(f"no plan that fits is runnable by {req.filter_name or 'the filter'} among the best "
                             f"{walk.num_scanned:,}; the best one is refused: {walk.first_refusal}")
    plans = [RankedPlan(plan=g[0][0], estimate=g[0][1], equal_cost_variants=[p.text() for p, _ in g[1:]]) for g in walk.groups]
    per_stage = None
    if req.per_stage is not None:
        plans, per_stage = _with_per_stage(req, batch, ranking, plans)
    seconds = time.perf_counter() - start
    info = SearchInfo(solver=ranking.solver, seconds=seconds, num_feasible=ranking.num_feasible, num_evaluated=ranking.num_evaluated,
                      proved_optimal=ranking.proved_optimal, per_stage=per_stage, framework=req.filter_name)
    results = Results(autopar_version=__version__, inputs=Inputs(model=req.model, cluster=req.cluster, training=req.training),
                      plans=plans, search=info)
    return SearchOutput(results, ranking, batch, seconds, walk.num_refused, walk.first_refusal)


def _with_per_stage(req: SearchRequest, batch: Batch, ranking: Ranking, plans: list[RankedPlan]):
    """The per-stage solves merged into the distinct plans; a per-stage plan the plan filter
    refuses (the framework cannot express its layout) is left out, and its solve says so
    (status REFUSED: refused by a rule, not short of memory)."""
    merged, info = per_stage_plans(batch, ranking, plans, len(plans) + req.per_stage.max_cores, req.per_stage)
    if req.plan_filter is not None:
        refused = {rp.estimate.plan: why for rp in merged if rp not in plans and (why := req.plan_filter(rp.plan, rp.estimate))}
        merged = [rp for rp in merged if rp.estimate.plan not in refused]
        for solve in info.solves:
            if solve.plan in refused:
                solve.status, solve.reason = "REFUSED", f"{req.filter_name or 'the plan filter'} refuses it: {refused[solve.plan]}"
    return merged[:req.top_k], info


def _ranked_chunks(req: SearchRequest, batch: Batch, ranking: Ranking) -> Iterator[np.ndarray]:
    """Feasible rows of the space in rank order, a chunk at a time. The exhaustive solver's
    full order is known; CP-SAT is asked for more plans (4x each time) when the first ones run out."""
    extra = ranking.extra
    if "all_order" in extra:
        order = extra["all_order"]
        for i in range(0, len(order), CHUNK_ROWS):
            yield order[i:i + CHUNK_ROWS]
        return
    seen: set[int] = set()
    rows, fetch = ranking.rows, len(ranking.rows)
    while True:
        new = np.asarray([r for r in rows.tolist() if r not in seen], dtype=np.int64)
        seen.update(new.tolist())
        for i in range(0, len(new), CHUNK_ROWS):
            yield new[i:i + CHUNK_ROWS]
        if len(rows) < fetch or fetch >= min(CPSAT_MAX_FETCH, ranking.num_feasible):
            return
        fetch = min(4 * fetch, CPSAT_MAX_FETCH)
        rows = cpsat.solve(batch, req.objective, fetch, extra.get("tables")).rows


class _Walk:
    """Collects the top distinct plans from ranked rows: rows with the same (step, memory) as a
    collected plan fold into it as equal-cost variants (they need not be neighbours: equal steps
    with different memory interleave); rows the plan filter refuses are counted and skipped."""

    def __init__(self, req: SearchRequest):
        self.req = req
        self.groups: list[list[tuple[Plan, Estimate]]] = []
        self.index: dict[tuple[float, float], int] = {}
        self.num_scanned = 0
        self.num_refused = 0
        self.first_refusal: str | None = None

    def take(self, batch: Batch, rows: np.ndarray) -> bool:
        """Estimate the chunk's rows in order; True once top_k groups are complete."""
        sub = Batch(batch.model, batch.cluster, batch.training, batch.params, batch.tab.take(rows))
        result = evaluate(sub)
        for i in range(len(rows)):
            plan, est = sub.tab.plan(i), to_estimate(sub, result, i)
            key = (round(est.step_seconds, 12), round(est.memory_bytes_per_gpu))
            if key in self.index:
                if self._accepts(plan, est):
                    self.groups[self.index[key]].append((plan, est))
                continue
            if len(self.groups) == self.req.top_k:
                if key[0] > max(k[0] for k in self.index):  # ranked by step: no later row can fold in
                    return True
                continue
            if self.num_refused >= FILTER_MAX_SCAN:
                return True
            if self._accepts(plan, est):
                self.index[key] = len(self.groups)
                self.groups.append([(plan, est)])
        return False

    def _accepts(self, plan: Plan, est: Estimate) -> bool:
        self.num_scanned += 1
        if self.req.plan_filter is None:
            return True
        reason = self.req.plan_filter(plan, est)
        if reason is None:
            return True
        self.num_refused += 1
        self.first_refusal = self.first_refusal or f"{plan.text()}: {reason}"
        return False


def explain_empty(req: SearchRequest) -> str:
    """Which rule leaves no legal plan (the product rule is built into the enumeration)."""
    n = req.cluster.num_gpus
    check_fixed_gpus(req.options.fixed, n)
    candidates = candidate_space(req.model, req.cluster, req.training, req.options)
    if not len(candidates):
        raise _emptying_fix(req)
    removed: dict[str, np.ndarray] = {}  # per field: the candidates any of its rules removes
    for rule in RULES:
        broken = np.asarray(rule.broken(req.model, req.cluster, req.training, candidates), dtype=bool)
        if broken.all():
            return f"no legal plan: every candidate breaks {rule.field}: {rule.message(req.model, req.training, _row(candidates, 0))}"
        removed[rule.field] = removed.get(rule.field, np.zeros(len(candidates), dtype=bool)) | broken
    counts = {field: int(mask.sum()) for field, mask in removed.items() if mask.any()}
    worst = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    return (f"no legal plan among {len(candidates):,} candidates for {n} GPUs (each breaks at least one rule); the rules that "
            "remove most are " + ", ".join(f"{field} ({count:,} of {len(candidates):,})" for field, count in worst))


def _emptying_fix(req: SearchRequest) -> AutoparError:
    """The --fix value without which candidates exist (autopar.space.check_fixed names the rules
    it knows before enumerating), with the values the search offers in its place."""
    fixed, n = req.options.fixed, req.cluster.num_gpus
    spelled = {k: (("off", "on")[int(v)] if k in ("sp", "ep_overlap") else getattr(v, "value", v)) for k, v in fixed.items()}
    for key in fixed:
        rest = {k: v for k, v in fixed.items() if k != key}
        offered = offered_values(req.model, req.cluster, req.training, replace(req.options, fixed=rest), key)
        if offered:
            others = ",".join(f"{k}={v}" for k, v in spelled.items() if k != key)
            return NoCandidate(f"fix.{key}", spelled[key], f"no candidate plan for {n:,} GPUs{' with ' + others if others else ''} has it; "
                              f"the search offers {key} {', '.join(offered)}")
    return NoFeasiblePlan(f"no candidate plan for {n:,} GPUs with --fix {','.join(f'{k}={v}' for k, v in spelled.items())}")


def _row(tab, i: int) -> dict:
    return {k: int(v[i]) for k, v in tab.columns().items()}


def explain_infeasible(req: SearchRequest, batch: Batch, ranking: Ranking) -> str:
    """The smallest memory need and the nearest change that makes something fit."""
    row = ranking.min_memory_row
    need, cluster = ranking.min_memory_bytes or 0.0, batch.cluster
    plan: Plan = batch.tab.plan(row)
    limit = f"HBM is {gb_gib(cluster.gpu.hbm_bytes)}" if not cluster.memory_headroom_gb else f"the limit is {cluster.hbm_limit_text()}"
    msg = f"no plan fits: smallest memory need is {need / 1e9:.1f} GB per GPU at {plan.text()}; {limit}"
    return msg + "; " + _nearest_fix(req)


def _nearest_fix(req: SearchRequest) -> str:
    hints = []
    fixed = req.options.fixed
    if "recompute" in fixed and str(fixed["recompute"]) != "full":
        hints.append("allow recompute=full (drop it from --fix)")
    n = req.cluster.num_gpus
    for gpus in _larger_gpu_counts(n, req.cluster.physical_gpus_per_node):
        try:
            bigger = _batch(req, req.cluster.whole_nodes().with_gpus(gpus))
        except AutoparError:
            break
        if len(bigger.tab) and _fits_somewhere(bigger):
            fabric = req.cluster.fabric_num_gpus
            hints.append(f"--gpus {gpus} fits" if gpus <= fabric else
                         f"--gpus {gpus} --extrapolate-fabric fits (cluster {req.cluster.name} describes {fabric:,} GPUs)")
            break
    else:
        hints.append(f"even {gpus} GPUs do not fit this model at this sequence length")
    return "nearest change: " + "; ".join(hints) if hints else "no nearby change fits"


def _larger_gpu_counts(n: int, gpus_per_node: int, steps: int = 6) -> list[int]:
    """Doublings of n that --gpus accepts: within one node any count, beyond it whole nodes (a
    part of a node steps to the full node: 5 GPUs on 8-GPU nodes -> 8, 16, 32, ...)."""
    out = []
    for _ in range(steps):
        nxt = 2 * n
        n = gpus_per_node if n < gpus_per_node < nxt else nxt
        out.append(n)
    return out


def _fits_somewhere(batch: Batch) -> bool:
    tables = cpsat.build_tables(batch)
    return bool(len(tables.pair_rows))
