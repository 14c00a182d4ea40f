"""`autopar sweep SWEEP.yaml --out DIR`: run a grid of searches in worker processes, resumable;
write summary.csv, summary.md, summary.json and plots/*.png; --baseline fails on differences."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import click

from autopar.cli import main
from autopar.cli.common import write_atomic
from autopar.errors import InputError

WORKER_DIED = "worker process died (killed or out of memory); not in cases.jsonl, so --resume runs it again"


def check_fixed_plan(spec) -> None:
    """The sweep's fixed values checked as a search checks --fix (autopar.space), once, before any
    case runs: values no case can take are an input error, named at sweep.fixed -- a rule between
    two of them (vpp=2 with pp=1) breaks for every case, a rule about the model (ep=8) when every
    model of the sweep breaks it, degrees whose product no GPU count of the sweep can have (tp=16
    on 8 GPUs). A value some models or GPU counts cannot take leaves those cases without a plan
    (no_plan, autopar.errors.NoCandidate), as does a GPU count or a batch no plan fits."""
    from autopar.space import _fixed_plan_fields, check_fixed, check_fixed_gpus, fixed_degrees  # what a search runs per case
    from autopar.specs import load_model

    fixed = dict(spec.fixed)
    refused: list[InputError] = []
    for name in spec.models:
        try:
            check_fixed(load_model(name), _fixed_plan_fields(fixed))
        except InputError as exc:
            refused.append(exc)
        else:
            break
    else:
        first = refused[0]
        # the same words for every model: a rule between the fixed values themselves, said once
        every = "" if len({str(e) for e in refused}) == 1 else f"; no model of the sweep can take it ({', '.join(spec.models)})"
        raise InputError("sweep.fixed." + first.field.removeprefix("fix."), first.value, first.rule + every)
    refused = []
    for gpus in spec.gpus:
        try:
            check_fixed_gpus(fixed, gpus)
        except InputError as exc:
            refused.append(exc)
        else:
            return
    degrees = fixed_degrees(fixed)
    field, value = (f"sweep.fixed.{next(iter(degrees))}", next(iter(degrees.values()))) if len(degrees) == 1 else \
        ("sweep.fixed", ",".join(f"{k}={v}" for k, v in degrees.items()))
    every = f"; no GPU count of the sweep can take it ({', '.join(map(str, spec.gpus))})" if len(spec.gpus) > 1 else ""
    raise InputError(field, value, refused[0].rule + every)


def _progress_bar(enabled: bool):
    """A rich progress bar on stderr; returns (callback, stop)."""
    if not enabled:
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"),
                        console=Console(stderr=True), transient=False)
    task = progress.add_task("", total=None)
    progress.start()

    def update(done: int, total: int, case: str) -> None:
        progress.update(task, completed=done, total=total, description=case)

    return update, progress.stop


@main.command()
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Results directory (cases.jsonl, summaries, plots)")
@click.option("--workers", type=int, default=1, show_default=True, help="Worker processes running cases in parallel")
@click.option("--resume", is_flag=True, help="Continue a sweep whose cases.jsonl already holds finished cases (refused when the sweep "
              "file, --cost-override, or a model, cluster or calibration file it names has changed since)")
@click.option("--baseline", type=click.Path(dir_okay=False), default=None, help="summary.json of an earlier run; exit 1 on differences")
@click.option("--threshold", type=click.FloatRange(0, 1e6), default=None, help="Relative tokens/s change --baseline allows (default: the sweep file's)")
@click.option("--cost-override", type=click.Path(dir_okay=False), default=None,
              help="YAML of dotted cost coefficients to replace, e.g. 'comm.network_efficiency: 0.5'")
@click.option("--no-plots", is_flag=True, help="Skip plots/*.png")
@click.option("--quiet", is_flag=True, help="No progress bar")
def sweep(sweep_file, out_dir, workers, resume, baseline, threshold, cost_override, no_plots, quiet):
    """Run a sweep of searches (models x clusters x GPUs x sequence lengths x batches).

    Each finished case is appended to OUT/cases.jsonl at once; Ctrl-C or SIGTERM stops the
    workers within seconds and --resume continues. Exits 1 when a case fails with an error (a
    case where no plan fits is a result, not a failure) or when --baseline finds differences;
    the summaries are written either way."""
    from autopar.plots import sweep_plots
    from solvers.sweep import (cases, compare, load_baseline, load_overrides, load_sweep, read_records, run_sweep, summary_csv, summary_json,
                               summary_markdown, summary_rows)
    from solvers.workers import WorkerDied

    spec = load_sweep(sweep_file)
    check_fixed_plan(spec)
    overrides = load_overrides(cost_override)
    previous = load_baseline(baseline) if baseline else None
    out = Path(out_dir)
    started = time.perf_counter()
    update, stop = _progress_bar(not quiet)
    lost = 0
    try:
        # a note now, not after the run: it is about the cases the folder already holds
        records = run_sweep(spec, out, workers, resume, overrides, update, note=lambda text: click.echo(f"note: {text}", err=True))
    except WorkerDied:  # the kernel's OOM killer, say: the pool broke and took the running cases with it
        finished = read_records(out)  # every case that finished is in cases.jsonl already
        records = [finished.get(c["case"]) or dict(c, status="error", message=WORKER_DIED) for c in cases(spec)]
        lost = sum(c["case"] not in finished for c in cases(spec))
    finally:
        stop()
    rows = summary_rows(records)
    write_atomic(out / "summary.csv", summary_csv(rows))
    write_atomic(out / "summary.md", summary_markdown(spec, rows))
    write_atomic(out / "summary.json", summary_json(spec, rows))
    plots = [] if no_plots else sweep_plots(records, out)
    ok = sum(r["status"] == "ok" for r in rows)
    click.echo(f"sweep {spec.name}: {len(rows)} cases ({ok} with a plan) in {time.perf_counter() - started:.1f} s; "
               f"summary in {out / 'summary.md'}" + (f", {len(plots)} plots in {out / 'plots'}" if plots else ""), err=True)
    failed = [r for r in records if r["status"] == "error"]
    diffs = compare(rows, previous, spec.threshold if threshold is None else threshold) if previous is not None else []
    if previous is not None:
        click.echo(f"baseline {baseline}: " + (f"{len(diffs)} difference(s)" if diffs else f"no differences ({len(rows)} cases)"))
        for d in diffs:
            click.echo(f"  {d}")
    if lost:
        others = f" ({len(failed) - lost} other case(s) failed)" if len(failed) > lost else ""
        # the same run again: the cost overrides change every result, the baseline is what it was checked against
        again = [("--cost-override", cost_override), ("--baseline", baseline), ("--threshold", threshold)]
        flags = "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in again if value is not None)
        raise InputError("sweep", spec.name, f"{lost} of {len(rows)} cases lost: a worker process died (killed or out of memory){others}; "
                         f"`autopar sweep {shlex.quote(sweep_file)} --out {shlex.quote(str(out))}{flags} --resume` runs them "
                         "(with fewer --workers if memory ran out); "
                         f"all in {out / 'summary.md'}")
    if failed:
        raise InputError("sweep", spec.name, f"{len(failed)} of {len(rows)} cases failed (first: {failed[0]['case']}: "
                         f"{failed[0].get('message', '')}); all in {out / 'summary.md'}")
    if diffs:
        raise InputError("baseline", baseline, f"{len(diffs)} case(s) differ from the baseline (listed above)")
