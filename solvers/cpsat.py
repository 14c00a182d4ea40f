"""OR-Tools CP-SAT over integer-scaled tables of the cost terms (docs/design.md 'Search').

Data: the space is split into *cores* (every dimension but vpp and schedule) and *outer*
options (vpp, schedule). The batch cost model costs each core once (vpp = 1, 1F1B); the step
of any plan is then m x T_max[core] + fill + F[core], where fill = R[core] / vpp for the
interleaved schedule, R[core] for 1F1B and 0 for zero-bubble (autopar.cost.compose.compose_outer
is the same composition in numpy). Memory depends on the in-flight micro-batches, so the
(core, outer) pairs that fit in HBM are an allowed-assignments table.
Model: an index over the (core, outer) pairs that fit; an element constraint reads the step,
whose table combines the term tables (see build_model for why the combination is in the data).
Solve: one worker and a fixed seed (reproducible); top-k by forbidding each found pair, over
the pairs at or below the k-th step only (candidate_pairs: exact for the top k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from autopar.cost.context import Batch
from autopar.cost.compose import COST_CHUNK_ROWS, step_and_memory_chunked
from solvers.base import Objective, Ranking, feasible, objective_values, rank_order

STEP_QUANTUM_SECONDS = 1e-6  # one integer unit of step time in the model
SEED = 20261129


@dataclass
class Tables:
    """The data of the CP-SAT model: the (core, outer) pairs that fit in memory, each named by
    the space row it stands for."""

    pair_rows: np.ndarray  # pair index -> space row, the rows that fit, in space order
    step_seconds: np.ndarray  # space row -> exact step seconds (composed)
    memory_bytes: np.ndarray  # space row -> peak memory


def build_tables(batch: Batch, chunk_rows: int = COST_CHUNK_ROWS) -> Tables:
    """Cost every plan, each core once per chunk (autopar.cost.compose.step_and_memory_chunked)."""
    step, memory = step_and_memory_chunked(batch, chunk_rows)
    return Tables(pair_rows=np.flatnonzero(feasible(batch, memory)), step_seconds=step, memory_bytes=memory)


def quantised_steps(tables: Tables) -> np.ndarray:
    """Step of every allowed pair in integer STEP_QUANTUM_SECONDS."""
    return np.rint(tables.step_seconds[tables.pair_rows] / STEP_QUANTUM_SECONDS).astype(np.int64)


def candidate_pairs(tables: Tables, top_k: int | None) -> np.ndarray:
    """Pair indices the model needs for the top_k: those whose quantised step is at most the
    top_k-th smallest (ties kept). Every pair left out is slower than top_k pairs kept, so the
    first top_k solutions of the reduced model are those of the full one.
    Measured (DeepSeek-V3 on 2,048 H800, full placement space): an element over all 2.56M
    pairs that fit had not solved after 10 minutes with one worker."""
    total = quantised_steps(tables)
    if top_k is None or top_k >= len(total):
        return np.arange(len(total))
    kth = np.partition(total, top_k - 1)[top_k - 1]
    return np.flatnonzero(total <= kth)


def build_model(tables: Tables, pairs: np.ndarray | None = None) -> tuple[cp_model.CpModel, dict[str, cp_model.IntVar]]:
    """An index variable over the (core, outer) pairs that fit (or the given subset of pair
    indices: candidate_pairs) and one element constraint for the step, whose table is the
    composed step m x T_max + fill + F of each pair rounded to STEP_QUANTUM_SECONDS.

    Measured on the LLaMA-3 70B (24k pairs) and 405B spaces with one worker: stating the
    product and the division as CP-SAT multiplication/division equalities took 6-60 s per
    solve, and tying three element terms by a linear equality exhausted 24 GiB of memory;
    a single element solves in ~0.5 s. The degrees' product rule is built into the space.
    The variable "pair" indexes `pairs` (all pairs when None).
    """
    model = cp_model.CpModel()
    total = quantised_steps(tables)
    if pairs is not None:
        total = total[pairs]
    pair = model.new_int_var(0, len(total) - 1, "pair")
    step = model.new_int_var(int(total.min()), int(total.max()), "step")
    model.add_element(pair, total.tolist(), step)
    model.minimize(step)
    return model, {"pair": pair, "step": step}


def solve_model(model: cp_model.CpModel, time_limit_seconds: float | None = None) -> tuple[cp_model.CpSolver, int]:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = SEED
    if time_limit_seconds:
        solver.parameters.max_time_in_seconds = time_limit_seconds
    return solver, solver.solve(model)


def solve(batch: Batch, objective: Objective, top_k: int, tables: Tables | None = None) -> Ranking:
    """The top_k plans, one CP-SAT solve each (each found pair is then forbidden). `tables`
    from an earlier solve of the same batch (Ranking.extra["tables"]) are reused."""
    tables = tables if tables is not None else build_tables(batch)
    best_mem = int(np.argmin(tables.memory_bytes)) if len(tables.memory_bytes) else None
    common = dict(num_evaluated=len(batch.tab), num_feasible=len(tables.pair_rows), solver="cpsat", min_memory_row=best_mem,
                  min_memory_bytes=float(tables.memory_bytes[best_mem]) if best_mem is not None else None,
                  extra={"tables": tables})
    if not len(tables.pair_rows):
        return Ranking(rows=np.zeros(0, dtype=int), objective=np.zeros(0), proved_optimal=True, **common)
    pairs = candidate_pairs(tables, top_k)
    model, var = build_model(tables, pairs)
    chosen, proved = [], True
    for _ in range(min(top_k, len(pairs))):
        solver, status = solve_model(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        proved &= status == cp_model.OPTIMAL
        index = int(solver.value(var["pair"]))
        chosen.append(index)
        model.add(var["pair"] != index)
    rows_arr = tables.pair_rows[pairs[chosen + _boundary_ties(quantised_steps(tables)[pairs], chosen)]]
    values = objective_values(batch, tables.step_seconds[rows_arr], objective)
    # equal quantised objectives may come back in any order: rank by the exact values (ties on memory)
    order = rank_order(values, tables.memory_bytes[rows_arr])[:len(chosen)]
    return Ranking(rows=rows_arr[order], objective=values[order], proved_optimal=proved, **common)


def _boundary_ties(total: np.ndarray, chosen: list[int]) -> list[int]:
    """Indices into `total` (the candidates' quantised steps) left out at the last level solved:
    CP-SAT returns any member of a tied level, so the cut at top_k is made over the whole level
    by the exact step and then memory (the exhaustive oracle's order), not by which came first."""
    if not chosen:
        return []
    level = total[chosen].max()
    return sorted(set(np.flatnonzero(total == level).tolist()) - set(chosen))
