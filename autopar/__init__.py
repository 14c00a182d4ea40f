"""autopar: search-based auto-parallelism planner for large-model training."""

__version__ = "0.1.0"
