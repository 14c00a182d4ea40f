"""The `autopar plan` chart: wall days vs cost for every point, one colour per GPU count, the
Pareto front joined, the chosen point ringed, the deadline and the budget as lines. PNG bytes; the
CLI writes them atomically with the permissions of its other results."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from autopar.report import dollars, human_count  # noqa: E402

if TYPE_CHECKING:
    from solvers.planner import PlanReport


def _money(p) -> float:
    """solvers.plan_choice's money (cost, or GPU-hours without a price or at a price of 0), in millions."""
    from solvers.plan_choice import money
    return money(p) / 1e6


def plan_png(report: "PlanReport", deadline_days: float | None = None, budget_usd: float | None = None) -> bytes:
    points = [p for p in report.points if p.wall_days is not None]
    priced = all(p.cost_usd for p in points)
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    counts = sorted({p.gpus for p in points})
    cmap = plt.get_cmap("viridis", max(len(counts), 2))
    for k, n in enumerate(counts):
        mine = [p for p in points if p.gpus == n]
        ax.scatter([p.wall_days for p in mine], [_money(p) for p in mine], color=cmap(k), s=36, label=f"{n:,} GPUs", zorder=3)
    front = sorted((p for p in points if p.pareto), key=lambda p: p.wall_days)
    if front:
        ax.plot([p.wall_days for p in front], [_money(p) for p in front], "k--", lw=1, label="Pareto front", zorder=2)
    if report.chosen is not None and report.points[report.chosen].wall_days is not None:
        c = report.points[report.chosen]
        ax.scatter([c.wall_days], [_money(c)], s=220, facecolors="none", edgecolors="red", linewidths=2, label="chosen", zorder=4)
    if deadline_days is not None:
        ax.axvline(deadline_days, color="tab:red", lw=1, ls=":", label=f"deadline {deadline_days:g} d")
    if budget_usd is not None and priced:
        ax.axhline(budget_usd / 1e6, color="tab:orange", lw=1, ls=":", label=f"budget {dollars(budget_usd)}")
    days = [p.wall_days for p in points]
    if days and max(days) > 8 * min(days):
        ax.set_xscale("log")
    ax.set_xlabel("wall-clock days (failures and checkpoints included)")
    ax.set_ylabel("cost, $M" if priced else "GPU-hours, millions")
    ax.set_title(f"{human_count(report.tokens)} tokens: days vs {'cost' if priced else 'GPU-hours'} per GPU count and batch")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
