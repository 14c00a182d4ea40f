"""Why the best plan beats the runner-up, in numbers: which plan keys differ, and which terms
of the two estimates' step-time breakdowns (and memory) account for the gap."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from autopar.specs.plan import Plan
from autopar.specs.results import RankedPlan

if TYPE_CHECKING:
    from autopar.specs import ModelSpec

TERMS_SHOWN = 3  # largest time differences listed


# Plan fields whose null default resolves from other fields: compared as the plan runs them
RESOLVED = {"sp": "sequence_parallel", "tp_overlap": "tp_comm_overlap", "etp": "expert_tp", "schedule": "pipeline_schedule",
            "reshard": "reshard_after_forward", "grad_sync": "gradient_sync"}
# dp is left out: it is N / (tp cp pp) on the one GPU count both plans share, so it differs only
# when those degrees do; null (derived) and an explicit equal value would read as a difference
NOT_COMPARED = ("dp",)


def plan_differences(best: Plan, other: Plan, model: ModelSpec | None = None) -> list[str]:
    """'pp=8 (vs 4)' for every resolved plan value that differs (dp only when the degrees do).
    With the model, the stage layout is compared as the layers of every virtual stage (see
    _with_layouts), not as it is spelled."""
    a, b = _with_layouts(best, other, model)
    return [f"{k}={a[k]} (vs {b[k]})" for k in a if a[k] != b[k] and not _follows(k, a, b)]


# three spellings of one thing: the decoder (and MTP) layers of every virtual pipeline stage
LAYOUT_KEYS = ("first_stage_layers", "last_stage_layers", "layout")


def _with_layouts(best: Plan, other: Plan, model: ModelSpec | None) -> tuple[dict[str, object], dict[str, object]]:
    """Both plans' resolved values; with the model, first_stage_layers, last_stage_layers and
    layout give way to one 'layout' value, the layers of every virtual stage as the plan runs
    them (Plan.model_layout), so first=16,last=16 and the balanced split that holds 16 layers on
    every stage are the same. Two balanced splits differ only where pp or vpp do, which say it."""
    a, b = _resolved(best), _resolved(other)
    if model is None:
        return a, b
    layouts = [p.model_layout(model) for p in (best, other)]
    same = layouts[0].decoders == layouts[1].decoders and layouts[0].mtp == layouts[1].mtp
    spelled = any(a[k] != "-" or b[k] != "-" for k in LAYOUT_KEYS)
    for values, layout in zip((a, b), layouts):
        for key in LAYOUT_KEYS[:2]:
            del values[key]
        values["layout"] = "-" if same or not spelled else layout.text()
    return a, b


# values that default to another field's: in both plans equal to it, the other field's difference says it
FOLLOWS = {"etp": "tp", "tp_overlap": "sp"}


def _follows(key: str, a: dict[str, object], b: dict[str, object]) -> bool:
    leader = FOLLOWS.get(key)
    return leader is not None and a[key] == a[leader] and b[key] == b[leader]


def _resolved(plan: Plan) -> dict[str, object]:
    """Every field of the plan language as the plan runs with it: defaults resolved, values in
    their text form (on/off, enum text, modules joined by +, stage counts by /), '-' for none
    and for a value the plan does not use (cp_algo without cp, reshard without ZeRO-3)."""
    unused = {"cp_algo": plan.cp == 1, "reshard": plan.zero != 3}
    values = {}
    for field in Plan.model_fields:
        if field in NOT_COMPARED:
            continue
        value = None if unused.get(field) else getattr(plan, RESOLVED.get(field, field))
        values[field] = _text(value)  # the key as Plan.text() writes it, so it reads against the plan column
    return values


def _text(value: object) -> object:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return ("+" if value and isinstance(value[0], Enum) else "/").join(str(_text(v)) for v in value)
    return value


def variant_hint(ranked: RankedPlan, model: ModelSpec | None = None) -> str:
    """What the folded equal-cost variants change, e.g. 'differ in order, cp_algo' (the stage
    layout as run with the model, as in plan_differences)."""
    from autopar.specs import parse_plan

    keys: list[str] = []
    for text in ranked.equal_cost_variants:
        base, other = _with_layouts(ranked.plan, parse_plan(text), model)
        keys += [k for k in base if other[k] != base[k] and k not in keys]
    return "differ in " + ", ".join(keys) if keys else "same values"


def time_differences(best: dict[str, float], other: dict[str, float]) -> list[tuple[str, float, float]]:
    """(term, best seconds, other seconds) for the terms that differ most, largest first."""
    keys = sorted(set(best) | set(other))
    diffs = [(k, best.get(k, 0.0), other.get(k, 0.0)) for k in keys]
    diffs = [d for d in diffs if abs(d[1] - d[2]) > 1e-9]
    return sorted(diffs, key=lambda d: -abs(d[1] - d[2]))[:TERMS_SHOWN]


def why_best(best: RankedPlan, runner_up: RankedPlan, model: ModelSpec | None = None) -> list[str]:
    """Lines under the best plan's table."""
    a, b = best.estimate, runner_up.estimate
    gap = b.step_seconds - a.step_seconds
    differs = ", ".join(plan_differences(best.plan, runner_up.plan, model)) or "no plan key"  # every field is compared, the stage layout as run
    if gap == 0.0:  # an exact tie ranks the lower peak memory first (solvers.base.rank_order)
        less = " and less memory" if a.memory_bytes_per_gpu < b.memory_bytes_per_gpu else ""
        lines = [f"  why it is above rank 2: the same step time{less}; differs in {differs}"]
    else:
        lines = [f"  why it beats rank 2: {gap:.3f} s per step faster ({100 * gap / b.step_seconds:.1f}%); differs in {differs}"]
    terms = time_differences(a.time_breakdown, b.time_breakdown)
    if terms:
        lines.append("    " + "; ".join(f"{k} {x:.3f} s vs {y:.3f} s ({x - y:+.3f})" for k, x, y in terms))
    mem = a.memory_bytes_per_gpu - b.memory_bytes_per_gpu
    if abs(mem) >= 0.05e9:
        lines.append(f"    memory {a.memory_bytes_per_gpu / 1e9:.1f} GB vs {b.memory_bytes_per_gpu / 1e9:.1f} GB per GPU ({mem / 1e9:+.1f})")
    return lines
