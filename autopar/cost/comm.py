"""Collectives placed on the cluster (seed 001 'Как работают коллективные операции на GPU',
'Коллективные операции внутри узла', 'Коллективные операции между узлами').

A group's ranks follow the rank order: a dimension's stride is the product of the degrees
before it. A group whose span fits in a node runs on NVLink (or PCIe); otherwise its
members sit on `nodes` nodes with `per_node` members each and the network part runs at the
members' share of the node's NICs (per_node x NIC per GPU, capped by NVLink).
Times (W = achieved bus bandwidth, n ranks):
  AllGather / ReduceScatter: bytes (n-1)/n / W;  AllReduce: twice that (SHARP: x sharp_speedup);
  AllToAll: off-node share bytes (n - per_node)/n over the NIC, on-node share over NVLink;
  P2P: bytes / W.  Latency: alpha per ring step (n - 1 steps, 2(n - 1) for AllReduce).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from autopar.specs.costparams import CostParams
from autopar.specs.hardware import GB, US, ClusterSpec, LinkKind


class Collective(str, Enum):
    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"
    all_to_all = "alltoall"
    send_recv = "sendrecv"


@dataclass(frozen=True)
class Group:
    """Placement of one communication group: size, members per node, nodes spanned."""

    size: int
    per_node: int
    nodes: int

    @property
    def tier(self) -> str:
        return "intra_node" if self.nodes <= 1 else "network"


def place_group(size, stride, gpus_per_node: int) -> Group:
    """Where a group of `size` ranks spaced `stride` apart lands (aligned placement).
    Works on integers or numpy arrays of sizes and strides (the search places many at once)."""
    size, stride = np.asarray(size), np.asarray(stride)
    inside = stride * size <= gpus_per_node
    per_node = np.where(inside, size, np.minimum(np.maximum(1, gpus_per_node // stride), size))
    per_node = np.where(size <= 1, 1, per_node)
    nodes = -(-np.maximum(size, 1) // per_node)
    if size.ndim == 0:
        return Group(int(max(size, 1)), int(per_node), int(nodes))
    return Group(np.maximum(size, 1), per_node, nodes)


def _achieved(peak_bytes_per_second: float, efficiency: float, message_bytes: float, half_bytes: float) -> float:
    """Bus bandwidth achieved at a message size: saturating in size (half at half_bytes)."""
    return peak_bytes_per_second * efficiency * message_bytes / (message_bytes + half_bytes)


def intra_bandwidth(cluster: ClusterSpec, message_bytes: float, params: CostParams, p2p: bool = False) -> float:
    link = cluster.intra_node
    eff = params.comm.nvlink_efficiency if link.kind == LinkKind.nvlink else params.comm.pcie_efficiency
    half = params.comm.p2p_half_bandwidth_bytes if p2p else params.comm.half_bandwidth_bytes
    return _achieved(link.bandwidth_gb_per_s * GB, eff, message_bytes, half)


def network_bandwidth(cluster: ClusterSpec, group: Group, message_bytes: float, params: CostParams, p2p: bool = False) -> float:
    """Bus bandwidth of a multi-node group: its members' NICs, capped by the node's links."""
    half = params.comm.p2p_half_bandwidth_bytes if p2p else params.comm.half_bandwidth_bytes
    nic = _achieved(cluster.nic_bytes_per_second_per_gpu * group.per_node, params.comm.network_efficiency, message_bytes, half)
    oversub = max([t.oversubscription for t in _tiers_spanned(cluster, group.nodes)] or [1.0])
    return min(nic / oversub, intra_bandwidth(cluster, message_bytes, params, p2p) if group.per_node > 1 else nic / oversub)


def _tiers_spanned(cluster: ClusterSpec, nodes: int):
    out = []
    for tier in cluster.tiers:
        out.append(tier)
        if nodes <= tier.num_nodes:
            break
    return out


def step_latency_seconds(cluster: ClusterSpec, group: Group) -> float:
    if group.nodes <= 1:
        return cluster.intra_node.latency_us * US
    tiers = _tiers_spanned(cluster, group.nodes)
    return (tiers[-1].latency_us if tiers else cluster.intra_node.latency_us) * US


def collective_seconds(op: Collective, message_bytes: float, group: Group, cluster: ClusterSpec, params: CostParams,
                       sharp: bool | None = None) -> float:
    """Time of one collective; message_bytes is the full buffer per rank (nccl-tests 'size')."""
    n = group.size
    if n <= 1 or message_bytes <= 0:
        return 0.0
    calibrated = _calibrated_seconds(op, message_bytes, group, cluster, params, sharp)
    if calibrated is not None:
        return calibrated
    alpha = step_latency_seconds(cluster, group)
    if op == Collective.send_recv:
        bw = intra_bandwidth(cluster, message_bytes, params, p2p=True) if group.nodes <= 1 else network_bandwidth(cluster, Group(2, 1, 2), message_bytes, params, p2p=True)
        return alpha + message_bytes / bw
    if op == Collective.all_to_all:
        off_node = message_bytes * (n - group.per_node) / n
        on_node = message_bytes * (group.per_node - 1) / n
        # each pair exchanges message_bytes / n: saturation follows the p2p curve
        t_on = on_node / intra_bandwidth(cluster, message_bytes / n, params, p2p=True) if on_node else 0.0
        t_off = off_node / _achieved(cluster.nic_bytes_per_second_per_gpu, params.comm.network_efficiency, message_bytes / n, params.comm.p2p_half_bandwidth_bytes) if off_node else 0.0
        # pairwise sends are issued together: latency grows with log2(n), not n
        return alpha * math.log2(n) + max(t_on, t_off)
    bw = intra_bandwidth(cluster, message_bytes, params) if group.nodes <= 1 else network_bandwidth(cluster, group, message_bytes, params)
    factor = (n - 1) / n
    steps = n - 1
    if op == Collective.all_reduce:
        use_sharp = (cluster.intra_node.sharp if group.nodes <= 1 else cluster.sharp) if sharp is None else sharp
        bw = bw * (params.comm.sharp_speedup if use_sharp else 1.0)
        factor *= 2
        steps *= 2
    return alpha * steps + message_bytes * factor / bw


def latency_steps(op: Collective, n: int) -> float:
    """Latency steps of a collective over n ranks: ring n - 1 (AllReduce = ReduceScatter +
    AllGather, 2(n - 1)); AllToAll log2 n (pairwise sends issued together); P2P 1."""
    if op == Collective.all_reduce:
        return 2.0 * (n - 1)
    if op in (Collective.all_gather, Collective.reduce_scatter):
        return float(n - 1)
    if op == Collective.all_to_all:
        return math.log2(n)
    return 1.0


def _calibrated_seconds(op: Collective, message_bytes: float, group: Group, cluster: ClusterSpec, params: CostParams,
                        sharp: bool | None) -> float | None:
    """Time from a calibration profile's fitted curve (calibration/nccl_fit.py), or None when
    the profile has no curve for this collective and tier:
    t = alpha x steps + S f / B (1 + (half / S)^exponent). Network tier: B is the measured
    busbw scaled by the group's members per node (the node's NIC share, seed 001 'Коллективные
    операции между узлами'), over the fabric's oversubscription; alpha x steps grows with n."""
    cal = params.collectives
    if cal is None:
        return None
    network = group.nodes > 1
    tier = cal.network if network else cal.intra_node
    n = group.size
    gain = 1.0
    if op == Collective.all_reduce:
        use_sharp = (cluster.sharp if network else cluster.intra_node.sharp) if sharp is None else sharp
        # NVLS needs 5+ GPUs (8x H200 sweep, calibration-samples/nccl/nonstandard/h200_b200_nvls_vs_ring_tables_stas00.md)
        use_sharp = use_sharp and (network or n >= cal.nvls_min_ranks)
        speedup = cal.sharp_speedup or params.comm.sharp_speedup
        curve = tier.get("all_reduce_sharp" if use_sharp else "all_reduce") or tier.get("all_reduce" if use_sharp else "all_reduce_sharp")
        if curve is not None and curve.sharp != use_sharp:
            gain = speedup if use_sharp else 1.0 / speedup
    else:
        curve = tier.get(op.value)
    if curve is None:
        return None
    busbw = curve.busbw_gb_per_s * GB * gain
    if network and op != Collective.send_recv:
        oversub = max([t.oversubscription for t in _tiers_spanned(cluster, group.nodes)] or [1.0])
        busbw *= group.per_node / curve.gpus_per_node / oversub
    alpha = curve.latency_us_per_step * US if curve.latency_us_per_step is not None else step_latency_seconds(cluster, group)
    saturation = 1.0 + (curve.half_bandwidth_bytes / message_bytes) ** curve.exponent
    return alpha * latency_steps(op, n) + message_bytes * busbw_factor(op, n) / busbw * saturation


def busbw_factor(op: Collective, n: int) -> float:
    """nccl-tests bus-bandwidth factor (busbw = algbw x factor)."""
    if op == Collective.all_reduce:
        return 2 * (n - 1) / n
    if op in (Collective.all_gather, Collective.reduce_scatter, Collective.all_to_all):
        return (n - 1) / n
    return 1.0
