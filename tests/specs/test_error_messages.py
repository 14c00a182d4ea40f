"""InputError.from_validation: one line naming the field, the value and the rule."""

from __future__ import annotations

import pydantic
import pytest

from autopar.errors import InputError


class _Curve(pydantic.BaseModel):
    keys: list[int]

    @pydantic.model_validator(mode="after")
    def _ascending(self):
        if self.keys != sorted(set(self.keys)):
            raise ValueError(f"keys={self.keys}: must be strictly ascending")
        return self


class _Holder(pydantic.BaseModel):
    curves: dict[str, _Curve]


def test_a_list_value_is_shown_whole():
    """The rule names a list (spaces inside): the value is the whole list, not '[1024,' with the
    rest taken for the rule (cost-override attention.length_curves.fa2.keys)."""
    with pytest.raises(pydantic.ValidationError) as exc:
        _Holder(curves={"fa2": {"keys": [1024, 512, 2048]}})
    err = InputError.from_validation(exc.value, "cost-override")
    assert str(err) == "cost-override.curves.fa2.keys=[1024, 512, 2048]: must be strictly ascending"
