"""Fleet-level time and energy of a whole training run, as pure functions: failure rate of a
job, checkpoint size and write time, goodput (useful share of wall time) and energy.

Seed 000 'Заблуждения и ловушки' (Young-Daly checkpointing; the goodput trap 'MFU x scaling
efficiency'), 'Перспектива: энергетический налог масштаба'. Legend: tau = checkpoint
interval, M = mean time between failures of the whole job, R = restart time, T_w = write time."""

from __future__ import annotations

from dataclasses import dataclass

from autopar.cost.roofline import checkpoint_tax, optimal_checkpoint_interval_seconds
from autopar.specs.hardware import GB

HOUR_SECONDS = 3600.0
JOULES_PER_MWH = 3.6e9

# Estimate.time_breakdown keys during which the GPU computes (at board power); every other key
# (exposed TP/CP/EP/PP/DP/FSDP communication, pipeline bubble, fixed step overhead) waits
BUSY_TIME_KEYS = ("compute_gemm", "compute_attention", "compute_elementwise", "recompute", "optimizer_step")


def job_mtbf_seconds(num_gpus: int, mtbf_hours_per_gpu: float, num_nodes: int = 0, mtbf_hours_per_node: float | None = None,
                     num_switches: float = 0.0, mtbf_hours_per_switch: float | None = None) -> float:
    """Independent failures add their rates: 1 / M = N_gpu / M_gpu + N_node / M_node + N_sw / M_sw
    (seed 000: MTBF_system = MTBF_GPU / N, extended to the node and switch parts a cluster file names)."""
    rate = num_gpus / (mtbf_hours_per_gpu * HOUR_SECONDS)
    if mtbf_hours_per_node is not None:
        rate += num_nodes / (mtbf_hours_per_node * HOUR_SECONDS)
    if mtbf_hours_per_switch is not None:
        rate += num_switches / (mtbf_hours_per_switch * HOUR_SECONDS)
    return 1.0 / rate


def checkpoint_bytes(num_params: float, weight_bytes_per_param: float, optimizer_bytes_per_param: float) -> float:
    """What a restart needs: weights and optimizer states (Adam: fp32 master + 2 moments = 12 B);
    gradients are recomputed and not saved. 405B x (2 + 12) B = 5.7 TB."""
    return num_params * (weight_bytes_per_param + optimizer_bytes_per_param)


def checkpoint_write_seconds(size_bytes: float, num_nodes: int, write_bytes_per_second_per_node: float,
                             aggregate_write_bytes_per_second: float | None = None) -> float:
    """Every node writes its shard in parallel; the shared storage caps the sum."""
    bandwidth = num_nodes * write_bytes_per_second_per_node
    if aggregate_write_bytes_per_second is not None:
        bandwidth = min(bandwidth, aggregate_write_bytes_per_second)
    return size_bytes / bandwidth


def cluster_job_mtbf_seconds(cluster, mtbf_hours_per_gpu: float | None = None) -> float:
    """job_mtbf_seconds of every GPU, node and switch the cluster file names (its MTBF fields)."""
    return job_mtbf_seconds(cluster.num_gpus, mtbf_hours_per_gpu if mtbf_hours_per_gpu is not None else cluster.mtbf_hours_per_gpu,
                            cluster.num_nodes, cluster.mtbf_hours_per_node, cluster.num_nodes * cluster.switches_per_node,
                            cluster.mtbf_hours_per_switch)


def cluster_checkpoint_write_seconds(num_params: float, training, cluster) -> float | None:
    """Weights + optimizer states over the cluster's storage bandwidth; None when the cluster
    file gives no storage bandwidth."""
    if cluster.storage_write_gb_per_s_per_node is None:
        return None
    size = checkpoint_bytes(num_params, training.weight_bytes_per_param, training.optimizer_bytes_per_param)
    aggregate = cluster.storage_write_gb_per_s * GB if cluster.storage_write_gb_per_s is not None else None
    return checkpoint_write_seconds(size, cluster.num_nodes, cluster.storage_write_gb_per_s_per_node * GB, aggregate)


def checkpoint_interval_steps(num_params: float, training, cluster, step_seconds: float) -> int | None:
    """Young-Daly interval in optimizer steps (Megatron --save-interval, torchtitan
    checkpoint.interval); None when the cluster file gives no storage bandwidth."""
    write = cluster_checkpoint_write_seconds(num_params, training, cluster)
    if write is None or not step_seconds > 0:
        return None
    tau = optimal_checkpoint_interval_seconds(write, cluster_job_mtbf_seconds(cluster))
    return max(1, round(tau / step_seconds))


@dataclass(frozen=True)
class Goodput:
    """Where the wall time of a run goes, as shares that sum to 1 (first order in tau / M)."""

    interval_seconds: float  # Young's tau between checkpoints, in training time
    checkpoint_write_share: float  # T_w / tau
    rework_share: float  # tau / (2 M): the half interval redone after each failure
    restart_share: float  # R / M
    mtbf_seconds: float
    periodic: bool = True  # False: the run is short enough that no periodic checkpoint is cheaper (goodput)

    @property
    def checkpoint_tax(self) -> float:
        """The seed's 'налог на контрольные точки и повторную работу' (5.8% at 1,024 GPUs)."""
        return self.checkpoint_write_share + self.rework_share

    @property
    def goodput(self) -> float:
        """Useful training time / wall time."""
        return 1.0 - self.checkpoint_tax - self.restart_share


def goodput(checkpoint_write_seconds: float, mtbf_seconds: float, restart_seconds: float,
            interval_seconds: float | None = None, train_seconds: float | None = None) -> Goodput:
    """Young-Daly interval (unless given) and the shares of wall time it leaves to training;
    `train_seconds` (the run's training time) when known, for runs shorter than one interval."""
    tau = interval_seconds if interval_seconds is not None else optimal_checkpoint_interval_seconds(checkpoint_write_seconds, mtbf_seconds)
    write = checkpoint_write_seconds / tau
    rework = checkpoint_tax(tau, checkpoint_write_seconds, mtbf_seconds) - write
    if train_seconds is not None and train_seconds / (2 * mtbf_seconds) < write + rework:
        # T_w / tau + tau / (2 M) prices a checkpoint every tau of a run many intervals long. A run
        # of T training seconds may instead write no periodic checkpoint (at most the final save,
        # which every run writes and which T_w / tau does not charge a long run either): a failure
        # sends it back to its start, losing on average half the run, T / (2 M) at first order.
        # The cheaper policy is the run's: none while T / (2 M) is below the periodic tax (up to
        # T = 2 tau at the Young-Daly interval), so the tax is continuous in the run's length.
        return Goodput(tau, 0.0, train_seconds / (2 * mtbf_seconds), restart_seconds / mtbf_seconds, mtbf_seconds, periodic=False)
    return Goodput(tau, write, rework, restart_seconds / mtbf_seconds, mtbf_seconds)


def useful_peak_fraction(mfu: float, scaling_efficiency: float) -> float:
    """MFU and scaling efficiency multiply (seed 000 'Ловушка: оптимизировать MFU, не учитывая
    эффективность масштабирования': 0.50 x 0.50 = 0.25 of peak, 256 of 1,024 GPU-equivalents)."""
    return mfu * scaling_efficiency


def busy_fraction(time_breakdown: dict[str, float]) -> float:
    """Share of a step the GPU computes; the rest it waits on communication or the bubble."""
    total = sum(time_breakdown.values())
    return sum(time_breakdown.get(k, 0.0) for k in BUSY_TIME_KEYS) / total if total > 0 else 1.0


def step_power_watts(tdp_watts: float, idle_watts: float | None, busy: float) -> float:
    """Average board power over a step: board power while computing, idle power while waiting
    (unknown idle power counts waiting at board power: an upper bound)."""
    wait = tdp_watts if idle_watts is None else idle_watts
    return busy * tdp_watts + (1.0 - busy) * wait


@dataclass(frozen=True)
class PowerModel:
    """Power of a job: its GPUs (per step and while stalled), its nodes' other parts, the facility."""

    num_gpus: int
    num_nodes: int
    gpu_step_watts: float
    gpu_stalled_watts: float  # checkpoint writes and restarts: GPUs wait
    node_overhead_watts: float
    pue: float


def run_energy_joules(power: PowerModel, wall_seconds: float, shares: Goodput) -> float:
    """Facility energy of a run: steps (useful and redone) at step power, checkpoint writes and
    restarts at stalled power, the nodes' other parts all the time, everything times PUE."""
    computing = wall_seconds * (shares.goodput + shares.rework_share)
    stalled = wall_seconds * (shares.checkpoint_write_share + shares.restart_share)
    gpus = power.num_gpus * (power.gpu_step_watts * computing + power.gpu_stalled_watts * stalled)
    nodes = power.num_nodes * power.node_overhead_watts * wall_seconds
    return (gpus + nodes) * power.pue
