"""From parsed logs to the physical parameters a calibration profile holds.

- Each log runs on a cluster (`--cluster`, else the preset of its GPU: H100 -> dgx-h100, ...)
  resized to the log's ranks; its communicator shape (ranks, ranks per node, nodes) and any
  forced algorithm / protocol (NCCL_ALGO / NCCL_PROTO, given as `LOG@ring/simple`) go to the
  fit (calibration/nccl_physfit.py), which predicts every size with the cost model's own
  function and fits the link bandwidths, latencies, NVLS / tree / SHARP gains and saturation
  that the logs measure. What no log measures keeps the default and is named.
- Each log also gets its own free curve fit (calibration/nccl_fit.py), reported per log.
- Algorithm of a log in the per-log report: an intra-node all_reduce whose busbw exceeds the
  GPU's NVLink rate ran with NVLink SHARP (NVLS) ("if you get over 370 GB/s on a single node,
  then you can be pretty sure that NVLS ... is working", NVIDIA/nccl-tests#309).
"""

from __future__ import annotations

from pathlib import Path

from autopar.cost.comm import Collective
from autopar.cost.nccl import ALGORITHMS, PROTOCOLS
from autopar.errors import InputError, Missing, ProfileNotFound
from autopar.specs import load_cluster
from autopar.specs.costparams import CommCalibration, CostParams, LogFit, load_cost_params
from autopar.specs.hardware import ClusterSpec, GpuSpec, load_gpu
from calibration.nccl_fit import FitResult, fit_log
from calibration.nccl_log import NcclLog
from calibration.nccl_physfit import Run, fit



def split_forced(spec: str) -> tuple[str, str | None, str | None]:
    """'LOG@ring/simple' -> (LOG, 'ring', 'simple'): the algorithm / protocol the run forced
    (NCCL_ALGO / NCCL_PROTO); a file whose own name has an '@' is taken whole."""
    if "@" not in spec or Path(spec).is_file():
        return spec, None, None
    path, _, forced = spec.rpartition("@")
    algo, _, proto = forced.partition("/")
    if algo and algo not in ALGORITHMS:
        raise InputError("logs", spec, f"forced algorithm must be one of {', '.join(ALGORITHMS)}")
    if proto and proto not in PROTOCOLS:
        raise InputError("logs", spec, f"forced protocol must be one of {', '.join(PROTOCOLS)}")
    return path, algo or None, proto or None


def find_gpu(log: NcclLog, fallback: str | None) -> GpuSpec | None:
    name = log.gpu_name or fallback
    if not name:
        return None
    try:
        return load_gpu(name)
    except ProfileNotFound:
        return None


def algorithm(log: NcclLog, gpu: GpuSpec | None) -> str:
    if log.algorithm:
        return log.algorithm
    if log.collective in (Collective.all_to_all, Collective.send_recv):
        return "p2p"  # pairwise sends, not NCCL-tuned (autopar.cost.comm.collective_choice)
    if (log.collective == Collective.all_reduce and log.tier == "intra_node" and gpu is not None
            and gpu.nvlink_gb_per_s and log.peak_busbw_gb_per_s > gpu.nvlink_gb_per_s):
        return "nvls"
    return "ring"


def log_fit_report(log: NcclLog, algo: str, fit: FitResult) -> LogFit:
    c = fit.curve
    return LogFit(log=log.path, collective=log.collective.value, tier=log.tier, num_ranks=log.num_ranks,
                  num_nodes=log.num_nodes, algorithm=algo, peak_busbw_gb_per_s=log.peak_busbw_gb_per_s, fitted=list(fit.fitted),
                  busbw_gb_per_s=c.busbw_bytes_per_second / 1e9, half_bandwidth_bytes=c.half_bytes, exponent=c.exponent,
                  latency_us=c.latency_seconds * 1e6 if "latency" in fit.fitted else None, num_sizes=len(log.rows),
                  median_error=fit.median_error(), max_error=fit.max_error(), warnings=list(log.warnings))


GPU_PRESET = {"H100": "dgx-h100", "H200": "dgx-h200", "H800": "hgx-h800", "A100-80GB": "dgx-a100",
              "A100-40GB": "dgx-a100-40gb", "B200": "dgx-b200", "B300": "dgx-b300"}


def cluster_for(log: NcclLog, cluster: ClusterSpec | None, gpu: GpuSpec | None) -> ClusterSpec:
    """The cluster a log ran on, resized to the log's ranks (whole nodes of its ranks per node)."""
    if cluster is None:
        preset = GPU_PRESET.get(gpu.name) if gpu is not None else None
        if preset is None:
            raise InputError("cluster", Missing(), f"{log.path}: pass --cluster (no preset for GPU {gpu.name if gpu else 'unknown'})")
        cluster = load_cluster(preset)
    per_node = log.ranks_per_node
    if per_node != cluster.gpus_per_node:
        cluster = cluster.model_copy(update={"gpus_per_node": per_node, "num_nodes": 1})
    return cluster.with_gpus(log.num_ranks) if log.num_nodes > 1 else cluster


def build_collectives(logs: list[NcclLog], forced: dict[str, tuple[str | None, str | None]] | None = None,
                      gpu_name: str | None = None, cluster: ClusterSpec | None = None,
                      params: CostParams | None = None, nccl_version: str | None = None) -> tuple[CommCalibration, list[LogFit]]:
    """Per-log fits (reported) and the fitted physical parameters (used by the cost model).
    forced: log path -> (algorithm, protocol) the run forced; nccl_version: the NCCL release the
    logs ran, when they do not print it (else theirs, else the default tuning model's)."""
    params = params or load_cost_params()
    forced = forced or {}
    reports, runs = [], []
    # a log without device lines ran on the GPU the others name (one profile = one kind of node)
    gpu_name = gpu_name or next((log.gpu_name for log in logs if log.gpu_name), None)
    for log in logs:
        gpu = find_gpu(log, gpu_name)
        algo, proto = forced.get(log.path, (None, None))
        runs.append(Run(log, cluster_for(log, cluster, gpu), algo or log.algorithm, proto))
        if not log.path.rsplit("#", 1)[-1].startswith("points["):
            reports.append(log_fit_report(log, algo or algorithm(log, gpu), fit_log(log)))
    return fit(runs, params, nccl_version), reports
