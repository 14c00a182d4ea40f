"""The oracle: cost every plan of the space with the batch cost model (numpy over plans; plans
that differ only in vpp and schedule share one costing, autopar.cost.compose),
keep the feasible ones, rank them. Ties break on peak memory, then enumeration order (deterministic)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from autopar.cost.compose import step_and_memory_chunked
from autopar.cost.context import Batch
from solvers.base import Objective, Ranking, feasible, objective_values, rank_order


def solve(batch: Batch, objective: Objective, top_k: int, progress: Callable[[int, int], None] | None = None) -> Ranking:
    n = len(batch.tab)
    step, memory = step_and_memory_chunked(batch, progress=progress)
    values = objective_values(batch, step, objective)
    ok = feasible(batch, memory)
    order = np.flatnonzero(ok)[rank_order(values[ok], memory[ok])]
    best_mem = int(np.argmin(memory)) if n else None
    return Ranking(rows=order[:top_k], objective=values[order[:top_k]], num_evaluated=n, num_feasible=int(ok.sum()),
                   proved_optimal=True, solver="exhaustive", min_memory_row=best_mem,
                   min_memory_bytes=float(memory[best_mem]) if best_mem is not None else None,
                   extra={"all_objective": values, "all_feasible": ok, "all_order": order})
