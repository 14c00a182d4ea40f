"""What a plan means, and what each framework's own code makes of an emitted artefact.

`planned(job)` states the plan in framework-neutral terms; `resolve(fmt, folder, job)` loads the
artefacts of one format with that framework's config code (Megatron-LM parse_args/validate_args
and Megatron Core, DeepSpeed's DeepSpeedConfig and sequence-parallel groups, torchtitan's
ConfigManager/ParallelDims/pipeline split, Megatron-Bridge's recipe, runtime_config_update and
Megatron Core) and returns the same keys as the framework resolved them. The integration tests
compare the two; tests/emit/framework_report.py turns the outcomes into results/emit/.
"""

from __future__ import annotations

from autopar.cost.flops import total_params
from autopar.emit.common import EmitJob
from autopar.specs.plan import Recompute

# Keys every format must resolve (a framework that cannot express one refuses the plan instead)
CORE_KEYS = ("tp", "pp", "cp", "dp", "vpp", "mbs", "gbs", "microbatches", "rank_layers", "precision",
             "reduce_fp32", "recompute", "recompute_layers", "schedule")
MOE_KEYS = ("ep", "etp", "dispatcher", "experts", "topk", "router_score", "router_expert_bias", "router_groups",
            "router_group_topk", "mtp_layers")


def recomputed_per_rank(job: EmitJob) -> list[int]:
    """Layers each pipeline rank recomputes in full (0 without full recompute)."""
    plan, model = job.plan, job.model
    ranks = plan.model_layout(model).rank_decoders()
    if plan.recompute != Recompute.full:
        return [0] * plan.pp
    if plan.stage_recompute_layers is not None:
        return [min(n, r) for n, r in zip(plan.stage_recompute_layers, ranks)]
    if plan.recompute_num_layers is not None:
        return [min(plan.recompute_num_layers, r) for r in ranks]
    return ranks


def planned(job: EmitJob) -> dict:
    """The plan's values under the keys the resolvers use."""
    plan, model, t = job.plan, job.model, job.training
    out = {
        "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "dp": job.dp, "vpp": plan.vpp, "mbs": plan.mbs,
        "gbs": t.global_batch_size, "microbatches": job.num_microbatches,
        "rank_layers": plan.model_layout(model).rank_decoders(),
        "precision": t.precision.value, "reduce_fp32": t.grad_reduce_bytes_per_param >= 4,
        "recompute": plan.recompute.value, "recompute_layers": recomputed_per_rank(job),
        "schedule": plan.pipeline_schedule.value, "zero": plan.zero,
    }
    if plan.zero == 3:
        out["reshard"] = plan.reshard_after_forward
    if model.position_embedding == "rope":  # the RoPE frequency scaling the layers build (HF type; None = unscaled)
        out["rope_scaling"] = model.rope_scaling.type if model.rope_scaling is not None else None
        out["rope_theta"] = model.rope_theta
    # the MLP the layers build: gated or not, and the activation (HF ACT2FN name)
    out["mlp"] = f"{'gated ' if model.gated_mlp else ''}{model.activation}"
    out["params"] = int(total_params(model))  # autopar's count of the network's weights
    if t.precision.value == "fp8":  # the recipe that runs (the spec's, else the stack's), every layer in FP8
        out["fp8_recipe"] = t.fp8_scaling.value
        out["fp8_bf16_end_layers"] = False
    if plan.cp > 1:
        out["cp_algo"] = plan.cp_algo.value
    if plan.tp > 1 and plan.tp_comm_overlap:
        out["async_tp_compiled"] = True  # torchtitan: async TP runs only with the model compiled
    if model.hybrid_layer_pattern is not None:  # one block per layer: the letters each layer builds
        out["layer_pattern"] = model.hybrid_layer_pattern
        out["mtp_pattern"] = model.mtp_hybrid_blocks if model.mtp_num_layers else None
    if model.mamba is not None:
        out["mamba"] = (model.mamba.num_heads, model.mamba.head_dim, model.mamba.state_dim, model.mamba.num_groups)
    if model.is_moe:
        out.update({
            "ep": plan.ep, "etp": plan.expert_tp, "dispatcher": plan.dispatcher.value, "experts": model.num_experts,
            "topk": model.moe_top_k, "router_score": model.moe_router_score_function.value,
            "router_expert_bias": model.moe_router_expert_bias, "router_groups": model.moe_router_num_groups,
            "router_group_topk": model.moe_router_group_topk, "mtp_layers": model.mtp_num_layers,
            "moe_layers": [int(model.is_moe_layer(i)) for i in range(model.num_layers)],
            "moe_latent": model.moe_latent_size,  # LatentMoE's expert width (None: the model width)
        })
    return out


def differences(expected: dict, resolved: dict) -> list[str]:
    """'key: plan X, framework Y' for every key the framework resolved differently."""
    return [f"{k}: plan {expected[k]!r}, framework {resolved[k]!r}" for k in sorted(resolved)
            if k in expected and resolved[k] != expected[k]]


def missing_keys(job: EmitJob, resolved: dict) -> list[str]:
    """Keys the plan needs that the framework's resolution did not produce."""
    need = CORE_KEYS + (MOE_KEYS if job.model.is_moe else ())
    return [k for k in need if k not in resolved]
