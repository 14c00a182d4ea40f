"""Search backends over autopar.space + autopar.cost: exhaustive (vectorized oracle), cpsat
(OR-Tools CP-SAT over tables of cost terms); run_search ties space, solver and estimates."""

from solvers.base import Objective, Ranking
from solvers.search import NoFeasiblePlan, SearchRequest, run_search

__all__ = ["NoFeasiblePlan", "Objective", "Ranking", "SearchRequest", "run_search"]
