"""How far to trust an estimate: the validated error of its family, read from the shipped
validation summary (profiles/validation/families.json, written by
`autopar validate --families profiles/validation/families.json tests/data/{dev,moe,fsdp}_runs.json
--holdout tests/data/holdout_runs.json`). Two figures per family: the error over the runs the model
was built against, and over held-out runs no coefficient was fitted to (how far it generalises).

A family is dense|moe / megatron-style|fsdp / precision / GPU architecture: the grain at which
the published runs say how well the cost model does."""

from __future__ import annotations

import json
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from autopar.specs._files import PROFILES_DIR

FAMILIES_FILE = PROFILES_DIR / "validation" / "families.json"


class FamilyError(BaseModel):
    """The validated error of one family."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    family: str = Field(description="dense|moe / megatron-style|fsdp / precision / architecture")
    mape: float | None = Field(None, description="Mean |predicted / measured - 1| over the family's published runs; null without runs")
    num_rows: int = Field(0, description="Published runs of the family that were predicted")
    holdout_mape: float | None = Field(None, description="Mean |predicted / measured - 1| over the family's held-out runs "
                                       "(tests/data/holdout_runs.json: no coefficient fitted to them); null without any")
    holdout_rows: int = Field(0, description="Held-out runs of the family that were predicted")
    holdout_mean_signed_error: float | None = Field(None, description="Mean (predicted / measured - 1) over the held-out runs: > 0 is optimistic")
    warning: str | None = Field(None, description="Set when the family has no validation rows")


def family_of(is_moe: bool, zero: int, precision: str, architecture: str) -> str:
    kind = "moe" if is_moe else "dense"
    style = "fsdp" if zero == 3 else "megatron-style"
    precision = {"fp16": "bf16"}.get(precision, precision)
    return f"{kind}/{style}/{precision}/{architecture}"


@lru_cache(maxsize=1)
def _table() -> dict[str, dict]:
    try:
        return json.loads(FAMILIES_FILE.read_text())["families"]
    except (OSError, ValueError, KeyError):
        return {}


def family_error(family: str) -> FamilyError:
    row = _table().get(family) or {}
    held = row.get("holdout") or {}
    out = {"family": family, "holdout_mape": held.get("mape"), "holdout_rows": held.get("num_rows", 0),
           "holdout_mean_signed_error": held.get("mean_signed_error")}
    if row.get("num_rows"):
        return FamilyError(mape=row["mape"], num_rows=row["num_rows"], **out)
    if held.get("num_rows"):
        return FamilyError(**out)
    return FamilyError(family=family, warning=f"no published runs validate {family}: treat the estimate as unvalidated")
