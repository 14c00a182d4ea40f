"""The results file `autopar search --out` writes and `autopar emit` reads."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autopar.errors import InputError
from autopar.specs._files import read_data
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
    equal_cost_variants: list[str] = Field(default_factory=list, description="Plans (text form) that cost exactly the same (e.g. another rank order), folded under this one")


class SearchInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    solver: str = Field(description="exhaustive | cpsat | given")
    seconds: float = Field(description="Wall time of the search")
    num_feasible: int = Field(description="Plans that fit")
    num_evaluated: int = Field(description="Plans costed")
    proved_optimal: bool = Field(description="The solver proved the first plan optimal")
    framework: str | None = Field(None, description="Only plans this launcher framework runs were ranked (search --framework / --emit)")


class Results(BaseModel):
    """A ranked list of plans with the inputs they were costed for."""

    model_config = ConfigDict(extra="forbid")
    autopar_version: str
    inputs: Inputs
    plans: list[RankedPlan]
    search: SearchInfo


def load_results(path: str | Path) -> Results:
    data = read_data(path, "results")
    try:
        return Results.model_validate(data)
    except ValidationError as exc:
        raise InputError.from_validation(exc, "results", value=str(path)) from None
