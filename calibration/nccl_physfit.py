"""Fit the physical parameters of the collective model (autopar/cost/nccl.py) to nccl-tests logs.

Every printed size of every log is predicted by the same function the cost model runs
(autopar.cost.comm.collective_choice), on the log's communicator shape (ranks, ranks per node,
nodes) and with the algorithm / protocol the log forced (NCCL_ALGO / NCCL_PROTO), if any; the
parameters below minimise the robust (Cauchy) misfit of log time. A row's time is the faster
of its out-of-place and in-place columns: a stall (first touch, a competing job) only ever
lengthens a time (e.g. nccl-tests#309's 8-node 8 MiB out-of-place 1272 us vs 321 us in-place).

A parameter is fitted only when the logs are sensitive to it (at least MIN_SENSITIVE printed
sizes move by SENSITIVITY x the relative change of the parameter); otherwise it keeps the
default and the profile says why (`not_identified`), e.g. a 2-node NVLS-tree run is bound by
NVLS, not by the NICs, so it cannot tell the network efficiency.

Logs of one node and of several are fitted in two stages: the one-node logs alone first (NVLink
and NVLS rates, latencies, saturation), then all logs with those parameters held. A multi-node
run tells the sum of its NVLink and network costs, not the split; fitted in one stage, the node's
mid-size ring was traded for network latencies and the ring logs were left as outliers (3.3x).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from autopar.cost.comm import NVLS_MODEL_CHANGE, Collective, collective_choice, place_group, version_tuple
from autopar.errors import InputError
from autopar.specs.costparams import CommCalibration, CostParams
from autopar.specs.hardware import ClusterSpec
from calibration.nccl_log import NcclLog

MIB = 1 << 20
SENSITIVITY = 0.05     # d log t / d log parameter that counts as "this size measures it"
MIN_SENSITIVE = 3      # sizes that must measure a parameter before it is fitted
ROBUST_SCALE = 0.05    # Cauchy scale on log time: outlying sizes (another protocol, a stall) count less
NCCL_OPS = (Collective.all_reduce, Collective.all_gather, Collective.reduce_scatter)
# all_to_all runs as pairwise sends that NCCL's tuning model does not choose for; its logs measure the
# point-to-point rate and saturation (one-node logs inside the node, multi-node logs across it). send_recv logs are not fitted:
# one pair's rate depends on what the model does not take (a100x8_sendrecv inside a node: 196 of 240 GB/s; xxrjun
# cluster01 across nodes: 40-46 GB/s for a 2-node pair, 15-26 for one pair per node boundary of a 10-node ring)
FITTED_OPS = NCCL_OPS + (Collective.all_to_all,)

# name -> (bounds relative to the default (absolute for exponents); prior width: the fit pays one
# ROBUST_SCALE residual per this many log units (units) away from the default -- NCCL's constants
# and the profile's efficiencies are a weak prior that settles what the logs leave degenerate
# (e.g. 2-node runs tell the sum of NVLink and network latencies, not the split); why not identified)
PARAMETERS = {
    "intra_busbw_gb_per_s": ((0.3, 2.0), np.log(1.3), "no large-message ring (Simple) run inside one node: intra-node bandwidth from the cluster's link rate x nvlink_efficiency"),
    "nvls_speedup": ((0.77, 1.6), np.log(1.2), "no NVLS-bound run (one-node AllReduce with NVLS, or 2-node NVLS-tree): NVLS gain from the default profile"),
    "network_efficiency": ((0.3, 1.11), np.log(1.15), "no multi-node run bound by the NICs (a NCCL_ALGO=Ring log, or more than 2 nodes): network efficiency from the default profile"),
    "intra_latency_scale": ((0.2, 5.0), np.log(2.0), "no small-message (LL/LL128) run inside one node: NCCL's NVLink/PCIe LL and LL128 latencies"),
    "net_latency_scale": ((0.2, 5.0), np.log(2.0), "no small-message (LL/LL128) multi-node run: NCCL's network LL and LL128 latencies"),
    "intra_simple_latency_scale": ((0.2, 5.0), np.log(2.0), "no mid-size Simple run inside one node: NCCL's NVLink/PCIe Simple latencies"),
    "net_simple_latency_scale": ((0.2, 5.0), np.log(2.0), "no mid-size Simple multi-node run: NCCL's network Simple latencies"),
    "ring_half_bandwidth_bytes": ((0.01, 100.0), np.log(4.0), "no mid-size ring/tree Simple data: ring saturation from the default profile (seed 001 58 MB point)"),
    "ring_saturation_exponent": ((0.3, 1.5), 0.3, "no mid-size ring/tree Simple data over a wide size range: ring saturation exponent from the default profile"),
    "switch_half_bandwidth_bytes": ((0.01, 100.0), np.log(4.0), "no mid-size NVLS / NVLS-tree data: in-switch saturation from the default profile"),
    "switch_saturation_exponent": ((0.3, 1.5), 0.3, "no mid-size NVLS / NVLS-tree data over a wide size range: in-switch saturation exponent from the default profile"),
    "intra_p2p_busbw_gb_per_s": ((0.3, 2.0), np.log(1.3), "no large-message one-node all_to_all log: point-to-point bandwidth inside a node from the cluster's link rate x nvlink_efficiency"),
    "intra_p2p_half_bandwidth_bytes": ((0.01, 100.0), np.log(4.0), "no mid-size one-node all_to_all log: point-to-point saturation inside a node from the default profile"),
    "net_p2p_half_bandwidth_bytes": ((0.01, 100.0), np.log(4.0), "no mid-size multi-node all_to_all log: point-to-point saturation across nodes from the default profile"),
}
_ABSOLUTE = ("ring_saturation_exponent", "switch_saturation_exponent")
_BANDWIDTHS = ("intra_busbw_gb_per_s", "nvls_speedup", "network_efficiency", "intra_p2p_busbw_gb_per_s")
BANDWIDTH_BOUND_BYTES = 512 * MIB


@dataclass(frozen=True)
class Run:
    """One log with the cluster it ran on and what it forced."""

    log: NcclLog
    cluster: ClusterSpec
    algorithm: str | None = None
    protocol: str | None = None

    @property
    def label(self) -> str:
        forced = "/".join(x for x in (self.algorithm, self.protocol) if x)
        return f"{self.log.path}@{forced}" if forced else self.log.path


@dataclass(frozen=True)
class Point:
    run: Run
    size_bytes: float
    seconds: float


def points(runs: list[Run], ops=FITTED_OPS) -> list[Point]:
    """The faster printed time of every size of every log of `ops` (by default the fitted ones:
    NCCL-tuned collectives and all_to_all)."""
    out = []
    for run in runs:
        if run.log.collective not in ops:
            continue
        for row in run.log.rows:
            out.append(Point(run, float(row.size_bytes), min(row.times_us) * 1e-6))
    return out


def defaults(params: CostParams, cluster: ClusterSpec) -> dict[str, float]:
    c, link = params.comm, cluster.intra_node
    eff = c.nvlink_efficiency if link.kind.value == "nvlink" else c.pcie_efficiency
    return {"intra_busbw_gb_per_s": link.bandwidth_gb_per_s * eff, "nvls_speedup": c.sharp_speedup,
            "network_efficiency": c.network_efficiency,
            "intra_latency_scale": 1.0, "net_latency_scale": 1.0, "intra_simple_latency_scale": 1.0,
            "net_simple_latency_scale": 1.0,
            "ring_half_bandwidth_bytes": c.half_bandwidth_bytes, "ring_saturation_exponent": c.saturation_exponent,
            "switch_half_bandwidth_bytes": c.switch_half_bandwidth_bytes, "switch_saturation_exponent": c.switch_saturation_exponent,
            "intra_p2p_busbw_gb_per_s": link.bandwidth_gb_per_s * eff, "intra_p2p_half_bandwidth_bytes": c.p2p_half_bandwidth_bytes,
            "net_p2p_half_bandwidth_bytes": c.net_p2p_half_bandwidth_bytes}


def with_values(params: CostParams, values: dict[str, float]) -> CostParams:
    return params.model_copy(update={"collectives": CommCalibration(**values)})


def predict(point: Point, params: CostParams) -> float:
    log = point.run.log
    group = place_group(log.num_ranks, 1, log.ranks_per_node)
    return collective_choice(log.collective, point.size_bytes, group, point.run.cluster, params,
                             point.run.algorithm, point.run.protocol).seconds


def _log_times(pts: list[Point], params: CostParams) -> np.ndarray:
    return np.log([predict(p, params) for p in pts])


def sensitivities(pts: list[Point], params: CostParams, values: dict[str, float], names) -> dict[str, int]:
    """How many sizes each parameter moves by >= SENSITIVITY (d log t / d log theta, 10% step).
    A link bandwidth counts only sizes of BANDWIDTH_BOUND_BYTES and more, where it sets the rate:
    below, it also sets the pipeline fill (nccl_pipeline.py), which a latency can trade for."""
    base = _log_times(pts, with_values(params, values))
    large = np.array([p.size_bytes >= BANDWIDTH_BOUND_BYTES for p in pts])
    out = {}
    for name in names:
        step = 0.1 if name in _ABSOLUTE else np.log(1.1)
        moved = dict(values)  # a step down keeps efficiencies within (0, 1]
        moved[name] = values[name] - step if name in _ABSOLUTE else values[name] / np.exp(step)
        delta = np.abs(_log_times(pts, with_values(params, moved)) - base) / step
        counted = delta >= SENSITIVITY
        out[name] = int(np.sum(counted & large if name in _BANDWIDTHS else counted))
    return out


def _solve(pts: list[Point], params: CostParams, anchor: dict[str, float], start: dict[str, float],
           free: list[str]) -> dict[str, float]:
    """Least squares over the free parameters; bounds relative to the defaults (anchor)."""
    measured = np.log([p.seconds for p in pts])

    def unpack(x):
        values = dict(start)
        for name, v in zip(free, x):
            values[name] = float(v) if name in _ABSOLUTE else float(anchor[name] * np.exp(v))
        return values

    prior_center = np.array([anchor[n] if n in _ABSOLUTE else 0.0 for n in free])
    prior_width = np.array([PARAMETERS[n][1] for n in free])

    def residual(x):
        prior = ROBUST_SCALE * (np.asarray(x) - prior_center) / prior_width
        return np.concatenate([_log_times(pts, with_values(params, unpack(x))) - measured, prior])

    lo = [PARAMETERS[n][0][0] if n in _ABSOLUTE else np.log(PARAMETERS[n][0][0]) for n in free]
    hi = [PARAMETERS[n][0][1] if n in _ABSOLUTE else np.log(PARAMETERS[n][0][1]) for n in free]
    x0 = np.clip([start[n] if n in _ABSOLUTE else np.log(start[n] / anchor[n]) for n in free], lo, hi)
    res = least_squares(residual, x0, bounds=(lo, hi), loss="cauchy", f_scale=ROBUST_SCALE, diff_step=1e-3)
    return unpack(res.x)


def logs_nccl_version(runs: list[Run]) -> str | None:
    """The NCCL release (major.minor) the logs print: the oldest when they differ but choose by
    the same tuning model; InputError when they straddle a change of it (name one: --nccl-version)."""
    printed = sorted({version_tuple(r.log.nccl_version) for r in runs if r.log.nccl_version and r.log.collective in NCCL_OPS})
    if not printed:
        return None
    if printed[0] < NVLS_MODEL_CHANGE <= printed[-1]:
        names = ", ".join(f"{a}.{b}" for a, b in printed)
        raise InputError("nccl_version", names, "the logs ran NCCL releases that choose algorithms differently (before and "
                         "from 2.28): fit them separately or name the release with --nccl-version")
    return "{}.{}".format(*printed[0])


def with_nccl_version(params: CostParams, version: str | None) -> CostParams:
    """Cost parameters whose NCCL choices follow the tuning model of that release."""
    if version is None:
        return params
    nccl = params.comm.nccl.model_copy(update={"version": version})
    return params.model_copy(update={"comm": params.comm.model_copy(update={"nccl": nccl})})


def fit(runs: list[Run], params: CostParams, nccl_version: str | None = None) -> CommCalibration:
    """Fit what the logs measure; keep (and name) what they do not. NCCL chooses algorithms by
    the model of nccl_version, else of the release the logs print, else of the default."""
    pts = points(runs)
    if not pts:
        raise ValueError("no all_reduce / all_gather / reduce_scatter log to fit")
    nccl_version = nccl_version or logs_nccl_version(runs)
    params = with_nccl_version(params, nccl_version)
    anchor = defaults(params, runs[0].cluster)
    if not runs[0].cluster.intra_node.sharp:
        anchor.pop("nvls_speedup")
    held: dict[str, float] = {}
    node_runs = [r for r in runs if r.log.num_nodes == 1]
    if node_runs and len(node_runs) < len(runs):
        # what one node measures first (its NVLink / NVLS rates, latencies, saturation), then the
        # network with those held: a 2-node run tells the sum of NVLink and network costs, not the
        # split, and fitted together the node's mid-size ring could be traded for a network rate
        held = _fit_free(points(node_runs), params, anchor, {})
    values = {**anchor, **held}
    free = _fit_free(pts, params, anchor, held)
    values.update(free)
    fitted = with_values(params, values)
    errors = [predict(p, fitted) / p.seconds - 1.0 for p in pts if p.size_bytes >= MIB]
    kept = {**held, **free}
    return CommCalibration(**kept, nccl_version=nccl_version, not_identified={n: PARAMETERS[n][2] for n in PARAMETERS if n not in kept},
                           num_observations=len(pts), median_error=statistics.median(abs(e) for e in errors) if errors else None,
                           max_error=max(abs(e) for e in errors) if errors else None, sources=sorted({r.label for r in runs}))


def _fit_free(pts: list[Point], params: CostParams, anchor: dict[str, float], held: dict[str, float]) -> dict[str, float]:
    """The parameters (other than held) that the points measure, fitted with held fixed."""
    values = {**anchor, **held}
    names = [n for n in values if n not in held]
    counts = sensitivities(pts, params, values, names)
    free = [n for n in names if counts[n] >= MIN_SENSITIVE]
    if free:
        values = _solve(pts, params, anchor, values, free)
        counts = sensitivities(pts, params, values, free)
        still = [n for n in free if counts[n] >= MIN_SENSITIVE]
        if still != free:  # a parameter the fit moved out of reach of the data: back to its default
            values = _solve(pts, params, anchor, {**values, **{n: anchor[n] for n in free if n not in still}}, still)
            free = still
    return {n: values[n] for n in free}
