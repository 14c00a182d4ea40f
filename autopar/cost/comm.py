"""Collectives placed on the cluster (seed 001 'Как работают коллективные операции на GPU',
'Коллективные операции внутри узла', 'Коллективные операции между узлами').

A group's ranks follow the rank order: a dimension's stride is the product of the degrees
before it. A group whose span fits in a node runs on NVLink (or PCIe); otherwise its
members sit on `nodes` nodes with `per_node` members each and the network part runs at the
members' share of the node's NICs (per_node x NIC per GPU).
AllReduce / AllGather / ReduceScatter run the algorithm and protocol NCCL's tuning model
picks for that communicator shape (autopar/cost/nccl.py: ring, tree, NVLS, NVLS-tree,
CollNet, PAT x LL, LL128, Simple), with the physical parameters of a calibration profile
when the cluster names one. AllToAll: off-node share bytes (n - per_node)/n over the NIC,
on-node share over NVLink; P2P: bytes / W.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from autopar.cost import nccl, nccl_pipeline
from autopar.specs.costparams import CommCalibration, CostParams
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
    if not p2p:
        return _achieved(link.bandwidth_gb_per_s * GB, eff, message_bytes, params.comm.half_bandwidth_bytes)
    # pairwise sends reach their own rate, not the ring's: a one-node all_to_all log measures it
    # (xxrjun cnode3 8x H100: 333-348 GB/s at 1-16 GiB against NVLink x nvlink_efficiency 369)
    peak = _calibrated(params, "intra_p2p_busbw_gb_per_s", link.bandwidth_gb_per_s * eff) * GB
    half = _calibrated(params, "intra_p2p_half_bandwidth_bytes", params.comm.p2p_half_bandwidth_bytes)
    return _achieved(peak, 1.0, message_bytes, half)


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


def _calibrated(params: CostParams, name: str, default):
    cal: CommCalibration | None = params.collectives
    value = getattr(cal, name) if cal is not None else None
    return default if value is None else value


NVLS_MODEL_CHANGE = (2, 28)  # NCCL 2.28.3 changed how its tuning model rates NVLS-tree


def version_tuple(version: str) -> tuple[int, int]:
    """'2.26.2+cuda12.8' -> (2, 26)."""
    major, minor = version.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def nccl_release(params: CostParams) -> tuple[int, int]:
    """The NCCL release whose choices the model follows: a calibration profile's, else the default's."""
    return version_tuple(_calibrated(params, "nccl_version", params.comm.nccl.version))


def fabric(cluster: ClusterSpec, group: Group, params: CostParams) -> nccl.Fabric:
    """The physical parameters of one communicator: the cluster's links, the default
    efficiencies, and what a calibration profile fitted in their place."""
    c, link = params.comm, cluster.intra_node
    nvlink = link.kind == LinkKind.nvlink
    intra = _calibrated(params, "intra_busbw_gb_per_s", link.bandwidth_gb_per_s * (c.nvlink_efficiency if nvlink else c.pcie_efficiency)) * GB
    nvls_on = link.sharp and group.per_node >= c.nvls_min_ranks
    network = group.nodes > 1
    tiers = _tiers_spanned(cluster, group.nodes) if network else []
    oversub = max([t.oversubscription for t in tiers] or [1.0])
    net = group.per_node * cluster.nic_bytes_per_second_per_gpu * _calibrated(params, "network_efficiency", c.network_efficiency) / oversub
    return nccl.Fabric(
        ranks=group.size, per_node=group.per_node, nodes=group.nodes, intra_busbw=intra,
        nvls_busbw=intra * _calibrated(params, "nvls_speedup", c.sharp_speedup) if nvls_on else 0.0,
        net_busbw=net if network else 0.0,
        collnet_speedup=_calibrated(params, "collnet_speedup", c.sharp_speedup) if network and cluster.sharp else 0.0,
        nvlink=nvlink, architecture=cluster.gpu.architecture,
        extra_net_latency_us=(tiers[-1].latency_us - tiers[0].latency_us) if tiers else 0.0,
        intra_latency_scale=_calibrated(params, "intra_latency_scale", 1.0),
        net_latency_scale=_calibrated(params, "net_latency_scale", 1.0),
        intra_simple_latency_scale=_calibrated(params, "intra_simple_latency_scale", 1.0),
        net_simple_latency_scale=_calibrated(params, "net_simple_latency_scale", 1.0),
        nccl_before_2_28=nccl_release(params) < NVLS_MODEL_CHANGE,
        channels=c.nccl.channels,
        nvls_channels=c.nccl.nvls_channels.get(cluster.gpu.architecture, min(c.nccl.nvls_channels.values())),
        ring_half_bytes=_calibrated(params, "ring_half_bandwidth_bytes", c.half_bandwidth_bytes),
        ring_exponent=_calibrated(params, "ring_saturation_exponent", c.saturation_exponent),
        switch_half_bytes=_calibrated(params, "switch_half_bandwidth_bytes", c.switch_half_bandwidth_bytes),
        switch_exponent=_calibrated(params, "switch_saturation_exponent", c.switch_saturation_exponent))


_MEMO_SLOTS = 4
_memos: OrderedDict[tuple[int, int], tuple[ClusterSpec, CostParams, dict]] = OrderedDict()


def _memo(cluster: ClusterSpec, params: CostParams) -> dict:
    """The choices already made on this (cluster, params) pair. A search asks for the same few
    thousand collectives a hundred thousand times (every chunk of the plan space, every pipeline
    layout); both specs are frozen, so a choice depends only on the call's other arguments. Keyed
    by identity: each slot holds its two objects, so an id cannot be reused while it is cached."""
    key = (id(cluster), id(params))
    slot = _memos.get(key)
    if slot is not None and slot[0] is cluster and slot[1] is params:
        _memos.move_to_end(key)
        return slot[2]
    table: dict = {}
    _memos[key] = (cluster, params, table)
    while len(_memos) > _MEMO_SLOTS:
        _memos.popitem(last=False)
    return table


def collective_choice(op: Collective, message_bytes: float, group: Group, cluster: ClusterSpec, params: CostParams,
                      algorithm: str | None = None, protocol: str | None = None) -> nccl.Choice:
    """Time of one collective and the NCCL algorithm / protocol it runs (message_bytes: the
    full buffer per rank, nccl-tests 'size'). AllToAll and P2P are not NCCL-tuned: 'p2p'.
    algorithm / protocol force one (NCCL_ALGO / NCCL_PROTO); ValueError when it cannot run."""
    memo = _memo(cluster, params)
    key = (op, float(message_bytes), group, algorithm, protocol)
    choice = memo.get(key)
    if choice is None:
        choice = memo[key] = _choose(op, message_bytes, group, cluster, params, algorithm, protocol)
    return choice


def _choose(op: Collective, message_bytes: float, group: Group, cluster: ClusterSpec, params: CostParams,
            algorithm: str | None, protocol: str | None) -> nccl.Choice:
    n = group.size
    if n <= 1 or message_bytes <= 0:
        return nccl.Choice("none", "none", 0.0, 0.0)
    if op in (Collective.all_to_all, Collective.send_recv):
        if algorithm is not None or protocol not in (None, "simple"):
            raise ValueError(f"{op.value} runs as NCCL point-to-point sends (Simple protocol), which NCCL_ALGO and NCCL_PROTO "
                             "do not tune; force an algorithm or protocol on all_reduce, all_gather, reduce_scatter or broadcast")
        t = _p2p_seconds(op, message_bytes, group, cluster, params)
        return nccl.Choice("p2p", "simple", t, t)
    f = fabric(cluster, group, params)
    return nccl_pipeline.choose(op.value, message_bytes, f, params.comm.nccl, algorithm, protocol, nccl_view(cluster, group, params, f))


def nccl_view(cluster: ClusterSpec, group: Group, params: CostParams, f: nccl.Fabric) -> nccl.Fabric:
    """The links as NCCL's tuning sees them: the rates its topology search assigns (NVLink at the
    default efficiency, each NIC at its search speed), not what a calibration measured."""
    comm = params.comm.model_copy(update={"network_efficiency": params.comm.nccl.graph_nic_fraction})
    nominal = params.model_copy(update={"collectives": None, "comm": comm})
    return replace(fabric(cluster, group, nominal), nccl_before_2_28=f.nccl_before_2_28)


def collective_seconds(op: Collective, message_bytes: float, group: Group, cluster: ClusterSpec, params: CostParams) -> float:
    """Time of one collective; message_bytes is the full buffer per rank (nccl-tests 'size')."""
    return collective_choice(op, message_bytes, group, cluster, params).seconds


def _p2p_seconds(op: Collective, message_bytes: float, group: Group, cluster: ClusterSpec, params: CostParams) -> float:
    n = group.size
    alpha = step_latency_seconds(cluster, group)
    eff = _calibrated(params, "network_efficiency", params.comm.network_efficiency)
    if op == Collective.send_recv:
        if group.nodes <= 1:
            return alpha + message_bytes / intra_bandwidth(cluster, message_bytes, params, p2p=True)
        # each rank sends to one rank on another node over the channels NCCL gives that peer, each at
        # most NCCL_P2P_PER_CHANNEL_NET_BW, and never faster than the NIC: xxrjun cluster01's 2-node pairs
        # run 4 channels at the NIC rate (39.7-46.1 GB/s of a 400G NIC), its 10-node rings 2 channels
        # (25-26 GB/s) or 1 with 8 ranks per node (15 GB/s). A cross-node send fills as the all_to_all
        # pairs on that network do (net_p2p_half_bandwidth_bytes: the rings reach 97-98% at 32 MiB)
        prm = params.comm.nccl
        channels = nccl.net_p2p_channels_per_peer(n, group.per_node, cluster.nic_gb_per_s_per_gpu, cluster.gpu.compute_capability,
                                                  nccl_release(params), prm)
        peak = min(cluster.nic_bytes_per_second_per_gpu * eff, channels * prm.p2p_per_channel_net_gb_per_s * GB)
        net_half = _calibrated(params, "net_p2p_half_bandwidth_bytes", params.comm.net_p2p_half_bandwidth_bytes)
        return alpha + message_bytes / _achieved(peak, 1.0, message_bytes, net_half)
    off_node = message_bytes * (n - group.per_node) / n
    on_node = message_bytes * (group.per_node - 1) / n
    net_half = _calibrated(params, "net_p2p_half_bandwidth_bytes", params.comm.net_p2p_half_bandwidth_bytes)
    # each pair exchanges message_bytes / n: saturation follows the p2p curve
    t_on = on_node / intra_bandwidth(cluster, message_bytes / n, params, p2p=True) if on_node else 0.0
    t_off = off_node / _achieved(cluster.nic_bytes_per_second_per_gpu, eff, message_bytes / n, net_half) if off_node else 0.0
    # pairwise sends are issued together: latency grows with log2(n), not n
    return alpha * math.log2(n) + max(t_on, t_off)


def busbw_factor(op: Collective, n: int) -> float:
    """nccl-tests bus-bandwidth factor (busbw = algbw x factor)."""
    if op == Collective.all_reduce:
        return 2 * (n - 1) / n
    if op in (Collective.all_gather, Collective.reduce_scatter, Collective.all_to_all):
        return (n - 1) / n
    return 1.0


def sm_slowdown(sms_held: float, num_sms: int | None) -> float:
    """Extra compute seconds per second that a kernel holding `sms_held` SMs costs the compute
    beside it: the compute runs on the other SMs, held / (SMs - held) slower (at least one SM
    stays with the compute; 0 when the GPU's SM count is unknown)."""
    if not num_sms:
        return 0.0
    held = min(sms_held, num_sms - 1)
    return held / (num_sms - held)


def overlapped_seconds(comm_seconds, compute_seconds, sms_held: float, num_sms: int | None):
    """What a communication kernel overlapped with compute still costs: the part that outlasts
    the compute, plus the compute slowed while the kernel holds SMs. A communication kernel
    keeps its CUDA blocks resident for its whole run (NCCL: one block per channel; NCCL docs,
    NCCL_MAX_NCHANNELS: 'reducing the number of channels also reduces the number of CUDA blocks
    used for communication, hence the impact on GPU computing resources'); a GEMM's blocks fill
    an SM's registers and shared memory, so the compute beside it runs on the other SMs."""
    hidden = np.minimum(comm_seconds, compute_seconds)
    return np.maximum(0.0, comm_seconds - compute_seconds) + sm_slowdown(sms_held, num_sms) * hidden
