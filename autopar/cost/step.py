"""One training step: compute, exposed communication, pipeline bubble, DP, optimizer
(DESIGN.md 'Step'; Narayanan et al. 2021 section 3; seed 000 'Гибридный параллелизм').

Step = pipeline(m x critical stage per-micro-batch time + fill/drain) + exposed DP
       + optimizer step + fixed overhead. Per-micro-batch stage time = GEMMs + attention
       + element-wise + recompute + exposed TP/CP/EP/PP/FSDP communication.
"""

from __future__ import annotations

from autopar.cost.comm import Collective, Group, collective_seconds
from autopar.cost.flops import activation_message_bytes, attention_core_flops_per_token, layer_gemms, layer_params, logits_gemm, model_flops_per_token
from autopar.cost.gemm import gemm_seconds
from autopar.cost.memory import memory_breakdown, recomputed_layers, stage_params
from autopar.cost.pipeline import bubble_fraction, pipeline_seconds
from autopar.cost.setup import Setup
from autopar.specs.costparams import CostParams, load_cost_params
from autopar.specs.estimate import Bottleneck, Estimate
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import CpAlgo, Plan, Recompute
from autopar.specs.training import TrainingSpec

MICROBATCH_PARTS = ("compute_gemm", "compute_attention", "compute_elementwise", "recompute",
                    "tp_comm", "cp_comm", "ep_comm", "pp_comm", "fsdp_comm")


def _hbm_seconds(s: Setup, num_bytes: float) -> float:
    return num_bytes / (s.cluster.gpu.hbm_bytes_per_second * s.params.memory.hbm_efficiency)


def _layer_forward(s: Setup, index: int) -> dict[str, float]:
    """Forward seconds (and flops) of one layer for one micro-batch on one GPU."""
    m, p, tr, prm = s.model, s.plan, s.training, s.params
    gpu, dtype = s.cluster.gpu, tr.precision.gemm_dtype
    T, t, B = s.tokens_per_microbatch, p.tp, tr.activation_bytes
    gemms = layer_gemms(m, index, T, t, p.ep, p.expert_tp)
    out = {"gemm": sum(gemm_seconds(g.m, g.n, g.k, dtype, gpu, prm) * g.count for g in gemms)}
    # fp8/fp4 GEMMs cast their bf16 inputs (forward: activations M x K; backward: output
    # gradients M x N) -- memory-bound work on top of the GEMM (Transformer Engine)
    cast = prm.memory.low_precision_cast_bytes_per_element if dtype in ("fp8", "fp4") else 0.0
    cast_bytes = cast * sum((g.m * g.k + g.m * g.n) * g.count for g in gemms)
    out["gemm_flops"] = sum(g.flops for g in gemms)
    flash = tr.flash_attention
    attn_flops = attention_core_flops_per_token(m, tr.seq_len, causal=flash) * T / t
    out["attn_flops"] = attn_flops
    if flash:
        out["attn"] = attn_flops / (gpu.peak_flops_per_second("bf16") * prm.attention.flash_efficiency)
    else:  # batched GEMMs over the full score matrix plus memory-bound softmax
        per_head = gemm_seconds(T, tr.seq_len, m.head_size, "bf16", gpu, prm) * 2
        scores = m.num_attention_heads / t * T * tr.seq_len
        out["attn"] = per_head * m.num_attention_heads / t + _hbm_seconds(s, scores * prm.attention.unfused_extra_bytes_per_score)
    if m.is_moe_layer(index):
        f_act = m.moe_top_k * (m.moe_ffn_hidden_size or 0) / p.expert_tp + m.moe_shared_expert_ffn_size / t
    else:
        f_act = m.ffn_hidden_size / t
    elem_bytes = prm.memory.elementwise_bytes_per_token_per_hidden * T * m.hidden_size / s.sp_divisor + 3 * B * T * f_act
    out["elem"] = _hbm_seconds(s, elem_bytes + cast_bytes / 3)  # x3 below: fwd + bwd share the casts
    # TP / SP: two AllReduce (or AllGather + ReduceScatter pairs) of B T h per layer
    tp_op = Collective.all_gather if p.sequence_parallel else Collective.all_reduce
    message = activation_message_bytes(T, m.hidden_size, B)
    tp_one = collective_seconds(tp_op, message, s.group("tp"), s.cluster, prm)
    if p.sequence_parallel:
        tp_one += collective_seconds(Collective.reduce_scatter, message, s.group("tp"), s.cluster, prm)
    out["tp"] = 2 * tp_one * (1 - (prm.comm.tp_overlap if p.tp_comm_overlap else 0.0))
    out["cp"], out["cp_bwd"] = _cp_exposed(s, out["attn"])
    if m.is_moe_layer(index) and p.ep > 1:
        a2a = collective_seconds(Collective.all_to_all, B * T * m.moe_top_k * m.hidden_size, s.group("ep"), s.cluster, prm)
        out["ep"] = 2 * a2a * (1 - prm.comm.ep_overlap)
    else:
        out["ep"] = 0.0
    return out


def _cp_comm(s: Setup) -> float:
    """Forward CP traffic of one layer (seed 000 'Параллелизм по контексту: Ring Attention против Ulysses')."""
    m, p, B, T = s.model, s.plan, s.training.activation_bytes, s.tokens_per_microbatch
    if p.cp == 1:
        return 0.0
    kv_per_rank = max(m.kv_heads, p.tp) / p.tp
    group = s.group("cp")
    if p.cp_algo == CpAlgo.ulysses or (p.cp_algo == CpAlgo.hybrid and group.nodes == 1):
        qkv = B * T * (m.num_attention_heads / p.tp + 2 * kv_per_rank) * m.head_size
        out = B * T * m.num_attention_heads / p.tp * m.head_size
        return collective_seconds(Collective.all_to_all, qkv, group, s.cluster, s.params) + collective_seconds(Collective.all_to_all, out, group, s.cluster, s.params)
    chunk = 2 * B * T * kv_per_rank * m.head_size  # K and V of the local chunk
    hop = collective_seconds(Collective.send_recv, chunk, Group(2, min(2, group.per_node), 1 if group.nodes == 1 else 2), s.cluster, s.params)
    return (p.cp - 1) * hop


def _cp_exposed(s: Setup, attn_seconds: float) -> tuple[float, float]:
    """Exposed CP seconds (forward, backward). Ring passes hide behind the attention of the
    chunk in hand when S/cp >= FLOP/s / link bandwidth (seed 000 'Ring Attention'); the
    backward moves K, V and their gradients (2x) behind ~2.5x the forward attention work."""
    comm = _cp_comm(s)
    if s.plan.cp_algo == CpAlgo.ring or (s.plan.cp_algo == CpAlgo.hybrid and s.group("cp").nodes > 1):
        return max(0.0, comm - attn_seconds), max(0.0, 2 * comm - 2.5 * attn_seconds)
    return comm, comm


def _stage_microbatch(s: Setup, stage: int, layer_cache: dict[int, dict[str, float]]) -> tuple[dict[str, float], float, dict[str, float]]:
    """(per-micro-batch seconds by part, hardware flops, fwd/bwd seconds) of one GPU of `stage`."""
    p, prm, tr = s.plan, s.params, s.training
    parts = dict.fromkeys(MICROBATCH_PARTS, 0.0)
    flops = fwd = bwd = 0.0
    n_recomputed = recomputed_layers(s, stage)
    # backward GEMMs: activation gradients (1x forward) + weight gradients (1x) unless frozen (LoRA)
    wgrad = 0.0 if tr.frozen_weights else 1.0
    for k, index in enumerate(s.stage_layer_indices[stage]):
        lf = layer_cache.get(index)
        if lf is None:
            lf = layer_cache[index] = _layer_forward(s, index)
        parts["compute_gemm"] += (2 + wgrad) * lf["gemm"]
        parts["compute_attention"] += 3.5 * lf["attn"]  # flash backward ~2.5x forward
        parts["compute_elementwise"] += 3 * lf["elem"]
        parts["tp_comm"] += 2 * lf["tp"]
        parts["cp_comm"] += lf["cp"] + lf["cp_bwd"]
        parts["ep_comm"] += 2 * lf["ep"]
        layer_fwd = lf["gemm"] + lf["attn"] + lf["elem"] + lf["tp"] + lf["cp"] + lf["ep"]
        flops += (2 + wgrad) * lf["gemm_flops"] + 3 * lf["attn_flops"]
        fwd += layer_fwd
        bwd += (1 + wgrad) * lf["gemm"] + 2 * (lf["elem"] + lf["tp"] + lf["ep"]) + 2.5 * lf["attn"] + lf["cp_bwd"]
        if k < n_recomputed:
            parts["recompute"] += layer_fwd
            flops += lf["gemm_flops"] + lf["attn_flops"]
        elif p.recompute == Recompute.selective and not tr.flash_attention:
            parts["recompute"] += lf["attn"]
            flops += lf["attn_flops"]
    if stage == p.pp - 1:
        g = logits_gemm(s.model, s.tokens_per_microbatch, p.tp)
        t_logits = gemm_seconds(g.m, g.n, g.k, tr.precision.gemm_dtype, s.cluster.gpu, prm)
        parts["compute_gemm"] += (2 + wgrad) * t_logits
        parts["compute_elementwise"] += 3 * _hbm_seconds(s, 4 * 3 * s.tokens_per_microbatch * s.model.vocab_size / p.tp)
        flops += (2 + wgrad) * g.flops
        fwd += t_logits
        bwd += (1 + wgrad) * t_logits
    if p.pp > 1:
        msg = activation_message_bytes(s.tokens_per_microbatch, s.model.hidden_size, tr.activation_bytes) / s.sp_divisor
        pp_group = s.group("pp")
        hop = collective_seconds(Collective.send_recv, msg, Group(2, min(2, pp_group.per_node), 1 if pp_group.nodes == 1 else 2), s.cluster, prm)
        # one activation send and one gradient send per micro-batch on the critical path; the
        # interleaved schedule's extra chunk boundaries overlap with compute (Megatron overlap_p2p_comm)
        parts["pp_comm"] = 2 * hop
    if p.zero == 3:
        parts["fsdp_comm"] = _fsdp_exposed(s, stage, sum(parts.values()))
    return parts, flops, {"fwd": fwd, "bwd": bwd}


def _fsdp_exposed(s: Setup, stage: int, compute_seconds: float) -> float:
    """ZeRO-3 per micro-batch: AllGather weights in forward and backward, ReduceScatter
    gradients, per layer (seed 000: 'около 3N_L коллективных операций'), prefetched behind compute."""
    tr, p = s.training, s.plan
    group = s.group("dpcp") if p.zero_shard_size is None else Group(p.zero_shard_size, min(p.zero_shard_size, s.cluster.gpus_per_node), max(1, p.zero_shard_size // s.cluster.gpus_per_node))
    total = 0.0
    for index in s.stage_layer_indices[stage]:
        dense, routed = layer_params(s.model, index)
        params = dense / p.tp + routed / (p.ep * p.expert_tp)
        total += 2 * collective_seconds(Collective.all_gather, params * tr.weight_bytes_per_param, group, s.cluster, s.params)
        total += collective_seconds(Collective.reduce_scatter, params * tr.grad_reduce_bytes_per_param, group, s.cluster, s.params)
    return max(total / max(1, len(s.stage_layer_indices[stage])), total - s.params.comm.zero3_overlap * compute_seconds)


def _dp_exposed(s: Setup, stage: int, fwd: float, bwd: float) -> float:
    """Gradient reduction after the last micro-batch, overlapped with its backward
    (Megatron --overlap-grad-reduce); ZeRO-1/2 add the parameter AllGather (overlapped with
    the next step's first forward)."""
    p, tr, prm = s.plan, s.training, s.params
    if p.zero == 3 or s.dp * p.cp == 1 or tr.frozen_weights:
        return 0.0
    dense, routed = stage_params(s, stage)
    ov = prm.comm.dp_overlap
    total = 0.0
    for count, group in ((dense, s.group("dpcp")), (routed, s.group("edp"))):
        if not count or group.size <= 1:
            continue
        if p.zero == 0:
            total += max(0.0, collective_seconds(Collective.all_reduce, count * tr.grad_reduce_bytes_per_param, group, s.cluster, prm) - ov * bwd)
        else:
            rs = collective_seconds(Collective.reduce_scatter, count * tr.grad_reduce_bytes_per_param, group, s.cluster, prm)
            ag = collective_seconds(Collective.all_gather, count * tr.weight_bytes_per_param, group, s.cluster, prm)
            total += max(0.0, rs - ov * bwd) + max(0.0, ag - ov * fwd)
    return total


def _optimizer_seconds(s: Setup, stage: int) -> float:
    if s.training.frozen_weights:
        return 0.0
    dense, routed = stage_params(s, stage)
    if s.plan.zero >= 1:
        dense, routed = dense / s.zero_shard, routed / max(1, s.expert_dp)
    return _hbm_seconds(s, (dense + routed) * s.params.memory.optimizer_bytes_moved_per_param)


def _bottleneck(time: dict[str, float]) -> Bottleneck:
    groups = {
        Bottleneck.compute: time["compute_gemm"] + time["compute_attention"] + time["recompute"],
        Bottleneck.memory: time["compute_elementwise"] + time["optimizer_step"],
        Bottleneck.communication: sum(time[k] for k in ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "fsdp_comm", "dp_comm")),
        Bottleneck.bubble: time["pipeline_bubble"],
        Bottleneck.coordination: time["step_overhead"],
    }
    return max(groups, key=lambda k: groups[k])


def estimate(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, plan: Plan, params: CostParams | None = None) -> Estimate:
    """Cost one plan. Raises InputError when the plan breaks a structural rule; a plan that
    does not fit in memory comes back with feasible=False and the reasons."""
    s = Setup.build(model, cluster, training, plan, params or load_cost_params())
    p, m = s.plan, s.num_microbatches
    cache: dict[int, dict[str, float]] = {}
    stages = [_stage_microbatch(s, i, cache) for i in range(p.pp)]
    stage_seconds = [sum(parts.values()) for parts, _, _ in stages]
    critical = max(range(p.pp), key=lambda i: stage_seconds[i])
    pipeline = pipeline_seconds(stage_seconds, m, p.vpp, s.schedule)
    time = {k: m * v for k, v in stages[critical][0].items()}
    time["pipeline_bubble"] = pipeline - m * stage_seconds[critical]
    time["dp_comm"] = max(_dp_exposed(s, i, st[2]["fwd"], st[2]["bwd"]) for i, st in enumerate(stages))
    time["optimizer_step"] = max(_optimizer_seconds(s, i) for i in range(p.pp))
    time["step_overhead"] = s.params.step_overhead_seconds
    step = sum(time.values())

    mems = [memory_breakdown(s, i, training.flash_attention) for i in range(p.pp)]
    totals = [sum(b.values()) for b in mems]
    worst = max(range(p.pp), key=lambda i: totals[i])
    reasons = []
    if totals[worst] > cluster.gpu.hbm_bytes:
        reasons.append(f"memory: needs {totals[worst] / 1e9:.1f} GB per GPU on stage {worst}, HBM is {cluster.gpu.hbm_bytes / 1e9:.0f} GB")
    if p.tp * p.cp > cluster.gpus_per_node and p.tp > cluster.gpus_per_node:
        reasons.append(f"tp={p.tp} spans nodes: the NVLink domain has {cluster.gpus_per_node} GPUs")

    tokens = training.tokens_per_step
    model_flops = model_flops_per_token(model, training.seq_len, frozen_weights=training.frozen_weights) * tokens
    hw_flops = m * s.dp * p.cp * p.tp * sum(f for _, f, _ in stages)
    peak = cluster.gpu.peak_flops_per_second(training.precision.gemm_dtype) * cluster.num_gpus
    tps = tokens / step
    ttt = training.target_tokens / tps if training.target_tokens else None
    price = cluster.price_usd_per_gpu_hour
    return Estimate(
        plan=p.text(), feasible=not reasons, reasons=reasons, num_gpus=cluster.num_gpus, dp=s.dp,
        num_microbatches=m, stage_layers=s.stage_layers, step_seconds=step,
        tokens_per_second=tps, tokens_per_second_per_gpu=tps / cluster.num_gpus,
        model_flops_per_step=model_flops, hardware_flops_per_step=hw_flops,
        model_tflops_per_gpu=model_flops / step / cluster.num_gpus / 1e12,
        mfu=model_flops / step / peak, hfu=hw_flops / step / peak,
        bubble_fraction=time["pipeline_bubble"] / pipeline if pipeline else 0.0,
        memory_bytes_per_gpu=totals[worst], memory_capacity_bytes=cluster.gpu.hbm_bytes, worst_stage=worst,
        memory_breakdown=mems[worst], time_breakdown=time, bottleneck=_bottleneck(time),
        time_to_train_seconds=ttt,
        cost_usd=ttt / 3600 * price * cluster.num_gpus if ttt is not None and price is not None else None,
    )


__all__ = ["bubble_fraction", "estimate"]
