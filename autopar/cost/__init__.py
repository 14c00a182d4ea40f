"""Pure cost functions: (model, cluster, training, plan) -> numbers and breakdowns. No I/O."""

from autopar.cost.step import estimate

__all__ = ["estimate"]
