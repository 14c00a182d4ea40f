"""NCCL's algorithm and protocol choice for AllReduce, AllGather and ReduceScatter, after its
own tuning model (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime;
our code, its structure and constants, which live in profiles/cost/defaults.yaml comm.nccl).

For every enabled algorithm a x protocol p NCCL estimates
    t(a, p, S) = latency(a, p) + S / algbw(a, p)
and runs the smallest. algbw comes from the links' bus bandwidth:
- ring: the node's ring bandwidth (NVLink/PCIe), across nodes the node's NIC share;
- tree: the links inside a node on <= 2 nodes (each node sends S, not 2S(n-1)/n, over the
  network), the NICs beyond; x tree efficiency; algbw = busbw / 2;
- NVLS (one node): NVLink SHARP; AllGather/ReduceScatter get half of it x (ppn-1)/ppn;
- NVLS-tree (several nodes): min(NVLS, NIC share x 2 on <= 2 nodes, x 1 beyond) -- why 2-node
  runs beat the NIC limit ("2-node results tend to be an aberration", nccl-tests#309);
- CollNet (IB SHARP): in-network reduction, NIC share x collnet speedup;
- PAT (AllGather/ReduceScatter with one rank per node): ring x 0.75, logarithmic latency.
Protocols: LL (half the line is flags, capped), LL128 (120 of 128 bytes; NVLink nodes only),
Simple. Latencies: base + steps x per-step hardware latency of the link each step crosses.

NCCL picks by this estimate as NCCL computes it: its own latency constants (not our fitted
scales), the links as its topology search rates them (autopar/cost/comm.py nccl_view: NICs at
their search speed, not a calibration's efficiencies), and its per-channel ceilings over the
channels of its tuning graph (perChMax*Bws; a tree's LL128 rate across > 2 Hopper nodes is
8 x 29 GB/s, below the NICs). Releases differ: before 2.28 NVLS-tree was rated min(NVLink, NICs
on <= 2 nodes, NICs / 2 beyond) x 5/6 with 14 us network steps (v2.27.7), which moves the
NVLS-tree / tree switch by several sizes; a profile's nccl_version picks the model. What the
chosen run then takes is autopar/cost/nccl_pipeline.py's: tree and NVLS-tree as the chunk
pipelines NCCL runs, the others as latency + transfer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autopar.specs.costparams import NcclParams

ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = "all_reduce", "all_gather", "reduce_scatter"
_SIMPLE = 2


@dataclass(frozen=True)
class Fabric:
    """What one communicator runs on (bandwidths in bytes/s, latencies in us)."""

    ranks: int
    per_node: int
    nodes: int
    intra_busbw: float          # ring (Simple) bus bandwidth inside a node
    nvls_busbw: float           # NVLS AllReduce bus bandwidth in a node; 0: no NVLS
    net_busbw: float            # the group's NIC share of a node (ring limit across nodes); 0: one node
    collnet_speedup: float      # IB SHARP network gain; 0: no CollNet
    nvlink: bool                # NVLink inside the node (else PCIe): LL128 on, NVLink latencies
    architecture: str
    extra_net_latency_us: float  # switch tiers beyond the leaf
    intra_latency_scale: float  # x NCCL's NVLink/PCIe step latencies of LL and LL128
    net_latency_scale: float    # x its network step latencies of LL and LL128
    intra_simple_latency_scale: float  # ... of Simple (large chunks: copies, flushes)
    net_simple_latency_scale: float
    nccl_before_2_28: bool      # NCCL <= 2.27 chose NVLS-tree by its older model
    channels: int               # ring/tree channels (NCCL's comm->nChannels)
    nvls_channels: int          # NVLS / NVLS-tree channels
    ring_half_bytes: float       # Simple saturation of ring, tree, PAT
    ring_exponent: float
    switch_half_bytes: float     # ... of NVLS, NVLS-tree, CollNet
    switch_exponent: float


@dataclass(frozen=True)
class Choice:
    """The algorithm and protocol NCCL's model picks, and the predicted time."""

    algorithm: str
    protocol: str
    seconds: float
    nccl_estimate_seconds: float


def log2i(x: int) -> int:
    return max(0, int(x).bit_length() - 1)


P2P_MODEL_CHANGE = (2, 29)  # NCCL 2.29.2 sized the channels of a send to another node anew
MAX_CHANNELS = 64            # MAXCHANNELS


def pow2_up(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def net_p2p_channels_per_peer(ranks: int, per_node: int, nic_gb_per_s: float, compute_capability: float,
                              version: tuple[int, int], prm: NcclParams) -> int:
    """Channels NCCL gives one send to a rank on another node in a communicator of `ranks` ranks,
    `per_node` on each node, one NIC per GPU (src/graph/paths.cc ncclTopoGetNchannels and
    ncclTopoComputeP2pChannels, v2.28.7 and v2.29.2). The communicator's p2p channels are its
    ring channels rounded up to a power of two: the topology search finds one ring per NIC at its
    speed, duplicates them unless the speed is below 25 GB/s or, from Ampere's successors on,
    below 50 GB/s with more than 4 rings (search.cc ncclTopoDupChannels), and the communicator
    runs each twice (connect.cc)."""
    speed = prm.graph_nic_fraction * nic_gb_per_s
    rings = min(per_node, prm.graph_channels)
    if not (speed < 25.0 or (compute_capability * 10 > 80 and speed < 50.0 and rings > 4)):
        rings *= 2
    p2p_channels = min(pow2_up(2 * rings), MAX_CHANNELS)
    if version >= P2P_MODEL_CHANGE:
        per_peer = pow2_up(max(1, math.ceil(int(nic_gb_per_s) / prm.p2p_per_channel_net_gb_per_s)))
        while per_peer * math.ceil(ranks / prm.p2p_per_batch) > p2p_channels and per_peer > 1:
            per_peer //= 2
        return per_peer
    per_peer = prm.p2p_net_channels_before_2_29  # "avoid overloading channels with 8+ operations"
    while per_peer * ranks > p2p_channels * 4 and per_peer > 1:
        per_peer //= 2
    return min(pow2_up(per_peer), p2p_channels)


def _ll_max(f: Fabric, prm: NcclParams) -> float:
    if f.nodes == 1:
        table = prm.ll_max_busbw_gb_per_s_one_node
        return table.get(f.architecture, table["volta"]) * 1e9
    return prm.ll_max_busbw_gb_per_s_multi_node[0 if f.nodes == 2 else 1] * 1e9


def _multi_node_ring_busbw(f: Fabric) -> float:
    """A ring across nodes enters each node through one GPU's NIC and leaves through another's,
    so each GPU's NVLinks carry (ppn - 1) / ppn of the ring's bus traffic (one ring per NIC, ppn
    rings: every GPU is the entry of one), where a one-node ring (what intra_busbw measures) puts
    all of it on them. NCCL's search rates such a ring at one speed for both tiers (search.cc:
    a ring graph keeps bwIntra = bwInter), the NIC's: 8 x 48 GB/s on 8x 400 Gb/s H100 nodes."""
    if f.per_node <= 1:
        return f.net_busbw
    return min(f.intra_busbw * f.per_node / (f.per_node - 1), f.net_busbw)


def _simple_busbw(op: str, algo: str, f: Fabric) -> float:
    """NCCL busBw of an algorithm before protocol refinements (0: not available)."""
    multi = f.nodes > 1
    if algo == "ring":
        return _multi_node_ring_busbw(f) if multi else f.intra_busbw
    links = min(f.intra_busbw, f.net_busbw) if multi else f.intra_busbw  # the slower tier
    if algo == "tree":
        if op != ALL_REDUCE:
            return 0.0
        return f.intra_busbw if f.nodes <= 2 else links
    if algo == "nvls":
        if multi or f.nvls_busbw <= 0:
            return 0.0
        return f.nvls_busbw if op == ALL_REDUCE else f.nvls_busbw / 2 * (f.per_node - 1) / f.per_node
    if algo == "nvls_tree":
        if not multi or op != ALL_REDUCE or f.nvls_busbw <= 0:
            return 0.0
        if f.nccl_before_2_28:  # NVLink x NICs, NICs / 2 beyond 2 nodes (v2.27.7 tuning.cc)
            return min(f.intra_busbw, f.net_busbw * (1 if f.nodes <= 2 else 0.5))
        return min(f.nvls_busbw, f.net_busbw * (2 if f.nodes <= 2 else 1))
    if algo in ("collnet_direct", "collnet_chain"):
        if not multi or op != ALL_REDUCE or f.collnet_speedup <= 0:
            return 0.0
        node = f.nvls_busbw or f.intra_busbw
        return min(node, f.net_busbw * f.collnet_speedup)
    if algo == "pat":  # one rank per node only (ncclPatEnable)
        return links if op != ALL_REDUCE and multi and f.per_node == 1 else 0.0
    raise ValueError(f"unknown algorithm {algo!r}")


def _channel_cap(kind: str, f: Fabric, prm: NcclParams, caps: bool) -> float:
    """NCCL's per-channel bandwidth ceiling x the channels of its tuning graph (inf: no cap)."""
    table = prm.per_channel_max_busbw_gb_per_s.get(kind, {}).get(f.architecture)
    if not caps or table is None:
        return float("inf")
    return prm.graph_channels * table[min(f.nodes, 3) - 1] * 1e9


def algorithm_bandwidth(op: str, algo: str, proto: int, f: Fabric, prm: NcclParams, caps: bool = False) -> float:
    """NCCL's algorithm bandwidth (bytes/s) of a x p; 0 when NCCL would not run it. caps: with
    NCCL's per-channel ceilings (its estimate); without, the links' rates (a prediction)."""
    bus = _simple_busbw(op, algo, f)
    if bus <= 0 or (algo not in ("ring", "tree") and proto != _SIMPLE):
        return 0.0
    if algo == "tree":
        bus = min(bus * prm.tree_allreduce_factor, _channel_cap("tree", f, prm, caps))
    if algo == "nvls_tree" and not f.nccl_before_2_28:
        bus = min(bus, _channel_cap("nvls_tree", f, prm, caps))
    if proto == 1 and not f.nvlink:  # LL128 is enabled on NVLink nodes only
        return 0.0
    if algo == "ring" and proto == 0:
        bus = min(_ll_max(f, prm), bus * prm.ring_ll_factor)
    elif algo == "ring" and proto == 1:
        bus = min(bus * prm.ring_ll128_factor, _channel_cap("ring_ll128", f, prm, caps))
    elif algo == "tree" and proto == 0:
        bus = min(bus * prm.tree_ll_factor, _ll_max(f, prm))
    elif algo == "tree" and proto == 1:
        factor = prm.tree_ll128_factor_one_node if f.nodes == 1 else prm.tree_ll128_factor_multi_node
        bus = min(bus * factor, _channel_cap("tree_ll128", f, prm, caps))
    elif algo == "pat":
        bus *= prm.pat_factor
    elif algo == "collnet_direct" and f.architecture in ("hopper", "blackwell"):
        bus *= prm.collnet_hopper_factor
    if op != ALL_REDUCE:
        # AllGather/ReduceScatter: ring converts with n / (n - 1); the others run at busBw
        return bus * f.ranks / (f.ranks - 1) if algo == "ring" else bus
    if algo == "nvls_tree" and f.nccl_before_2_28:
        return bus * prm.v2_27_nvls_tree_algbw_ratio
    if algo in ("ring", "nvls", "nvls_tree"):
        return bus * f.ranks / (2 * (f.ranks - 1))
    return bus / 2


def step_latencies_us(algo: str, proto: int, f: Fabric, prm: NcclParams) -> tuple[float, float]:
    """(NVLink/PCIe, network) latency of one step of a x p: NCCL's constants x the fitted scales."""
    link = "nvlink" if f.nvlink else "pcie"
    simple = proto == _SIMPLE
    intra = prm.hw_latency_us[link][algo][proto] * (f.intra_simple_latency_scale if simple else f.intra_latency_scale)
    # one rank per node: every step is exposed, NCCL uses the tree's network latency
    net = prm.hw_latency_us["net"]["tree" if f.per_node == 1 else algo][proto]
    if algo == "nvls_tree" and f.nccl_before_2_28 and f.per_node > 1:
        net = prm.v2_27_nvls_tree_net_latency_us
    net = net * (f.net_simple_latency_scale if simple else f.net_latency_scale)
    return intra, net + f.extra_net_latency_us * (2 if simple else 1)  # + flush on Simple


def latency_us(op: str, algo: str, proto: int, f: Fabric, prm: NcclParams) -> float:
    """NCCL's latency of a x p: base + per-step latencies of the links crossed."""
    base = prm.base_latency_us[algo][proto]
    intra, net = step_latencies_us(algo, proto, f, prm)
    ppn, multi = f.per_node, f.nodes > 1
    steps = 2 * (f.ranks - 1) if op == ALL_REDUCE else f.ranks - 1
    if algo == "ring":
        overhead = prm.net_overhead_us * (3 if proto == _SIMPLE else 1) if multi else 0.0
        inter = 0 if not multi else (2 * (f.nodes - 1) if op == ALL_REDUCE else f.nodes - 1)
        return base + (steps - inter) * max(intra, overhead) + inter * net
    if algo == "tree":
        return base + 2 * ((ppn - 1) * intra + log2i(f.nodes) * net)
    if algo == "collnet_direct":
        return base + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * prm.collnet_arity_us) + net
    if algo == "collnet_chain":
        return base + 2 * (ppn - 1) * intra + net
    if algo == "nvls":
        return intra + (net if multi else 0.0)
    if algo == "nvls_tree":
        return base + intra + 2 * log2i(f.nodes) * net
    return base + log2i(f.nodes) * net / prm.pat_log_latency_divisor + f.ranks * prm.pat_linear_us_per_rank


def _tree_correction(op: str, algo: str, proto: int, size_bytes: float, prm: NcclParams) -> float:
    if algo != "tree" or op != ALL_REDUCE:
        return 1.0
    index = log2i(int(size_bytes) >> 6) if size_bytes >= 64 else -1
    table = prm.tree_correction[PROTOCOLS[proto]]
    return table[index] if 0 <= index < 23 else 1.0


def ring_plateau(op: str, algo: str, proto: int, size_bytes: float, f: Fabric, prm: NcclParams) -> float:
    """ncclTopoGetAlgoTime: multi-node ring Simple AllReduce latency x 1.4 once each rank's
    share of a channel is >= 64 B ("plateau effect of ring")."""
    plateau = (algo == "ring" and proto == _SIMPLE and f.nodes > 1 and op == ALL_REDUCE
               and size_bytes / (f.channels * f.ranks) >= 64)
    return prm.ring_plateau_factor if plateau else 1.0


def estimate_seconds(op: str, algo: str, proto: int, size_bytes: float, f: Fabric, prm: NcclParams) -> float | None:
    """NCCL's own time estimate (ncclTopoGetAlgoTime) with NCCL's latency constants -- what it
    chooses by -- and the links' bandwidths; None when a x p does not run."""
    bw = algorithm_bandwidth(op, algo, proto, f, prm, caps=True) * _tree_correction(op, algo, proto, size_bytes, prm)
    if bw <= 0:
        return None
    nccl_latencies = replace(f, intra_latency_scale=1.0, net_latency_scale=1.0, intra_simple_latency_scale=1.0,
                             net_simple_latency_scale=1.0)
    lat = latency_us(op, algo, proto, nccl_latencies, prm) * ring_plateau(op, algo, proto, size_bytes, f, prm)
    return lat * 1e-6 + size_bytes / bw
