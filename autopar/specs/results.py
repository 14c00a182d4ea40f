"""The results file `autopar search --out` writes and `autopar emit` reads."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autopar.errors import InputError
from autopar.specs.estimate import Estimate
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan
from autopar.specs.training import TrainingSpec


class Inputs(BaseModel):
    """Everything needed to re-cost or launch a plan, resolved (no preset names)."""

    model_config = ConfigDict(extra="forbid")
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec


class RankedPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    plan: Plan
    estimate: Estimate


class SearchInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    solver: str = Field(description="exhaustive | cpsat | given")
    seconds: float = Field(description="Wall time of the search")
    num_feasible: int = Field(description="Plans that fit")
    num_evaluated: int = Field(description="Plans costed")
    proved_optimal: bool = Field(description="The solver proved the first plan optimal")


class Results(BaseModel):
    """A ranked list of plans with the inputs they were costed for."""

    model_config = ConfigDict(extra="forbid")
    autopar_version: str
    inputs: Inputs
    plans: list[RankedPlan]
    search: SearchInfo


def load_results(path: str | Path) -> Results:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError("results", str(path), f"cannot read file ({exc.strerror})") from None
    try:
        return Results.model_validate_json(text)
    except ValidationError as exc:
        raise InputError.from_validation(exc, "results", value=str(path)) from None
