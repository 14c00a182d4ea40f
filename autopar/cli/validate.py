"""`autopar validate`: predict published runs and report the error."""

from __future__ import annotations

from pathlib import Path

import click

from autopar.cli import main
from autopar.cli.common import dump_json, write_atomic
from autopar.validation import families_table, render, validate_runs


def _markdown(reports: dict[str, dict]) -> str:
    """One page over all files: per file, source group and family, and rank agreement."""
    lines = ["# Validation against published runs", "",
             "Regenerate: `autopar validate tests/data/dev_runs.json tests/data/moe_runs.json tests/data/fsdp_runs.json "
             "--report-dir results/validation --families profiles/validation/families.json`", "",
             "| file | modelled MAPE | all rows MAPE | rows | not modelled | skipped | Kendall tau | pairs ordered right |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, rep in reports.items():
        s = s_ = rep["summary"]
        ra = s.get("rank_agreement", {}).get("pooled", {})
        tau = f"{ra['kendall_tau']:.2f}" if ra.get("kendall_tau") is not None else "-"
        right = f"{100 * ra['ordered_right']:.0f}% of {ra['pairs']}" if ra.get("ordered_right") is not None else "-"
        lines.append(f"| {name} | {100 * (s['overall_mape'] or 0):.1f}% | {100 * (s_['all_rows_mape'] or 0):.1f}% | {s['num_rows']} | "
                     f"{len(s['not_modelled'])} | {s['num_skipped']} | {tau} | {right} |")
    for title, key in (("source group", "by_group"), ("family", "by_family"), ("stack", "by_stack")):
        lines += ["", f"## By {title}", "", "| file | " + title + " | MAPE | rows | mean signed error |", "| --- | --- | ---: | ---: | ---: |"]
        for name, rep in reports.items():
            for group, g in rep["summary"][key].items():
                lines.append(f"| {name} | {group} | {100 * g['mape']:.1f}% | {g['num_rows']} | {100 * g['mean_signed_error']:+.1f}% |")
    lines += ["", "## Not modelled (counted in 'all rows' only)", ""]
    for name, rep in reports.items():
        lines += [f"- {name}: {nm['id']}: {nm['reason']}" for nm in rep["summary"]["not_modelled"]]
    return "\n".join(lines) + "\n"


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (one file) or an object per file")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON report here (one runs file)")
@click.option("--report-dir", type=click.Path(file_okay=False), default=None,
              help="Write <file>_report.json and .txt per runs file and summary.md over all of them here")
@click.option("--families", type=click.Path(dir_okay=False), default=None,
              help="Write the validated error per family (the table estimates carry) to this JSON file")
def validate(runs, as_json, out, report_dir, families):
    """Predict published training runs and report per-row, per-source and per-family error (MAPE)."""
    reports = {Path(r).stem: validate_runs(r) for r in runs}
    if out:
        if len(reports) != 1:
            raise click.UsageError("--out takes one runs file; use --report-dir for several")
        write_atomic(out, dump_json(next(iter(reports.values()))))
    if report_dir:
        for name, rep in reports.items():
            write_atomic(Path(report_dir) / f"{name}_report.json", dump_json(rep))
            write_atomic(Path(report_dir) / f"{name}_report.txt", render(rep) + "\n")
        write_atomic(Path(report_dir) / "summary.md", _markdown(reports))
    if families:
        write_atomic(families, dump_json(families_table(reports)))
    if as_json:
        click.echo(dump_json(next(iter(reports.values())) if len(reports) == 1 else reports), nl=False)
    else:
        click.echo("\n\n".join(f"== {name}\n{render(rep)}" if len(reports) > 1 else render(rep) for name, rep in reports.items()))
