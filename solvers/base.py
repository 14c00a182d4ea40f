"""What every solver returns, and the objective."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from autopar.cost.context import Batch


class Objective(str, Enum):
    """What the search minimises."""

    throughput = "throughput"
    """Step time (the fastest plan)."""
    cost = "cost"
    """US dollars per million tokens (step time x GPUs x price per GPU-hour)."""


def check_objective(cluster, objective: Objective) -> None:
    """The cost objective needs the cluster's price (check_cost_objective)."""
    if objective == Objective.cost:
        check_cost_objective(cluster, "--objective cost ranks plans by dollars per million tokens", "--objective throughput")


def check_cost_objective(cluster, ranks: str, instead: str) -> None:
    """An objective of cost the user asked for (search's, plan's, a sweep case's) needs the
    cluster's price: refused as objective=cost when the file gives none, and at a price of 0
    (check_priced). `instead` names the objectives that need no price."""
    if cluster.price_usd_per_gpu_hour is None:
        from autopar.errors import InputError

        raise InputError("objective", "cost", f"cluster {cluster.name} has no price_usd_per_gpu_hour; "
                         f"set it in the cluster file or rank by {instead}")
    check_priced(cluster, ranks, instead)


def check_priced(cluster, ranks: str, instead: str) -> None:
    """A price of 0 per GPU-hour (legal for the other objectives) makes every plan cost $0: a cost
    ranking would tie them all and fold unrelated plans together as equal-cost variants."""
    if cluster.price_usd_per_gpu_hour == 0:
        from autopar.errors import InputError

        raise InputError("cluster.price_usd_per_gpu_hour", 0, f"{ranks}, and at a price of 0 (cluster {cluster.name}) every plan "
                         f"costs $0, so none ranks above another; set the price in the cluster file or rank by {instead}")


def step_cost_usd(cluster, step_seconds):
    """US dollars of one optimizer step: every GPU of the job for the step at the price per GPU-hour."""
    return step_seconds * cluster.num_gpus * cluster.price_usd_per_gpu_hour / 3600


def objective_values(batch: Batch, step_seconds: np.ndarray, objective: Objective) -> np.ndarray:
    if objective == Objective.throughput:
        return step_seconds
    check_objective(batch.cluster, objective)
    return step_cost_usd(batch.cluster, step_seconds) / batch.training.tokens_per_step * 1e6


def rank_order(values: np.ndarray, memory_bytes: np.ndarray) -> np.ndarray:
    """Indices best first: by objective, and among plans of exactly the same objective (e.g.
    ZeRO-1 and ZeRO-2 when the gradient shards cost no time) the one with the lower peak memory
    first, the headroom the allocator's fragmentation and a longer sequence need; then the
    enumeration order (both sorts stable: deterministic)."""
    return np.lexsort((memory_bytes, values))


def feasible(batch: Batch, memory_bytes: np.ndarray) -> np.ndarray:
    """Fits in usable HBM (less the cluster's memory headroom); tp inside the NVLink domain (the space keeps it there unless allowed)."""
    return memory_bytes <= batch.cluster.usable_hbm_bytes


@dataclass
class Ranking:
    """Rows of the space in rank order (best first) with their objective values."""

    rows: np.ndarray
    objective: np.ndarray
    num_evaluated: int
    num_feasible: int
    proved_optimal: bool
    solver: str
    min_memory_row: int | None = None
    min_memory_bytes: float | None = None
    extra: dict = field(default_factory=dict)
