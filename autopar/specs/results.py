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


class StageSolve(BaseModel):
    """One core's per-stage solve (solvers.stages): its plan against the enumeration's best
    plan of the same core (balanced layout, one recompute setting for all stages)."""

    model_config = ConfigDict(extra="forbid")
    plan: str | None = Field(description="The per-stage plan (null when the solve found none)")
    balanced_plan: str = Field(description="The enumeration's best plan of this core")
    step_seconds: float | None = Field(description="Predicted step of the per-stage plan, seconds")
    balanced_step_seconds: float = Field(description="Predicted step of balanced_plan, seconds")
    balanced_fits: bool = Field(description="balanced_plan fits in memory (false: a core taken because it would be fast if it fit)")
    status: str = Field(description="OPTIMAL (proved) | FEASIBLE (gap > 0) | BALANCED (the balanced plan, outside the per-stage "
                        "domain, is faster; see reason) | INFEASIBLE (no layout fits in memory) | UNKNOWN (none found in the "
                        "time limit) | REFUSED (breaks a rule: the per-stage model's, the cost model's or the --framework's; see reason)")
    gap: float | None = Field(description="Relative gap between the solution and the solver's bound; 0 when proved")
    seconds: float = Field(description="Wall time of the cost-model tables and the CP-SAT solve")
    agreement: float | None = Field(description="|re-costed step - solver's step| / solver's step")
    reason: str = Field("", description="Why no plan came back, or why it was refused")


class PerStageInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(description="Wall time of all per-stage solves")
    cores_skipped: int = Field(description="Candidate cores left unsolved when the time budget ran out")
    best_balanced_plan: str = Field(description="The enumeration's best plan")
    best_balanced_step_seconds: float = Field(description="Its predicted step, seconds")
    solves: list[StageSolve] = Field(description="One entry per solved core, in the enumeration's rank order")


class SearchInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    solver: str = Field(description="exhaustive | cpsat | given")
    seconds: float = Field(description="Wall time of the search")
    num_feasible: int = Field(description="Plans that fit")
    num_evaluated: int = Field(description="Plans costed")
    proved_optimal: bool = Field(description="The solver proved its best plan optimal over the enumerated space "
                                 "(per-stage solves carry their own status in per_stage)")
    per_stage: PerStageInfo | None = Field(None, description="Per-stage layer and recompute solves of the top cores (null when off)")
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
