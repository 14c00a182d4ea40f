"""What a collective NCCL chose takes (autopar/cost/nccl.py says which one it chooses).

Tree and NVLS-tree AllReduce run as pipelines of chunks through a chain of hops (NVIDIA/nccl
src/enqueue.cc calcCollChunking; the NCCL 2.4 blog "Massively Scale Your Deep Learning Training
with NCCL 2.4": trees are pipelined, latency grows with log2 of the nodes). Hop h costs a chunk of
u bytes a step latency alpha_h (NCCL's per-step hardware latency x the fitted scale) and a
transfer u / r_h at the link's share r_h. Two regimes, by protocol:
- Simple stores and forwards whole steps, with NCCL_STEPS steps in flight per connection: the
  first chunk pays every hop in full, the others follow one per cycle of the slowest hop, whose
  step latency overlaps the previous step's transfer:
    t = base + sum_h (alpha_h + u / r_h) + (n - 1) max_h max(alpha_h, u / r_h),  n = size / u
- LL and LL128 forward each flagged line as it lands (cut-through): the first chunk pays the
  latencies plus one transfer, but every step waits for its flag handshake before it streams:
    t = base + sum_h alpha_h + max_h u / r_h + (n - 1) max_h (alpha_h + u / r_h)
(the pipelined tree of Sanders, Speck, Traeff, "Two-tree algorithms for full bandwidth
broadcast, reduction and scan", Parallel Computing 2009). NCCL sizes u by the message (smaller
chunks for smaller messages and deeper trees), so the pipeline fill -- which NCCL's own estimate leaves out and its
treeCorrectionFactor patches -- follows from its chunking rules, not from a fitted curve:
- tree: per channel; 2 (ppn - 1) NVLink hops at the GPU's NVLink share (each GPU forwards up
  and down at once: intra busbw / (2 channels)) and 2 log2(nodes) network hops at the NICs'
  share (net busbw / channels; / 2 beyond 2 nodes, where an inner node takes two children's data);
- NVLS-tree: u = channels x heads x chunk for the whole node; two NVLS hops (reduce in the
  switch, multicast back) at the NVLS rate and 2 log2(nodes) network hops at the NICs' rate.
The other algorithms: latency + size / algbw, and for Simple a size-dependent slowdown
x (1 + (h / size)^e) fitted from logs (ring-like and in-switch families).
"""

from __future__ import annotations

from dataclasses import replace

from autopar.cost.nccl import (ALGORITHMS, ALL_REDUCE, PROTOCOLS, Choice, Fabric, algorithm_bandwidth, estimate_seconds,
                               latency_us, log2i, ring_plateau, step_latencies_us)
from autopar.specs.costparams import NcclParams

_LL, _SIMPLE = 0, 2


def pipeline_seconds(base_seconds: float, hops: list[tuple[float, float, float]], unit_bytes: float, total_bytes: float,
                     cut_through: bool = False) -> float:
    """Chunk pipeline over hops (latency s, rate of the first unit, rate in steady state; bytes/s):
    the first unit has a hop's link to itself in one direction, later ones share it with the
    flow coming back; total split in units of unit_bytes."""
    if not hops:
        return base_seconds
    units = total_bytes / unit_bytes
    if units <= 1.0:
        unit_bytes, units = total_bytes, 1.0
    if cut_through:
        first = sum(alpha for alpha, _, _ in hops) + max(unit_bytes / rate for _, rate, _ in hops)
        cycle = max(alpha + unit_bytes / rate for alpha, _, rate in hops)
    else:
        first = sum(alpha + unit_bytes / rate for alpha, rate, _ in hops)
        cycle = max(max(alpha, unit_bytes / rate) for alpha, _, rate in hops)
    return base_seconds + first + (units - 1.0) * cycle


def tree_channels(size_bytes: float, proto: int, f: Fabric, prm: NcclParams) -> int:
    """topoGetAlgoInfo: drop channels while size < channels x threads x per-thread threshold."""
    nc = f.channels
    while nc >= 2 and size_bytes < nc * prm.max_threads[proto] * prm.thread_threshold_bytes[proto]:
        nc -= 1
    return nc


def tree_chunk_bytes(size_bytes: float, proto: int, nc: int, f: Fabric, prm: NcclParams) -> float:
    """calcCollChunking: data bytes per channel per step (LL: half of each line is flags;
    LL128: 120 of 128 bytes; Simple tree: one step), LL128 halved for small messages."""
    step = prm.buffer_bytes[proto] / prm.steps
    if proto == _LL:
        return step / 2
    if proto == _SIMPLE:
        return step
    chunk = int(step) // 16 * 15
    nsteps = 1 + log2i(f.nodes) + 0.1 * f.per_node
    for k, floor in prm.ll128_chunk_rule:
        while size_bytes // (nc * chunk) < nsteps * k / f.per_node and chunk > floor:
            chunk //= 2
    return chunk


_WIRE_PER_DATA_BYTE = (2.0, 128 / 120, 1.0)  # LL: 4 B flag per 4 B data; LL128: 8 B flag per 128 B line


def tree_seconds(size_bytes: float, proto: int, f: Fabric, prm: NcclParams) -> float:
    """Tree AllReduce as NCCL's per-channel chunk pipeline (module docstring)."""
    nc = tree_channels(size_bytes, proto, f, prm)
    wire = _WIRE_PER_DATA_BYTE[proto]
    chunk = tree_chunk_bytes(size_bytes, proto, nc, f, prm) * wire
    intra, net = (x * 1e-6 for x in step_latencies_us("tree", proto, f, prm))
    hops = [(intra, f.intra_busbw / nc, f.intra_busbw / (2 * nc))] * (2 * (f.per_node - 1))
    if f.nodes > 1:
        net_rate = f.net_busbw / (nc * (1 if f.nodes <= 2 else 2))
        hops += [(net, net_rate, net_rate)] * (2 * log2i(f.nodes))
    base = prm.base_latency_us["tree"][proto] * 1e-6
    pipeline = pipeline_seconds(base, hops, chunk, size_bytes * wire / nc, cut_through=proto != _SIMPLE)
    # no faster than the protocol moves data (LL: llMaxBw, LL128: 120 of 128 bytes, x .92)
    return max(pipeline, size_bytes / algorithm_bandwidth(ALL_REDUCE, "tree", proto, f, prm))


def nvls_tree_chunk_bytes(size_bytes: float, f: Fabric, prm: NcclParams) -> float:
    """calcCollChunking, NVLS-tree: per channel and head; 64 KiB cap on >= 4 nodes."""
    ops = f.nvls_channels * f.per_node
    chunk = prm.nvls_chunk_bytes if f.nodes < 4 else min(prm.nvls_chunk_bytes, prm.nvls_tree_chunk_bytes_from_4_nodes)
    for k, floor in prm.nvls_tree_chunk_rule:
        if size_bytes < k * ops * chunk and chunk > floor:
            chunk = floor
    return chunk


def nvls_tree_seconds(size_bytes: float, f: Fabric, prm: NcclParams) -> float:
    """NVLS-tree AllReduce as a pipeline of whole-node chunks (module docstring)."""
    to_alg = f.ranks / (2 * (f.ranks - 1))
    nvls_rate = f.nvls_busbw * to_alg
    net_rate = f.net_busbw * (2 if f.nodes <= 2 else 1) * to_alg
    intra, net = (x * 1e-6 for x in step_latencies_us("nvls_tree", _SIMPLE, f, prm))
    # one unit crosses the network up, then down: alone on the NICs, twice the steady share
    hops = [(intra / 2, nvls_rate, nvls_rate)] * 2 + [(net, 2 * net_rate, net_rate)] * (2 * log2i(f.nodes))
    unit = f.nvls_channels * f.per_node * nvls_tree_chunk_bytes(size_bytes, f, prm)
    return pipeline_seconds(prm.base_latency_us["nvls_tree"][_SIMPLE] * 1e-6, hops, unit, size_bytes)


def flat_seconds(op: str, algo: str, proto: int, size_bytes: float, f: Fabric, prm: NcclParams) -> float:
    """Latency + transfer. Inside one node, Simple transfers run slower at mid sizes, by the fitted
    slowdown of their family (NVLink rings; NVLS): the links' rate / (1 + (h / size)^e), measured on
    8-GPU nodes (seed 001 'Замеры на практике'; calibration/data/nccl). Across nodes a ring's pace is
    its NICs' and the node's shape does not carry over: the 2-node NCCL_ALGO=Ring log of
    nccl-tests#309 runs at 97% of its 8 GiB busbw at 512 MiB, where the node shape would give 85%."""
    lat = latency_us(op, algo, proto, f, prm) * ring_plateau(op, algo, proto, size_bytes, f, prm) * 1e-6
    if proto == _SIMPLE and f.nodes == 1:
        ring_fill = (f.ring_half_bytes / size_bytes) ** f.ring_exponent
        switch_fill = (f.switch_half_bytes / size_bytes) ** f.switch_exponent
        f = replace(f, intra_busbw=f.intra_busbw / (1.0 + ring_fill), nvls_busbw=f.nvls_busbw / (1.0 + switch_fill))
    return lat + size_bytes / algorithm_bandwidth(op, algo, proto, f, prm)


def predicted_seconds(op: str, algo: str, proto: int, size_bytes: float, f: Fabric, prm: NcclParams) -> float:
    if op == ALL_REDUCE and algo == "tree":
        return tree_seconds(size_bytes, proto, f, prm)
    if op == ALL_REDUCE and algo == "nvls_tree":
        return nvls_tree_seconds(size_bytes, f, prm)
    return flat_seconds(op, algo, proto, size_bytes, f, prm)


def choose(op: str, size_bytes: float, f: Fabric, prm: NcclParams, algorithm: str | None = None,
           protocol: str | None = None, view: Fabric | None = None) -> Choice:
    """NCCL's pick (smallest own estimate) among the enabled algorithms and protocols, or the
    forced ones (NCCL_ALGO / NCCL_PROTO), with its predicted time on f; ValueError when none can
    run. view: the links as NCCL sees them (nominal rates, not a calibration's), default f."""
    best = None
    for algo in ALGORITHMS if algorithm is None else (algorithm,):
        for proto in range(3) if protocol is None else (PROTOCOLS.index(protocol),):
            estimate = estimate_seconds(op, algo, proto, size_bytes, view or f, prm)
            if estimate is not None and (best is None or estimate < best[0]):
                best = (estimate, algo, proto)
    if best is None:
        forced = "/".join(x for x in (algorithm, protocol) if x)
        raise ValueError(f"{forced or 'no algorithm'} cannot run {op} on {f.ranks} ranks, {f.nodes} node(s)")
    estimate, algo, proto = best
    return Choice(algo, PROTOCOLS[proto], predicted_seconds(op, algo, proto, size_bytes, f, prm), estimate)
