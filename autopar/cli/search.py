"""`autopar search`: rank every legal plan and explain the best ones."""

from __future__ import annotations

import sys
import time

import click

from autopar.cli import main
from autopar.cli.common import dump_json, model_cluster_options, parse_count, resolve_inputs, resolve_training, training_options, write_atomic
from autopar.cost import estimate as cost_estimate
from autopar.emit import RuleViolation, emit_results
from autopar.errors import InputError
from autopar.space import FIXABLE, SpaceOptions
from autopar.specs import parse_plan
from autopar.specs.costparams import params_for_cluster
from solvers import Objective, SearchRequest, run_search
from solvers.stage_search import DEFAULT_CORES, DEFAULT_SECONDS, PerStageOptions


def parse_fix(text: str | None) -> dict[str, object]:
    """'tp=8,pp=16' -> {'tp': 8, 'pp': 16}, values checked by the Plan schema."""
    if not text:
        return {}
    keys = [item.split("=", 1)[0].strip() for item in text.split(",") if item.strip()]
    for key in keys:
        if key not in FIXABLE:
            raise InputError("fix", key, f"unknown dimension; can fix: {', '.join(FIXABLE)}")
    probe = {k: v for k, v in (i.split("=", 1) for i in text.split(",") if "=" in i)}
    if "vpp" in probe and "pp" not in probe:
        probe["pp"] = "2"  # vpp > 1 needs pp > 1 in the schema; the space applies the real rule
    plan = parse_plan(",".join(f"{k}={v}" for k, v in probe.items()))
    out: dict[str, object] = {}
    for key in keys:
        value = getattr(plan, key)
        if key == "sp":
            value = int(bool(value))
        out[key] = value.value if hasattr(value, "value") else value
    return out


def _emit_best_runnable(results, fmt: str, out_dir: str) -> tuple[list, list[str]]:
    """Emit the best-ranked plan the framework can run (e.g. Megatron-LM has no zero-bubble
    schedule); say which ranks it refused and why. Raises the first refusal if all are refused."""
    refused, first_error = [], None
    for rank in range(1, len(results.plans) + 1):
        try:
            return emit_results(results, fmt, out_dir, rank), refused
        except RuleViolation as exc:
            first_error = first_error or exc
            refused.append(f"rank {rank} not emitted for {fmt}: {exc}")
    raise first_error


def _table(output, references) -> str:
    res = output.results
    lines = [f"{'rank':>4} {'step s':>9} {'tokens/s':>12} {'MFU':>6} {'mem GB':>7} {'bottleneck':<13} plan"]
    previous, same = None, 0
    for i, rp in enumerate(res.plans, 1):
        e = rp.estimate
        key = (round(e.step_seconds, 12), round(e.memory_bytes_per_gpu))
        if key == previous:  # rank-order / CP-algorithm variants that cost exactly the same
            same += 1
            continue
        if same:
            lines.append(f"{'':>4} {'':>9} (+{same} equal-cost variant(s) of this plan, e.g. rank order; all in --json)")
        previous, same = key, 0
        lines.append(f"{i:>4} {e.step_seconds:9.3f} {e.tokens_per_second:12,.0f} {100 * e.mfu:5.1f}% {e.memory_bytes_per_gpu / 1e9:7.1f} {e.bottleneck.value:<13} {e.plan}")
        if len(e.stages) > 1:
            lines.append(f"{'':>4} {'':>9} {_stages_line(e)}")
    if same:
        lines.append(f"{'':>4} {'':>9} (+{same} equal-cost variant(s) of this plan, e.g. rank order; all in --json)")
    s = res.search
    lines.append("")
    lines.append(f"{s.solver}: {s.num_evaluated:,} plans, {s.num_feasible:,} fit; {'proved optimal' if s.proved_optimal else 'best found'} in {s.seconds:.2f} s")
    lines.append(_per_stage_line(s.per_stage))
    for ref in references:
        lines.append(ref)
    if res.plans:
        best = res.plans[0].estimate
        lines.append("")
        lines.append(f"best plan: {best.plan}")
        top = sorted(((v, k) for k, v in best.time_breakdown.items() if v), reverse=True)[:4]
        lines.append("  where the step goes: " + ", ".join(f"{k} {100 * v / best.step_seconds:.0f}%" for v, k in top))
    return "\n".join(lines)


def _reference_line(text, model, cluster, training, output) -> str:
    est = cost_estimate(model, cluster, training, parse_plan(text), output.batch.params)
    best = output.results.plans[0].estimate.step_seconds
    gap = est.step_seconds / best - 1
    rank = ""
    extra = output.ranking.extra
    if "all_objective" in extra:
        values, ok = extra["all_objective"], extra["all_feasible"]
        better = int((values[ok] < est.step_seconds * (1 - 1e-12)).sum())
        rank = f", rank {better + 1} of {int(ok.sum()):,}"
    fit = "fits" if est.feasible else "does NOT fit: " + "; ".join(est.reasons)
    return f"reference {est.plan}: step {est.step_seconds:.3f} s, {100 * gap:+.1f}% vs best{rank}; {fit}"


def _run_length(values: list[int]) -> str:
    """7/8x14/7: equal neighbours folded."""
    out, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        out.append(f"{values[i]}x{j - i + 1}" if j > i else str(values[i]))
        i = j + 1
    return "/".join(out)


def _stages_line(e) -> str:
    """Per-stage layers and recomputed layers of a pipelined plan (first stage first)."""
    rec = [s.recompute_layers for s in e.stages]
    text = f"stages: layers {_run_length([s.layers for s in e.stages])}"
    return text + (f", recompute {_run_length(rec)}" if any(rec) else "")


def _per_stage_line(info) -> str:
    """What the per-stage solves did, and the largest gain over a core's balanced plan."""
    if info is None:
        return "per-stage: off"
    found = [s for s in info.solves if s.step_seconds is not None]
    proved = sum(s.status == "OPTIMAL" for s in found)
    compared = [s for s in found if s.balanced_fits]
    head = (f"per-stage: {len(info.solves)} cores in {info.seconds:.2f} s ({proved} proved optimal, "
            f"{len(info.solves) - len(found)} without a plan that fits, {info.cores_skipped} skipped by the time budget)")
    if not compared:
        return head
    top = min(compared, key=lambda s: (s.step_seconds / s.balanced_step_seconds, s.step_seconds))
    return head + (f"; largest gain {100 * (top.step_seconds / top.balanced_step_seconds - 1):+.1f}% "
                   f"({top.balanced_step_seconds:.3f} s balanced -> {top.step_seconds:.3f} s per-stage: {top.plan})")


@main.command()
@model_cluster_options
@training_options
@click.option("--objective", type=click.Choice([o.value for o in Objective]), default="throughput", show_default=True)
@click.option("--top", "top_k", type=int, default=10, show_default=True, help="How many plans to rank")
@click.option("--solver", type=click.Choice(["auto", "cpsat", "exhaustive"]), default="auto", show_default=True)
@click.option("--fix", "fix_text", default=None, help="Pin dimensions, e.g. tp=8,pp=16")
@click.option("--max-gbs-tokens", default=None, help="Reject a global batch above this many tokens (critical batch size)")
@click.option("--allow-tp-across-nodes", is_flag=True, help="Let tp exceed the NVLink domain")
@click.option("--stage-layouts", is_flag=True, help="Also search the first/last pipeline stages' layer counts")
@click.option("--reference", "references", multiple=True, help="Also cost this plan and show its rank and gap (repeatable)")
@click.option("--no-flash", is_flag=True, help="Unfused attention (stores the score matrix)")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the results JSON here (atomically)")
@click.option("--emit", "emit_format", type=click.Choice(["megatron", "deepspeed", "torchtitan", "megatron-bridge"]), default=None,
              help="Write the launcher of the best plan")
@click.option("--emit-dir", type=click.Path(file_okay=False), default="launch", show_default=True, help="Where --emit writes")
@click.option("--per-stage/--no-per-stage", default=True, show_default=True,
              help="Solve the layers and recomputed layers of every pipeline stage of the top cores exactly (CP-SAT)")
@click.option("--per-stage-cores", type=int, default=DEFAULT_CORES, show_default=True, help="Cores (plans without layout and recompute) solved per stage")
@click.option("--per-stage-seconds", type=float, default=DEFAULT_SECONDS, show_default=True, help="Time budget of the per-stage solves, seconds")
def search(model_name, cluster_name, gpus, seq_len, global_batch, global_batch_tokens, precision, objective, top_k, solver,
           fix_text, max_gbs_tokens, allow_tp_across_nodes, stage_layouts, references, no_flash, as_json, out, emit_format, emit_dir,
           per_stage, per_stage_cores, per_stage_seconds):
    """Search the plan space and rank the fastest (or cheapest) plans that fit."""
    model, cluster = resolve_inputs(model_name, cluster_name, gpus)
    params = params_for_cluster(cluster)
    critical = parse_count(max_gbs_tokens, "max-gbs-tokens", binary=True) if max_gbs_tokens else None
    training = resolve_training(seq_len, global_batch, global_batch_tokens, precision, flash_attention=not no_flash)
    if critical is not None and training.tokens_per_step > critical:
        raise InputError("global-batch", training.global_batch_size,
                         f"{training.tokens_per_step:,} tokens per step exceed --max-gbs-tokens {critical:,} (critical batch size)")
    options = SpaceOptions(fixed=parse_fix(fix_text), allow_tp_across_nodes=allow_tp_across_nodes, stage_layouts=stage_layouts)
    if per_stage_cores <= 0 or per_stage_seconds <= 0:
        bad = ("per-stage-cores", per_stage_cores) if per_stage_cores <= 0 else ("per-stage-seconds", per_stage_seconds)
        raise InputError(*bad, "must be positive")
    stages = PerStageOptions(per_stage_cores, per_stage_seconds, "recompute" in options.fixed) if per_stage else None
    request = SearchRequest(model, cluster, training, Objective(objective), top_k, solver, options, params, per_stage=stages)
    started = time.perf_counter()
    shown = [False]

    def progress(done: int, total: int) -> None:
        if time.perf_counter() - started > 1.0 and not as_json:
            shown[0] = True
            click.echo(f"\rsearching: {done:,} / {total:,} plans ({100 * done / total:.0f}%)", nl=False, err=True)

    output = run_search(request, progress)
    if shown[0]:
        click.echo("", err=True)
    lines = [_reference_line(r, model, cluster, training, output) for r in references]
    payload = dump_json(output.results.model_dump(mode="json"))
    if out:
        write_atomic(out, payload)
    written, refused = _emit_best_runnable(output.results, emit_format, emit_dir) if emit_format else ([], [])
    if as_json:
        click.echo(payload, nl=False)
    else:
        click.echo(f"{model.name} on {cluster.name} ({cluster.num_gpus} x {cluster.gpu.name}), seq {seq_len}, "
                   f"batch {training.global_batch_size} x {seq_len} tokens, {precision}")
        click.echo(_table(output, lines))
        if out:
            click.echo(f"results written to {out}", err=True)
        for line in refused:
            click.echo(line, err=True)
        for path in written:
            click.echo(f"{emit_format} launcher written to {path}", err=True)
    sys.stdout.flush()
