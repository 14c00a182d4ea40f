"""The base of every input schema: unknown keys refused, no infinite or NaN numbers, and a
boolean never taken as a number.

pydantic's lax mode reads `num_hidden_layers: true` as 1 (a one-layer model) and accepts
`inf` bandwidths; both come from hand-written files, so they are refused here once for every
spec class (ModelSpec, ClusterSpec, TrainingSpec, Plan, CostParams, SweepSpec...)."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

_NUMBERS = (int, float)


def _wants_number(annotation: Any) -> bool:
    """True for int / float (optionally in a union with None) that does not also admit bool."""
    if annotation in _NUMBERS:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(args) and bool not in args and all(_wants_number(a) or a is str for a in args) and any(_wants_number(a) for a in args)
    return False


def _element_type(annotation: Any) -> Any:
    """The element annotation of list[X] / tuple[X, ...] / dict[K, X] (None otherwise)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple, set, frozenset) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _bool_where_number(annotation: Any, value: Any) -> bool:
    if isinstance(value, bool):
        return _wants_number(annotation)
    element = _element_type(annotation)
    if element is None or not _wants_number(element):
        return False
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    return any(isinstance(v, bool) for v in items)


class StrictModel(BaseModel):
    """Input schema: extra keys refused, floats finite, booleans not read as numbers."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _bool_where_number(field.annotation, value):
            if isinstance(value, bool):
                raise ValueError(f"must be a number, not the boolean {str(value).lower()}")
            raise ValueError("must hold numbers, not booleans")
        return value
