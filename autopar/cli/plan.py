"""`autopar plan`: from a token budget to GPUs, batch, layout, days, dollars and megawatt-hours."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import TYPE_CHECKING

import click

from autopar.cli import main
from autopar.cli.common import DIGIT_SEPARATORS, DIGIT_SEPARATORS_RULE, apply_memory_headroom, memory_headroom_option, PLAN_OBJECTIVES, PRECISIONS, dump_json, parse_amount, parse_count, parse_quantity, write_atomic
from autopar.fix import parse_fix
from autopar.errors import InputError

if TYPE_CHECKING:  # the planner (numpy, OR-Tools) loads when the command runs, not for --help
    from solvers.planner import PlanReport, PlanRequest

_DAYS = {"d": 1.0, "h": 1 / 24, "w": 7.0}


def parse_tokens_binary(value: str, field: str) -> int:
    """Batch sizes: K/M/G/T are powers of two, B the same as G (16M = 16,777,216), as in `autopar search`."""
    return parse_count(value, field, binary=True)


def parse_batch_bound(value: str, field: str) -> float:
    """A batch bound in tokens, read as batches are (parse_count's suffixes, 4B = 4Gi = 4 x 2**30),
    fractions allowed (67.5M)."""
    number = parse_quantity(value, field, binary=True)
    if number <= 0:
        raise InputError(field, value, "must be a positive, finite number")
    return number


def parse_noise(text: str | None) -> tuple[float, float] | None:
    """'1.6e6/100' -> (tr Sigma, |G|^2)."""
    if not text:
        return None
    if "/" not in text:
        raise InputError("gradient-noise", text, "must be TRACE/NORM2, e.g. 1.6e6/100")
    trace, norm2 = text.split("/", 1)
    return parse_amount(trace, "gradient-noise"), parse_amount(norm2, "gradient-noise")


def parse_days(value: str | None) -> float | None:
    """'60d' -> 60, '1440h' -> 60, '8w' -> 56, '60' -> 60 days: a duration, not a count, so no K/M/G/T;
    digit separators refused as parse_quantity refuses them."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if DIGIT_SEPARATORS.search(text):
        raise InputError("deadline", value, f"must be a duration {DIGIT_SEPARATORS_RULE} (1440h, not 1,440h): a number of days, "
                         "or with a d/h/w suffix (60d, 1440h, 8w)")
    unit = _DAYS.get(text[-1:], None)
    try:
        days = float(text[:-1] if unit else text) * (unit or 1.0)
    except ValueError:
        raise InputError("deadline", value, "must be a duration: a number of days, or with a d/h/w suffix (60d, 1440h, 8w)") from None
    if not (math.isfinite(days) and days > 0):
        raise InputError("deadline", value, "must be a positive, finite duration (60d, 1440h, 8w)")
    return days


def parse_gpus(text: str | None, default_max: int, per_node: int) -> list[int]:
    """'512:16384' -> powers of two times 512 up to 16384; '1024,2048' -> that list;
    default: from 1/16 of the preset's size (at least one node) up to the preset's size."""
    if not text:
        low, high = max(per_node, default_max // 16), default_max
    elif ":" in text:
        a, b = text.split(":", 1)
        low, high = int(parse_amount(a, "gpus")), int(parse_amount(b, "gpus"))
        if low > high:
            raise InputError("gpus", text, "the range must run from the smaller count to the larger")
    else:
        counts = [parse_amount(v, "gpus") for v in text.split(",") if v.strip()]
        if not counts or any(c != int(c) for c in counts):
            raise InputError("gpus", text, "must be whole GPU counts, e.g. 1024,2048 or 512:16384")
        return sorted({int(c) for c in counts})
    out, n = [], low
    while n <= high:
        out.append(n)
        n *= 2
    return out


def parse_ramp(text: str | None, seq_len: int) -> tuple[tuple[int, float], ...]:
    """'4M@252M,8M@2.87T': batch 4M tokens until 252M tokens, then 8M until 2.87T, then the point's batch."""
    if not text:
        return ()
    steps, last = [], 0.0
    for item in (piece.strip() for piece in text.split(",")):
        if "@" not in item:
            raise InputError("ramp", item, "each step is BATCH@UNTIL_TOKENS, e.g. 4M@252M")
        batch_text, until_text = item.split("@", 1)
        batch, until = parse_tokens_binary(batch_text, "ramp"), parse_amount(until_text, "ramp")
        if batch % seq_len:
            raise InputError("ramp", item, f"batch must be a multiple of seq-len={seq_len}")
        if until <= last:
            raise InputError("ramp", item, "steps must end at increasing token counts")
        steps.append((batch, until))
        last = until
    return tuple(steps)


def _cell(value: float | None, fmt: str, width: int) -> str:
    return f"{'-' if value is None else format(value, fmt):>{width}}"


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def table(report: PlanReport) -> str:
    from autopar.report import dollars, human_count
    from autopar.specs.hardware import GB

    head = (f"{'':2}{'GPUs':>7} {'batch':>7} {'step s':>8} {'MFU %':>6} {'goodput':>8} {'days':>7} {'GPU-h':>8} {'cost':>10} "
            f"{'MWh':>8} {'ckpt m':>7} {'mem GB':>6}  layout")
    lines = [head]
    for i, p in enumerate(report.points):
        mark = (">" if i == report.chosen else " ") + ("*" if p.pareto else " ")
        layout = p.plan if p.plan is not None else f"({p.note})"
        lines.append(" ".join([
            f"{mark}{p.gpus:>7,}", f"{human_count(p.global_batch_tokens, binary=True):>7}", _cell(p.step_seconds, ".2f", 8),
            _cell(_scaled(p.mfu, 100), ".1f", 6), _cell(_scaled(p.goodput, 100), ".1f", 7) + "%", _cell(p.wall_days, ".1f", 7),
            f"{'-' if p.gpu_hours is None else human_count(p.gpu_hours):>8}", f"{dollars(p.cost_usd):>10}", _cell(p.energy_mwh, ",.0f", 8),
            _cell(_scaled(p.checkpoint_interval_seconds, 1 / 60), ".0f", 7), _cell(_scaled(p.memory_bytes_per_gpu, 1 / GB), ".1f", 6),
            f" {layout}"]))
    lines.append("  * Pareto front (days vs cost)   > chosen   ckpt m = Young-Daly checkpoint interval, minutes   batch K/M/G = 2^10/2^20/2^30 tokens")
    capacity = {p.memory_capacity_bytes for p in report.points if p.memory_capacity_bytes is not None}
    if capacity:
        lines.append(f"  mem GB = peak HBM per GPU (fullest stage) of {', '.join(f'{c / GB:.1f}' for c in sorted(capacity))} GB the plan may fill")
    return "\n".join(lines)


def summary(report: PlanReport) -> list[str]:
    from autopar.report import dollars, human_count, human_tokens

    cap = report.critical_batch_tokens
    lines = [f"critical batch: {human_tokens(cap)} tokens = {cap:,.0f} ({report.critical_batch_source})"]
    if report.learning_rate_rule:
        lines.append(f"learning rate: {report.learning_rate_rule}")
    if report.chosen is None:
        lines.append("chosen: none (no point has a plan)")
        return lines + report.explanation
    p = report.points[report.chosen]
    # an asked-for cost objective needs a price (planner.run_plan); the default one under --deadline
    # ranks a cluster without one by GPU-hours (solvers.plan_choice.money), and says so (cost_unit in --json)
    objective = report.objective
    if report.cost_unit == "gpu_hours":
        objective = "cost in GPU-hours: the cluster has no price_usd_per_gpu_hour"
    lines.append(f"chosen ({objective}): {p.gpus:,} GPUs, batch {p.global_batch_tokens:,} tokens, {p.wall_days:.1f} days, "
                 f"{human_count(p.gpu_hours)} GPU-hours, {dollars(p.cost_usd)}, {_cell(p.energy_mwh, ',.0f', 0)} MWh")
    lines.append(f"  layout {p.plan}")
    train_minutes, every = p.train_days * 1440, p.checkpoint_interval_seconds / 60
    when = (f" every {every:.1f} min = {p.checkpoint_interval_steps:,} steps (--save-interval)" if p.checkpoint_periodic else
            f": none periodic, the run trains {train_minutes:.1f} min, and losing half of it to a failure costs less "
            f"than checkpointing every {every:.1f} min")
    lines.append(f"  step {p.step_seconds:.2f} s, MFU {100 * p.mfu:.1f}%; job MTBF {p.mtbf_hours:.2f} h; checkpoint ({p.checkpoint_write_seconds:.0f} s "
                 f"to write){when}; checkpoint tax {100 * p.checkpoint_tax:.1f}%, restarts {100 * p.restart_share:.1f}%, "
                 f"goodput {100 * p.goodput:.1f}%")
    if p.note:
        lines.append(f"  {p.note}")
    if p.learning_rate is not None:
        lines.append(f"  learning rate {p.learning_rate:.3g}")
    lines.append(f"  data parallelism over {p.gpus:,} GPUs is compute-bound from {human_tokens(p.compute_bound_batch_tokens)} tokens of batch "
                 f"(N x C/W, seed 001)")
    return lines + report.explanation


def points_csv(report: PlanReport) -> str:
    rows = [p.model_dump() for p in report.points]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["gpus"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_outputs(report: PlanReport, out_dir: str, deadline: float | None, budget: float | None) -> list[Path]:
    from autopar.plan_plot import plan_png

    out = Path(out_dir)
    paths = [out / "plan.json", out / "plan.csv", out / "plan.png"]
    write_atomic(paths[0], dump_json(report.model_dump(mode="json")))
    write_atomic(paths[1], points_csv(report))
    write_atomic(paths[2], plan_png(report, deadline, budget))
    return paths


@main.command()
@click.option("--model", "model_name", required=True, help="Model preset, autopar model file or HF config.json")
@click.option("--cluster", "cluster_name", required=True, help="Cluster preset or YAML file (resized to each GPU count)")
@click.option("--tokens", required=True, help="Training tokens, decimal suffixes (15T = 1.5e13)")
@click.option("--seq-len", type=int, required=True, help="Sequence length, tokens")
@click.option("--gpus", "gpus_text", default=None,
              help="GPU counts: LOW:HIGH (powers of two times LOW) or a list 1024,2048; default: 1/16 of the preset's size to its size")
@click.option("--precision", type=click.Choice(PRECISIONS), default="bf16", show_default=True, help="GEMM precision")
@click.option("--batch-tokens", default=None, help="Global batches to search, e.g. 8M,16M (K/M/G/T powers of two, B = G); default: the grid below the critical batch")
@click.option("--batches", type=int, default=1, show_default=True,
              help="Grid batches per GPU count: the K largest 2^k or 3x2^k sequences under the critical batch")
@click.option("--critical-batch-tokens", default=None,
              help="Upper bound on the global batch, tokens (K/M/G/T powers of two, B = G); default: DeepSeek LLM's fitted B_opt(C)")
@click.option("--gradient-noise", default=None,
              help="Measured gradient noise TRACE/NORM2 (tr Sigma / |G|^2 per sequence): critical batch B* = TRACE/NORM2 sequences")
@click.option("--ramp", default=None,
              help="Batch ramp-up BATCH@UNTIL_TOKENS,..., e.g. 4M@252M,8M@2.87T (at each point's layout when it runs them)")
@click.option("--deadline", default=None, help="Wall-clock limit: 60d, 1440h, 8w")
@click.option("--budget", default=None, help="Money limit in USD: 5M, $2.5M")
@click.option("--objective", type=click.Choice(PLAN_OBJECTIVES), default=None, help="What the chosen point minimises [default: cost under a deadline, else time]")
@click.option("--mtbf-hours-per-gpu", type=float, default=None, help="Override the cluster's MTBF per GPU, hours")
@click.option("--checkpoint-write-seconds", type=float, default=None, help="Override the checkpoint write time, seconds")
@click.option("--restart-seconds", type=float, default=None, help="Override the cluster's restart time after a failure, seconds")
@click.option("--lr0", type=float, default=None, help="Reference learning rate (with --batch0): prints the scaled LR per point")
@click.option("--batch0", default=None, help="Batch (tokens) at which --lr0 was tuned")
@click.option("--optimizer", type=click.Choice(["adam", "sgd"]), default="adam", show_default=True, help="Picks the LR scaling rule")
@click.option("--fix", "fix_text", default=None, help="Pin layout dimensions in every search, e.g. recompute=full")
@click.option("--extrapolate-fabric", is_flag=True,
              help="Allow GPU counts beyond the cluster file's fabric, assuming its top tier repeats")
@memory_headroom_option
@click.option("--full-space", is_flag=True, help="Also vary the rank order and the CP algorithm (pinned to Megatron's defaults otherwise)")
@click.option("--per-stage/--no-per-stage", default=True, show_default=True,
              help="Solve the layers and recomputed layers of every pipeline stage of the top cores exactly (CP-SAT)")
@click.option("--workers", type=int, default=1, show_default=True, help="Processes searching GPU counts in parallel")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Write plan.json, plan.csv and plan.png here (atomically)")
def plan(model_name, cluster_name, tokens, seq_len, gpus_text, precision, batch_tokens, batches, critical_batch_tokens, gradient_noise,
         ramp, deadline,
         budget, objective, mtbf_hours_per_gpu, checkpoint_write_seconds, restart_seconds, lr0, batch0, optimizer, fix_text, full_space,
         extrapolate_fabric, memory_headroom, per_stage, workers, as_json, out_dir):
    """From a token budget to GPUs, batch, layout, days, dollars and MWh (failures priced in)."""
    from autopar.report import human_count, plural
    from solvers.planner import run_plan

    request = build_request(**locals())
    report = run_plan(request)
    if out_dir:
        for path in write_outputs(report, out_dir, request.constraints.deadline_days, request.constraints.budget_usd):
            click.echo(f"written {path}", err=True)
    if as_json:
        click.echo(dump_json(report.model_dump(mode="json")), nl=False)
        return
    model, cluster = request.model, request.cluster
    click.echo(f"{model.name} on {cluster.name} ({cluster.gpu.name}), {human_count(report.tokens)} tokens, seq {seq_len}, {precision}; "
               f"{plural(len(report.points), 'point')} planned in {report.seconds:.1f} s")
    click.echo(table(report))
    click.echo("")
    click.echo("\n".join(summary(report)))


def _positive(value: float | None, field: str) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InputError(field, value, "must be a positive, finite number")
    return value


def build_request(model_name, cluster_name, tokens, seq_len, gpus_text, precision, batch_tokens, batches, critical_batch_tokens,
                  gradient_noise, ramp, deadline, budget, objective, mtbf_hours_per_gpu, checkpoint_write_seconds, restart_seconds, lr0, batch0, optimizer,
                  fix_text, workers, full_space=False, extrapolate_fabric=False, per_stage=True, memory_headroom=None,
                  **_unused) -> PlanRequest:
    """Command-line values -> PlanRequest; every bad value raises InputError naming its option."""
    from autopar.space import SpaceOptions
    from autopar.specs import Precision, load_cluster, load_model
    from solvers.plan_choice import Constraints
    from solvers.plan_points import FleetInputs
    from solvers.planner import PlanRequest

    if seq_len <= 0:
        raise InputError("seq-len", seq_len, "must be a positive integer")
    if batches <= 0 or workers <= 0:
        raise InputError("batches" if batches <= 0 else "workers", batches if batches <= 0 else workers, "must be a positive integer")
    model, cluster = load_model(model_name), load_cluster(cluster_name)
    cluster = apply_memory_headroom(cluster, memory_headroom)
    token_count = parse_amount(tokens, "tokens")
    _positive(mtbf_hours_per_gpu, "mtbf-hours-per-gpu")
    if checkpoint_write_seconds is not None and not (math.isfinite(checkpoint_write_seconds) and checkpoint_write_seconds >= 0):
        raise InputError("checkpoint-write-seconds", checkpoint_write_seconds, "must be a finite number of seconds >= 0")
    if restart_seconds is not None and not (math.isfinite(restart_seconds) and restart_seconds >= 0):
        raise InputError("restart-seconds", restart_seconds, "must be a finite number of seconds >= 0")
    fleet = FleetInputs(mtbf_hours_per_gpu or cluster.mtbf_hours_per_gpu, checkpoint_write_seconds,
                        cluster.restart_seconds if restart_seconds is None else restart_seconds, parse_ramp(ramp, seq_len))
    learning_rate = None
    if (lr0 is None) != (batch0 is None):
        raise InputError("lr0" if lr0 is None else "batch0", lr0 if lr0 is None else batch0, "give both --lr0 and --batch0")
    if lr0 is not None:
        learning_rate = (_positive(lr0, "lr0"), parse_tokens_binary(batch0, "batch0"), optimizer)
    constraints = Constraints(parse_days(deadline), parse_amount(budget, "budget", money=True) if budget else None, objective)
    if not gpus_text:  # the default counts run up to the file's size: a num_nodes beyond its top tier is refused as in search
        cluster.check_fabric(cluster.num_gpus, extrapolate_fabric, "cluster.num_nodes", cluster.num_nodes)
    return PlanRequest(
        model=model, cluster=cluster, seq_len=seq_len, precision=Precision(precision), tokens=token_count,
        gpu_counts=parse_gpus(gpus_text, cluster.num_gpus, cluster.gpus_per_node),
        batch_tokens=[parse_tokens_binary(b, "batch-tokens") for b in batch_tokens.split(",")] if batch_tokens else [],
        batches_per_count=batches,
        critical_batch_tokens=parse_batch_bound(critical_batch_tokens, "critical-batch-tokens") if critical_batch_tokens else None,
        gradient_noise=parse_noise(gradient_noise), fleet=fleet, constraints=constraints, learning_rate=learning_rate,
        options=SpaceOptions(fixed=parse_fix(fix_text)), workers=workers, full_space=full_space, extrapolate_fabric=extrapolate_fabric,
        per_stage=per_stage, ramp_text=tuple(item.strip() for item in ramp.split(",")) if ramp else (),
        batch_tokens_text=tuple(b.strip() for b in batch_tokens.split(",")) if batch_tokens else (),
        critical_batch_tokens_text=critical_batch_tokens)
