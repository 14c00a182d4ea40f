"""Per-layer, per-micro-batch times of one GPU (DESIGN.md 'Compute time', 'Per-strategy
traffic'), one value per plan of a Batch. A layer is either dense or MoE; every layer of a
kind costs the same."""

from __future__ import annotations

import numpy as np

from autopar.cost.comm import Collective
from autopar.cost.context import Batch
from autopar.cost.flops import activation_message_bytes, attention_core_flops_per_token, layer_gemms
from autopar.cost.gemm import gemm_seconds
from autopar.cost.memory import kv_heads_per_rank
from autopar.cost.table import CP_ALGO, vmap
from autopar.specs.plan import CpAlgo

RING, ULYSSES, HYBRID = (CP_ALGO.index(a) for a in (CpAlgo.ring, CpAlgo.ulysses, CpAlgo.hybrid))


def gemm_time(batch: Batch, m, n, k, dtype: str) -> np.ndarray:
    gpu, params = batch.cluster.gpu, batch.params
    return vmap(lambda a, b, c: gemm_seconds(a, b, c, dtype, gpu, params), m, n, k)


def layer_forward(batch: Batch, index: int) -> dict[str, np.ndarray]:
    """Forward seconds (and FLOPs) of layer `index` for one micro-batch on one GPU."""
    m, t, tr, prm = batch.model, batch.tab, batch.training, batch.params
    dtype, T, B = tr.precision.gemm_dtype, batch.tokens, tr.activation_bytes
    gemms = layer_gemms(m, index, T, t.tp, t.ep, t.etp, tr.moe_capacity_factor)
    out = {"gemm": sum(gemm_time(batch, g.m, g.n, g.k, dtype) * g.count for g in gemms)}
    out["gemm_flops"] = sum(g.flops for g in gemms)
    # fp8/fp4 GEMMs cast their bf16 inputs (forward: activations M x K; backward: output
    # gradients M x N): memory-bound work on top of the GEMM (Transformer Engine)
    cast = prm.memory.low_precision_cast_bytes_per_element if dtype in ("fp8", "fp4") else 0.0
    cast_bytes = cast * sum((g.m * g.k + g.m * g.n) * g.count for g in gemms)
    out["attn_flops"] = attention_core_flops_per_token(m, tr.seq_len, causal=tr.flash_attention) * T / t.tp
    # FLOPs as counted for HFU: attention non-causal, the convention of model FLOPs (MFU)
    out["attn_flops_counted"] = attention_core_flops_per_token(m, tr.seq_len, causal=False) * T / t.tp
    if tr.flash_attention:
        out["attn"] = out["attn_flops"] / (batch.cluster.gpu.peak_flops_per_second("bf16") * prm.attention.flash_efficiency)
    else:  # batched GEMMs over the whole score matrix plus a memory-bound softmax
        per_head = 2 * gemm_time(batch, T, tr.seq_len, m.head_size, "bf16")
        scores = m.num_attention_heads / t.tp * T * tr.seq_len
        out["attn"] = per_head * m.num_attention_heads / t.tp + batch.hbm_seconds(scores * prm.attention.unfused_extra_bytes_per_score)
    if m.is_moe_layer(index):
        f_act = m.moe_top_k * (m.moe_ffn_hidden_size or 0) / t.etp + m.moe_shared_expert_ffn_size / t.tp
    else:
        f_act = m.ffn_hidden_size / t.tp
    elem_bytes = prm.memory.elementwise_bytes_per_token_per_hidden * T * m.hidden_size / batch.sp_divisor + 3 * B * T * f_act
    out["elem"] = batch.hbm_seconds(elem_bytes + cast_bytes / 3)  # fwd + bwd (x3 below) share the casts
    out["tp"] = _tp_seconds(batch)
    out["cp"], out["cp_bwd"] = _cp_exposed(batch, out["attn"])
    if m.is_moe_layer(index):
        a2a = batch.collective(Collective.all_to_all, B * T * m.moe_top_k * tr.moe_capacity_factor * m.hidden_size, batch.group("ep"))
        out["ep"] = np.where(t.ep > 1, 2 * a2a * (1 - prm.comm.ep_overlap), 0.0)
    else:
        out["ep"] = np.zeros(len(t))
    return out


def _tp_seconds(batch: Batch) -> np.ndarray:
    """Two AllReduce (SP: AllGather + ReduceScatter pairs) of B T h per layer forward
    (seed 000 'Тензорный параллелизм'), partly hidden with --tp-comm-overlap."""
    t, prm = batch.tab, batch.params
    message = activation_message_bytes(batch.tokens, batch.model.hidden_size, batch.training.activation_bytes)
    group = batch.group("tp")
    pair = batch.collective(Collective.all_gather, message, group) + batch.collective(Collective.reduce_scatter, message, group)
    allreduce = batch.collective(Collective.all_reduce, message, group)
    one = np.where(t.sp == 1, pair, allreduce)
    return 2 * one * (1 - np.where(t.tp_overlap == 1, prm.comm.tp_overlap, 0.0))


def cp_comm_seconds(batch: Batch) -> np.ndarray:
    """Forward CP traffic of one layer (seed 000 'Параллелизм по контексту: Ring Attention
    против Ulysses'): ring passes the local K, V chunk cp - 1 times; Ulysses runs two AllToAll
    (q, k, v in; output back); hybrid is Ulysses inside a node and ring across nodes."""
    m, t, B, T = batch.model, batch.tab, batch.training.activation_bytes, batch.tokens
    group = batch.group("cp")
    kv = kv_heads_per_rank(batch)
    chunk = 2 * B * T * kv * m.head_size
    ring = (t.cp - 1) * batch.collective(Collective.send_recv, chunk, batch.neighbour(group))
    qkv = B * T * (m.num_attention_heads / t.tp + 2 * kv) * m.head_size
    out = B * T * m.num_attention_heads / t.tp * m.head_size
    ulysses = batch.collective(Collective.all_to_all, qkv, group) + batch.collective(Collective.all_to_all, out, group)
    use_ring = (t.cp_algo == RING) | ((t.cp_algo == HYBRID) & (group.nodes > 1))
    return np.where(t.cp > 1, np.where(use_ring, ring, ulysses), 0.0), use_ring


def _cp_exposed(batch: Batch, attn_seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exposed CP seconds (forward, backward). Ring passes hide behind the attention of the
    chunk in hand when S/cp >= FLOP/s / link bandwidth; the backward moves K, V and their
    gradients (2x) behind ~2.5x the forward attention work."""
    comm, use_ring = cp_comm_seconds(batch)
    fwd = np.where(use_ring, np.maximum(0.0, comm - attn_seconds), comm)
    bwd = np.where(use_ring, np.maximum(0.0, 2 * comm - 2.5 * attn_seconds), comm)
    return fwd, bwd


def layer_parts(batch: Batch, index: int) -> dict[str, np.ndarray]:
    """Per-micro-batch seconds of one layer by breakdown part (forward + backward), plus the
    pieces recompute and the pipeline need."""
    f = layer_forward(batch, index)
    w = batch.wgrad
    layer_fwd = f["gemm"] + f["attn"] + f["elem"] + f["tp"] + f["cp"] + f["ep"]
    return {
        "compute_gemm": (2 + w) * f["gemm"],
        "compute_attention": 3.5 * f["attn"],  # flash backward ~2.5x the forward
        "compute_elementwise": 3 * f["elem"],
        "tp_comm": 2 * f["tp"],
        "cp_comm": f["cp"] + f["cp_bwd"],
        "ep_comm": 2 * f["ep"],
        "fwd": layer_fwd,
        "bwd": (1 + w) * f["gemm"] + 2 * (f["elem"] + f["tp"] + f["ep"]) + 2.5 * f["attn"] + f["cp_bwd"],
        "flops": (2 + w) * f["gemm_flops"] + 3 * f["attn_flops_counted"],
        "fwd_flops": f["gemm_flops"] + f["attn_flops_counted"],
        "attn_fwd": f["attn"],
        "attn_flops": f["attn_flops_counted"],
    }
