"""run_search: space -> solver -> estimates of the top plans, with the diagnosis users need
when nothing fits (the binding constraint, its numbers, and the nearest change that fits)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from autopar import __version__
from autopar.cost import evaluate, to_estimate
from autopar.cost.context import Batch
from autopar.cost.rules import RULES, legal_mask
from autopar.cost.table import PlanTable
from autopar.errors import AutoparError, InputError
from autopar.space import SpaceOptions, candidate_space, enumerate_space
from autopar.specs.costparams import CostParams, load_cost_params
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan
from autopar.specs.results import Inputs, RankedPlan, Results, SearchInfo
from autopar.specs.training import TrainingSpec
from solvers import cpsat, exhaustive
from solvers.base import Objective, Ranking
from solvers.stage_search import PerStageOptions, per_stage_plans

EXHAUSTIVE_MAX_ROWS = 2_000_000  # solver=auto: above this the oracle is too slow; use CP-SAT


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


def _batch(req: SearchRequest, cluster: ClusterSpec | None = None) -> Batch:
    if req.candidates is not None and cluster is None:
        space = req.candidates.take(np.flatnonzero(legal_mask(req.model, req.cluster, req.training, req.candidates)))
        return Batch(req.model, req.cluster, req.training, req.params or load_cost_params(), space)
    cluster = cluster or req.cluster
    space = enumerate_space(req.model, cluster, req.training, req.options)
    return Batch(req.model, cluster, req.training, req.params or load_cost_params(), space)


def run_search(req: SearchRequest, progress: Callable[[int, int], None] | None = None) -> SearchOutput:
    if req.top_k <= 0:
        raise InputError("top", req.top_k, "must be a positive integer")
    start = time.perf_counter()
    batch = _batch(req)
    if len(batch.tab) == 0:
        raise NoFeasiblePlan(explain_empty(req))
    solver = req.solver
    if solver == "auto":
        solver = "exhaustive" if len(batch.tab) <= EXHAUSTIVE_MAX_ROWS else "cpsat"
    if solver == "exhaustive":
        ranking = exhaustive.solve(batch, req.objective, req.top_k, progress)
    elif solver == "cpsat":
        ranking = cpsat.solve(batch, req.objective, req.top_k)
    else:
        raise InputError("solver", solver, "must be auto, cpsat or exhaustive")
    if len(ranking.rows) == 0:
        raise NoFeasiblePlan(explain_infeasible(req, batch, ranking))
    top = batch.tab.take(ranking.rows)
    top_batch = Batch(batch.model, batch.cluster, batch.training, batch.params, top)
    result = evaluate(top_batch)
    plans = [RankedPlan(plan=top.plan(i), estimate=to_estimate(top_batch, result, i)) for i in range(len(top))]
    per_stage = None
    if req.per_stage is not None:
        plans, per_stage = per_stage_plans(batch, ranking, plans, req.top_k, req.per_stage)
    seconds = time.perf_counter() - start
    info = SearchInfo(solver=ranking.solver, seconds=seconds, num_feasible=ranking.num_feasible,
                      num_evaluated=ranking.num_evaluated, proved_optimal=ranking.proved_optimal, per_stage=per_stage)
    results = Results(autopar_version=__version__, inputs=Inputs(model=req.model, cluster=req.cluster, training=req.training),
                      plans=plans, search=info)
    return SearchOutput(results, ranking, batch, seconds)


def explain_empty(req: SearchRequest) -> str:
    """Which rule leaves no legal plan (the product rule is built into the enumeration)."""
    fixed = req.options.fixed
    degrees = {k: fixed[k] for k in ("tp", "cp", "pp", "dp") if k in fixed}
    n = req.cluster.num_gpus
    product = int(np.prod(list(degrees.values()))) if degrees else 1
    if degrees and (n % product or ("dp" in degrees and len(degrees) == 4 and product != n)):
        text = " * ".join(f"{k}({v})" for k, v in degrees.items())
        raise InputError("fix", ",".join(f"{k}={v}" for k, v in fixed.items()), f"{text} = {product} is incompatible with GPUs({n})")
    candidates = candidate_space(req.model, req.cluster, req.training, req.options)
    if not len(candidates):
        return f"no candidate plan for {n} GPUs with --fix {fixed}"
    counts = {}
    for rule in RULES:
        broken = np.asarray(rule.broken(req.model, req.cluster, req.training, candidates), dtype=bool)
        if broken.all():
            return f"no legal plan: every candidate breaks {rule.field}: {rule.message(req.model, req.training, _row(candidates, 0))}"
        counts[rule.field] = counts.get(rule.field, 0) + int(broken.sum())
    worst = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    return (f"no legal plan among {len(candidates):,} candidates for {n} GPUs: the rules that remove most are "
            + ", ".join(f"{field} ({count:,})" for field, count in worst))


def _row(tab, i: int) -> dict:
    return {k: int(v[i]) for k, v in tab.columns().items()}


def explain_infeasible(req: SearchRequest, batch: Batch, ranking: Ranking) -> str:
    """The smallest memory need and the nearest change that makes something fit."""
    row = ranking.min_memory_row
    need, hbm = ranking.min_memory_bytes or 0.0, batch.cluster.gpu.hbm_bytes
    plan: Plan = batch.tab.plan(row)
    msg = f"no plan fits: smallest memory need is {need / 1e9:.1f} GB per GPU at {plan.text()}; HBM is {hbm / 1e9:.0f} GB"
    return msg + "; " + _nearest_fix(req)


def _nearest_fix(req: SearchRequest) -> str:
    hints = []
    fixed = req.options.fixed
    if "recompute" in fixed and str(fixed["recompute"]) != "full":
        hints.append("allow recompute=full (drop it from --fix)")
    n = req.cluster.num_gpus
    for factor in (2, 4, 8, 16, 32, 64):
        gpus = n * factor
        try:
            bigger = _batch(req, req.cluster.with_gpus(gpus))
        except AutoparError:
            break
        if len(bigger.tab) and _fits_somewhere(bigger):
            hints.append(f"--gpus {gpus} fits")
            break
    else:
        hints.append(f"even {n * 64} GPUs do not fit this model at this sequence length")
    return "nearest change: " + "; ".join(hints) if hints else "no nearby change fits"


def _fits_somewhere(batch: Batch) -> bool:
    tables = cpsat.build_tables(batch)
    return bool(tables.allowed)
