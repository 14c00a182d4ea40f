"""`autopar validate`: predict published runs and report the error."""

from __future__ import annotations

from pathlib import Path

import click

from autopar.cli import main
from autopar.cli.common import dump_json, write_atomic
from autopar.errors import InputError

REQUIRED_COUNTS = ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "num_gpus", "global_batch_size")
# The committed reports (python -m autopar.cli.reports regenerates them)
REPORT_RUNS = ("tests/data/dev_runs.json", "tests/data/moe_runs.json", "tests/data/fsdp_runs.json")
# runs no coefficient was fitted to: reported apart, their error per family shipped as 'holdout'
REPORT_HOLDOUT = ("tests/data/holdout_runs.json",)
REPORT_DIR = "results/validation"
FAMILIES_FILE = "profiles/validation/families.json"


def _markdown(reports: dict[str, dict], holdout: tuple[str, ...] = ()) -> str:
    """One page over all files: per file, source group, family, stack and GPU, and rank agreement."""
    from autopar.validation.report import SUMMARY_TABLES

    lines = ["# Validation against published runs", "",
             f"Regenerate: `autopar validate {' '.join(REPORT_RUNS)} --holdout {' '.join(REPORT_HOLDOUT)} "
             f"--report-dir {REPORT_DIR} --families {FAMILIES_FILE}` (or `python -m autopar.cli.reports`)", "",
             "A held-out file's runs were collected to measure how far the cost model generalises: no coefficient is fitted "
             "to them, and each estimate carries their error next to the in-sample error of its family.", "",
             "| file | modelled MAPE | all rows MAPE | rows | not modelled | skipped | Kendall tau | pairs ordered right | predicted equal "
             "| same layout, left out |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, rep in reports.items():
        s = rep["summary"]
        name = f"{name} (held out)" if name in holdout else name
        ra = s.get("rank_agreement", {}).get("pooled", {})
        tau = f"{ra['kendall_tau']:.2f}" if ra.get("kendall_tau") is not None else "-"
        right = f"{100 * ra['ordered_right']:.0f}% of {ra['pairs']}" if ra.get("ordered_right") is not None else "-"
        lines.append(f"| {name} | {100 * (s['overall_mape'] or 0):.1f}% | {100 * (s['all_rows_mape'] or 0):.1f}% | {s['num_rows']} | "
                     f"{len(s['not_modelled'])} | {s['num_skipped']} | {tau} | {right} | {ra.get('tied', '-')} | {ra.get('same_layout', '-')} |")
    for title, key in SUMMARY_TABLES:
        lines += ["", f"## By {title}", "", "| file | " + title + " | MAPE | rows | mean signed error |", "| --- | --- | ---: | ---: | ---: |"]
        for name, rep in reports.items():
            for group, g in rep["summary"][key].items():
                lines.append(f"| {name} | {group} | {100 * g['mape']:.1f}% | {g['num_rows']} | {100 * g['mean_signed_error']:+.1f}% |")
    lines += ["", "## Not modelled (counted in 'all rows' only)", ""]
    for name, rep in reports.items():
        lines += [f"- {name}: {nm['id']}: {nm['reason']}" for nm in rep["summary"]["not_modelled"]]
    return "\n".join(lines) + "\n"


def write_report_dir(reports: dict[str, dict], report_dir: str | Path, holdout: tuple[str, ...] = ()) -> None:
    """<file>_report.json and .txt per runs file, and summary.md over all of them."""
    from autopar.validation import render

    for name, rep in reports.items():
        write_atomic(Path(report_dir) / f"{name}_report.json", dump_json(rep), field="report-dir")
        write_atomic(Path(report_dir) / f"{name}_report.txt", render(rep) + "\n", field="report-dir")
    write_atomic(Path(report_dir) / "summary.md", _markdown(reports, holdout), field="report-dir")


def _check_rows(data) -> None:
    """The count columns are positive whole numbers or null (a text or a boolean there is a broken
    file, not a row to skip; a null or absent one is derived per row or the row is skipped)."""
    rows = data.get("rows", data.get("runs")) if isinstance(data, dict) else data
    if not isinstance(rows, list):
        return  # load_rows names the shape error
    for i, row in enumerate(rows):
        for key in REQUIRED_COUNTS:
            if isinstance(row, dict) and row.get(key) is not None:
                value = row[key]
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise InputError(f"runs[{i}].{key}", value, "must be a positive whole number")


def progress_line(enabled: bool, label: str):
    """A one-line progress counter on stderr (a terminal only): returns (callback, close)."""
    import sys

    if not enabled or not sys.stderr.isatty():
        return None, lambda: None

    def update(done: int, total: int) -> None:
        click.echo(f"\r{label}: {done}/{total} rows", nl=False, err=True)

    def close() -> None:
        click.echo("\r" + " " * 60 + "\r", nl=False, err=True)

    return update, close


def validate_files(runs: list[str], quiet: bool = True) -> dict[str, dict]:
    """Each runs file read strictly, then predicted; {file stem: report}."""
    from autopar.specs._files import read_data
    from autopar.validation import validate_runs

    for path in runs:
        _check_rows(read_data(path, "runs"))  # UTF-8, no duplicate keys, finite numbers, counts are counts
    reports = {}
    for path in runs:
        update, close = progress_line(not quiet, Path(path).name)
        try:
            reports[Path(path).stem] = validate_runs(path, progress=update)
        finally:
            close()
    return reports


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (one file) or an object per file")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON report here (one runs file)")
@click.option("--report-dir", type=click.Path(file_okay=False), default=None,
              help="Write <file>_report.json and .txt per runs file and summary.md over all of them here")
@click.option("--families", type=click.Path(dir_okay=False), default=None,
              help="Write the validated error per family (the table estimates carry) to this JSON file")
@click.option("--holdout", "holdout_runs", multiple=True, type=click.Path(dir_okay=False),
              help="A runs file held out from the model's development (repeatable): predicted and reported like RUNS, "
                   "its error per family written to --families apart from the in-sample error")
@click.option("--quiet", is_flag=True, help="No progress line")
def validate(runs, as_json, out, report_dir, families, holdout_runs, quiet):
    """Predict published training runs and report per-row, per-source and per-family error (MAPE).

    Exits 1 when a runs file had no row predicted (every row skipped)."""
    from autopar.validation import families_table, render

    runs = tuple(runs) + tuple(holdout_runs)
    if out and len(runs) != 1:
        raise InputError("out", out, "takes one runs file; use --report-dir for several")
    if len({Path(p).stem for p in runs}) < len(runs):
        raise InputError("runs", " ".join(runs), "two runs files share a file name; reports are named by it")
    reports = validate_files(list(runs), quiet)
    held = tuple(Path(p).stem for p in holdout_runs)
    if out:
        write_atomic(out, dump_json(next(iter(reports.values()))))
    if report_dir:
        write_report_dir(reports, report_dir, held)
    if families:
        write_atomic(families, dump_json(families_table(reports, held)), field="families")
    if as_json:
        click.echo(dump_json(next(iter(reports.values())) if len(reports) == 1 else reports), nl=False)
    else:
        click.echo("\n\n".join(f"== {name}{' (held out)' if name in held else ''}\n{render(rep)}" if len(reports) > 1 else render(rep)
                               for name, rep in reports.items()))
    for path, rep in zip(runs, reports.values()):
        summary = rep["summary"]
        if not summary["num_predicted"]:
            first = next((r["skipped"] for r in rep["rows"] if r["skipped"]), "the file has no rows")
            raise InputError("runs", path, f"no row predicted ({summary['num_rows']} rows, all skipped; first: {first})")
