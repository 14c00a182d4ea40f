"""`autopar search`: rank every legal plan and explain the best ones."""

from __future__ import annotations

import time

import click

from autopar.cli import main
from autopar.cli.common import (FRAMEWORKS, OBJECTIVES, check_stage_layout, dump_json, flush_notes, model_cluster_options, parse_count, resolve_inputs,
                                resolve_training, training_options, write_atomic)
from autopar.errors import InputError

# autopar.space.FIXABLE, spelled here so that --help imports no numpy (tests/cli/test_lazy.py)
FIXABLE = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "zero", "recompute", "sp", "schedule", "cp_algo", "order")
MAX_REFINE_TRIALS = 100_000
_SWITCH = {"on": 1, "off": 0, "true": 1, "false": 0, "1": 1, "0": 0, "yes": 1, "no": 0}


def parse_fix(text: str | None) -> dict[str, object]:
    """'tp=8,pp=16' -> {'tp': 8, 'pp': 16}; each value is checked by its own Plan field's type
    and bounds, so an error names the key it is about (cross-key rules are the space's)."""
    if not text:
        return {}
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from autopar.specs import Plan

    out: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq:
            raise InputError("fix", item, "expected key=value (e.g. tp=8)")
        if key not in FIXABLE:
            raise InputError("fix", key, f"unknown dimension; can fix: {', '.join(FIXABLE)}")
        if key in out:
            raise InputError(f"fix.{key}", value, f"{key} is given twice")
        if key == "sp":
            if value.lower() not in _SWITCH:
                raise InputError("fix.sp", value, "must be on or off")
            out[key] = _SWITCH[value.lower()]
            continue
        info = Plan.model_fields[key]
        kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        try:
            parsed = TypeAdapter(kind).validate_python(value)
        except ValidationError as exc:
            raise InputError(f"fix.{key}", value, exc.errors()[0]["msg"]) from None
        if parsed is None:
            raise InputError(f"fix.{key}", value, "must be a value, not null")
        out[key] = parsed.value if hasattr(parsed, "value") else parsed
    return out


def _fmt_gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def _table(output, references: list[str]) -> str:
    from autopar.cli.explain import variant_hint, why_best

    res = output.results
    hbm = res.inputs.cluster.gpu.hbm_bytes
    lines = [f"{'rank':>4} {'step s':>9} {'tokens/s':>12} {'MFU':>6} {f'mem/{_fmt_gb(hbm)} GB':>11} {'bottleneck':<13} plan"]
    for rank, rp in enumerate(res.plans, 1):
        e = rp.estimate
        lines.append(f"{rank:>4} {e.step_seconds:9.3f} {e.tokens_per_second:12,.0f} {100 * e.mfu:5.1f}% "
                     f"{_fmt_gb(e.memory_bytes_per_gpu):>11} {e.bottleneck.value:<13} {e.plan}")
        if rp.equal_cost_variants:
            n = len(rp.equal_cost_variants)
            lines.append(f"{'':>4} {'':>9} (+{n} equal-cost variant{'s' if n > 1 else ''}: {variant_hint(rp)}; all in --json)")
    s = res.search
    lines.append("")
    lines.append(f"{s.solver}: {s.num_evaluated:,} plans, {s.num_feasible:,} fit; {'proved optimal' if s.proved_optimal else 'best found'} "
                 f"in {s.seconds:.2f} s" + (f"; only plans {s.framework} runs ({output.num_refused:,} better ones refused)" if s.framework else ""))
    lines += references
    if res.plans:
        best = res.plans[0].estimate
        lines += ["", f"best plan: {best.plan}"]
        top = sorted(((v, k) for k, v in best.time_breakdown.items() if v), reverse=True)[:4]
        lines.append("  where the step goes: " + ", ".join(f"{k} {100 * v / best.step_seconds:.0f}%" for v, k in top))
        lines.append(f"  memory: {_fmt_gb(best.memory_bytes_per_gpu)} of {_fmt_gb(hbm)} GB HBM per GPU "
                     f"({100 * best.memory_bytes_per_gpu / hbm:.0f}%)")
        if len(res.plans) > 1:
            lines += why_best(res.plans[0], res.plans[1])
    return "\n".join(lines)


def _reference_line(plan, model, cluster, training, output) -> str:
    from autopar.cost import estimate as cost_estimate

    est = cost_estimate(model, cluster, training, plan, output.batch.params)
    best = output.results.plans[0].estimate.step_seconds
    gap = est.step_seconds / best - 1
    rank = ""
    extra = output.ranking.extra
    if "all_objective" in extra:
        values, ok = extra["all_objective"], extra["all_feasible"]
        better = int((values[ok] < est.step_seconds * (1 - 1e-12)).sum())
        rank = f", plan {better + 1:,} of {int(ok.sum()):,} that fit"
    fit = "fits" if est.feasible else "does NOT fit: " + "; ".join(est.reasons)
    return f"reference {est.plan}: step {est.step_seconds:.3f} s, {100 * gap:+.1f}% vs best{rank}; {fit}"


def _refine(output, model, cluster, training, params, num_trials, seed, plan_filter=None) -> str:
    """Refine the top plans; a better plan (that the --framework runs) goes to rank 1 of the
    results. Returns the summary line."""
    from autopar.specs.results import RankedPlan
    from solvers.refine import refine

    res = output.results
    starts = [rp.plan for rp in res.plans]
    r = refine(model, cluster, training, starts, max(num_trials, len(starts)), params, seed)
    head = f"refine: {r.num_trials} Optuna trials (seed {seed}), {r.num_feasible} fit"
    if not r.improved:
        return f"{head}; no plan beats the {res.search.solver} best ({r.start.step_seconds:.3f} s)"
    refused = plan_filter(r.best_plan, r.best) if plan_filter else None
    if refused:
        return f"{head}; the best refined plan is refused by {res.search.framework} ({refused}); the ranking is kept"
    res.plans = [RankedPlan(plan=r.best_plan, estimate=r.best)] + res.plans[: max(0, len(res.plans) - 1)]
    res.search.solver = f"{res.search.solver}+refine"
    res.search.proved_optimal = False  # rank 1 is now the refined plan, outside the table the solver proved
    return (f"{head}; step {r.start.step_seconds:.3f} s -> {r.best.step_seconds:.3f} s ({-100 * r.gain:+.1f}%, "
            f"tokens/s {r.start.tokens_per_second:,.0f} -> {r.best.tokens_per_second:,.0f}), stages {r.start.stage_layers} -> {r.best.stage_layers}\n"
            f"  was {r.start.plan}\n  now {r.best.plan}")


def _progress(as_json: bool):
    started = time.perf_counter()
    shown = [False]

    def progress(done: int, total: int) -> None:
        if time.perf_counter() - started > 1.0 and not as_json:
            shown[0] = True
            click.echo(f"\rsearching: {done:,} / {total:,} plans ({100 * done / total:.0f}%)", nl=False, err=True)

    def close() -> None:
        if shown[0]:
            click.echo("", err=True)

    return progress, close


@main.command()
@model_cluster_options
@training_options
@click.option("--objective", type=click.Choice(OBJECTIVES), default="throughput", show_default=True)
@click.option("--top", "top_k", type=int, default=10, show_default=True,
              help="How many distinct plans to rank (equal-cost variants fold under their row)")
@click.option("--solver", type=click.Choice(["auto", "cpsat", "exhaustive"]), default="auto", show_default=True)
@click.option("--fix", "fix_text", default=None, help="Pin dimensions, e.g. tp=8,pp=16")
@click.option("--max-gbs-tokens", default=None, help="Reject a global batch above this many tokens (critical batch size)")
@click.option("--allow-tp-across-nodes", is_flag=True, help="Let tp exceed the NVLink domain")
@click.option("--stage-layouts", is_flag=True, help="Also search the first/last pipeline stages' layer counts")
@click.option("--reference", "references", multiple=True, help="Also cost this plan and show its rank and gap (repeatable)")
@click.option("--no-flash", is_flag=True, help="Unfused attention (stores the score matrix)")
@click.option("--framework", type=click.Choice(FRAMEWORKS), default=None,
              help="Rank only plans this framework's launcher runs (its emitter's own rules; e.g. no zero-bubble for Megatron-LM)")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the results JSON here (atomically)")
@click.option("--emit", "emit_format", type=click.Choice(FRAMEWORKS), default=None,
              help="Write the launcher of the best plan; implies --framework (the plan is the best one the framework runs)")
@click.option("--emit-dir", type=click.Path(file_okay=False), default="launch", show_default=True, help="Where --emit writes")
@click.option("--refine", "refine_trials", type=int, default=None,
              help="Then tune stage layouts, recompute layers and micro-batch of the top plans with N Optuna trials (full cost model)")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --refine sampler")
def search(model_name, cluster_name, gpus, extrapolate_fabric, seq_len, global_batch, global_batch_tokens, precision, objective, top_k,
           solver, fix_text, max_gbs_tokens, allow_tp_across_nodes, stage_layouts, references, no_flash, framework, as_json, out,
           emit_format, emit_dir, refine_trials, seed):
    """Search the plan space and rank the fastest (or cheapest) plans that fit.

    Without --seq-len the sequence is the model's max_position_embeddings, at most 8192 (the
    pre-training length of LLaMA 3; longer maxima come from a separate long-context phase);
    without a batch it is about 4M tokens (LLaMA 2 and 3), a power of two sequences.
    """
    from autopar.cli.framework import framework_filter, resolve_framework
    from autopar.space import SpaceOptions
    from autopar.specs import parse_plan
    from autopar.specs.costparams import params_for_cluster
    from solvers import Objective, SearchRequest, run_search

    model, cluster = resolve_inputs(model_name, cluster_name, gpus, extrapolate_fabric)
    params = params_for_cluster(cluster)
    critical = parse_count(max_gbs_tokens, "max-gbs-tokens", binary=True) if max_gbs_tokens else None
    training = resolve_training(model, seq_len, global_batch, global_batch_tokens, precision, flash_attention=not no_flash)
    if critical is not None and training.tokens_per_step > critical:
        raise InputError("global-batch", training.global_batch_size,
                         f"{training.tokens_per_step:,} tokens per step exceed --max-gbs-tokens {critical:,} (critical batch size)")
    if refine_trials is not None and not 0 < refine_trials <= MAX_REFINE_TRIALS:
        raise InputError("refine", refine_trials, "must be a positive number of trials" + (f" at most {MAX_REFINE_TRIALS:,}" if refine_trials > 0 else ""))
    framework = resolve_framework(framework, emit_format)
    reference_plans = [check_stage_layout(parse_plan(text), model) for text in references]  # bad ones fail before the search
    options = SpaceOptions(fixed=parse_fix(fix_text), allow_tp_across_nodes=allow_tp_across_nodes, stage_layouts=stage_layouts)
    request = SearchRequest(model, cluster, training, Objective(objective), top_k, solver, options, params,
                            plan_filter=framework_filter(framework, model, cluster, training) if framework else None,
                            filter_name=framework)
    progress, close = _progress(as_json)
    try:
        output = run_search(request, progress)
    finally:
        close()
    lines = [_reference_line(p, model, cluster, training, output) for p in reference_plans]
    if refine_trials is not None:
        lines.append(_refine(output, model, cluster, training, params, refine_trials, seed, request.plan_filter))
    payload = dump_json(output.results.model_dump(mode="json"))
    if out:
        write_atomic(out, payload)
    written = _emit(output.results, emit_format, emit_dir) if emit_format else []
    flush_notes()
    if as_json:
        click.echo(payload, nl=False)
    else:
        click.echo(f"{model.name} on {cluster.name} ({cluster.num_gpus} x {cluster.gpu.name}), seq {training.seq_len}, "
                   f"batch {training.global_batch_size} x {training.seq_len} tokens, {precision}")
        click.echo(_table(output, lines))
        if out:
            click.echo(f"results written to {out}", err=True)
        for path in written:
            click.echo(f"{emit_format} launcher written to {path}", err=True)


def _emit(results, fmt: str, out_dir: str) -> list:
    from autopar.emit import emit_results

    try:
        return emit_results(results, fmt, out_dir)
    except OSError as exc:
        raise InputError("emit-dir", out_dir, f"cannot write ({exc.strerror})") from None
