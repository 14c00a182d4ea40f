"""--fix: the plan dimensions a search can pin, and the reading of 'tp=8,pp=16'. Imports no
numpy, so that the CLI's --help stays light (tests/cli/test_lazy.py); autopar.space, the sweep
and the commands read --fix through here."""

from __future__ import annotations

from autopar.errors import InputError

FIXABLE = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "zero", "recompute", "sp", "schedule", "cp_algo", "order",
           "dispatcher", "ep_overlap")
_SWITCH = {"on": 1, "off": 0, "true": 1, "false": 0, "1": 1, "0": 0, "yes": 1, "no": 0}


def parse_fix(text: str | None) -> dict[str, object]:
    """'tp=8,pp=16' -> {'tp': 8, 'pp': 16}; each value is checked by its own Plan field's type
    and bounds, so an error names the key it is about (cross-key rules are the space's). No text
    (or only spaces) fixes nothing; an empty item ('tp=8,,pp=4', a trailing comma) is refused as
    in a plan text (autopar.specs.plan._plan_items): a dropped value is more likely a typo."""
    if not text or not text.strip():
        return {}
    if any(not part.strip() for part in text.split(",")):
        raise InputError("fix", text, "has an empty item (two commas in a row, or one at an end); "
                         "give key=value items separated by single commas")
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from autopar.specs import Plan

    out: dict[str, object] = {}
    for item in (part.strip() for part in text.split(",")):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq:
            raise InputError("fix", item, "expected key=value (e.g. tp=8)")
        if key not in FIXABLE:
            raise InputError("fix", key, f"unknown dimension; can fix: {', '.join(FIXABLE)}")
        if key in out:
            raise InputError(f"fix.{key}", value, f"{key} is given twice")
        if key in ("sp", "ep_overlap"):
            if value.lower() not in _SWITCH:
                raise InputError(f"fix.{key}", value, "must be on or off")
            out[key] = _SWITCH[value.lower()]
            continue
        info = Plan.model_fields[key]
        kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        try:
            parsed = TypeAdapter(kind).validate_python(value)
        except ValidationError as exc:
            raise InputError.from_validation(exc, f"fix.{key}", value) from None
        if parsed is None:
            raise InputError(f"fix.{key}", value, "must be a value, not null")
        out[key] = parsed.value if hasattr(parsed, "value") else parsed
    return out
