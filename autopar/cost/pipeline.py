"""Pipeline schedules (seed 000 'Конвейерный параллелизм', footnote 7; Narayanan et al. 2021).

Legend: p stages, m micro-batches per step, v virtual chunks per stage, i stage index.
"""

from __future__ import annotations

from autopar.specs.plan import Schedule


def bubble_fraction(p: int, m: int, v: int = 1, schedule: Schedule = Schedule.one_f_one_b) -> float:
    """Idle fraction of a uniform pipeline: (p-1)/(m+p-1) for GPipe and 1F1B; the interleaved
    schedule divides the bubble time by v; ZB-H2 fills it (seed 000 'Нулевой пузырь').
    Seed 000 'Сценарий: цена пузыря конвейера': p=8, m=32 -> 7/39 = 17.9%."""
    if p <= 1:
        return 0.0
    if schedule == Schedule.zero_bubble:
        return 0.0
    bubble = (p - 1) / (v if schedule == Schedule.interleaved else 1)
    return bubble / (m + bubble)


def pipeline_seconds(stage_seconds: list[float], m: int, v: int, schedule: Schedule) -> float:
    """Step time of the pipeline part from per-micro-batch stage times t_i (fwd + bwd).

    1F1B/GPipe: (m - 1) max t + sum t (uniform stages: (m + p - 1) t).
    Interleaved: m max t + (sum t - max t) / v.  ZB-H2: m max t (bubble filled by W passes).
    """
    t_max = max(stage_seconds)
    rest = sum(stage_seconds) - t_max
    if schedule == Schedule.zero_bubble:
        return m * t_max
    if schedule == Schedule.interleaved:
        return m * t_max + rest / v
    return m * t_max + rest


def in_flight_microbatches(stage: int, p: int, m: int, v: int, schedule: Schedule) -> float:
    """Micro-batches whose activations stage `stage` holds at its peak (in units of a whole
    stage's layers). 1F1B: p - i; interleaved (Megatron warm-up): ((p-i-1) 2 + (v-1) p + 1) / v
    chunks, i.e. p + (p-1)/v on stage 0; GPipe: m; ZB-H2: 2 (p - i) - 1. Capped at m."""
    if schedule == Schedule.gpipe:
        held = float(m)
    elif schedule == Schedule.interleaved:
        held = ((p - stage - 1) * 2 + (v - 1) * p + 1) / v
    elif schedule == Schedule.zero_bubble:
        held = 2.0 * (p - stage) - 1
    else:
        held = float(p - stage)
    return min(held, float(m))
