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

    @classmethod
    def from_validation(cls, exc, prefix: str, value: object = None) -> "InputError":
        """The first error of a pydantic ValidationError, its location under `prefix`."""
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        return cls(f"{prefix}.{loc}" if loc else prefix, err.get("input") if value is None else value, err["msg"])


class ProfileNotFound(AutoparError, LookupError):
    """A preset name that no profile file defines."""

    def __init__(self, kind: str, name: str, known: list[str]):
        self.kind = kind
        self.name = name
        super().__init__(
            f"unknown {kind} {name!r}; known presets: {', '.join(sorted(known))}"
        )
