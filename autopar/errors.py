"""Typed errors raised at the library boundary; only autopar.cli turns them into exit codes.

Every message has the form `<field>=<value>: <rule>` on one line, the value cut to
VALUE_CHARS characters, so a failure never dumps a whole object (a GPU preset with its source
notes is 1,800 characters). Text values get TEXT_CHARS: a full plan text (~100-170 characters)
or a file path is the value a user needs to see whole."""

from __future__ import annotations

import re

VALUE_CHARS = 80
TEXT_CHARS = 200


def one_line(text: str) -> str:
    """Collapse a message onto one line (a YAML parser's message spans several)."""
    return " ".join(str(text).split())


def short_value(value: object, limit: int | None = None) -> str:
    """The value as it appears in a message: repr, one line, cut to `limit` characters
    (VALUE_CHARS, TEXT_CHARS for text). A mapping or list (a whole config object) shows its
    size, not its contents."""
    limit = limit or (TEXT_CHARS if isinstance(value, str) else VALUE_CHARS)
    if isinstance(value, dict):
        keys = ", ".join(map(str, list(value)[:4]))
        text = f"{{{keys}{', ...' if len(value) > 4 else ''}}} ({len(value)} keys)"
    elif isinstance(value, (list, tuple)) and len(repr(value)) > limit:
        text = f"[...] ({len(value)} items)"
    else:
        text = one_line(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


class AutoparError(Exception):
    """Base class of every error autopar raises on purpose."""


class InputError(AutoparError, ValueError):
    """Bad user input: names the field, the value and the rule it breaks."""

    def __init__(self, field: str, value: object, rule: str):
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field}={short_value(value)}: {one_line(rule)}")

    @classmethod
    def from_validation(cls, exc, prefix: str, value: object = None) -> "InputError":
        """The first error of a pydantic ValidationError, its location under `prefix`. A
        missing key shows as `(missing)`; a cross-field rule that names its field first
        ("moe_top_k=0 must be ...") is reported at that field, also inside a mapping field
        (sweep `fixed`: "tp='x': ..." at sweep.fixed.tp); another error about a whole object
        shows `value` when given (e.g. the file's path), else the object's keys."""
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        field = f"{prefix}.{loc}" if loc else prefix
        shown, rule = err.get("input"), _pydantic_rule(err)
        named = _NAMED_RULE.match(rule) if not loc or isinstance(shown, dict) else None
        if err.get("type") == "missing":
            shown = Missing()
        elif named:  # a cross-field rule that names its field first ("moe_top_k=0 must be ...")
            # a rule raised as an InputError already names its whole field (plan.layout=...)
            inner = named["field"]
            field = inner if inner.startswith(f"{prefix}.") else f"{field}.{inner}"
            shown, rule = Shown(named["value"]), named["rule"]
        elif value is not None and (not loc or isinstance(shown, dict)):
            shown = value
        return cls(field, shown, rule)


# "<field>=<value>[:] <rule>": how a model validator states the field it refuses
# (a bracketed or quoted value may hold spaces: keys=[1024, 512]: must be strictly ascending)
_NAMED_RULE = re.compile(r"(?P<field>[A-Za-z_][\w.]*)=(?P<value>\[[^\]]*\]|\([^)]*\)|'[^']*'|\S+?):?\s+(?P<rule>.+)", re.S)


class NoCandidate(InputError):
    """A --fix value that no candidate plan can take (autopar.space.check_fixed): for one search an
    input error; for a sweep case or one GPU count of a plan, a case without a plan."""


class Shown:
    """A value a message already spells out (the text of a cross-field rule), shown as is."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


class Missing(Shown):
    """Stands for a key the input lacks (shown as `(missing)`)."""

    def __init__(self):
        super().__init__("(missing)")


def _pydantic_rule(err: dict) -> str:
    msg = str(err.get("msg", "invalid"))
    return msg.removeprefix("Value error, ")


class ProfileNotFound(AutoparError, LookupError):
    """A preset name that no profile file defines."""

    def __init__(self, kind: str, name: str, known: list[str]):
        self.kind = kind
        self.name = name
        super().__init__(
            f"{kind.lower()}={short_value(name)}: unknown {kind} preset and not a file; known presets: {', '.join(sorted(known))}"
        )
