"""The Pareto front (days vs cost), the chosen point under a deadline / budget / objective, and
why a larger cluster would not help, in numbers (batch cap, bubble, communication, failures)."""

from __future__ import annotations

from dataclasses import dataclass

from autopar.errors import InputError
from autopar.report import dollars, human_count
from solvers.plan_points import PlanPoint

OBJECTIVES = ("time", "cost", "energy")


@dataclass(frozen=True)
class Constraints:
    deadline_days: float | None = None
    budget_usd: float | None = None
    objective: str | None = None  # None: cost under a deadline, otherwise time


def check_budget(cluster, budget_usd: float | None) -> None:
    """A budget in dollars needs the cluster's price: without one no point has a cost to hold
    against it (planner.run_plan calls this before any search)."""
    if budget_usd is not None and cluster.price_usd_per_gpu_hour is None:
        raise InputError("budget", dollars(budget_usd), f"cluster {cluster.name} has no price_usd_per_gpu_hour, so a budget "
                         "cannot be checked; set it in the cluster file or drop --budget")


def _priced(points: list[PlanPoint]) -> list[int]:
    return [i for i, p in enumerate(points) if p.wall_days is not None]


def money(p: PlanPoint) -> float:
    """Cost, or GPU-hours when the cluster has no price or a price of 0 (the same order at a
    constant price; at $0 every point would tie, and the last doubling's change divide by zero)."""
    return p.cost_usd if p.cost_usd else p.gpu_hours


def mark_pareto(points: list[PlanPoint]) -> None:
    """A point is on the front when no other point is at least as fast and as cheap and better in one."""
    ok = _priced(points)
    for i in ok:
        a = points[i]
        a.pareto = not any(
            points[j].wall_days <= a.wall_days and money(points[j]) <= money(a)
            and (points[j].wall_days < a.wall_days or money(points[j]) < money(a))
            for j in ok if j != i
        )


def _objective(p: PlanPoint, objective: str) -> tuple[float, float]:
    key = {"time": p.wall_days, "cost": money(p), "energy": p.energy_mwh if p.energy_mwh is not None else float("inf")}[objective]
    return key, p.wall_days


def choose(points: list[PlanPoint], c: Constraints) -> tuple[int | None, str]:
    """The point that meets the deadline and the budget and minimises the objective. Raises
    InputError naming the tightest constraint and the nearest point when none meets them."""
    objective = c.objective or ("cost" if c.deadline_days is not None else "time")
    if objective not in OBJECTIVES:
        raise InputError("objective", objective, f"must be one of {', '.join(OBJECTIVES)}")
    ok = _priced(points)
    if not ok:
        return None, objective
    in_time = [i for i in ok if c.deadline_days is None or points[i].wall_days <= c.deadline_days]
    in_budget = [i for i in ok if c.budget_usd is None or points[i].cost_usd <= c.budget_usd]
    both = [i for i in in_time if i in in_budget]
    if not both:
        raise _unmet(points, ok, in_time, in_budget, c)
    return min(both, key=lambda i: _objective(points[i], objective)), objective


def _describe(p: PlanPoint) -> str:
    money = dollars(p.cost_usd) if p.cost_usd is not None else f"{human_count(p.gpu_hours)} GPU-hours"
    return f"{p.gpus:,} GPUs x {human_count(p.global_batch_tokens, binary=True)}-token batch: {p.wall_days:.1f} days, {money}"


def _unmet(points, ok, in_time, in_budget, c: Constraints) -> InputError:
    deadline = ("deadline", f"{c.deadline_days:g}d" if c.deadline_days is not None else None)
    budget = ("budget", f"${c.budget_usd:,.0f}" if c.budget_usd is not None else None)
    if not in_time:
        fastest = points[min(ok, key=lambda i: points[i].wall_days)]
        return InputError(*deadline, f"no point finishes in time; nearest: {_describe(fastest)}")
    if not in_budget:
        cheapest = points[min(ok, key=lambda i: points[i].cost_usd)]
        return InputError(*budget, f"no point costs that little; nearest: {_describe(cheapest)}")
    # each alone can be met: name the one that needs the smaller relaxation
    cheap_in_time = points[min(in_time, key=lambda i: points[i].cost_usd)]
    fast_in_budget = points[min(in_budget, key=lambda i: points[i].wall_days)]
    over_budget = cheap_in_time.cost_usd / c.budget_usd - 1
    over_deadline = fast_in_budget.wall_days / c.deadline_days - 1
    if over_budget <= over_deadline:
        return InputError(*budget, f"no point within the deadline costs that little; nearest: {_describe(cheap_in_time)} (+{100 * over_budget:.0f}%)")
    return InputError(*deadline, f"no point within the budget finishes in time; nearest: {_describe(fast_in_budget)} (+{100 * over_deadline:.0f}%)")


def _best_per_count(points: list[PlanPoint]) -> list[PlanPoint]:
    best: dict[int, PlanPoint] = {}
    for p in points:
        if p.wall_days is not None and (p.gpus not in best or p.wall_days < best[p.gpus].wall_days):
            best[p.gpus] = p
    return [best[n] for n in sorted(best)]


def explain(points: list[PlanPoint], chosen: int | None, cap_tokens: float) -> list[str]:
    """Lines of numbers: what the next larger cluster buys over the chosen (or fastest) count and
    where the rest goes; and what a linear-scaling budget would have promised."""
    best = _best_per_count(points)
    if len(best) < 2:
        return []
    anchor = points[chosen] if chosen is not None else min(best, key=lambda p: p.wall_days)
    index = next(i for i, p in enumerate(best) if p.gpus == anchor.gpus)
    if index + 1 < len(best):
        lines = _larger(best[index], best[index + 1], cap_tokens, "the next larger cluster")
    else:  # the chosen count is the largest searched: what its last doubling bought, and the cap beyond it
        lines = _larger(best[index - 1], best[index], cap_tokens, "the last doubling") + [_beyond(best[index])]
    lines.append(_linear_budget(best[0], best[-1]))
    return lines


def _beyond(p: PlanPoint) -> str:
    """Seed 001 B/X > C/W: per-GPU batch needed for compute-bound data parallelism is fixed, while
    the capped global batch spreads over twice the GPUs."""
    need_per_gpu = p.compute_bound_batch_tokens / p.gpus
    have = p.global_batch_tokens / (2 * p.gpus)
    verdict = "below" if have < need_per_gpu else "still above"
    return (f"  beyond {p.gpus:,} GPUs: the capped batch would give {have:,.0f} tokens per GPU on {2 * p.gpus:,}, {verdict} the "
            f"{need_per_gpu:,.0f} that keep data parallelism compute-bound; failures would come every {p.mtbf_hours / 2:.1f} h")


def _larger(a: PlanPoint, b: PlanPoint, cap_tokens: float, what: str) -> list[str]:
    speedup = a.wall_days / b.wall_days
    ideal = b.gpus / a.gpus
    change = (money(b) / money(a) - 1) * 100
    lines = [f"{what}, {a.gpus:,} -> {b.gpus:,} GPUs: {a.wall_days:.1f} -> {b.wall_days:.1f} days ({speedup:.2f}x of an ideal {ideal:.0f}x, "
             f"scaling efficiency {100 * speedup / ideal:.0f}%), {'cost' if b.cost_usd else 'GPU-hours'} {change:+.0f}%"]
    per_gpu_a, per_gpu_b = a.global_batch_tokens / a.gpus, b.global_batch_tokens / b.gpus
    need = b.compute_bound_batch_tokens
    lines.append(f"  batch cap: the critical batch holds the global batch at <= {human_count(cap_tokens, binary=True)} tokens, so tokens per GPU fall "
                 f"{per_gpu_a:,.0f} -> {per_gpu_b:,.0f}; data parallelism over {b.gpus:,} GPUs is compute-bound only from "
                 f"{human_count(need, binary=True)} tokens ({need / b.gpus:,.0f} per GPU, seed 001 B/X > C/W)")
    lines.append(f"  bubble: {100 * a.bubble_share:.0f}% -> {100 * b.bubble_share:.0f}% of the step; exposed communication: "
                 f"{100 * a.comm_share:.0f}% -> {100 * b.comm_share:.0f}%; MFU {100 * a.mfu:.0f}% -> {100 * b.mfu:.0f}%")
    lines.append(f"  failures: job MTBF {a.mtbf_hours:.1f} -> {b.mtbf_hours:.1f} h, goodput {100 * a.goodput:.1f}% -> {100 * b.goodput:.1f}% "
                 f"(checkpoint every {a.checkpoint_interval_seconds / 60:.0f} -> {b.checkpoint_interval_seconds / 60:.0f} min)")
    return lines


def _linear_budget(small: PlanPoint, large: PlanPoint) -> str:
    """Seed 000 'Закон Амдала': teams that budget for linear scaling miss deadlines and overpay."""
    promised = small.wall_days * small.gpus / large.gpus
    useful_small = small.gpus * small.mfu * small.goodput
    useful_large = large.gpus * large.mfu * large.goodput
    return (f"linear scaling from {small.gpus:,} GPUs would promise {promised:.1f} days on {large.gpus:,}; the model says "
            f"{large.wall_days:.1f} ({100 * (large.wall_days / promised - 1):+.0f}%): useful work is MFU x goodput = "
            f"{useful_small:,.0f} -> {useful_large:,.0f} peak-GPU equivalents, not {useful_small * large.gpus / small.gpus:,.0f}")
