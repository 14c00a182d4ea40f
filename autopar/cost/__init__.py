"""Cost model: pure functions of (model, cluster, training, plans) -> numbers and breakdowns.
No I/O. `estimate` costs one plan; `evaluate` costs a PlanTable of many at once."""

from autopar.cost.estimate import estimate, make_batch, to_estimate
from autopar.cost.step import evaluate

__all__ = ["estimate", "evaluate", "make_batch", "to_estimate"]
