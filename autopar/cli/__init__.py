"""The `autopar` command line: a thin click layer. Library errors become one line on stderr
and exit code 1; no cost logic lives here."""

from __future__ import annotations

import sys

import click
from pydantic import ValidationError

from autopar import __version__
from autopar.errors import AutoparError


class _Group(click.Group):
    """Turns typed library errors into `Error: <one line>` and exit code 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AutoparError as exc:
            raise click.ClickException(str(exc)) from None
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or exc.title
            raise click.ClickException(f"{loc}={err.get('input')!r}: {err['msg']}") from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autopar")
def main() -> None:
    """Find, explain and launch the fastest parallel plan for training a transformer."""


def _register() -> None:
    from autopar.cli import estimate, validate  # noqa: F401  (commands attach themselves)

    for name in ("emit", "calibrate", "search", "comm", "sweep", "tune", "plan"):
        try:
            __import__(f"autopar.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"autopar.cli.{name}":
                raise


_register()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
