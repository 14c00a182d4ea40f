"""Typed errors raised at the library boundary; only autopar.cli turns them into exit codes."""


class AutoparError(Exception):
    """Base class of every error autopar raises on purpose."""


class InputError(AutoparError, ValueError):
    """Bad user input: names the field, the value and the rule it breaks."""

    def __init__(self, field: str, value: object, rule: str):
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field}={value!r}: {rule}")


class ProfileNotFound(AutoparError, LookupError):
    """A preset name that no profile file defines."""

    def __init__(self, kind: str, name: str, known: list[str]):
        self.kind = kind
        self.name = name
        super().__init__(
            f"unknown {kind} {name!r}; known presets: {', '.join(sorted(known))}"
        )
