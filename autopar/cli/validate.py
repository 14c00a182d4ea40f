"""`autopar validate`: predict published runs and report the error."""

from __future__ import annotations

import click

from autopar.cli import main
from autopar.cli.common import dump_json, write_atomic
from autopar.validation import render, validate_runs


@main.command()
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON report here")
def validate(runs, as_json, out):
    """Predict published training runs and report per-row and per-source error (MAPE)."""
    report = validate_runs(runs)
    if out:
        write_atomic(out, dump_json(report))
    click.echo(dump_json(report) if as_json else render(report), nl=not as_json)
