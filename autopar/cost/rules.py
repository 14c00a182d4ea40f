"""Structural rules a plan must satisfy before it can be costed (DESIGN.md 'The plan space';
shared/reference/launchers.md 1.4 for Megatron-LM's own checks). Each violation names the
field, its value and the rule."""

from __future__ import annotations

from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import CpAlgo, Plan, Schedule
from autopar.specs.training import TrainingSpec


def plan_violations(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, plan: Plan) -> list[tuple[str, object, str]]:
    """(field, value, rule) for every broken rule; empty when the plan can be built."""
    out: list[tuple[str, object, str]] = []
    n = cluster.num_gpus
    mp = plan.tp * plan.cp * plan.pp
    if n % mp:
        out.append(("plan", plan.text(), f"tp({plan.tp}) * cp({plan.cp}) * pp({plan.pp}) = {mp} does not divide GPUs({n})"))
        return out
    dp = n // mp
    if plan.dp is not None and plan.dp != dp:
        out.append(("plan.dp", plan.dp, f"tp({plan.tp}) * cp({plan.cp}) * pp({plan.pp}) * dp({plan.dp}) = {mp * plan.dp} != GPUs({n})"))
        return out
    a, g = model.num_attention_heads, model.kv_heads
    if a % plan.tp:
        out.append(("plan.tp", plan.tp, f"must divide num_attention_heads={a}"))
    if model.mla is None and g % plan.tp and plan.tp % g:
        out.append(("plan.tp", plan.tp, f"num_kv_heads={g} and tp must divide one another"))
    if model.ffn_hidden_size % plan.tp:
        out.append(("plan.tp", plan.tp, f"must divide ffn_hidden_size={model.ffn_hidden_size}"))
    if plan.cp > 1:
        if training.seq_len % (2 * plan.cp):
            out.append(("plan.cp", plan.cp, f"seq_len={training.seq_len} must divide by 2*cp (causal load balance)"))
        if plan.cp_algo == CpAlgo.ulysses and (a % plan.cp or plan.cp > g):
            out.append(("plan.cp", plan.cp, f"ulysses needs num_attention_heads={a} % cp == 0 and cp <= num_kv_heads={g}"))
    if plan.sequence_parallel and (training.seq_len // plan.cp) % plan.tp:
        out.append(("plan.sp", "on", f"seq_len/cp={training.seq_len // plan.cp} must divide by tp={plan.tp}"))
    if plan.ep > 1 or plan.etp not in (None, plan.tp):
        if not model.is_moe:
            out.append(("plan.ep", plan.ep, "expert parallelism needs a MoE model (num_experts > 0)"))
        else:
            if model.num_experts % plan.ep:
                out.append(("plan.ep", plan.ep, f"must divide num_experts={model.num_experts}"))
            if (dp * plan.cp * plan.tp) % (plan.ep * plan.expert_tp):
                out.append(("plan.ep", plan.ep, f"ep*etp={plan.ep * plan.expert_tp} must divide dp*cp*tp={dp * plan.cp * plan.tp} (experts borrow data-parallel ranks)"))
    if model.is_moe and (model.moe_ffn_hidden_size or 0) % plan.expert_tp:
        out.append(("plan.etp", plan.expert_tp, f"must divide moe_ffn_hidden_size={model.moe_ffn_hidden_size}"))
    if plan.pp > model.num_layers:
        out.append(("plan.pp", plan.pp, f"more stages than num_layers={model.num_layers}"))
    elif plan.vpp > 1:
        stages = plan.layers_per_stage(model.num_layers)
        if any(s % plan.vpp for s in stages):
            out.append(("plan.vpp", plan.vpp, f"must divide the layers of every stage {sorted(set(stages))}"))
    if training.global_batch_size % (dp * plan.mbs):
        out.append(("plan.mbs", plan.mbs, f"global_batch_size={training.global_batch_size} must divide by dp({dp}) * mbs({plan.mbs})"))
    else:
        m = training.global_batch_size // (dp * plan.mbs)
        if plan.pipeline_schedule == Schedule.interleaved and (m % plan.pp or m < plan.pp):
            out.append(("plan.vpp", plan.vpp, f"interleaved schedule needs micro-batches({m}) % pp({plan.pp}) == 0 and >= pp"))
    if plan.zero >= 2 and plan.pp > 1:
        out.append(("plan.zero", plan.zero, "ZeRO-2/3 with pp > 1 is not offered by the frameworks (DeepSpeed rejects it)"))
    if plan.zero_shard_size is not None and (dp * plan.cp) % plan.zero_shard_size:
        out.append(("plan.zero_shard_size", plan.zero_shard_size, f"must divide dp*cp={dp * plan.cp}"))
    if plan.recompute_num_layers is not None and plan.recompute.value != "full":
        out.append(("plan.recompute_num_layers", plan.recompute_num_layers, "needs recompute=full"))
    if not training.precision.value in ("bf16", "fp16") and not cluster.gpu.supports(training.precision.value):
        out.append(("precision", training.precision.value, f"{cluster.gpu.name} has no {training.precision.value} tensor cores"))
    return out
