"""`autopar tune`: refinement against measured runs. Starts from the search's top predictions,
runs --trial-cmd for each trial and reports predicted vs measured step time for every trial."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import click

from autopar.cli import main
from autopar.cli.common import FRAMEWORKS, check_attention_kernel, flush_notes, model_cluster_options, resolve_inputs, resolve_training, training_options, write_atomic
from autopar.errors import InputError


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


def _existing_study(req):
    """The study tune would resume, or None when its storage holds none of that name."""
    import optuna

    from solvers.tune import open_storage, storage_url

    if req.storage is None and not (req.out_dir / "tune.db").exists():
        return None  # the default SQLite file is not there yet (opening it would create it)
    try:
        return optuna.load_study(study_name=req.study_name, storage=open_storage(storage_url(req)))
    except KeyError:
        return None


def _progress(t: dict) -> None:
    """One stderr line per trial; a failed trial says why (the end of its output)."""
    measured = f"{t['measured']:.3f} s" if t["measured"] else "-"
    why = f" -- {' '.join(str(t['message']).split())[:300]}" if t.get("message") and t["status"] != "ok" else ""
    click.echo(f"trial {t['number']}: {t['status']}, measured {measured}: {t['plan']}{why}", err=True)


@main.command("tune")
@model_cluster_options
@training_options
@click.option("--trial-cmd", required=True,
              help="Shell command run per trial inside its folder; {plan_file}, {plan} and {trial_dir} are replaced (absolute paths). "
                   "It must print 'autopar-step-seconds: <seconds>'; a line with 'autopar-oom' or 'out of memory' marks an OOM trial; "
                   "a non-zero exit otherwise marks a failed trial")
@click.option("--trials", "num_trials", type=int, required=True, help="Trials this worker runs")
@click.option("--storage", default=None, help="Optuna RDB URL shared by workers (default: sqlite:///OUT/tune.db; postgresql://... for many machines)")
@click.option("--study", "study_name", default=None, help="Study name (default: from model, GPUs, sequence and batch)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="results/tune", show_default=True,
              help="Writes OUT/trials/STUDY/NNNN/ (plan.json, log.txt), OUT/tune-STUDY.csv and the SQLite study OUT/tune.db")
@click.option("--top", "top_k", type=int, default=5, show_default=True, help="Predicted plans the study starts from")
@click.option("--fix", "fix_text", default=None, help="Pin dimensions of the starting search, e.g. tp=8,pp=4")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampler seed (give each worker its own)")
@click.option("--timeout", "timeout_seconds", type=float, default=None, help="Seconds before a trial counts as failed")
@click.option("--emit", "emit_format", type=click.Choice(FRAMEWORKS), default=None,
              help="Start from plans this framework runs and write each trial's launcher to TRIAL_DIR/launch")
def tune_command(model_name, cluster_name, gpus, extrapolate_fabric, memory_headroom, seq_len, global_batch, global_batch_tokens, precision, fp8_recipe, stack,
                 moe_routing, fp8_param_gather, expandable_segments, attention_kernel, trial_cmd,
                 num_trials, storage, study_name, out_dir, top_k, fix_text, seed, timeout_seconds, emit_format):
    """Refine the best predicted plans against measured step times (Optuna study).

    Exits 1 when no trial of the study measured a step time (the table says why each failed)."""
    from autopar.cli.framework import framework_filter
    from autopar.fix import parse_fix
    from autopar.space import SpaceOptions
    from autopar.specs.costparams import params_for_cluster
    from solvers import SearchRequest, run_search
    from solvers.refine import check_study_inputs, check_study_params, choices, distributions, stamp_study, study_inputs
    from solvers.tune import TuneRequest, best_measured, check_options, queued_trials, trial_rows, tune

    model, cluster = resolve_inputs(model_name, cluster_name, gpus, extrapolate_fabric, memory_headroom)
    params = params_for_cluster(cluster)
    training = resolve_training(model, seq_len, global_batch, global_batch_tokens, precision, stack, emit_format, fp8_recipe,
                                moe_routing=moe_routing, fp8_param_gather=fp8_param_gather, expandable_segments=expandable_segments,
                                attention_kernel=attention_kernel)
    check_attention_kernel(training, cluster)
    name = study_name if study_name is not None else re.sub(r"[^A-Za-z0-9._=+-]+", "-", f"{model.name}-{cluster.num_gpus}gpu-s{training.seq_len}-b{training.global_batch_size}").strip("-.")
    out = Path(out_dir)
    options = TuneRequest(model, cluster, training, [], trial_cmd, num_trials, out, storage, name, seed, timeout_seconds, params)
    check_options(options)
    # a study made for other inputs is refused before the search (resumed, it mixed two setups'
    # trials, then failed inside Optuna once a trial drew a parameter the study had with other choices)
    inputs = study_inputs(model, cluster, training)
    existing = _existing_study(options)
    if existing is not None:
        check_study_inputs(existing, inputs)
    plan_filter = framework_filter(emit_format, model, cluster, training) if emit_format else None
    search = run_search(SearchRequest(model, cluster, training, top_k=top_k, options=SpaceOptions(fixed=parse_fix(fix_text)), params=params,
                                      plan_filter=plan_filter, filter_name=emit_format))
    req = TuneRequest(model, cluster, training, [rp.plan for rp in search.results.plans], trial_cmd, num_trials, out,
                      storage, name, seed, timeout_seconds, params, _prepare(emit_format))
    if existing is not None:  # also an older autopar's study, which has no inputs to compare
        check_study_params(existing, distributions([choices(model, cluster, training, p) for p in req.starts]))
        stamp_study(existing, inputs)
    flush_notes()
    study = tune(req, _progress)
    rows = trial_rows(study)
    table = out / f"tune-{name}.csv"
    write_atomic(table, _csv(rows))
    queued = queued_trials(study)
    waiting = f"; {queued} queued prediction{'s' if queued > 1 else ''} not run yet: more --trials or another worker runs them" if queued else ""
    click.echo(f"study {name} ({len(rows)} trials, all workers{waiting})")
    click.echo(_table(rows))
    click.echo(f"trials written to {out / 'trials' / name}, table to {table}", err=True)
    best = best_measured(rows)
    if best is None:
        first = next((r for r in rows if r["message"]), None)
        why = f"trial {first['number']} {first['status']}: {first['message']}" if first else "no trial ran"
        raise InputError("trial-cmd", trial_cmd, f"no trial measured a step time ({why})")
    click.echo(f"best measured: {best['measured_seconds']:.3f} s (predicted {best['predicted_seconds']:.3f} s), trial {best['number']}: {best['plan']}")

