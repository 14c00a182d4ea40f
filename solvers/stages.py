"""Per-stage pipeline plans with OR-Tools CP-SAT: for one core plan (every field but the
layout and the recompute counts), the decoder layers L_r and fully recomputed layers R_r of
every pipeline rank r, solved exactly against tables of the cost model (autopar.cost.stages).

Data: per rank, the (L, R) pairs whose stage fits in HBM under this vpp and schedule, each with
its integer-scaled per-micro-batch seconds T and once-per-step terms X_k (exposed DP and FSDP
reductions, optimizer step), keeping only the pairs no other pair with the same L beats.
Model: one Boolean per (rank, pair), exactly one per rank; the layers sum to the model's; the
objective is the step the cost model composes,
    a max_r T_r + b (sum_r T_r - max_r T_r) + sum_k max_r X_k,r   (+ constants)
(a, b from autopar.cost.pipeline for the schedule: 1F1B a = m, b = 1; interleaved b = 1/vpp;
zero-bubble b = 0), then fewer recomputed layers. The maxima take their values from the levels
present, searched lowest first (measured: allowed-assignment tables over (L, R, T, ...) did not
prove the LLaMA-3 405B pp=16 optimum in 10 minutes; this form proves it in 0.1-0.3 s).
Solve: one worker and a fixed seed; the solver proves the optimum or reports the gap.
Check: the solved plan is re-costed by autopar.cost.estimate and must agree within
AGREEMENT_RTOL; a plan that does not is refused, not returned.

Embedding and loss sit on the first and last ranks as the plan language places them; the first
and last ranks may hold no decoder layer (E or L as its own stage), middle ranks hold at least
one; a rank holds at most CAP_FACTOR x the even share. A first-k-dense MoE model keeps its dense
layers in the first virtual stage.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from ortools.sat.python import cp_model

from autopar.cost import estimate
from autopar.cost.step import STAGE_STEP_TERMS
from autopar.cost.stages import (StageModelError, StageTable, compose, held_microbatches, pipeline_coefficients, rank_layout,
                                 sample_stages, stage_memory_bytes)
from autopar.errors import InputError
from autopar.specs.costparams import CostParams
from autopar.specs.estimate import Estimate
from autopar.specs.hardware import ClusterSpec
from autopar.specs.layout import balanced_layout
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan, Recompute, Schedule
from autopar.specs.training import TrainingSpec

STAGE_QUANTUM_SECONDS = 1e-6  # one integer unit of per-stage time in the model
SEED = 20261129
# CP-SAT deterministic time per core solve (its work units, about seconds on a reference machine):
# LLaMA-3 70B cores on 256-1,024 H100 prove optimality in 0.012-0.037 units, 0.16-0.30 s of wall
# time on 2 shared cores
SOLVE_WORK_LIMIT = 5.0
CAP_FACTOR = 1.5  # a rank holds at most this many times the even share of layers
AGREEMENT_RTOL = 1e-9  # re-costed step vs the step composed from the tables (both exact: float rounding only)
COLUMNS = ("L", "R", "T", *STAGE_STEP_TERMS)  # layers, recomputed layers, seconds per micro-batch, once-per-step terms


@dataclass(frozen=True)
class StageCore:
    """What the per-stage solver fixes: the core plan (vpp = 1, 1F1B; recompute none or full
    merged into per-stage counts unless pinned) and the (vpp, schedule) it solves for."""

    core: Plan
    vpp: int
    schedule: Schedule
    recompute_free: bool  # R_r may be chosen; False keeps the core's recompute mode with R = 0


@dataclass
class StageSolution:
    core: StageCore
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | UNKNOWN | REFUSED
    layers: list[int]
    recomputed: list[int]
    plan: Plan | None
    step_seconds: float  # composed from the tables (exact for the solved layout)
    gap: float  # (objective - bound) / objective in the solver's integer units; 0 when proved optimal
    solve_seconds: float
    estimate: Estimate | None = None  # the cost model re-costing the plan
    agreement: float = math.nan  # |re-costed - composed| / composed
    reason: str = ""


def dense_prefix(model: ModelSpec) -> int:
    """Layers before the first MoE layer; raises when layer kinds alternate (moe_layer_freq > 1),
    where a stage's cost depends on where its layers start."""
    if not model.is_moe:
        return 0
    if model.moe_layer_freq != 1:
        raise StageModelError(f"moe_layer_freq={model.moe_layer_freq}: per-stage layouts assume dense layers only as a prefix")
    return model.moe_first_k_dense_layers


def bounds(model: ModelSpec, pp: int) -> tuple[list[int], list[int]]:
    """(lowest, highest) decoder layers of each rank (module docstring), always holding the
    balanced split."""
    n, k = model.num_layers, dense_prefix(model)
    lo = [0] + [1] * (pp - 2) + [0]
    lo[0] = max(lo[0], k)  # the dense prefix in the first virtual stage (autopar.cost.stages.rank_chunks)
    cap = min(n, max(math.ceil(CAP_FACTOR * n / pp), max(balanced_layout(n, pp, 1, model.mtp_num_layers, model.mtp_layout_units).rank_decoders())))
    return lo, [cap] * pp


def core_of(plan: Plan, pinned_recompute: bool = False) -> StageCore:
    """The per-stage core of a plan: recompute none/full become free per-stage counts unless
    pinned (selective keeps R = 0: the plan language has per-stage counts only for full)."""
    if plan.pipeline_schedule.v_shaped:
        raise StageModelError(f"schedule={plan.pipeline_schedule.value} places two stages per rank in a V (embedding and loss on "
                              "rank 0); per-stage layouts are solved for round-robin placement")
    free = plan.recompute in (Recompute.none, Recompute.full) and not pinned_recompute
    fields = plan.model_dump()
    fields.update(vpp=1, schedule=Schedule.one_f_one_b, layout=None, first_stage_layers=None, last_stage_layers=None,
                  recompute_num_layers=None, stage_recompute_layers=None)
    if free:
        fields["recompute"] = Recompute.full
    return StageCore(Plan.model_validate(fields), plan.vpp, plan.pipeline_schedule, free)


def _scale(a: float, b: float) -> tuple[int, int, int]:
    """Integers (qa, qb, q) with qa / q = a and qb / q = b (b = 1 / vpp is a fraction)."""
    fa, fb = Fraction(a).limit_denominator(4096), Fraction(b).limit_denominator(4096)
    q = math.lcm(fa.denominator, fb.denominator)
    return int(fa * q), int(fb * q), q


def rank_options(table: StageTable, sc: StageCore, lo: list[int], hbm_bytes: float, params: CostParams) -> list[list[tuple[int, ...]]]:
    """Per rank, the options (L, R, T, then each once-per-step term) that fit in HBM and that no
    other option with the same L beats (no larger time, terms or R): the objective never
    decreases in any of them, so a dominated option is never needed. Times in
    STAGE_QUANTUM_SECONDS."""
    held = held_microbatches(table.pp, table.microbatches, sc.vpp, sc.schedule)
    q = lambda x: int(round(float(x) / STAGE_QUANTUM_SECONDS))  # noqa: E731
    out = []
    for r in range(table.pp):
        v = {k: a[r] for k, a in table.values.items()}
        memory = stage_memory_bytes(v["memory_fixed_bytes"], v["memory_per_microbatch_bytes"], held[r], params)
        options = []
        for L in range(lo[r], table.hi[r] + 1):
            cands = [(q(v["seconds"][L, R]), *(q(v[k][L, R]) for k in STAGE_STEP_TERMS), R)
                     for R in range(L + 1)  # without free counts only the core's own R was sampled
                     if not np.isnan(v["seconds"][L, R]) and memory[L, R] <= hbm_bytes]
            for c in cands:
                if not any(o != c and all(x <= y for x, y in zip(o, c)) for o in cands):
                    options.append((L, c[-1], *c[:-1]))
        out.append(options)
    return out


def build_model(table: StageTable, sc: StageCore, lo: list[int], hbm_bytes: float, params: CostParams):
    """The CP-SAT model of one core under sc's vpp and schedule, or None when some rank has no
    option that fits. Returns (model, chosen, q): chosen[r][k] is true when rank r takes option
    k; the objective is (N + 1) q step + sum R in STAGE_QUANTUM_SECONDS (q: the denominator of
    the pipeline coefficients), so among equally fast plans the one recomputing least wins."""
    P, N = table.pp, table.num_layers
    a, b, _ = pipeline_coefficients(table.microbatches, sc.vpp, sc.schedule, P, table.hop_seconds)
    if not a >= b >= 0:
        raise StageModelError(f"pipeline time {a} max + {b} rest is not monotone in the stage times")
    options = rank_options(table, sc, lo, hbm_bytes, params)
    if not all(options):
        return None
    model = cp_model.CpModel()
    chosen = [[model.new_bool_var(f"x_{r}_{k}") for k in range(len(options[r]))] for r in range(P)]
    expr = {name: [] for name in COLUMNS}
    for r in range(P):
        model.add_exactly_one(chosen[r])
        for i, name in enumerate(COLUMNS):
            expr[name].append(sum(o[i] * x for o, x in zip(options[r], chosen[r])))
    model.add(sum(expr["L"]) == N)
    # ranks with the same options are interchangeable: order their layers (and recompute)
    for r in range(P):
        twin = next((s for s in range(r + 1, P) if options[s] == options[r]), None)
        if twin is not None:
            model.add(expr["L"][r] * (N + 1) + expr["R"][r] <= expr["L"][twin] * (N + 1) + expr["R"][twin])
    top = {}
    for i, name in enumerate(COLUMNS[2:], start=2):
        levels = sorted({o[i] for opts in options for o in opts})
        top[name] = model.new_int_var_from_domain(cp_model.Domain.from_values(levels), f"max_{name}")
        for r in range(P):
            for o, x in zip(options[r], chosen[r]):
                if o[i] > levels[0]:
                    model.add(top[name] >= o[i]).only_enforce_if(x)
    qa, qb, q = _scale(a, b)
    step = qa * top["T"] + qb * (sum(expr["T"]) - top["T"]) + q * sum(top[k] for k in STAGE_STEP_TERMS)
    model.minimize((N + 1) * step + sum(expr["R"]))
    # the slowest stage dominates the step: try its levels from the lowest (measured on the
    # LLaMA-3 405B pp=16 core: 0.1-0.2 s to prove, against > 10 min with table constraints)
    model.add_decision_strategy([top[k] for k in COLUMNS[2:]], cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)
    return model, chosen, options, q


def solve_model(model: cp_model.CpModel, time_limit_seconds: float | None = None) -> tuple[cp_model.CpSolver, int]:
    """One worker, a fixed seed and a limit in CP-SAT's deterministic time, so a solve ends at
    the same point on any machine; the wall-clock limit is only the caller's safety cap."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = SEED
    solver.parameters.search_branching = cp_model.FIXED_SEARCH
    solver.parameters.max_deterministic_time = SOLVE_WORK_LIMIT
    if time_limit_seconds:
        solver.parameters.max_time_in_seconds = time_limit_seconds
    return solver, solver.solve(model)


def stage_plan(sc: StageCore, layers: list[int], recomputed: list[int], model: ModelSpec) -> Plan:
    """The plan text of a per-stage solution: no layout when the layers are the balanced split,
    else a Megatron layout string; recompute as the plan language says it most simply (none;
    full on every layer; recompute_num_layers k when R_r = min(L_r, k); else per-stage counts)."""
    fields = sc.core.model_dump()
    fields.update(vpp=sc.vpp, schedule=sc.schedule)
    n, mtp = model.num_layers, model.mtp_num_layers
    balanced = balanced_layout(n, len(layers), sc.vpp, mtp, model.mtp_layout_units)
    k = dense_prefix(model)
    if balanced.rank_decoders() != list(layers) or (k and balanced.decoders[0] < k):
        fields["layout"] = rank_layout(list(layers), sc.vpp, mtp, k).text()
    if not sc.recompute_free:
        return Plan.model_validate(fields)
    counts = [min(L, R) for L, R in zip(layers, recomputed)]
    if sum(counts) == 0:
        fields["recompute"] = Recompute.none
    elif counts != list(layers):
        uniform = next((c for c in range(1, max(layers) + 1) if [min(L, c) for L in layers] == counts), None)
        if uniform is not None:
            fields["recompute_num_layers"] = uniform
        else:
            fields["stage_recompute_layers"] = tuple(counts)
    return Plan.model_validate(fields)


def solve_core(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, params: CostParams, sc: StageCore,
               table: StageTable | None = None, time_limit_seconds: float | None = None) -> StageSolution:
    """Solve one core, re-cost the solution with the cost model, and check they agree."""
    start = time.perf_counter()
    P = sc.core.pp
    lo, hi = bounds(model, P)
    table = table or sample_stages(model, cluster, training, params, sc.core, lo, hi, sc.recompute_free)
    built = build_model(table, sc, lo, cluster.usable_hbm_bytes, params)
    where = "HBM less the memory headroom" if cluster.memory_headroom_gb else "HBM"
    empty = StageSolution(sc, "INFEASIBLE", [], [], None, math.nan, math.nan, 0.0, reason=f"no stage layout fits in {where}")
    if built is None:
        empty.solve_seconds = time.perf_counter() - start
        return keep_balanced(empty, model, cluster, training, params)
    cp, chosen, options, q = built
    solver, status = solve_model(cp, time_limit_seconds)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        empty.status, empty.reason, empty.solve_seconds = name, f"CP-SAT {name}", time.perf_counter() - start
        return keep_balanced(empty, model, cluster, training, params)
    picks = [options[r][next(k for k, x in enumerate(xs) if solver.boolean_value(x))] for r, xs in enumerate(chosen)]
    layers, recomputed = [o[0] for o in picks], [o[1] for o in picks]
    step, _ = compose(table, np.asarray([layers]), np.asarray([recomputed]), sc.vpp, sc.schedule, params)
    gap = 0.0 if status == cp_model.OPTIMAL else (solver.objective_value - solver.best_objective_bound) / solver.objective_value
    sol = StageSolution(sc, name, layers, recomputed, stage_plan(sc, layers, recomputed, model), float(step[0]), gap,
                        time.perf_counter() - start)
    _check(sol, model, cluster, training, params)
    return keep_balanced(sol, model, cluster, training, params)


def outside_bounds(model: ModelSpec, sc: StageCore) -> str:
    """Why the balanced split of the core is not in the per-stage domain ('' when it is)."""
    lo, hi = bounds(model, sc.core.pp)
    layout = balanced_layout(model.num_layers, sc.core.pp, sc.vpp, model.mtp_num_layers, model.mtp_layout_units)
    k = dense_prefix(model)
    if k and layout.decoders[0] < k:
        return f"its first virtual stage holds {layout.decoders[0]} of the {k} dense layers"
    if any(not a <= n <= b for n, a, b in zip(layout.rank_decoders(), lo, hi)):
        return f"its stages hold {layout.rank_decoders()} layers, outside {lo}..{hi}"
    return ""


def keep_balanced(sol: StageSolution, model, cluster, training, params) -> StageSolution:
    """When the balanced split lies outside the per-stage domain, the better of the solution
    and the core's balanced plans (no recompute, full recompute): status BALANCED when the
    balanced plan wins, so per-stage never returns a plan slower than the balanced one."""
    why = outside_bounds(model, sol.core)
    if not why:
        return sol
    base = sol.core.core.model_copy(update={"vpp": sol.core.vpp, "schedule": sol.core.schedule})
    modes = [Recompute.none, Recompute.full] if sol.core.recompute_free else [base.recompute]
    costed = [(r, estimate(model, cluster, training, base.model_copy(update={"recompute": r}), params)) for r in modes]
    fits = [(r, e) for r, e in costed if e.feasible]
    if not fits:
        return sol
    mode, best = min(fits, key=lambda re: re[1].step_seconds)
    if sol.estimate is not None and sol.status in ("OPTIMAL", "FEASIBLE") and sol.step_seconds <= best.step_seconds:
        return sol
    return StageSolution(sol.core, "BALANCED", [s.layers for s in best.stages], [s.recompute_layers for s in best.stages],
                         base.model_copy(update={"recompute": mode}), best.step_seconds, 0.0, sol.solve_seconds, best, 0.0,
                         reason=f"kept the balanced plan: {why} (per-stage domain: dense layers in the first virtual stage)")


def _check(sol: StageSolution, model, cluster, training, params) -> None:
    """Re-cost the solved plan; refuse it when the cost model disagrees or it does not fit."""
    try:
        est = estimate(model, cluster, training, sol.plan, params)
    except InputError as exc:
        sol.status, sol.reason = "REFUSED", f"the solved plan breaks a rule: {exc}"
        return
    sol.estimate = est
    sol.agreement = abs(est.step_seconds - sol.step_seconds) / sol.step_seconds
    if sol.agreement > AGREEMENT_RTOL:
        sol.status, sol.reason = "REFUSED", f"the cost model re-costs the plan at {est.step_seconds:.6f} s, the solver said {sol.step_seconds:.6f} s"
    elif not est.feasible:  # INFEASIBLE when it does not fit in memory, as when no layout fits; REFUSED when it breaks a rule
        host = est.host_memory_capacity_bytes is not None and est.host_memory_bytes_per_gpu > est.host_memory_capacity_bytes
        memory = est.memory_bytes_per_gpu > est.memory_capacity_bytes or host
        sol.status, sol.reason = "INFEASIBLE" if memory else "REFUSED", "; ".join(est.reasons)
