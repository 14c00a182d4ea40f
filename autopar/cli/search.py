"""`autopar search`: rank every legal plan and explain the best ones."""

from __future__ import annotations

import time

import click
from click.core import ParameterSource

from autopar.cli import main
from autopar.cli.common import (FRAMEWORKS, OBJECTIVES, check_attention_kernel, checked_plan, dump_json, flush_notes, model_cluster_options, parse_count, resolve_inputs,
                                resolve_training, training_options, write_atomic)
from autopar.errors import InputError
from autopar.fix import parse_fix

# solvers.stage_search.DEFAULT_CORES / DEFAULT_SECONDS, spelled here for the same reason
PER_STAGE_CORES, PER_STAGE_SECONDS = 8, 60.0


def _fmt_gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def _table(output, references: list[str], objective: str = "throughput") -> str:
    from autopar.cli.explain import variant_hint, why_best
    from autopar.report import dollars
    from solvers.base import step_cost_usd

    res = output.results
    cluster = res.inputs.cluster
    hbm = cluster.usable_hbm_bytes  # the limit plans are held to: HBM less the memory headroom
    priced = objective == "cost"  # the search refused a cluster without a price
    lines = [f"{'rank':>4} {'step s':>9} {'tokens/s':>12} {'MFU':>6} {f'mem/{_fmt_gb(hbm)} GB':>11} "
             + (f"{'$/step':>9} " if priced else "") + f"{'bottleneck':<13} plan"]
    for rank, rp in enumerate(res.plans, 1):
        e = rp.estimate
        cost = f"{dollars(step_cost_usd(cluster, e.step_seconds), digits=4):>9} " if priced else ""  # ranks differ in cents
        lines.append(f"{rank:>4} {e.step_seconds:9.3f} {e.tokens_per_second:12,.0f} {100 * e.mfu:5.1f}% "
                     f"{_fmt_gb(e.memory_bytes_per_gpu):>11} {cost}{e.bottleneck.value:<13} {e.plan}")
        if rp.equal_cost_variants:
            n = len(rp.equal_cost_variants)
            lines.append(f"{'':>4} {'':>9} (+{n} equal-cost variant{'s' if n > 1 else ''}: {variant_hint(rp, res.inputs.model)}; all in --json)")
        if len(e.stages) > 1:
            lines.append(f"{'':>4} {'':>9} {_stages_line(e)}")
    s = res.search
    lines.append("")
    lines.append(f"{s.solver}: {s.num_evaluated:,} plans, {s.num_feasible:,} fit; {'proved optimal' if s.proved_optimal else 'best found'} "
                 f"in {s.seconds:.2f} s" + (f"; only plans {s.framework} runs ({output.num_refused:,} better ones refused)" if s.framework else ""))
    lines.append(_per_stage_line(s.per_stage) + (f"; per-stage plans {s.framework} refuses are left out" if s.framework and s.per_stage else ""))
    lines += references
    if res.plans:
        best = res.plans[0].estimate
        lines += ["", f"best plan: {best.plan}"]
        top = sorted(((v, k) for k, v in best.time_breakdown.items() if v), reverse=True)[:4]
        lines.append("  where the step goes: " + ", ".join(f"{k} {100 * v / best.step_seconds:.0f}%" for v, k in top))
        lines.append(f"  memory: {_fmt_gb(best.memory_bytes_per_gpu)} GB of {cluster.hbm_limit_text()} per GPU "
                     f"({100 * best.memory_bytes_per_gpu / hbm:.0f}%)")
        if priced:
            lines.append(_cost_line(best, cluster, res.inputs.training))
        if best.validated is not None:
            from autopar.report import trust_line
            lines.append(f"  validated: {trust_line(best.validated)}")
        if len(res.plans) > 1:
            lines += why_best(res.plans[0], res.plans[1], res.inputs.model)
    return "\n".join(lines)


def _cost_line(best, cluster, training) -> str:
    """What the best plan costs: per step, per million tokens and, with target tokens, the run."""
    from autopar.report import dollars, human_count
    from solvers.base import step_cost_usd

    step = step_cost_usd(cluster, best.step_seconds)
    line = (f"  cost: {dollars(step, digits=4)} per step, {dollars(step / training.tokens_per_step * 1e6)} per million tokens "
            f"({cluster.num_gpus:,} GPUs x ${cluster.price_usd_per_gpu_hour:,.2f} per GPU-hour)")
    if best.cost_usd is not None:
        line += f"; {dollars(best.cost_usd)} to train {human_count(training.target_tokens)} tokens"
    return line


def _reference_line(plan, model, cluster, training, output, objective: str = "throughput") -> str:
    import numpy as np

    from autopar.cost import estimate as cost_estimate
    from solvers.base import Objective, objective_values

    est = cost_estimate(model, cluster, training, plan, output.batch.params)
    best = output.results.plans[0].estimate.step_seconds
    gap = est.step_seconds / best - 1
    if not est.feasible:  # no rank among the plans that fit, and no gap it could claim over them
        return (f"reference {est.plan}: does NOT fit: " + "; ".join(est.reasons)
                + f" (if it did: step {est.step_seconds:.3f} s, {100 * gap:+.1f}% vs best)")
    rank = ""
    extra = output.ranking.extra
    if "all_objective" in extra:
        values, ok = extra["all_objective"], extra["all_feasible"]
        # the ranked values are in the objective's units (seconds, or $ per million tokens under
        # cost): the reference is put in the same units the same way before it is compared
        mine = float(objective_values(output.batch, np.array([est.step_seconds]), Objective(objective))[0])
        better = int((values[ok] < mine * (1 - 1e-12)).sum())
        rank = f", plan {better + 1:,} of {int(ok.sum()):,} that fit"
    return f"reference {est.plan}: step {est.step_seconds:.3f} s, {100 * gap:+.1f}% vs best{rank}; fits"


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
    from solvers.stage_search import SOLVED

    if info is None:
        return "per-stage: off"
    found = [s for s in info.solves if s.status in SOLVED and s.step_seconds is not None]
    proved = sum(s.status == "OPTIMAL" for s in found)
    compared = [s for s in found if s.balanced_fits]
    # a core refused by a rule (the per-stage model's, a re-costing that disagrees, the framework's)
    # is not one that did not fit in memory (CP-SAT INFEASIBLE: the layer bounds always hold the
    # balanced split, so only the memory constraint can leave no layout)
    refused = sum(s.status == "REFUSED" for s in info.solves)
    no_fit = sum(s.status == "INFEASIBLE" for s in info.solves)
    unsolved = len(info.solves) - len(found) - refused - no_fit  # UNKNOWN: no layout found within the time limit
    head = (f"per-stage: {len(info.solves)} cores in {info.seconds:.2f} s ({proved} proved optimal, {refused} refused by rules, "
            f"{no_fit} did not fit in memory, " + (f"{unsolved} unsolved in the time limit, " if unsolved else "")
            + f"{info.cores_skipped} skipped by the time budget)")
    if not compared:
        return head
    top = min(compared, key=lambda s: (s.step_seconds / s.balanced_step_seconds, s.step_seconds))
    return head + (f"; largest gain {100 * (1 - top.step_seconds / top.balanced_step_seconds):.1f}% less step time "
                   f"({top.balanced_step_seconds:.3f} s balanced -> {top.step_seconds:.3f} s per-stage: {top.plan})")


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
@click.option("--max-gbs-tokens", default=None, help="Critical batch size: reject a given global batch above this many tokens (suffixes as --global-batch-tokens); "
              "without a batch, the default batch stays under it")
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
@click.option("--emit-dir", type=click.Path(file_okay=False), default="launch", show_default=True, help="Where --emit writes (only with --emit)")
@click.option("--per-stage/--no-per-stage", default=True, show_default=True,
              help="Solve the layers and recomputed layers of every pipeline stage of the top cores exactly (CP-SAT)")
@click.option("--per-stage-cores", type=int, default=PER_STAGE_CORES, show_default=True, help="Cores (plans without layout and recompute) solved per stage")
@click.option("--per-stage-seconds", type=float, default=PER_STAGE_SECONDS, show_default=True, help="Wall-clock cap on the per-stage step, seconds: cores it does not reach are skipped, so a cap that binds makes the ranking depend on the machine's speed")
def search(model_name, cluster_name, gpus, extrapolate_fabric, memory_headroom, seq_len, global_batch, global_batch_tokens, precision, fp8_recipe, stack,
           moe_routing, fp8_param_gather, expandable_segments, attention_kernel, objective, top_k,
           solver, fix_text, max_gbs_tokens, allow_tp_across_nodes, stage_layouts, references, no_flash, framework, as_json, out,
           emit_format, emit_dir, per_stage, per_stage_cores, per_stage_seconds):
    """Search the plan space and rank the fastest (or cheapest) plans that fit.

    Without --seq-len the sequence is the model's max_position_embeddings, at most 8192 (the
    pre-training length of LLaMA 3; longer maxima come from a separate long-context phase);
    without a batch it is about 4M tokens (LLaMA 2 and 3), a power of two sequences.
    """
    from autopar.cli.framework import framework_filter, resolve_framework
    from autopar.space import SpaceOptions
    from autopar.specs.costparams import params_for_cluster
    from solvers import Objective, SearchRequest, run_search
    from solvers.stage_search import PerStageOptions

    # --emit picks the framework, and so the plans ranked (it implies --framework): no emitter is
    # chosen for the user, and an --emit-dir alone wrote nothing and said nothing
    if emit_format is None and click.get_current_context().get_parameter_source("emit_dir") is not ParameterSource.DEFAULT:
        raise InputError("emit-dir", emit_dir, f"is where --emit writes; give --emit {'|'.join(FRAMEWORKS)} too (nothing is written without it)")
    model, cluster = resolve_inputs(model_name, cluster_name, gpus, extrapolate_fabric, memory_headroom)
    params = params_for_cluster(cluster)
    critical = parse_count(max_gbs_tokens, "max-gbs-tokens", binary=True) if max_gbs_tokens else None
    framework = resolve_framework(framework, emit_format)
    training = resolve_training(model, seq_len, global_batch, global_batch_tokens, precision, stack, framework, fp8_recipe,
                                flash_attention=not no_flash, moe_routing=moe_routing, max_batch_tokens=critical,
                                fp8_param_gather=fp8_param_gather, expandable_segments=expandable_segments, attention_kernel=attention_kernel)
    check_attention_kernel(training, cluster)
    if critical is not None and training.tokens_per_step > critical:
        raise InputError("global-batch", training.global_batch_size,
                         f"{training.tokens_per_step:,} tokens per step exceed --max-gbs-tokens {critical:,} (critical batch size)")
    if per_stage_cores <= 0:
        raise InputError("per-stage-cores", per_stage_cores, "must be positive")
    if not 0 < per_stage_seconds < float("inf"):
        raise InputError("per-stage-seconds", per_stage_seconds, "must be positive" if per_stage_seconds <= 0 else "must be a finite number")
    reference_plans = [checked_plan(text, model, training, cluster.num_gpus) for text in references]  # bad ones fail before the search
    options = SpaceOptions(fixed=parse_fix(fix_text), allow_tp_across_nodes=allow_tp_across_nodes, stage_layouts=stage_layouts)
    stages = PerStageOptions(per_stage_cores, per_stage_seconds, "recompute" in options.fixed) if per_stage else None
    request = SearchRequest(model, cluster, training, Objective(objective), top_k, solver, options, params,
                            plan_filter=framework_filter(framework, model, cluster, training) if framework else None,
                            filter_name=framework, per_stage=stages)
    progress, close = _progress(as_json)
    try:
        output = run_search(request, progress)
    finally:
        close()
    lines = [_reference_line(p, model, cluster, training, output, objective) for p in reference_plans]
    payload = dump_json(output.results.model_dump(mode="json"))
    if out:
        write_atomic(out, payload)
    written = _emit(output.results, emit_format, emit_dir) if emit_format else []
    flush_notes()
    if as_json:
        click.echo(payload, nl=False)
    else:
        click.echo(f"{model.name} on {cluster.name} ({cluster.num_gpus} x {cluster.gpu.name}), seq {training.seq_len}, "
                   f"batch {training.global_batch_size} x {training.seq_len} tokens, {training.precision_label}")
        click.echo(_table(output, lines, objective))
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
