"""The per-stage oracle: every layer split of a core within the per-stage bounds, times every
recompute count of every stage, each costed as a whole plan by the batch cost model
(autopar.cost.step.evaluate: step and peak memory, no per-stage tables, no composition). The
tests compare solvers.stages against it on small models (docs/design.md 'Search': same optimum)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from autopar.cost.context import Batch
from autopar.cost.stages import rank_layout
from autopar.cost.step import evaluate
from autopar.cost.table import PlanTable, intern
from autopar.specs.costparams import CostParams
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan
from autopar.specs.training import TrainingSpec
from solvers.stages import StageCore, bounds, dense_prefix


@dataclass
class OracleResult:
    step_seconds: float  # inf when nothing fits
    layers: list[int]
    recomputed: list[int]
    num_plans: int


def compositions(total: int, lo: list[int], hi: list[int]) -> list[tuple[int, ...]]:
    """Every vector of len(lo) integers within [lo, hi] that sums to total."""
    if len(lo) == 1:
        return [(total,)] if lo[0] <= total <= hi[0] else []
    rest_lo, rest_hi = sum(lo[1:]), sum(hi[1:])
    out = []
    for first in range(max(lo[0], total - rest_hi), min(hi[0], total - rest_lo) + 1):
        out += [(first, *tail) for tail in compositions(total - first, lo[1:], hi[1:])]
    return out


def oracle(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, params: CostParams, sc: StageCore) -> OracleResult:
    """The fastest plan of the core that fits (fewest recomputed layers among equally fast)."""
    pp = sc.core.pp
    lo, hi = bounds(model, pp)
    mtp, k = model.mtp_num_layers, dense_prefix(model)
    base = Plan.model_validate({**sc.core.model_dump(), "vpp": sc.vpp, "schedule": sc.schedule,
                                "layout": rank_layout(list(compositions(model.num_layers, lo, hi)[0]), sc.vpp, mtp, k).text()})
    row = PlanTable.from_plans([base], cluster.num_gpus)
    splits = compositions(model.num_layers, lo, hi)
    # (split, recompute counts) pairs: one batch per split with free counts (the cost model
    # resolves per-stage counts per distinct tuple), every split in one batch without
    if sc.recompute_free:
        chunks = [[(layers, c) for c in itertools.product(*(range(n + 1) for n in layers))] for layers in splits]
    else:
        chunks = [[(layers, None) for layers in splits]]
    best = OracleResult(float("inf"), [], [], sum(len(c) for c in chunks))
    for chunk in chunks:
        tab = row.take(np.zeros(len(chunk), dtype=int))
        tab.layout = np.asarray([intern(rank_layout(list(layers), sc.vpp, mtp, k).text()) for layers, _ in chunk])
        tab.rc_stages = np.asarray([intern(counts) for _, counts in chunk])
        res = evaluate(Batch(model, cluster, training, params, tab))
        fits = np.flatnonzero(res.memory_bytes <= cluster.usable_hbm_bytes)
        if not len(fits):
            continue
        recomputed = res.stage_recomputed_layers[:, :pp]
        i = fits[np.lexsort((recomputed[fits].sum(axis=1), res.step_seconds[fits]))[0]]
        if res.step_seconds[i] < best.step_seconds:
            best.step_seconds = float(res.step_seconds[i])
            best.layers, best.recomputed = list(chunk[i][0]), [int(k) for k in recomputed[i]]
    return best
