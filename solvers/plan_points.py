"""One point of `autopar plan` (GPU count x global batch) priced end to end: the searched layout's
step, the batch ramp-up at that layout, failures and checkpoints (goodput), wall time, GPU-hours,
money and energy. Pure costing: the layout comes from the search (solvers.search)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from autopar.cost import estimate as cost_estimate
from autopar.cost.flops import total_params
from autopar.cost.step import COMM_PARTS
from autopar.cost.goodput import (
    HOUR_SECONDS,
    JOULES_PER_MWH,
    Goodput,
    PowerModel,
    busy_fraction,
    cluster_checkpoint_write_seconds,
    cluster_job_mtbf_seconds,
    goodput,
    run_energy_joules,
    step_power_watts,
)
from autopar.errors import InputError
from autopar.report import human_count
from autopar.specs.costparams import CostParams
from autopar.specs.estimate import Estimate
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan
from autopar.specs.training import TrainingSpec

DAY_SECONDS = 86400.0


class PlanPoint(BaseModel):
    """One row of the plan table (the first twelve fields are the `--json` contract of issue 11)."""

    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(description="GPUs in the job")
    global_batch_tokens: int = Field(description="Tokens per optimizer step after the ramp-up")
    plan: str | None = Field(description="Best layout at this point (text form); null when nothing fits")
    step_seconds: float | None = Field(description="Seconds per optimizer step at global_batch_tokens")
    mfu: float | None = Field(description="Model FLOPs utilisation of that step")
    goodput: float | None = Field(description="Useful training time / wall time (failures, checkpoints, restarts)")
    checkpoint_interval_seconds: float | None = Field(description="Young-Daly interval between checkpoints, training seconds")
    wall_days: float | None = Field(description="Wall-clock days to train on all tokens")
    gpu_hours: float | None = Field(description="GPUs x wall hours")
    cost_usd: float | None = Field(description="gpu_hours x price per GPU-hour; null when the cluster has no price")
    energy_mwh: float | None = Field(description="Facility energy (GPUs, node overhead, PUE), MWh")
    pareto: bool = Field(False, description="On the days-vs-cost Pareto front")
    checkpoint_interval_steps: int | None = Field(None, description="The interval in optimizer steps (Megatron --save-interval)")
    checkpoint_write_seconds: float | None = Field(None, description="Time to write one checkpoint (weights + optimizer states)")
    mtbf_hours: float | None = Field(None, description="Mean time between failures of the whole job, hours")
    checkpoint_tax: float | None = Field(None, description="Share of wall time writing checkpoints and redoing lost work")
    checkpoint_periodic: bool = Field(True, description="Whether the run writes periodic checkpoints (a short run is cheaper without: goodput)")
    restart_share: float | None = Field(None, description="Share of wall time restarting after failures")
    tokens_per_second: float | None = Field(None, description="Training tokens per second at global_batch_tokens")
    memory_bytes_per_gpu: float | None = Field(None, description="Peak HBM per GPU of the plan (its fullest pipeline stage), bytes")
    memory_capacity_bytes: float | None = Field(None, description="HBM per GPU the plan may fill: the GPU's HBM less the memory headroom, bytes")
    train_days: float | None = Field(None, description="Days of training steps alone (ramp-up included, no failures)")
    bottleneck: str | None = Field(None, description="Largest time category of the step")
    bubble_share: float | None = Field(None, description="Pipeline bubble / step time")
    comm_share: float | None = Field(None, description="Exposed communication / step time")
    busy_share: float | None = Field(None, description="Share of the step the GPUs compute (board power)")
    scaling_efficiency: float | None = Field(None, description="Tokens/s per GPU relative to the smallest GPU count searched at this batch")
    compute_bound_batch_tokens: float | None = Field(None, description="N x C / W: the batch at which DP over N GPUs is compute-bound (seed 001)")
    learning_rate: float | None = Field(None, description="LR scaled from the reference (lr0, batch0) to global_batch_tokens")
    note: str | None = Field(None, description="Why the point has no plan, or what limits it")


@dataclass(frozen=True)
class FleetInputs:
    """What prices a point beyond its step: reliability, storage, power, money (cluster fields,
    overridable from the command line)."""

    mtbf_hours_per_gpu: float
    checkpoint_write_seconds: float | None  # None: from checkpoint size and storage bandwidth
    restart_seconds: float
    ramp: tuple[tuple[int, float], ...] = ()  # (batch tokens, train at it until this many tokens)


@dataclass(frozen=True)
class PointContext:
    model: ModelSpec
    cluster: ClusterSpec  # resized to the point's GPU count
    training: TrainingSpec  # at the point's final batch
    params: CostParams
    tokens: float
    fleet: FleetInputs


def write_seconds(ctx: PointContext) -> float:
    """Checkpoint write time: the override, or weights + optimizer states over the storage."""
    if ctx.fleet.checkpoint_write_seconds is not None:
        return ctx.fleet.checkpoint_write_seconds
    seconds = cluster_checkpoint_write_seconds(total_params(ctx.model), ctx.training, ctx.cluster)
    if seconds is None:
        raise InputError("cluster.storage_write_gb_per_s_per_node", None,
                         f"cluster {ctx.cluster.name} has no storage bandwidth; set it in the cluster file or give --checkpoint-write-seconds")
    return seconds


def reliability(ctx: PointContext, checkpoint_seconds: float, train_seconds: float | None = None) -> Goodput:
    return goodput(checkpoint_seconds, cluster_job_mtbf_seconds(ctx.cluster, ctx.fleet.mtbf_hours_per_gpu), ctx.fleet.restart_seconds,
                   train_seconds=train_seconds)


def _phases(ctx: PointContext):
    """(batch tokens, tokens trained at it) of each ramp-up phase, then the final batch."""
    done = 0.0
    for batch_tokens, until in ctx.fleet.ramp:
        phase = min(until, ctx.tokens) - done
        if phase > 0:
            yield batch_tokens, phase
            done += phase
    yield ctx.training.tokens_per_step, ctx.tokens - done


def ramp_train_seconds(ctx: PointContext, plan: Plan, final: Estimate) -> float | None:
    """Seconds of training steps over all tokens: each ramp-up phase at its batch with the same
    layout (Megatron --rampup-batch-size changes the micro-batch count, not the layout), then the
    rest at the final batch. None when the layout cannot run a ramp batch."""
    seconds = 0.0
    for batch_tokens, phase in _phases(ctx):
        if batch_tokens == ctx.training.tokens_per_step:
            seconds += phase / final.tokens_per_second
            continue
        training = ctx.training.model_copy(update={"global_batch_size": batch_tokens // ctx.training.seq_len})
        try:
            est = cost_estimate(ctx.model, ctx.cluster, training, plan, ctx.params)
        except InputError:
            return None
        if not est.feasible:
            return None
        seconds += phase / est.tokens_per_second
    return seconds


def price_point(ctx: PointContext, ranked: list[tuple[Plan, Estimate]],
                ramp_best: dict[int, Estimate] | None = None) -> PlanPoint:
    """The first ranked layout that also runs every ramp-up batch, priced over the whole run.
    Failing that, with `ramp_best` (each ramp batch's own best layout at this GPU count), each
    phase runs at its own layout: a re-shard at a checkpoint between phases, as Llama 3 changed
    its parallelism between batch phases."""
    base = PlanPoint(gpus=ctx.cluster.num_gpus, global_batch_tokens=ctx.training.tokens_per_step, plan=None, step_seconds=None,
                     mfu=None, goodput=None, checkpoint_interval_seconds=None, wall_days=None, gpu_hours=None, cost_usd=None,
                     energy_mwh=None)
    for plan, est in ranked:
        train = ramp_train_seconds(ctx, plan, est)
        if train is not None:
            return _priced(ctx, base, est, train)
    if ramp_best is not None and all(b in ramp_best for b, _ in ctx.fleet.ramp):
        final = ranked[0][1]
        best = {**ramp_best, ctx.training.tokens_per_step: final}
        train = sum(phase / best[b].tokens_per_second for b, phase in _phases(ctx))
        point = _priced(ctx, base, final, train)
        point.note = "ramp-up phases at their own layouts: " + "; ".join(
            f"{human_count(b, binary=True)}: {ramp_best[b].plan}" for b, _ in ctx.fleet.ramp)
        return point
    base.note = f"none of the top {len(ranked)} layouts runs every ramp-up batch, and no layout fits one of them"
    return base


def _priced(ctx: PointContext, point: PlanPoint, est: Estimate, train_seconds: float) -> PlanPoint:
    point.checkpoint_write_seconds = write_seconds(ctx)
    shares = reliability(ctx, point.checkpoint_write_seconds, train_seconds)
    step = est.step_seconds
    point.plan, point.step_seconds, point.mfu, point.tokens_per_second = est.plan, step, est.mfu, est.tokens_per_second
    point.memory_bytes_per_gpu, point.memory_capacity_bytes = est.memory_bytes_per_gpu, est.memory_capacity_bytes
    point.bottleneck = est.bottleneck.value
    point.bubble_share = est.time_breakdown.get("pipeline_bubble", 0.0) / step
    point.comm_share = sum(est.time_breakdown.get(k, 0.0) for k in COMM_PARTS) / step
    point.busy_share = busy_fraction(est.time_breakdown)
    point.checkpoint_interval_seconds = shares.interval_seconds
    point.checkpoint_interval_steps = max(1, round(shares.interval_seconds / step))
    point.mtbf_hours = shares.mtbf_seconds / HOUR_SECONDS
    point.checkpoint_tax, point.restart_share = shares.checkpoint_tax, shares.restart_share
    point.checkpoint_periodic = shares.periodic
    point.train_days = train_seconds / DAY_SECONDS
    if shares.goodput <= 0:
        point.note = (f"failures every {point.mtbf_hours:.2f} h leave no useful time (checkpoint tax {100 * shares.checkpoint_tax:.0f}%, "
                      f"restarts {100 * shares.restart_share:.0f}%)")
        return point
    point.goodput = shares.goodput
    wall = train_seconds / shares.goodput
    point.wall_days = wall / DAY_SECONDS
    point.gpu_hours = ctx.cluster.num_gpus * wall / HOUR_SECONDS
    price = ctx.cluster.price_usd_per_gpu_hour
    point.cost_usd = point.gpu_hours * price if price is not None else None
    power = power_model(ctx.cluster, point.busy_share)
    point.energy_mwh = run_energy_joules(power, wall, shares) / JOULES_PER_MWH if power is not None else None
    return point


def power_model(cluster: ClusterSpec, busy: float) -> PowerModel | None:
    gpu = cluster.gpu
    if gpu.tdp_watts is None:
        return None
    stalled = gpu.idle_watts if gpu.idle_watts is not None else gpu.tdp_watts
    return PowerModel(num_gpus=cluster.num_gpus, num_nodes=cluster.num_nodes,
                      gpu_step_watts=step_power_watts(gpu.tdp_watts, gpu.idle_watts, busy), gpu_stalled_watts=stalled,
                      node_overhead_watts=cluster.node_overhead_watts or 0.0, pue=cluster.pue)
