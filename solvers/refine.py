"""Refinement (Optuna): start from the solver's top-k plans (enqueue_trial) and tune what the
plan table leaves coarse -- explicit first/last pipeline-stage layer counts (Megatron
--decoder-first/last-pipeline-num-layers), how many layers full recompute covers
(--recompute-num-layers), micro-batch size and the recompute mode -- against the full cost
model. A plan that overflows memory is a constraint value for the sampler, never an exception;
the sampler is seeded; the result is never worse than the best start (the starts are trials).

Bucket sizes are not tuned: the cost model has no gradient-bucket term to tune them against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import optuna

from autopar.cost import estimate
from autopar.cost.rules import plan_violations
from autopar.errors import InputError
from autopar.space import MAX_MICRO_BATCH, divisors
from autopar.specs.costparams import CostParams
from autopar.specs.estimate import Estimate
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan, Recompute, stage_layout
from autopar.specs.training import TrainingSpec

LAYOUT_SPREAD = 3  # explicit end-stage layer counts within this many layers of the even split
CONSTRAINT = "memory_overflow"  # constraint name: > 0 when the plan does not fit in HBM
ILLEGAL = 1.0  # constraint value of a chosen layout that no plan has
ALL_LAYERS = 0  # recompute_layers choice meaning "every layer of the stage" (recompute_num_layers unset)


@dataclass
class StartChoices:
    """The legal values refinement may pick around one start plan. An explicit layout is
    (first, middle) layers with last = L - first - (pp - 2) middle, so neighbouring values are
    neighbouring layouts and every middle stage splits evenly (Megatron's rule)."""

    plan: Plan
    mbs: list[int]
    recomputes: list[str]
    max_stage_layers: int
    first_range: tuple[int, int] | None  # None: no explicit layouts (pp == 1, or vpp > 1)
    middle_range: tuple[int, int] | None  # None: pp == 2 (no middle stage)

    def layout(self, num_layers: int, first: int, middle: int | None) -> tuple[int, int] | None:
        """(first, last) for the chosen values, or None when no legal layout has them."""
        pp = self.plan.pp
        last = num_layers - first - (pp - 2) * (middle or 0)
        if last < 1 or (middle is not None and middle < 1):
            return None
        return first, last


@dataclass
class Refinement:
    """What refinement found: the best start, the best plan, and every trial."""

    start_plan: Plan
    start: Estimate
    best_plan: Plan
    best: Estimate
    num_trials: int
    num_feasible: int
    seed: int
    trials: list[dict[str, Any]] = field(default_factory=list)

    @property
    def improved(self) -> bool:
        return self.best.step_seconds < self.start.step_seconds

    @property
    def gain(self) -> float:
        """Relative step-time reduction over the best start (0.034 = 3.4% faster)."""
        return 1 - self.best.step_seconds / self.start.step_seconds


def _legal(model, cluster, training, plan: Plan) -> bool:
    try:
        return not plan_violations(model, cluster, training, plan) and bool(stage_layout(model.num_layers, plan.pp, plan.first_stage_layers, plan.last_stage_layers))
    except InputError:
        return False


def choices(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, plan: Plan) -> StartChoices:
    """Legal micro-batch sizes, stage layouts and recompute modes around one start plan."""
    dp = plan.data_parallel(cluster.num_gpus)
    base = plan.model_copy(update={"dp": dp})
    mbs = [b for b in divisors(training.global_batch_size // dp) if b <= MAX_MICRO_BATCH
           and _legal(model, cluster, training, base.model_copy(update={"mbs": b}))] or [plan.mbs]
    recomputes = [r.value for r in Recompute if not (training.flash_attention and r == Recompute.selective)]
    if plan.recompute.value not in recomputes:
        recomputes.append(plan.recompute.value)
    even = model.num_layers // plan.pp
    explicit = plan.pp > 1 and plan.vpp == 1 and plan.first_stage_layers is None and plan.last_stage_layers is None
    first_range = (max(1, even - LAYOUT_SPREAD), even + LAYOUT_SPREAD) if explicit else None
    middle_range = (max(1, even - 1), even + LAYOUT_SPREAD) if explicit and plan.pp > 2 else None
    most = max(plan.layers_per_stage(model.num_layers)) + 2 * LAYOUT_SPREAD
    return StartChoices(base, mbs, recomputes, max(1, most // plan.vpp), first_range, middle_range)


def suggest_plan(trial: optuna.Trial, starts: list[StartChoices], num_layers: int) -> Plan | None:
    """A plan from the trial's parameters, or None when the chosen layout is not legal. Names
    carry the start index so each start's choices are their own distributions."""
    i = trial.suggest_categorical("start", list(range(len(starts))))
    c = starts[i]
    mbs = trial.suggest_categorical(f"mbs_{i}", c.mbs)
    first, last = c.plan.first_stage_layers, c.plan.last_stage_layers
    if c.first_range is not None and trial.suggest_categorical(f"uneven_{i}", [False, True]):
        f = trial.suggest_int(f"first_{i}", *c.first_range)
        m = trial.suggest_int(f"middle_{i}", *c.middle_range) if c.middle_range else None
        layout = c.layout(num_layers, f, m)
        if layout is None:
            return None
        first, last = layout
    recompute = trial.suggest_categorical("recompute", c.recomputes) if len(c.recomputes) > 1 else c.recomputes[0]
    layers = None
    if recompute == Recompute.full.value:
        k = trial.suggest_int(f"recompute_layers_{i}", ALL_LAYERS, c.max_stage_layers)
        layers = None if k == ALL_LAYERS else k
    return c.plan.model_copy(update={"mbs": mbs, "first_stage_layers": first, "last_stage_layers": last,
                                     "recompute": Recompute(recompute), "recompute_num_layers": layers})


def start_params(i: int, c: StartChoices) -> dict[str, Any]:
    """The trial parameters that reproduce start plan i exactly (for enqueue_trial)."""
    params: dict[str, Any] = {"start": i, f"mbs_{i}": c.plan.mbs, "recompute": c.plan.recompute.value}
    if c.first_range is not None:
        params[f"uneven_{i}"] = False
    if c.plan.recompute == Recompute.full:
        params[f"recompute_layers_{i}"] = c.plan.recompute_num_layers or ALL_LAYERS
    return params


def memory_constraint(est: Estimate) -> float:
    """> 0 when the plan overflows HBM: the overflow as a fraction of HBM."""
    return est.memory_bytes_per_gpu / est.memory_capacity_bytes - 1


def make_sampler(seed: int, n_startup_trials: int = 10) -> optuna.samplers.TPESampler:
    """Seeded TPE that keeps memory-overflowing trials apart (constraint > 0 is infeasible)."""
    if hasattr(optuna.trial.Trial, "set_constraint"):  # Optuna >= 5: constraints live on the trial
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials,
                                      constraints_func=lambda t: [t.user_attrs.get(CONSTRAINT, 0.0)])


def set_constraint(trial: optuna.Trial, value: float) -> None:
    trial.set_user_attr(CONSTRAINT, value)
    if hasattr(trial, "set_constraint"):
        trial.set_constraint(CONSTRAINT, value)


def refine(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, starts: list[Plan], n_trials: int,
           params: CostParams | None = None, seed: int = 0, progress: Callable[[int, int], None] | None = None) -> Refinement:
    """Tune the starts against the cost model; n_trials includes one trial per start."""
    if not starts:
        raise InputError("refine", 0, "needs at least one start plan")
    if n_trials < len(starts):
        raise InputError("refine", n_trials, f"must be at least the number of start plans ({len(starts)})")
    spaces = [choices(model, cluster, training, p) for p in starts]
    cache: dict[str, Estimate] = {}
    plans: dict[str, Plan] = {}
    penalty = [0.0]  # objective of an illegal layout: twice the slowest plan seen
    records: list[dict[str, Any]] = []

    def objective(trial: optuna.Trial) -> float:
        plan = suggest_plan(trial, spaces, model.num_layers)
        if plan is None:  # the layout leaves no layers for the last stage: infeasible, not an error
            set_constraint(trial, ILLEGAL)
            return penalty[0]
        est = cache.get(plan.text()) or estimate(model, cluster, training, plan, params)
        cache[plan.text()] = est
        plans[plan.text()] = plan
        penalty[0] = max(penalty[0], 2 * est.step_seconds)
        set_constraint(trial, memory_constraint(est))
        trial.set_user_attr("plan", plan.text())
        records.append(dict(number=trial.number, plan=plan.text(), step_seconds=est.step_seconds, feasible=est.feasible,
                            memory_gb=est.memory_bytes_per_gpu / 1e9))
        if progress:
            progress(trial.number + 1, n_trials)
        return est.step_seconds

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=make_sampler(seed))
    for i, c in enumerate(spaces):
        study.enqueue_trial(start_params(i, c))
    study.optimize(objective, n_trials=n_trials)
    start_est = [cache[s.plan.text()] for s in spaces]
    feasible_starts = [i for i, e in enumerate(start_est) if e.feasible] or list(range(len(spaces)))
    first = min(feasible_starts, key=lambda i: (start_est[i].step_seconds, i))
    best_plan, best = spaces[first].plan, start_est[first]
    for r in records:  # strict improvement only: ties keep the solver's plan
        est = cache[r["plan"]]
        if est.feasible and est.step_seconds < best.step_seconds * (1 - 1e-12) and not math.isnan(est.step_seconds):
            best_plan, best = plans[r["plan"]], est
    return Refinement(spaces[first].plan, start_est[first], best_plan, best, n_trials,
                      sum(r["feasible"] for r in records), seed, records)

