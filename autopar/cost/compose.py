"""Plans that differ only in vpp and schedule share every per-micro-batch stage cost: the
pipeline fill and the in-flight activations are the only terms those change (rank layer
totals do not depend on vpp: autopar.specs.layout.balanced_layout; when layer kinds differ,
vpp changes which kinds a rank holds and stays in the core). The search costs each
*core* (every column but vpp and schedule) once and composes the rest here; the tests check
the composition against autopar.cost.step.evaluate row by row."""

from __future__ import annotations

from typing import Callable

import numpy as np

from autopar.cost.context import Batch
from autopar.cost.memory import in_flight_microbatches
from autopar.cost.pipeline import pipeline_fill
from autopar.cost.step import StepResult, evaluate
from autopar.cost.table import SCHEDULE, row_groups, v_shaped
from autopar.specs.plan import Schedule

ONE_F_ONE_B = SCHEDULE.index(Schedule.one_f_one_b)


def _vpp_composes(batch: Batch) -> bool:
    """vpp leaves every rank's costs alone when all layers are alike; with a dense prefix,
    interleaved MoE layers or interleaved local/global attention the chunks a rank holds (and so
    its mix of kinds) change with vpp."""
    m = batch.model
    return len({m.layer_kind(i) for i in range(m.num_layers)}) == 1


def core_rows(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(one representative row per core, the core of every row). A V-shaped schedule
    (dualpipev) is a core of its own: its placement puts the embedding and the loss on rank 0."""
    outer = ("vpp", "schedule") if _vpp_composes(batch) else ("schedule",)
    s = batch.tab.schedule
    return row_groups(np.where(v_shaped(s), s, -1), *(v for k, v in batch.tab.columns().items() if k not in outer))


def evaluate_cores(batch: Batch) -> tuple[StepResult, np.ndarray, Batch]:
    """Cost each core once with 1F1B (and vpp = 1 where vpp composes), V-shaped cores with
    their own schedule: (result per core, core of every row, the core batch)."""
    first, core_of_row = core_rows(batch)
    reps = batch.tab.take(first)
    v_shape = v_shaped(reps.schedule)
    if _vpp_composes(batch):
        reps.vpp = np.where(v_shape, reps.vpp, 1)
    reps.schedule = np.where(v_shape, reps.schedule, ONE_F_ONE_B).astype(reps.schedule.dtype)
    core_batch = Batch(batch.model, batch.cluster, batch.training, batch.params, reps)
    return evaluate(core_batch, per_stage=False), core_of_row, core_batch


def step_and_memory(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Step seconds and peak memory bytes of every plan of the batch (same numbers as
    evaluate(), costing each core once)."""
    result, core_of_row, _ = evaluate_cores(batch)
    t = batch.tab
    return compose_outer(result, core_of_row, batch.microbatches, t.pp, t.vpp, t.schedule, batch.params)


COST_CHUNK_ROWS = 100_000  # plans costed at once by the solvers


def step_and_memory_chunked(batch: Batch, chunk_rows: int = COST_CHUNK_ROWS,
                            progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """step_and_memory a bounded chunk of plans at a time, in space order: memory stays at one
    chunk's (plans x stages) arrays (a 9.4M-plan DeepSeek-V3 space costed in one piece did not
    finish in half an hour); each chunk costs its own cores once."""
    tab = batch.tab
    n = len(tab)
    step, memory = np.empty(n), np.empty(n)
    for start in range(0, n, chunk_rows):
        rows = np.arange(start, min(n, start + chunk_rows))
        sub = Batch(batch.model, batch.cluster, batch.training, batch.params, tab.take(rows))
        step[rows], memory[rows] = step_and_memory(sub)
        if progress:
            progress(int(rows[-1]) + 1, n)
    return step, memory


def compose_outer(result: StepResult, rows: np.ndarray, microbatches: np.ndarray, pp: np.ndarray,
                  vpp: np.ndarray, schedule: np.ndarray, params) -> tuple[np.ndarray, np.ndarray]:
    """(step seconds, peak memory bytes) of plans that differ from the costed `rows` only in
    vpp and schedule: the pipeline fill and the in-flight activations are the only terms
    those change (the solvers compose them instead of re-costing)."""
    m = microbatches.astype(float)
    t_max, rest = result.stage_max_seconds[rows], result.stage_rest_seconds[rows]
    fill = pipeline_fill(rest, m, vpp, schedule, pp, result.pp_hop_seconds[rows])
    fixed_parts = sum(result.time[k][rows] for k in ("dp_comm", "optimizer_step", "step_overhead"))
    step = m * t_max + fill + fixed_parts
    mem = params.memory
    # memory columns: one per stage type (autopar.cost.step._stage_types), at the stage index
    # each stands for; in-flight micro-batches depend on that index, m, vpp and the schedule
    width = max(1, int((result.memory_stage_index >= 0).sum(axis=1).max())) if len(rows) else 1
    index = result.memory_stage_index[:, :width][rows]
    # held micro-batches: a table over the few distinct (pp, m, vpp, schedule) and stage indices
    first, combo_of = row_groups(pp, m, vpp, schedule)
    stages = np.arange(int(np.max(pp)) if len(pp) else 1)[None, :]
    col = lambda x: np.asarray(x)[first][:, None]  # noqa: E731
    table = in_flight_microbatches(stages, col(pp), col(m), col(vpp), col(schedule))
    held = table[combo_of[:, None], np.maximum(index, 0)]
    fixed = result.memory_fixed_stage[rows, :width]
    per_mb = result.memory_per_microbatch_stage[rows, :width]
    per_stage = fixed + per_mb * held + mem.reserve_bytes  # both parts carry the fragmentation slack (cost.step._memory)
    return step, np.where(index >= 0, per_stage, -np.inf).max(axis=1)
