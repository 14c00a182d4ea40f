"""`autopar tune`: refinement against measured runs. Starts from the search's top predictions,
runs --trial-cmd for each trial and reports predicted vs measured step time for every trial."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import click

from autopar.cli import main
from autopar.cli.common import model_cluster_options, resolve_inputs, resolve_training, training_options, write_atomic
from autopar.cli.search import parse_fix
from autopar.space import SpaceOptions
from autopar.specs.costparams import params_for_cluster
from solvers import SearchRequest, run_search
from solvers.tune import TuneRequest, best_measured, trial_rows, tune

EMIT_FORMATS = ["megatron", "deepspeed", "torchtitan", "megatron-bridge"]


def _prepare(emit_format: str | None):
    """Write the trial's launcher next to its plan file when --emit is given."""
    if not emit_format:
        return None

    def prepare(trial_dir: Path, results) -> list[str]:
        from autopar.emit import RuleViolation, emit_results

        try:
            emit_results(results, emit_format, trial_dir / "launch")
        except RuleViolation as exc:
            return [f"{emit_format} launcher not written: {exc}"]
        return []

    return prepare


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["number"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _table(rows: list[dict]) -> str:
    lines = [f"{'trial':>5} {'status':<14} {'predicted s':>11} {'measured s':>10} {'meas/pred':>9}  plan"]
    for r in rows:
        pred = f"{r['predicted_seconds']:.3f}" if r["predicted_seconds"] else "-"
        meas = f"{r['measured_seconds']:.3f}" if r["measured_seconds"] else "-"
        ratio = f"{r['measured_over_predicted']:.2f}" if r["measured_over_predicted"] else "-"
        lines.append(f"{r['number']:>5} {r['status']:<14} {pred:>11} {meas:>10} {ratio:>9}  {r['plan']}")
    return "\n".join(lines)


@main.command("tune")
@model_cluster_options
@training_options
@click.option("--trial-cmd", required=True,
              help="Shell command run per trial; {plan_file}, {plan} and {trial_dir} are replaced. It must print "
                   "'autopar-step-seconds: <seconds>'; a line with 'autopar-oom' or 'out of memory' marks an OOM trial; "
                   "a non-zero exit otherwise marks a failed trial")
@click.option("--trials", "num_trials", type=int, required=True, help="Trials this worker runs")
@click.option("--storage", default=None, help="Optuna RDB URL shared by workers (default: sqlite:///OUT/tune.db; postgresql://... for many machines)")
@click.option("--study", "study_name", default=None, help="Study name (default: from model, GPUs, sequence and batch)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="results/tune", show_default=True, help="Trial files, tune.csv, the SQLite study")
@click.option("--top", "top_k", type=int, default=5, show_default=True, help="Predicted plans the study starts from")
@click.option("--fix", "fix_text", default=None, help="Pin dimensions of the starting search, e.g. tp=8,pp=4")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampler seed (give each worker its own)")
@click.option("--timeout", "timeout_seconds", type=float, default=None, help="Seconds before a trial counts as failed")
@click.option("--emit", "emit_format", type=click.Choice(EMIT_FORMATS), default=None, help="Also write each trial's launcher to TRIAL_DIR/launch")
def tune_command(model_name, cluster_name, gpus, seq_len, global_batch, global_batch_tokens, precision, trial_cmd, num_trials,
                 storage, study_name, out_dir, top_k, fix_text, seed, timeout_seconds, emit_format):
    """Refine the best predicted plans against measured step times (Optuna study)."""
    model, cluster = resolve_inputs(model_name, cluster_name, gpus)
    params = params_for_cluster(cluster)
    training = resolve_training(seq_len, global_batch, global_batch_tokens, precision)
    search = run_search(SearchRequest(model, cluster, training, top_k=top_k, options=SpaceOptions(fixed=parse_fix(fix_text)), params=params))
    name = study_name or f"{model.name}-{cluster.num_gpus}gpu-s{seq_len}-b{training.global_batch_size}"
    out = Path(out_dir)
    req = TuneRequest(model, cluster, training, [rp.plan for rp in search.results.plans], trial_cmd, num_trials, out,
                      storage, name, seed, timeout_seconds, params, _prepare(emit_format))

    def progress(t: dict) -> None:
        measured = f"{t['measured']:.3f} s" if t["measured"] else "-"
        click.echo(f"trial {t['number']}: {t['status']}, measured {measured}: {t['plan']}", err=True)

    study = tune(req, progress)
    rows = trial_rows(study)
    write_atomic(out / f"tune-{name}.csv", _csv(rows))
    click.echo(f"study {name} ({len(rows)} trials, all workers)")
    click.echo(_table(rows))
    best = best_measured(rows)
    if best is None:
        click.echo("no trial measured a step time")
    else:
        click.echo(f"best measured: {best['measured_seconds']:.3f} s (predicted {best['predicted_seconds']:.3f} s), trial {best['number']}: {best['plan']}")
    click.echo(f"trials written to {out / 'trials' / name}, table to {out / f'tune-{name}.csv'}", err=True)
