"""Pipeline schedules (seed 000 'Конвейерный параллелизм', footnote 7; Narayanan et al. 2021).

Legend: p stages, m micro-batches per step, v virtual chunks per stage, t_i the per-micro-
batch (forward + backward) time of stage i.
"""

from __future__ import annotations

import numpy as np

from autopar.cost.table import SCHEDULE
from autopar.specs.plan import Schedule

INTERLEAVED = SCHEDULE.index(Schedule.interleaved)
ZERO_BUBBLE = SCHEDULE.index(Schedule.zero_bubble)
DUALPIPEV = SCHEDULE.index(Schedule.dualpipev)
# DualPipeV's bubble per chunk boundary as a share of a chunk's forward + backward time:
# (F&B + B - 3W) / (F + B) with F&B = F + B (the overlap pairs hide communication, not
# compute), a full backward B = 2F of which W = F computes weight gradients (Qi et al. 2023's
# F = B_input = W): (F + 2F + 2F - 3F) / 3F = 2/3
DUALPIPE_BUBBLE_PER_CHUNK = 2.0 / 3.0


def bubble_fraction(p: int, m: int, v: int = 1, schedule: Schedule = Schedule.one_f_one_b) -> float:
    """Idle fraction of a uniform pipeline: (p-1)/(m+p-1) for GPipe and 1F1B; the interleaved
    schedule divides the bubble time by v; ZB-H2 fills it (seed 000 'Нулевой пузырь'); DualPipeV
    idles (p-1) x 2/3 of a chunk, a third of 1F1B's (DUALPIPE_BUBBLE_PER_CHUNK).
    Seed 000 'Сценарий: цена пузыря конвейера': p=8, m=32 -> 7/39 = 17.9%."""
    if p <= 1:
        return 0.0
    # uniform stages of unit time: the others' work is p - 1, and no hop time
    bubble = float(pipeline_fill(np.asarray(p - 1.0), m, v, SCHEDULE.index(schedule), p, 0.0))
    return bubble / (m + bubble)


def pipeline_fill(rest, m_unused, v, schedule, p, hop_seconds):
    """Pipeline time beyond m x the critical stage: the fill and drain of the other stages'
    work (1F1B/GPipe: all of it; interleaved: divided by v; ZB-H2: filled by weight-gradient
    passes; DualPipeV: (PP/2 - 1)(F&B + B - 3W) over PP = 2p chunks, i.e. (p - 1) chunk bubbles of
    2/3 of a chunk's time, a third of the others' work, each rank's time being two chunks),
    plus the chain of point-to-point hops the first micro-batch's activations and the last
    one's gradients cross in warm-up and cool-down: one per virtual-stage boundary, p - 1
    without interleaving and p v - 1 with it (Narayanan et al. 2021 section 2.2: interleaving
    multiplies the communication by v; DualPipeV's V has 2p - 1)."""
    interleaved = (schedule == INTERLEAVED) | (schedule == DUALPIPEV)
    work = np.select([schedule == ZERO_BUBBLE, schedule == DUALPIPEV, interleaved],
                     [0.0 * rest, rest * DUALPIPE_BUBBLE_PER_CHUNK / 2, rest / v], default=rest)
    boundaries = np.where(interleaved, p * v, p) - 1
    return work + np.where(p > 1, 2 * boundaries * hop_seconds, 0.0)


def pipeline_seconds(stage_seconds: np.ndarray, m, v, schedule, p, hop_seconds) -> np.ndarray:
    """Pipeline time from per-micro-batch stage times (rows: plans, columns: stages).

    1F1B/GPipe: (m - 1) max t + sum t (uniform stages: (m + p - 1) t).
    Interleaved: m max t + (sum t - max t) / v.  ZB-H2: m max t (bubble filled by W passes).
    Plus the warm-up and cool-down hop chain (pipeline_fill).
    """
    t_max = stage_seconds.max(axis=-1)
    rest = stage_seconds.sum(axis=-1) - t_max
    return m * t_max + pipeline_fill(rest, m, v, schedule, p, hop_seconds)
