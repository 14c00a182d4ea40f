"""pydantic input/output schemas: model, hardware, training, plan, estimate."""

from autopar.specs.hardware import ClusterSpec, GpuSpec, NetworkTier, load_cluster, load_gpu
from autopar.specs.model import ModelSpec, load_model
from autopar.specs.plan import CpAlgo, Plan, RankOrder, Recompute, Schedule, parse_plan
from autopar.specs.training import Precision, TrainingSpec

__all__ = [
    "ClusterSpec",
    "CpAlgo",
    "GpuSpec",
    "ModelSpec",
    "NetworkTier",
    "Plan",
    "Precision",
    "RankOrder",
    "Recompute",
    "Schedule",
    "TrainingSpec",
    "load_cluster",
    "load_gpu",
    "load_model",
    "parse_plan",
]
