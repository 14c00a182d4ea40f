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

What NCCL's model leaves out and measured curves show: below a few hundred MB a Simple
transfer does not reach its bandwidth (the pipeline of large chunks fills; LL and LL128 move
small flagged lines and do not have it). The predicted time of Simple is
    t = latency + S / algbw x (1 + (h / S)^e)
with h, e per family (ring-like: many pipeline steps; in-switch: few) fitted by
calibration/nccl_physfit.py; the choice is
NCCL's own estimate (without that term), as NCCL makes it.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    intra_latency_scale: float
    net_latency_scale: float
    tree_efficiency: float
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


def _log2i(x: int) -> int:
    return max(0, int(x).bit_length() - 1)


def _ll_max(f: Fabric, prm: NcclParams) -> float:
    if f.nodes == 1:
        table = prm.ll_max_busbw_gb_per_s_one_node
        return table.get(f.architecture, table["volta"]) * 1e9
    return prm.ll_max_busbw_gb_per_s_multi_node[0 if f.nodes == 2 else 1] * 1e9


def _simple_busbw(op: str, algo: str, f: Fabric) -> float:
    """NCCL busBw of an algorithm before protocol refinements (0: not available)."""
    multi = f.nodes > 1
    ring = min(f.intra_busbw, f.net_busbw) if multi else f.intra_busbw
    if algo == "ring":
        return ring
    if algo == "tree":
        if op != ALL_REDUCE:
            return 0.0
        return f.tree_efficiency * (f.intra_busbw if f.nodes <= 2 else ring)
    if algo == "nvls":
        if multi or f.nvls_busbw <= 0:
            return 0.0
        return f.nvls_busbw if op == ALL_REDUCE else f.nvls_busbw / 2 * (f.per_node - 1) / f.per_node
    if algo == "nvls_tree":
        if not multi or op != ALL_REDUCE or f.nvls_busbw <= 0:
            return 0.0
        return min(f.nvls_busbw, f.net_busbw * (2 if f.nodes <= 2 else 1))
    if algo in ("collnet_direct", "collnet_chain"):
        if not multi or op != ALL_REDUCE or f.collnet_speedup <= 0:
            return 0.0
        node = f.nvls_busbw or f.intra_busbw
        return min(node, f.net_busbw * f.collnet_speedup)
    if algo == "pat":  # one rank per node only (ncclPatEnable)
        return ring if op != ALL_REDUCE and multi and f.per_node == 1 else 0.0
    raise ValueError(f"unknown algorithm {algo!r}")


def algorithm_bandwidth(op: str, algo: str, proto: int, f: Fabric, prm: NcclParams) -> float:
    """NCCL's algorithm bandwidth (bytes/s) of a x p; 0 when NCCL would not run it."""
    bus = _simple_busbw(op, algo, f)
    if bus <= 0 or (algo not in ("ring", "tree") and proto != _SIMPLE):
        return 0.0
    if proto == 1 and not f.nvlink:  # LL128 is enabled on NVLink nodes only
        return 0.0
    if algo == "ring" and proto == 0:
        bus = min(_ll_max(f, prm), bus * prm.ring_ll_factor)
    elif algo == "ring" and proto == 1:
        bus *= prm.ring_ll128_factor
    elif algo == "tree" and proto == 0:
        bus = min(bus * prm.tree_ll_factor, _ll_max(f, prm))
    elif algo == "tree" and proto == 1:
        bus *= prm.tree_ll128_factor_one_node if f.nodes == 1 else prm.tree_ll128_factor_multi_node
    elif algo == "pat":
        bus *= prm.pat_factor
    elif algo == "collnet_direct" and f.architecture in ("hopper", "blackwell"):
        bus *= prm.collnet_hopper_factor
    if op != ALL_REDUCE:
        # AllGather/ReduceScatter: ring converts with n / (n - 1); the others run at busBw
        return bus * f.ranks / (f.ranks - 1) if algo == "ring" else bus
    if algo in ("ring", "nvls", "nvls_tree"):
        return bus * f.ranks / (2 * (f.ranks - 1))
    return bus / 2


def latency_us(op: str, algo: str, proto: int, f: Fabric, prm: NcclParams) -> float:
    """NCCL's latency of a x p: base + per-step latencies of the links crossed."""
    link = "nvlink" if f.nvlink else "pcie"
    base = prm.base_latency_us[algo][proto]
    intra = prm.hw_latency_us[link][algo][proto] * f.intra_latency_scale
    # one rank per node: every step is exposed, NCCL uses the tree's network latency
    net = prm.hw_latency_us["net"]["tree" if f.per_node == 1 else algo][proto] * f.net_latency_scale
    net += f.extra_net_latency_us * (2 if proto == _SIMPLE else 1)  # + flush on Simple
    ppn, multi = f.per_node, f.nodes > 1
    steps = 2 * (f.ranks - 1) if op == ALL_REDUCE else f.ranks - 1
    if algo == "ring":
        overhead = prm.net_overhead_us * (3 if proto == _SIMPLE else 1) if multi else 0.0
        inter = 0 if not multi else (2 * (f.nodes - 1) if op == ALL_REDUCE else f.nodes - 1)
        return base + (steps - inter) * max(intra, overhead) + inter * net
    if algo == "tree":
        return base + 2 * ((ppn - 1) * intra + _log2i(f.nodes) * net)
    if algo == "collnet_direct":
        return base + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * prm.collnet_arity_us) + net
    if algo == "collnet_chain":
        return base + 2 * (ppn - 1) * intra + net
    if algo == "nvls":
        return intra + (net if multi else 0.0)
    if algo == "nvls_tree":
        return base + intra + 2 * _log2i(f.nodes) * net
    return base + _log2i(f.nodes) * net / prm.pat_log_latency_divisor + f.ranks * prm.pat_linear_us_per_rank


def _tree_correction(op: str, algo: str, proto: int, size_bytes: float, prm: NcclParams) -> float:
    if algo != "tree" or op != ALL_REDUCE:
        return 1.0
    index = _log2i(int(size_bytes) >> 6) if size_bytes >= 64 else -1
    table = prm.tree_correction[PROTOCOLS[proto]]
    return table[index] if 0 <= index < 23 else 1.0


def _estimates(op: str, algo: str, proto: int, size_bytes: float, f: Fabric, prm: NcclParams):
    """(NCCL's estimate, our prediction) in seconds, or None when a x p does not run."""
    bw = algorithm_bandwidth(op, algo, proto, f, prm)
    if bw <= 0:
        return None
    bw *= _tree_correction(op, algo, proto, size_bytes, prm)
    lat = latency_us(op, algo, proto, f, prm)
    plateau = (algo == "ring" and proto == _SIMPLE and f.nodes > 1 and op == ALL_REDUCE
               and size_bytes / (prm.channels * f.ranks) >= 64)
    lat = lat * (prm.ring_plateau_factor if plateau else 1.0) * 1e-6
    transfer = size_bytes / bw
    switch = algo.startswith(("nvls", "collnet"))
    half, exponent = (f.switch_half_bytes, f.switch_exponent) if switch else (f.ring_half_bytes, f.ring_exponent)
    fill = (half / size_bytes) ** exponent if proto == _SIMPLE else 0.0
    return lat + transfer, lat + transfer * (1.0 + fill)


def choose(op: str, size_bytes: float, f: Fabric, prm: NcclParams, algorithm: str | None = None,
           protocol: str | None = None) -> Choice:
    """NCCL's pick (smallest own estimate) among the enabled algorithms and protocols, or the
    forced ones (NCCL_ALGO / NCCL_PROTO); ValueError when none of them can run."""
    best = None
    for algo in ALGORITHMS if algorithm is None else (algorithm,):
        for proto in range(3) if protocol is None else (PROTOCOLS.index(protocol),):
            times = _estimates(op, algo, proto, size_bytes, f, prm)
            if times is not None and (best is None or times[0] < best.nccl_estimate_seconds):
                best = Choice(algo, PROTOCOLS[proto], times[1], times[0])
    if best is None:
        forced = "/".join(x for x in (algorithm, protocol) if x)
        raise ValueError(f"{forced or 'no algorithm'} cannot run {op} on {f.ranks} ranks, {f.nodes} node(s)")
    return best
