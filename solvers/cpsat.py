"""OR-Tools CP-SAT over integer-scaled tables of the cost terms (docs/design.md 'Search').

Data: the space is split into *cores* (every dimension but vpp and schedule) and *outer*
options (vpp, schedule). The batch cost model costs each core once (vpp = 1, 1F1B); the step
of any plan is then m x T_max[core] + fill + F[core], where fill = R[core] / vpp for the
interleaved schedule, R[core] for 1F1B and 0 for zero-bubble (autopar.cost.compose.compose_outer
is the same composition in numpy). Memory depends on the in-flight micro-batches, so the
(core, outer) pairs that fit in HBM are an allowed-assignments table.
Model: an index over the (core, outer) pairs that fit; an element constraint reads the step,
whose table combines the term tables (see build_model for why the combination is in the data).
Solve: one worker and a fixed seed (reproducible); top-k by forbidding each found pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from autopar.cost.context import Batch
from autopar.cost.pipeline import ZERO_BUBBLE
from autopar.cost.compose import compose_outer, evaluate_cores
from solvers.base import Objective, Ranking, feasible, objective_values

STEP_QUANTUM_SECONDS = 1e-6  # one integer unit of step time in the model
SEED = 20261129


@dataclass
class Tables:
    """The data of the CP-SAT model, all indexed by core or outer option."""

    core_of_row: np.ndarray  # space row -> core index
    outer_of_row: np.ndarray  # space row -> outer index
    microbatches: np.ndarray  # core -> m
    t_max: np.ndarray  # core -> critical stage seconds per micro-batch
    rest: np.ndarray  # core -> the other stages' seconds per micro-batch
    fixed: np.ndarray  # core -> DP + optimizer + overhead seconds
    outer_vpp: np.ndarray  # outer -> vpp
    outer_zero_bubble: np.ndarray  # outer -> 1 for zero-bubble
    allowed: list[tuple[int, int]]  # (core, outer) pairs that fit in memory
    row_of_pair: dict[tuple[int, int], int]
    step_seconds: np.ndarray  # space row -> exact step seconds (composed)
    memory_bytes: np.ndarray  # space row -> peak memory


def build_tables(batch: Batch) -> Tables:
    tab = batch.tab
    result, core_of_row, core_batch = evaluate_cores(batch)
    outer_keys = np.stack([tab.vpp, tab.schedule], axis=1)
    outers, outer_of_row = np.unique(outer_keys, axis=0, return_inverse=True)
    outer_of_row = outer_of_row.ravel()
    step, memory = compose_outer(result, core_of_row, batch.microbatches, tab.pp, tab.vpp, tab.schedule, batch.params)
    fixed = sum(result.time[k] for k in ("dp_comm", "optimizer_step", "step_overhead"))
    ok = feasible(batch, memory)
    pairs = list(zip(core_of_row[ok].tolist(), outer_of_row[ok].tolist()))
    return Tables(
        core_of_row=core_of_row, outer_of_row=outer_of_row, microbatches=core_batch.microbatches.astype(np.int64),
        t_max=result.stage_max_seconds, rest=result.stage_rest_seconds, fixed=fixed,
        outer_vpp=outers[:, 0].astype(np.int64), outer_zero_bubble=(outers[:, 1] == ZERO_BUBBLE).astype(np.int64),
        allowed=pairs, row_of_pair={pair: int(r) for pair, r in zip(pairs, np.flatnonzero(ok).tolist())},
        step_seconds=step, memory_bytes=memory,
    )


def build_model(tables: Tables) -> tuple[cp_model.CpModel, dict[str, cp_model.IntVar]]:
    """An index variable over the (core, outer) pairs that fit and one element constraint for
    the step, whose table is the sum of the integer-scaled terms m x T_max, R / vpp (0 for
    zero-bubble) and F, each rounded to STEP_QUANTUM_SECONDS (so within 1.5 quanta).

    Measured on the LLaMA-3 70B (24k pairs) and 405B spaces with one worker: stating the
    product and the division as CP-SAT multiplication/division equalities took 6-60 s per
    solve, and tying three element terms by a linear equality exhausted 24 GiB of memory;
    a single element solves in ~0.5 s. The degrees' product rule is built into the space.
    """
    model = cp_model.CpModel()
    pairs = np.asarray(tables.allowed, dtype=np.int64)
    core_idx, outer_idx = pairs[:, 0], pairs[:, 1]
    q = lambda x: np.rint(np.asarray(x) / STEP_QUANTUM_SECONDS).astype(np.int64)  # noqa: E731
    # body m x T_max, fill (autopar.cost.pipeline.pipeline_fill) and F, composed in numpy
    # (autopar.cost.compose) for each allowed (core, outer) pair
    rows = np.asarray([tables.row_of_pair[(int(c), int(o))] for c, o in zip(core_idx, outer_idx)], dtype=np.int64)
    total = q(tables.step_seconds[rows])
    pair = model.new_int_var(0, len(pairs) - 1, "pair")
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


def solve(batch: Batch, objective: Objective, top_k: int) -> Ranking:
    tables = build_tables(batch)
    ok = feasible(batch, tables.memory_bytes)
    best_mem = int(np.argmin(tables.memory_bytes)) if len(tables.memory_bytes) else None
    common = dict(num_evaluated=len(batch.tab), num_feasible=int(ok.sum()), solver="cpsat", min_memory_row=best_mem,
                  min_memory_bytes=float(tables.memory_bytes[best_mem]) if best_mem is not None else None)
    if not tables.allowed:
        return Ranking(rows=np.zeros(0, dtype=int), objective=np.zeros(0), proved_optimal=True, **common)
    model, var = build_model(tables)
    rows, proved = [], True
    for _ in range(min(top_k, len(tables.allowed))):
        solver, status = solve_model(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        proved &= status == cp_model.OPTIMAL
        index = int(solver.value(var["pair"]))
        rows.append(tables.row_of_pair[tables.allowed[index]])
        model.add(var["pair"] != index)
    rows_arr = np.asarray(rows, dtype=int)
    values = objective_values(batch, tables.step_seconds[rows_arr], objective)
    # equal quantised objectives may come back in any order: rank by the exact values
    order = np.argsort(values, kind="stable")
    return Ranking(rows=rows_arr[order], objective=values[order], proved_optimal=proved, **common)
