"""The plan space: the legal values of every plan dimension for a model, cluster and
training spec, enumerated once as a PlanTable and shared by every solver (DESIGN.md 'The
plan space'). Cross-dimension rules come from autopar.cost.rules (one implementation)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from autopar.cost.rules import legal_mask
from autopar.cost.table import CP_ALGO, NONE, ORDER, RECOMPUTE, SCHEDULE, PlanTable
from autopar.errors import InputError
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import CpAlgo, Plan, RankOrder, Recompute, Schedule, stage_layout
from autopar.specs.training import TrainingSpec

MAX_MICRO_BATCH = 16  # larger micro-batches only add activation memory once GEMMs saturate
FIXABLE = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "zero", "recompute", "sp", "schedule", "cp_algo", "order")


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending, built from its prime factorisation: trial division up to
    sqrt(n) and then work proportional to the number of divisors (trying every integer up to n
    never returned for n = 10^12)."""
    if n < 1:
        return []
    factors: list[tuple[int, int]] = []
    rest, p = n, 2
    while p * p <= rest:
        if rest % p == 0:
            k = 0
            while rest % p == 0:
                rest //= p
                k += 1
            factors.append((p, k))
        p += 1 if p == 2 else 2
    if rest > 1:
        factors.append((rest, 1))
    out = [1]
    for prime, power in factors:
        out = [d * prime**e for d in out for e in range(power + 1)]
    return sorted(out)


@dataclass(frozen=True)
class SpaceOptions:
    """What the search may vary. `fixed` pins dimensions (CLI --fix)."""

    fixed: dict[str, object] = field(default_factory=dict)
    allow_tp_across_nodes: bool = False
    stage_layouts: bool = False  # also vary the layers of the first and last pipeline stage
    max_micro_batch: int = MAX_MICRO_BATCH


def _fixed_plan_fields(fixed: dict[str, object]) -> dict[str, object]:
    """Validate --fix values through the Plan schema so errors name the field and rule."""
    unknown = set(fixed) - set(FIXABLE)
    if unknown:
        raise InputError("fix", ",".join(sorted(unknown)), f"unknown dimension; can fix: {', '.join(FIXABLE)}")
    fields = {k: v for k, v in fixed.items() if k != "vpp" or v != 1}
    Plan.model_validate({k: v for k, v in fields.items() if k not in ("schedule", "vpp")})
    return fixed


def _allowed(name: str, values: list, fixed: dict[str, object]) -> list:
    if name not in fixed:
        return values
    want = fixed[name]
    if isinstance(want, (Recompute, Schedule, CpAlgo, RankOrder)):
        want = want.value
    return [v for v in values if (v.value if hasattr(v, "value") else v) == want]


def enumerate_space(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, options: SpaceOptions | None = None) -> PlanTable:
    """Every legal plan for the cluster's GPU count (product tp*cp*pp*dp = N by construction)."""
    tab = candidate_space(model, cluster, training, options)
    return tab.take(np.flatnonzero(legal_mask(model, cluster, training, tab)))


def candidate_space(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, options: SpaceOptions | None = None) -> PlanTable:
    """The cartesian product of each dimension's candidate values, before the cross-dimension rules."""
    opts = options or SpaceOptions()
    fixed = _fixed_plan_fields(dict(opts.fixed))
    n = cluster.num_gpus
    gpn = cluster.gpus_per_node
    tps = [t for t in divisors(n) if opts.allow_tp_across_nodes or t <= gpn]
    blocks = []
    for tp in _allowed("tp", tps, fixed):
        for cp in _allowed("cp", divisors(n // tp), fixed):
            for pp in _allowed("pp", [p for p in divisors(n // (tp * cp)) if p <= model.num_layers], fixed):
                dp = n // (tp * cp * pp)
                if "dp" in fixed and fixed["dp"] != dp:
                    continue
                block = _block(model, training, opts, fixed, tp, cp, pp, dp)
                if block is not None:
                    blocks.append(block)
    if not blocks:
        return PlanTable(**{k: np.zeros(0, dtype=np.int64) for k in PlanTable.__dataclass_fields__})
    return PlanTable(**{k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]})


def end_stage_layouts(num_layers: int, pp: int, spread: int = 2) -> list[tuple[int, int]]:
    """Explicit (first, last) stage layer counts near the balanced split, the middle stages
    splitting the rest evenly and carrying at least as many layers as the end stages (which
    also hold the embedding and the logits; Megatron --decoder-first/last-pipeline-num-layers)."""
    if pp < 2:
        return []
    out = []
    middle_stages = pp - 2
    even = num_layers / pp
    for first in range(max(1, int(even) - spread), int(even) + 2):
        for last in range(max(1, int(even) - spread), int(even) + 2):
            rest = num_layers - first - last
            if middle_stages == 0:
                if rest == 0:
                    out.append((first, last))
                continue
            if rest <= 0 or rest % middle_stages:
                continue
            middle = rest // middle_stages
            if middle >= max(first, last) and middle - min(first, last) <= spread:
                out.append((first, last))
    balanced = stage_layout(num_layers, pp)
    return [fl for fl in out if [fl[0], fl[1]] != [balanced[0], balanced[-1]] or len(set(balanced[1:-1])) > 1]


def _block(model, training, opts, fixed, tp, cp, pp, dp) -> dict[str, np.ndarray] | None:
    """The cartesian product of the remaining dimensions for one (tp, cp, pp)."""
    per_replica = training.global_batch_size // dp if training.global_batch_size % dp == 0 else 1
    mbs = _allowed("mbs", [b for b in divisors(per_replica) if b <= opts.max_micro_batch], fixed)
    eps = [e for e in divisors(model.num_experts) if (dp * cp * tp) % e == 0] if model.is_moe else [1]
    etps = sorted({tp, 1}) if model.is_moe else [tp]
    vpps = [1] + ([v for v in range(2, model.num_layers // pp + 1) if (model.num_layers // pp) % v == 0] if pp > 1 else [])
    zeros = [0, 1, 2, 3] if pp == 1 else [0, 1]
    recomputes = [r for r in Recompute if not (training.flash_attention and r == Recompute.selective)]
    sps = [1, 0] if tp > 1 else [0]
    algos = [a for a in CpAlgo if cp > 1 or a == CpAlgo.ring]
    orders = list(RankOrder) if pp > 1 and dp > 1 else [RankOrder.tp_cp_ep_dp_pp]
    layouts = [(NONE, NONE)] + (end_stage_layouts(model.num_layers, pp) if opts.stage_layouts else [])
    combos = itertools.product(
        _allowed("ep", eps, fixed), _allowed("etp", etps, fixed), _allowed("vpp", vpps, fixed), mbs,
        _allowed("zero", zeros, fixed), _allowed("recompute", recomputes, fixed), _allowed("sp", sps, fixed),
        _allowed("cp_algo", algos, fixed), _allowed("order", orders, fixed),
    )
    rows = []
    for ep, etp, vpp, b, zero, rc, sp, algo, order in combos:
        schedules = [Schedule.interleaved] if vpp > 1 else ([Schedule.one_f_one_b, Schedule.zero_bubble] if pp > 1 else [Schedule.one_f_one_b])
        for sched in _allowed("schedule", schedules, fixed):
            for first, last in layouts:
                rows.append((tp, pp, dp, cp, ep, etp, vpp, b, zero, NONE, RECOMPUTE.index(rc), NONE, sp, sp,
                             SCHEDULE.index(sched), CP_ALGO.index(algo), ORDER.index(order), first, last))
    if not rows:
        return None
    arr = np.asarray(rows, dtype=np.int64)
    names = list(PlanTable.__dataclass_fields__)
    return {name: arr[:, i] for i, name in enumerate(names)}
