"""The neighbourhood Optuna explores around each start plan when tuning against *measured*
runs (solvers.tune, `autopar tune`): micro-batch size, recompute mode and how many layers full
recompute covers (--recompute-num-layers, or the start's own per-stage counts), and for a
balanced vpp = 1 start explicit first/last pipeline-stage layer counts (Megatron
--decoder-first/last-pipeline-num-layers). A start that already has a per-stage layout (from
solvers.stages) keeps it. Names carry the start index so each start's choices are their own
distributions; a plan that overflows memory is a constraint value, never an exception.

A study is for one model, cluster and training setup: study_inputs() names them (and a
fingerprint of the whole specs), kept as a study attribute, and check_study() refuses to resume
a study made for other inputs, or whose trials drew a parameter from other choices (Optuna's
own error for that is an internal-looking ValueError in the middle of the run).

Against the cost model there is no Optuna step: the enumeration covers micro-batch and
recompute mode, and solvers.stages solves each stage's layers and recompute counts exactly
(the `search --refine` Optuna pass this module used to run is retired).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution, check_distribution_compatibility

from autopar.cost.rules import plan_violations
from autopar.errors import InputError
from autopar.space import MAX_MICRO_BATCH, divisors
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan, Recompute, stage_layout
from autopar.specs.training import TrainingSpec

LAYOUT_SPREAD = 3  # explicit end-stage layer counts within this many layers of the even split
CONSTRAINT = "memory_overflow"  # constraint name: > 0 when the plan does not fit in HBM
ILLEGAL = 1.0  # constraint value of a chosen layout that no plan has
ALL_LAYERS = 0  # recompute_layers choice meaning "every layer of the stage" (recompute_num_layers unset)
STAGE_COUNTS = -1  # recompute_layers choice meaning "the start's own per-stage counts" (stage_recompute_layers)
INPUTS_ATTR = "autopar_inputs"  # study user attribute: what the study was created for (study_inputs)
OBJECTIVE = "measured step seconds"  # what a study's trials minimize
NOT_INPUTS = ("description", "sources")  # a profile's prose: editing it changes no study
# study_inputs keys shown when a resumed study differs, with their labels
INPUT_LABELS = {"model": "model", "cluster": "cluster", "gpus": "GPUs", "seq_len": "seq-len", "global_batch": "global batch",
                "precision": "precision", "stack": "stack", "objective": "objective"}
NEW_STUDY = "use a new --study name, or another --storage or --out"


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
    own_recompute: bool = False  # the start's mode is not a common choice (selective under flash attention, an MLA start)

    def layout(self, num_layers: int, first: int, middle: int | None) -> tuple[int, int] | None:
        """(first, last) for the chosen values, or None when no legal layout has them."""
        pp = self.plan.pp
        last = num_layers - first - (pp - 2) * (middle or 0)
        if last < 1 or (middle is not None and middle < 1):
            return None
        return first, last


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
    own = plan.recompute.value not in recomputes
    if own:
        recomputes.append(plan.recompute.value)
    even = model.num_layers // plan.pp
    explicit = plan.pp > 1 and plan.vpp == 1 and plan.first_stage_layers is None and plan.last_stage_layers is None and plan.layout is None
    first_range = (max(1, even - LAYOUT_SPREAD), even + LAYOUT_SPREAD) if explicit else None
    middle_range = (max(1, even - 1), even + LAYOUT_SPREAD) if explicit and plan.pp > 2 else None
    most = max(plan.layers_per_stage(model.num_layers)) + 2 * LAYOUT_SPREAD
    return StartChoices(base, mbs, recomputes, max(1, most // plan.vpp), first_range, middle_range, own)


def recompute_name(i: int, c: StartChoices) -> str:
    """The recompute mode's parameter: one shared by the starts, or recompute_{i} for a start
    whose choices add its own mode (one name with two sets of choices is an Optuna error)."""
    return f"recompute_{i}" if c.own_recompute else "recompute"


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
    recompute = trial.suggest_categorical(recompute_name(i, c), c.recomputes) if len(c.recomputes) > 1 else c.recomputes[0]
    layers, per_stage = None, None
    if recompute == Recompute.full.value:
        low = STAGE_COUNTS if c.plan.stage_recompute_layers else ALL_LAYERS
        k = trial.suggest_int(f"recompute_layers_{i}", low, c.max_stage_layers)
        layers = None if k in (ALL_LAYERS, STAGE_COUNTS) else k
        per_stage = c.plan.stage_recompute_layers if k == STAGE_COUNTS else None
    return c.plan.model_copy(update={"mbs": mbs, "first_stage_layers": first, "last_stage_layers": last,
                                     "recompute": Recompute(recompute), "recompute_num_layers": layers,
                                     "stage_recompute_layers": per_stage,  # modules name what selective recomputes
                                     "recompute_modules": c.plan.recompute_modules if recompute == Recompute.selective.value else None})


def start_params(i: int, c: StartChoices) -> dict[str, Any]:
    """The trial parameters that reproduce start plan i exactly (for enqueue_trial)."""
    params: dict[str, Any] = {"start": i, f"mbs_{i}": c.plan.mbs, recompute_name(i, c): c.plan.recompute.value}
    if c.first_range is not None:
        params[f"uneven_{i}"] = False
    if c.plan.recompute == Recompute.full:
        params[f"recompute_layers_{i}"] = STAGE_COUNTS if c.plan.stage_recompute_layers else c.plan.recompute_num_layers or ALL_LAYERS
    return params


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


def distributions(starts: list[StartChoices]) -> dict[str, BaseDistribution]:
    """Every parameter suggest_plan may ask for, with the distribution it asks with."""
    space: dict[str, BaseDistribution] = {"start": CategoricalDistribution(list(range(len(starts))))}
    for i, c in enumerate(starts):
        space[f"mbs_{i}"] = CategoricalDistribution(c.mbs)
        if c.first_range is not None:
            space[f"uneven_{i}"] = CategoricalDistribution([False, True])
            space[f"first_{i}"] = IntDistribution(*c.first_range)
            if c.middle_range is not None:
                space[f"middle_{i}"] = IntDistribution(*c.middle_range)
        if len(c.recomputes) > 1:
            space[recompute_name(i, c)] = CategoricalDistribution(c.recomputes)
        if Recompute.full.value in c.recomputes:
            space[f"recompute_layers_{i}"] = IntDistribution(STAGE_COUNTS if c.plan.stage_recompute_layers else ALL_LAYERS, c.max_stage_layers)
    return space


def study_inputs(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec) -> dict[str, Any]:
    """What a study is for: readable names, and a fingerprint of the whole model, cluster and
    training specs (a changed profile or training option changes it)."""
    specs = {kind: {k: v for k, v in spec.model_dump(mode="json").items() if k not in NOT_INPUTS}
             for kind, spec in (("model", model), ("cluster", cluster), ("training", training))}
    fingerprint = hashlib.sha256(json.dumps([specs, OBJECTIVE], sort_keys=True).encode()).hexdigest()[:12]
    t = specs["training"]
    return dict(model=model.name, cluster=cluster.name, gpus=cluster.num_gpus, seq_len=t["seq_len"], global_batch=t["global_batch_size"],
                precision=t["precision"], stack=t["stack"], objective=OBJECTIVE, fingerprint=fingerprint)


def check_study_inputs(study: optuna.Study, inputs: dict[str, Any]) -> None:
    """Refuse a study created for other inputs (study_inputs), naming what differs. A study
    without the attribute (an older autopar's) is left to check_study_params."""
    theirs = study.user_attrs.get(INPUTS_ATTR)
    if not isinstance(theirs, dict) or theirs.get("fingerprint") == inputs["fingerprint"]:
        return
    diffs = [f"{label} {theirs.get(key)}, not {inputs[key]}" for key, label in INPUT_LABELS.items() if theirs.get(key) != inputs[key]]
    what = "; ".join(diffs) or (f"other specs under the same names (a changed model or cluster profile, or a training option: "
                                f"fingerprint {theirs.get('fingerprint')}, now {inputs['fingerprint']})")
    raise InputError("study", study.study_name, f"was created for {what}: {NEW_STUDY}")


def check_study_params(study: optuna.Study, space: dict[str, BaseDistribution]) -> None:
    """Refuse a study whose trials drew a parameter of `space` (distributions()) from other
    choices: Optuna would fail the run the first time a trial asks for it."""
    for trial in study.get_trials(deepcopy=False):
        for name, old in trial.distributions.items():
            new = space.get(name)
            if new is None:
                continue
            try:
                check_distribution_compatibility(old, new)
            except ValueError:
                raise InputError("study", study.study_name, f"trial {trial.number} drew {name} from {_choices(old)}, these inputs give "
                                 f"{_choices(new)} (the study was made for another model, cluster, batch, --top, --fix or --emit): "
                                 f"{NEW_STUDY}") from None


def stamp_study(study: optuna.Study, inputs: dict[str, Any]) -> None:
    """Record what the study is for, once: a study keeps the inputs it was first run with."""
    if INPUTS_ATTR not in study.user_attrs:
        study.set_user_attr(INPUTS_ATTR, inputs)


def _choices(dist: BaseDistribution) -> str:
    if isinstance(dist, CategoricalDistribution):
        return str(list(dist.choices))
    if isinstance(dist, IntDistribution):
        return f"integers {dist.low}..{dist.high}"
    return type(dist).__name__
