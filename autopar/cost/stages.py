"""Per-stage costs of one core plan, tabulated from the cost model (the data of the per-stage
solver, solvers.stages).

A *core* is a plan without its pipeline layout, per-stage recompute counts, vpp and schedule.
For a fixed core, each pipeline rank's per-micro-batch seconds, exposed DP seconds, optimizer
seconds and memory (the bytes that do not scale with in-flight micro-batches, and one
micro-batch's activations) depend on that rank's decoder layers L and fully recomputed layers R
only, and the step and the peak memory combine them as

    step   = pipeline(stage seconds; m, vpp, schedule) + sum_k max_r term_k,r + constant
    memory = max_r (fixed_r + held_r x per_microbatch_r) + reserve

(autopar.cost.step: the terms k are the once-per-step parts the step takes the maximum of over
stages, STAGE_STEP_TERMS -- exposed DP and FSDP reductions, the optimizer step; held_r: the
micro-batches rank r holds, autopar.cost.memory; fixed_r and per_microbatch_r carry the
allocator's fragmentation slack, autopar.cost.context.Batch.fragmentation). Rather than
restating the cost model's formulas, sample_stages evaluates plans with explicit layouts so that
every rank sees every (L, R) of its domain, reads the per-stage arrays of the result, and checks
what the solvers rely on: a (rank, L, R) costs the same in every layout it was sampled in, and
the composition above reproduces every sample's step and stage memory. A physics change that
breaks either raises StageModelError instead of producing a wrong table.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from autopar.cost.estimate import make_batch
from autopar.cost.memory import in_flight_microbatches
from autopar.cost.pipeline import pipeline_seconds
from autopar.cost.step import STAGE_STEP_TERMS, evaluate
from autopar.cost.table import SCHEDULE
from autopar.specs.costparams import CostParams
from autopar.specs.hardware import ClusterSpec
from autopar.specs.layout import PipelineLayout
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan, Recompute, Schedule
from autopar.specs.training import TrainingSpec

SEPARABLE_RTOL = 1e-9  # relative spread allowed between samples of one (rank, L, R), and in the composition
VALUES = ("seconds", *STAGE_STEP_TERMS, "memory_fixed_bytes", "memory_per_microbatch_bytes")


class StageModelError(Exception):
    """The cost model's per-stage terms are not what the per-stage solver assumes (not separable
    by rank, or not composed as the module docstring states): the solver declines the core."""


@dataclass
class StageTable:
    """Per rank r, layers L and recomputed layers R: arrays [r, L, R] of each of VALUES (NaN
    outside the sampled domain), the step's constant seconds, and what was sampled."""

    core: Plan
    num_layers: int
    mtp_layers: int
    microbatches: int
    lo: list[int]
    hi: list[int]
    recompute: bool  # R may be > 0 (full recompute per stage); False: R = 0 only
    values: dict[str, np.ndarray]
    constant_seconds: float
    hop_seconds: float  # one activation send between pipeline stages (the pipeline's hop chain)
    num_layouts: int
    num_samples: int
    seconds_taken: float

    @property
    def pp(self) -> int:
        return len(self.lo)


def rank_chunks(layers: int, vpp: int, first_at_least: int = 0) -> list[int]:
    """A rank's layers over its vpp chunks, larger chunks first; chunk 0 holds at least
    first_at_least of them when it can (the first rank keeps a first-k-dense prefix there)."""
    head = min(layers, max(first_at_least, -(-layers // vpp)))
    if vpp == 1 or head == -(-layers // vpp):
        base, extra = divmod(layers, vpp)
        return [base + (1 if c < extra else 0) for c in range(vpp)]
    return [head] + rank_chunks(layers - head, vpp - 1)


def rank_layout(ranks: list[int], vpp: int, mtp_layers: int, dense_prefix: int = 0) -> PipelineLayout:
    """The pipeline layout with these decoder layers per rank (MTP on the last virtual stage;
    a first-k-dense prefix in the first virtual stage)."""
    pp = len(ranks)
    chunks = [rank_chunks(n, vpp, dense_prefix if r == 0 else 0) for r, n in enumerate(ranks)]
    decoders = tuple(chunks[j % pp][j // pp] for j in range(pp * vpp))
    mtp = [0] * (pp * vpp)
    mtp[-1] = mtp_layers
    return PipelineLayout(pp, decoders, tuple(mtp))


def schedule_index(schedule: Schedule) -> int:
    return SCHEDULE.index(schedule)


def held_microbatches(pp: int, microbatches: int, vpp: int, schedule: Schedule) -> np.ndarray:
    """Micro-batches whose activations each rank holds at its peak (autopar.cost.memory)."""
    return np.asarray(in_flight_microbatches(np.arange(pp), pp, microbatches, vpp, schedule_index(schedule)), dtype=float)


def stage_memory_bytes(fixed: np.ndarray, per_microbatch: np.ndarray, held: np.ndarray, params: CostParams) -> np.ndarray:
    """Peak bytes of a stage from its two memory parts, fragmentation slack included (as
    autopar.cost.compose composes them)."""
    return fixed + per_microbatch * held + params.memory.reserve_bytes


def _snap(x: float) -> float:
    """x as the nearest fraction with a small denominator (m, 1 / vpp, 0) when it is one up
    to float rounding."""
    f = float(Fraction(x).limit_denominator(4096))
    return f if abs(f - x) <= SEPARABLE_RTOL * max(1.0, abs(x)) else x


def pipeline_coefficients(microbatches: int, vpp: int, schedule: Schedule, pp: int, hop_seconds: float) -> tuple[float, float, float]:
    """(a, b, c) with pipeline time = a max_r t_r + b (sum_r t_r - max_r t_r) + c, read off the
    cost model's pipeline_seconds with probe stage times, and checked on a third probe."""
    code = np.asarray([schedule_index(schedule)])

    def run(t: list[float]) -> float:
        return float(pipeline_seconds(np.asarray([t + [0.0] * (pp - len(t))]), np.asarray([microbatches]), np.asarray([vpp]), code,
                                      np.asarray([pp]), np.asarray([hop_seconds]))[0])

    c = run([])
    a = _snap(run([1.0]) - c)
    b = _snap(run([1.0, 1.0]) - c - a)
    probe = [3.0, 1.0] + [2.0] * (pp - 2)
    expect = 3 * a + b * (sum(probe) - 3) + c
    if abs(run(probe) - expect) > SEPARABLE_RTOL * max(1.0, abs(expect)):
        raise StageModelError(f"pipeline time of schedule {schedule.value} is not a max + rest composition")
    return a, b, c


def cover_layouts(total: int, lo: list[int], hi: list[int]) -> list[list[int]]:
    """Rank layer vectors (each summing to total, within [lo, hi]) in which every rank takes
    every value it can take in some legal vector. Each round picks, by dynamic programming over
    (rank, layers so far), a vector with the most values not yet covered, extreme values first
    (middle values pair up easily later), so about one round per value of the widest rank."""
    P = len(lo)
    if not sum(lo) <= total <= sum(hi):
        raise StageModelError(f"{total} layers do not fit {P} stages within {lo}..{hi}")
    want = [set(range(max(lo[r], total - sum(hi) + hi[r]), min(hi[r], total - sum(lo) + lo[r]) + 1)) for r in range(P)]
    out: list[list[int]] = []
    while any(want):
        # gain[r][s]: most new values ranks r.. can cover holding s layers (-inf: impossible)
        gain = np.full((P + 1, total + 1), -np.inf)
        gain[P, 0] = 0.0
        for r in range(P - 1, -1, -1):
            for v in range(lo[r], min(hi[r], total) + 1):
                shifted = np.full(total + 1, -np.inf)
                shifted[v:] = gain[r + 1, : total + 1 - v] + (v in want[r])
                np.maximum(gain[r], shifted, out=gain[r])
        vec, left = [], total
        for r in range(P):
            mid = (lo[r] + hi[r]) / 2
            v = max((v for v in range(lo[r], min(hi[r], left) + 1) if gain[r + 1, left - v] > -np.inf),
                    key=lambda v: (gain[r + 1, left - v] + (v in want[r]), v in want[r], abs(v - mid), -v))
            vec.append(v)
            left -= v
        out.append(vec)
        for r in range(P):
            want[r].discard(vec[r])
    return out


def _sample_plans(core: Plan, vectors: list[list[int]], mtp_layers: int, recompute: bool) -> tuple[list[Plan], np.ndarray]:
    """The sampled plans (vpp = 1, 1F1B) and each one's layers per rank. Each layout is costed
    with every recompute count at once (one layout group of the batch cost model)."""
    base = Plan.model_validate({**core.model_dump(), "vpp": 1, "schedule": Schedule.one_f_one_b, "first_stage_layers": None,
                                "last_stage_layers": None, "recompute_num_layers": None, "stage_recompute_layers": None,
                                "layout": None, "recompute": Recompute.full if recompute else core.recompute})
    plans, layers = [], []
    for vec in vectors:
        layout = rank_layout(vec, 1, mtp_layers).text()  # canonical text: no re-validation needed
        for k in range(max(vec) + 1) if recompute else [None]:
            update: dict = {"layout": layout}
            if k is not None:
                update["stage_recompute_layers"] = (k,) * len(vec)
            plans.append(base.model_copy(update=update))
            layers.append(vec)
    return plans, np.asarray(layers, dtype=int)


def sample_stages(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, params: CostParams, core: Plan,
                  lo: list[int], hi: list[int], recompute: bool) -> StageTable:
    """Tabulate every rank's per-stage values over its (L, R) domain from the cost model;
    recompute=False keeps the core's own recompute mode with R = 0 (none or selective)."""
    start = time.perf_counter()
    vectors = cover_layouts(model.num_layers, lo, hi)
    plans, layers = _sample_plans(core, vectors, model.mtp_num_layers, recompute)
    batch = make_batch(model, cluster, training, plans, params)
    res = evaluate(batch)
    # the last rank's recomputed layers also count its MTP layers (autopar.cost.step
    # _recomputed_layers caps by the rank's layers, MTP included): R runs to max(hi) + MTP
    P, H = len(lo), max(hi) + model.mtp_num_layers + 1
    m = int(batch.microbatches[0])
    arrays = {"seconds": res.stage_seconds, **res.stage_step_terms,
              "memory_fixed_bytes": res.memory_fixed_stage, "memory_per_microbatch_bytes": res.memory_per_microbatch_stage}
    rec = np.rint(res.stage_recomputed_layers[:, :P]).astype(int)
    values = {k: np.full((P, H, H), np.nan) for k in VALUES}
    for name, arr in arrays.items():
        sampled = arr[:, :P]
        for r in range(P):
            key = layers[:, r] * H + rec[:, r]
            hi_v = np.full(H * H, -np.inf)
            lo_v = np.full(H * H, np.inf)
            np.maximum.at(hi_v, key, sampled[:, r])
            np.minimum.at(lo_v, key, sampled[:, r])
            seen = np.isfinite(hi_v)
            if np.any(hi_v[seen] - lo_v[seen] > SEPARABLE_RTOL * np.maximum(1.0, np.abs(hi_v[seen]))):
                raise StageModelError(f"{name} of stage {r} depends on the other stages' layers (not separable)")
            values[name][r].reshape(-1)[seen] = hi_v[seen]
    constant, hop = _check_composition(res, P, m, params)
    return StageTable(core, model.num_layers, model.mtp_num_layers, m, list(lo), list(hi), recompute, values, constant, hop,
                      len(vectors), len(plans), time.perf_counter() - start)


def _check_composition(res, P: int, m: int, params: CostParams) -> tuple[float, float]:
    """(the step's constant part, the pipeline hop seconds); raises when the samples are not
    composed as the module docstring states."""
    hop = res.pp_hop_seconds
    if np.ptp(hop) > SEPARABLE_RTOL * max(hop.max(), 1e-12):
        raise StageModelError("the pipeline hop time depends on the stage layout")
    a, b, c = pipeline_coefficients(m, 1, Schedule.one_f_one_b, P, float(hop[0]))
    t = res.stage_seconds[:, :P]
    pipeline = a * t.max(axis=1) + b * (t.sum(axis=1) - t.max(axis=1)) + c
    if np.any(np.abs(pipeline - res.pipeline_seconds) > SEPARABLE_RTOL * res.pipeline_seconds):
        raise StageModelError("the pipeline time is not composed from the stage times")
    constant = res.step_seconds - pipeline - sum(v[:, :P].max(axis=1) for v in res.stage_step_terms.values())
    if np.ptp(constant) > SEPARABLE_RTOL * res.step_seconds.max():
        raise StageModelError("the step is not pipeline + the stages' once-per-step maxima + a constant")
    held = held_microbatches(P, m, 1, Schedule.one_f_one_b)
    memory = stage_memory_bytes(res.memory_fixed_stage[:, :P], res.memory_per_microbatch_stage[:, :P], held, params)
    if np.any(np.abs(memory - res.stage_memory_bytes[:, :P]) > SEPARABLE_RTOL * res.stage_memory_bytes[:, :P]):
        raise StageModelError("stage memory is not fixed + held x per-micro-batch activations")
    return float(constant.mean()), float(hop[0])


def compose(table: StageTable, layers: np.ndarray, recomputed: np.ndarray, vpp: int, schedule: Schedule,
            params: CostParams) -> tuple[np.ndarray, np.ndarray]:
    """(step seconds, peak memory bytes) of many (L, R) rank vectors (rows) under one vpp and
    schedule, from the table; NaN where a vector leaves the sampled domain."""
    P = table.pp
    r = np.arange(P)[None, :]
    v = {k: table.values[k][r, layers, recomputed] for k in VALUES}
    a, b, c = pipeline_coefficients(table.microbatches, vpp, schedule, P, table.hop_seconds)
    t = v["seconds"]
    step = a * t.max(axis=1) + b * (t.sum(axis=1) - t.max(axis=1)) + c + sum(v[k].max(axis=1) for k in STAGE_STEP_TERMS) \
        + table.constant_seconds
    held = held_microbatches(P, table.microbatches, vpp, schedule)
    memory = stage_memory_bytes(v["memory_fixed_bytes"], v["memory_per_microbatch_bytes"], held, params).max(axis=1)
    return step, memory
