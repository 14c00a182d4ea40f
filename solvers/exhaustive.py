"""The oracle: cost every plan of the space with the batch cost model (numpy over plans; plans
that differ only in vpp and schedule share one costing, autopar.cost.compose),
keep the feasible ones, rank them. Ties break on enumeration order (deterministic)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from autopar.cost.compose import step_and_memory
from autopar.cost.context import Batch
from autopar.cost.table import PlanTable
from solvers.base import Objective, Ranking, feasible, objective_values

CHUNK_ROWS = 100_000


def solve(batch: Batch, objective: Objective, top_k: int, progress: Callable[[int, int], None] | None = None) -> Ranking:
    tab: PlanTable = batch.tab
    n = len(tab)
    step = np.empty(n)
    memory = np.empty(n)
    for start in range(0, n, CHUNK_ROWS):
        rows = np.arange(start, min(n, start + CHUNK_ROWS))
        sub = Batch(batch.model, batch.cluster, batch.training, batch.params, tab.take(rows))
        step[rows], memory[rows] = step_and_memory(sub)
        if progress:
            progress(int(rows[-1]) + 1, n)
    values = objective_values(batch, step, objective)
    ok = feasible(batch, memory)
    order = np.flatnonzero(ok)[np.argsort(values[ok], kind="stable")]
    best_mem = int(np.argmin(memory)) if n else None
    return Ranking(rows=order[:top_k], objective=values[order[:top_k]], num_evaluated=n, num_feasible=int(ok.sum()),
                   proved_optimal=True, solver="exhaustive", min_memory_row=best_mem,
                   min_memory_bytes=float(memory[best_mem]) if best_mem is not None else None,
                   extra={"all_objective": values, "all_feasible": ok})
