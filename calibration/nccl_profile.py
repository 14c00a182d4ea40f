"""From parsed logs to the collective curves a calibration profile holds (per tier and collective).

- Tier: one node -> intra_node; several -> network (seed 001: groups inside a node run on
  NVLink, across nodes on the NICs at the members' share of the node's bandwidth).
- Algorithm: an intra-node all_reduce whose busbw exceeds the GPU's NVLink rate ran with
  NVLink SHARP (NVLS): a ring cannot move more than the link rate ("if you get over 370 GB/s on
  a single node, then you can be pretty sure that NVLS ... is working", NVIDIA/nccl-tests#309).
- Logs of the same tier, collective and algorithm are pooled into one fit; its shape (h, p)
  seeds the fits of the same tier and algorithm's pools with too few sizes (else the default
  model's shape: half_bandwidth_bytes, exponent 1).
- SHARP speedup = NVLS all_reduce busbw over ring busbw at the largest size the ring
  measurement has (default coefficient when no ring measurement exists).
- Curves are keyed by collective (ring algorithms) plus `all_reduce_sharp` for NVLS / SHARP.
  Missing ring curves are derived: all_gather / reduce_scatter have the ring all_reduce's bus
  bandwidth (AllReduce = ReduceScatter + AllGather); from NVLS alone, busbw / speedup with the
  default shape.
"""

from __future__ import annotations

import statistics
from collections import Counter

from autopar.cost.comm import Collective, latency_steps
from autopar.errors import ProfileNotFound
from autopar.specs.costparams import CollectiveCurve, CommCalibration, LogFit
from autopar.specs.hardware import GpuSpec, load_gpu
from calibration.nccl_fit import Curve, FitResult, fit_log, fit_pool
from calibration.nccl_log import NcclLog

RING_OPS = (Collective.all_reduce, Collective.all_gather, Collective.reduce_scatter)
AR = Collective.all_reduce.value
SHARP_KEY = "all_reduce_sharp"  # in-switch reduction (NVLS / IB SHARP) all_reduce, next to the ring one


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


def _curve(fit: FitResult, logs: list[NcclLog], op: Collective, sharp: bool) -> CollectiveCurve:
    c = fit.curve
    latency_logs = [log for log in logs if min(log.sizes_bytes) <= 64 * 1024]
    per_step = None
    if "latency" in fit.fitted and latency_logs:
        n = Counter(log.num_ranks for log in latency_logs).most_common(1)[0][0]
        per_step = c.latency_seconds * 1e6 / latency_steps(op, n)
    return CollectiveCurve(
        busbw_gb_per_s=c.busbw_bytes_per_second / 1e9, half_bandwidth_bytes=c.half_bytes, exponent=c.exponent,
        latency_us_per_step=per_step, gpus_per_node=Counter(log.ranks_per_node for log in logs).most_common(1)[0][0],
        sharp=sharp, num_ranks=Counter(log.num_ranks for log in logs).most_common(1)[0][0],
        sources=[log.path for log in logs], median_error=fit.median_error(), max_error=fit.max_error())


def _as_curve(c: CollectiveCurve) -> Curve:
    return Curve(0.0, c.busbw_gb_per_s * 1e9, c.half_bandwidth_bytes, c.exponent)


def _fit_pools(pools: dict[tuple[str, str, str], list[NcclLog]],
               default_shape: tuple[float, float]) -> dict[tuple[str, str, str], CollectiveCurve]:
    """Pools with the most sizes first; a pool whose sizes cannot tell its shape (h, p) takes
    the shape of a measured pool of the same tier and algorithm, else the default model's
    (a profile changes only what its data measured: NVLink curves saturate differently from
    network ones, NVLS differently from ring)."""
    shapes: dict[tuple[str, str], Curve] = {}
    curves = {}
    for key in sorted(pools, key=lambda k: -len({s for log in pools[k] for s in log.sizes_bytes})):
        tier, op, algo = key
        logs = pools[key]
        peak = max(log.peak_busbw_gb_per_s for log in logs) * 1e9
        half, exponent = (shapes[(tier, algo)].half_bytes, shapes[(tier, algo)].exponent) if (tier, algo) in shapes else default_shape
        fit = fit_pool(logs, Curve(0.0, peak, half, exponent))
        curves[key] = _curve(fit, logs, Collective(op), sharp=algo != "ring")
        if "exponent" in fit.fitted:
            shapes.setdefault((tier, algo), fit.curve)
    return curves


def _sharp_speedup(curves: dict[tuple[str, str, str], CollectiveCurve],
                   pools: dict[tuple[str, str, str], list[NcclLog]]) -> float | None:
    """NVLS over ring all_reduce busbw on the intra-node tier (ring all_gather / reduce_scatter
    stand in when no ring all_reduce was measured), at the ring data's largest size."""
    nvls = curves.get(("intra_node", Collective.all_reduce.value, "nvls"))
    ring_keys = [("intra_node", op.value, "ring") for op in RING_OPS]
    ring_keys = [k for k in ring_keys if k in curves]
    if nvls is None or not ring_keys:
        return None
    if ring_keys[0][1] == Collective.all_reduce.value:
        ring_keys = ring_keys[:1]
    size = max(s for k in ring_keys for log in pools[k] for s in log.sizes_bytes)
    ring_busbw = statistics.fmean(_as_curve(curves[k]).busbw(size) for k in ring_keys)
    return _as_curve(nvls).busbw(size) / ring_busbw


def _fill_latency(tier: dict[str, CollectiveCurve]) -> None:
    """Per-step latency is the tier's links: curves fitted without small sizes take it from a
    curve of the same tier that measured it."""
    measured = next((c for c in tier.values() if c.latency_us_per_step is not None), None)
    if measured is None:
        return
    for op, c in tier.items():
        if c.latency_us_per_step is None:
            tier[op] = c.model_copy(update={"latency_us_per_step": measured.latency_us_per_step})


def _derive(tier: dict[str, CollectiveCurve], speedup: float, default_shape: tuple[float, float]) -> None:
    """Fill the ring all_reduce / all_gather / reduce_scatter from whichever the logs measured."""
    ring_ops = (Collective.all_gather, Collective.reduce_scatter)
    sharp = tier.get(SHARP_KEY)
    if AR not in tier and not any(op.value in tier for op in ring_ops) and sharp is not None:
        # the ring's saturation was not measured: the default shape, not NVLS's
        tier[AR] = sharp.model_copy(update={"busbw_gb_per_s": sharp.busbw_gb_per_s / speedup, "sharp": False,
                                            "half_bandwidth_bytes": default_shape[0], "exponent": default_shape[1],
                                            "derived_from": f"{SHARP_KEY} busbw / sharp_speedup {speedup:.3f}, default shape"})
    ring = next((tier[op.value] for op in ring_ops if op.value in tier), None)
    for op in ring_ops:
        if op.value not in tier and ring is not None:
            tier[op.value] = ring.model_copy(update={"derived_from": "ring bus bandwidth of the other of all_gather / reduce_scatter"})
        elif op.value not in tier and AR in tier:
            tier[op.value] = tier[AR].model_copy(update={"derived_from": "all_reduce (ring: AllReduce = ReduceScatter + AllGather, same bus bandwidth)"})
    if AR not in tier and ring is not None:
        tier[AR] = ring.model_copy(update={"derived_from": "ring bus bandwidth of all_gather / reduce_scatter"})


def build_collectives(logs: list[NcclLog], gpu_name: str | None = None, default_sharp_speedup: float = 1.3,
                      default_shape: tuple[float, float] = (8.5e7, 1.0)) -> tuple[CommCalibration, list[LogFit]]:
    """Per-log fits (reported) and the pooled, derived tier curves (used by the cost model)."""
    pools: dict[tuple[str, str, str], list[NcclLog]] = {}
    reports = []
    # a log without device lines ran on the GPU the others name (one profile = one kind of node)
    gpu_name = gpu_name or next((log.gpu_name for log in logs if log.gpu_name), None)
    for log in logs:
        algo = algorithm(log, find_gpu(log, gpu_name))
        pools.setdefault((log.tier, log.collective.value, algo), []).append(log)
        if not log.path.rsplit("#", 1)[-1].startswith("points["):
            reports.append(log_fit_report(log, algo, fit_log(log)))
    curves = _fit_pools(pools, default_shape)
    tiers: dict[str, dict[str, CollectiveCurve]] = {"intra_node": {}, "network": {}}
    for (tier, op, algo), curve in curves.items():
        tiers[tier][op if algo == "ring" else SHARP_KEY] = curve
    speedup = _sharp_speedup(curves, pools)
    for tier in tiers.values():
        _fill_latency(tier)
        _derive(tier, speedup or default_sharp_speedup, default_shape)
    return CommCalibration(intra_node=tiers["intra_node"], network=tiers["network"], sharp_speedup=speedup), reports
