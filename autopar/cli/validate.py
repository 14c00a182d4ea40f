"""`autopar validate`: predict published runs and report the error."""

from __future__ import annotations

import click

from autopar.cli import main
from autopar.cli.common import dump_json, write_atomic
from autopar.errors import InputError


def _table(report: dict) -> str:
    lines = [f"{'id':<40} {'plan':<58} {'measured':>9} {'predicted':>9} {'error':>7}"]
    for r in report["rows"]:
        if r["skipped"]:
            lines.append(f"{r['id']:<40} skipped: {r['skipped']}")
            continue
        lines.append(f"{r['id']:<40} {r['plan'][:58]:<58} {r['measured_tokens_per_second_per_gpu']:9.0f} "
                     f"{r['predicted_tokens_per_second_per_gpu']:9.0f} {100 * r['error']:+6.1f}%")
    s = report["summary"]
    lines.append("")
    lines.append("tokens/s per GPU; error = (predicted - measured) / measured")
    for group, g in s["by_group"].items():
        lines.append(f"  {group:<40} MAPE {100 * g['mape']:5.1f}%  ({g['num_rows']} rows)")
    if s["overall_mape"] is not None:
        lines.append(f"  {'overall':<40} MAPE {100 * s['overall_mape']:5.1f}%  ({s['num_predicted']} predicted, {s['num_skipped']} skipped)")
    return "\n".join(lines)


def progress_line(enabled: bool):
    """A one-line progress counter on stderr (a terminal only): returns (callback, close)."""
    import sys

    shown = [False]

    def update(done: int, total: int, what: str) -> None:
        shown[0] = True
        click.echo(f"\r{done}/{total} {what[:60]:<60}", nl=False, err=True)

    def close() -> None:
        if shown[0]:
            click.echo("\r" + " " * 80 + "\r", nl=False, err=True)

    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    return update, close


REQUIRED_COUNTS = ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "num_gpus", "global_batch_size")


def _check_rows(data) -> None:
    """The columns every row needs are positive whole numbers (a text or a boolean there is a
    broken file, not a row to skip)."""
    rows = data.get("rows", data.get("runs")) if isinstance(data, dict) else data
    if not isinstance(rows, list):
        return  # validate_runs names the shape error
    for i, row in enumerate(rows):
        for key in REQUIRED_COUNTS:
            value = row.get(key) if isinstance(row, dict) else None
            if key in (row if isinstance(row, dict) else {}) and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise InputError(f"runs[{i}].{key}", value, "must be a positive whole number")


@main.command()
@click.argument("runs", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON report here")
@click.option("--quiet", is_flag=True, help="No progress line")
def validate(runs, as_json, out, quiet):
    """Predict published training runs and report per-row and per-source error (MAPE).

    Exits 1 when no row could be predicted (every row skipped)."""
    from autopar.specs._files import read_data
    from autopar.validation import validate_runs

    _check_rows(read_data(runs, "runs"))  # strict reading first: UTF-8, no duplicate keys, finite numbers
    update, close = progress_line(not quiet)
    try:
        report = validate_runs(runs, progress=update)
    finally:
        close()
    if out:
        write_atomic(out, dump_json(report))
    click.echo(dump_json(report) if as_json else _table(report), nl=not as_json)
    summary = report["summary"]
    if not summary["num_predicted"]:
        first = next((r["skipped"] for r in report["rows"] if r["skipped"]), "the file has no rows")
        raise InputError("runs", runs, f"no row predicted ({summary['num_rows']} rows, all skipped; first: {first})")
