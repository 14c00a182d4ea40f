"""Megatron-Bridge: recipe overrides (cfg.model.*, cfg.train.*, cfg.dataset.seq_length,
cfg.ddp.*, mixed precision) as a runnable Python script and as YAML overrides.

Names and rules: shared/reference/launchers.md section 4.2 (Megatron-Bridge 067f987d). Bridge
checks world/DP, the eval batch, CP sequence length and the PP dtype itself and delegates the
rest to Megatron Core, so the Megatron-LM rules are applied to the same plan as well.
"""

from __future__ import annotations

from autopar.emit.common import Artefact, EmitJob, Rules, check_common, comment_block, header_lines, rendezvous_block, uneven_first_last
from autopar.emit.megatron import (
    CP_COMM_TYPE, FSDP_STRATEGY, check_megatron, hierarchical_cp_sizes, max_position_embeddings, needs_max_connections_1,
    stage_layout_string,
)
from autopar.specs.plan import CpAlgo, Recompute
from autopar.specs.training import Precision

FRAMEWORK = "megatron-bridge"

# autopar model name -> (recipe module, recipe function)
RECIPES = {
    "llama3-8b": ("megatron.bridge.recipes.llama", "llama3_8b_pretrain_config"),
    "llama3-70b": ("megatron.bridge.recipes.llama", "llama3_70b_pretrain_config"),
    "llama3-405b": ("megatron.bridge.recipes.llama", "llama31_405b_pretrain_config"),
    "deepseek-v3": ("megatron.bridge.recipes.deepseek", "deepseek_v3_pretrain_config"),
}


def recipe_for(job: EmitJob) -> tuple[str, str]:
    m = job.model
    if m.name in RECIPES:
        return RECIPES[m.name]
    if m.mla is not None:
        return RECIPES["deepseek-v3"]
    if m.is_moe:
        return "megatron.bridge.recipes.qwen", "qwen3_30b_a3b_pretrain_config"
    return RECIPES["llama3-8b"]


def precision_name(job: EmitJob) -> str:
    """A mixed-precision recipe name registered in megatron/bridge/training/mixed_precision.py."""
    p, blackwell = job.training.precision, job.cluster.gpu.compute_capability >= 10
    if p == Precision.fp16:
        return "fp16_mixed"
    if p == Precision.fp8:
        return "bf16_with_mxfp8_mixed" if blackwell else "bf16_with_fp8_delayed_scaling_mixed"
    if p == Precision.fp4:
        return "bf16_with_nvfp4_mixed"
    return "bf16_mixed"


def _model_overrides(job: EmitJob) -> dict:
    plan, m, t = job.plan, job.model, job.training
    o: dict = {
        "model.tensor_model_parallel_size": plan.tp,
        "model.pipeline_model_parallel_size": plan.pp,
        "model.context_parallel_size": plan.cp,
        "model.sequence_parallel": plan.sequence_parallel,
        "model.seq_length": t.seq_len,
    }
    if plan.pp > 1:
        o["model.pipeline_dtype"] = "torch.float16" if t.precision == Precision.fp16 else "torch.bfloat16"
        stages = plan.layers_per_stage(m.num_layers)
        try:
            ends = uneven_first_last(stages)
            layout = ends is not None and (ends[0] % plan.vpp or ends[1] % plan.vpp)
        except ValueError:
            ends, layout = None, True
        if layout:
            o["model.pipeline_model_parallel_layout"] = stage_layout_string(stages, plan.vpp)
            o["model.virtual_pipeline_model_parallel_size"] = None
        else:
            o["model.virtual_pipeline_model_parallel_size"] = plan.vpp if plan.vpp > 1 else None
            if ends is not None:
                o["model.num_layers_in_first_pipeline_stage"] = ends[0]
                o["model.num_layers_in_last_pipeline_stage"] = ends[1]
    if plan.cp > 1:
        o["model.cp_comm_type"] = CP_COMM_TYPE[plan.cp_algo]
        if plan.cp_algo == CpAlgo.hybrid:
            o["model.hierarchical_context_parallel_sizes"] = list(hierarchical_cp_sizes(job))
    if m.is_moe:
        o["model.expert_model_parallel_size"] = plan.ep
        o["model.expert_tensor_parallel_size"] = plan.expert_tp
    if plan.recompute == Recompute.selective:
        o.update({"model.recompute_granularity": "selective", "model.recompute_method": None, "model.recompute_num_layers": None})
    elif plan.recompute == Recompute.full:
        n = plan.recompute_num_layers
        o.update({"model.recompute_granularity": "full", "model.recompute_method": "uniform" if n is None else "block",
                  "model.recompute_num_layers": 1 if n is None else max(1, n // plan.vpp)})
    else:
        o["model.recompute_granularity"] = None
    # The recipe's provider is resized to the autopar ModelSpec (a no-op for a matching recipe).
    o.update({"model.num_layers": m.num_layers, "model.hidden_size": m.hidden_size, "model.ffn_hidden_size": m.ffn_hidden_size,
              "model.num_attention_heads": m.num_attention_heads, "model.vocab_size": m.vocab_size,
              "model.max_position_embeddings": max_position_embeddings(m, t.seq_len)})
    o["model.gated_linear_unit"] = m.gated_mlp
    o["model.share_embeddings_and_output_weights"] = m.tied_embeddings
    if m.mla is None:
        o["model.num_query_groups"] = m.kv_heads
        o["model.kv_channels"] = m.head_size
    else:  # MLATransformerConfig names
        o.update({"model.q_lora_rank": m.mla.q_lora_rank, "model.kv_lora_rank": m.mla.kv_lora_rank,
                  "model.qk_head_dim": m.mla.qk_nope_head_dim, "model.qk_pos_emb_head_dim": m.mla.qk_rope_head_dim,
                  "model.v_head_dim": m.mla.v_head_dim})
    if m.is_moe:
        o.update({"model.num_moe_experts": m.num_experts, "model.moe_router_topk": m.moe_top_k,
                  "model.moe_ffn_hidden_size": m.moe_ffn_hidden_size,
                  "model.moe_shared_expert_intermediate_size": m.moe_shared_expert_ffn_size or None,
                  "model.moe_layer_freq": [int(m.is_moe_layer(i)) for i in range(m.num_layers)]})
    return o


def bridge_overrides(job: EmitJob) -> dict:
    """Dotted ConfigContainer paths -> values."""
    plan, t = job.plan, job.training
    o = _model_overrides(job)
    o.update({
        "train.micro_batch_size": plan.mbs,
        "train.global_batch_size": t.global_batch_size,
        "train.train_iters": 1000,
        "dataset.seq_length": t.seq_len,
        "mixed_precision": precision_name(job),
        "ddp.use_distributed_optimizer": plan.zero >= 1,
        "optimizer.use_distributed_optimizer": plan.zero >= 1,
        "ddp.overlap_grad_reduce": True,
        "ddp.overlap_param_gather": plan.zero >= 1,
        "ddp.grad_reduce_in_fp32": t.grad_reduce_bytes_per_param >= 4,
        "ddp.use_megatron_fsdp": plan.zero >= 2,
        "dist.use_tp_pp_dp_mapping": plan.order.value == "tp-cp-ep-pp-dp",
    })
    if plan.zero >= 2:
        o["ddp.data_parallel_sharding_strategy"] = FSDP_STRATEGY[plan.zero]
        o["checkpoint.ckpt_format"] = "fsdp_dtensor"
    if plan.zero >= 1 and plan.zero_shard_size is not None and (job.dp * plan.cp) // plan.zero_shard_size > 1:
        o["ddp.num_distributed_optimizer_instances"] = (job.dp * plan.cp) // plan.zero_shard_size
    o["comm_overlap.tp_comm_overlap"] = plan.tp > 1 and plan.tp_comm_overlap
    return o


def validate_bridge(o: dict, world: int, rules: Rules) -> Rules:
    """Bridge's own checks (MB get_data_parallel_size, validate; MPC __post_init__)."""
    tp, pp, cp = o["model.tensor_model_parallel_size"], o["model.pipeline_model_parallel_size"], o["model.context_parallel_size"]
    if rules.check(world % (tp * pp * cp) == 0, "world % (TP*PP*CP) == 0", f"world({world}) % {tp * pp * cp}", "MB"):
        dp = world // (tp * pp * cp)
        mbs, gbs = o["train.micro_batch_size"], o["train.global_batch_size"]
        rules.check(gbs % (mbs * dp) == 0, "GBS % (MBS * DP) == 0 (eval batch defaults to the train batch)",
                    f"{gbs} % ({mbs} * {dp}) = {gbs % (mbs * dp)}", "MB")
    if cp > 1:
        seq = o["model.seq_length"]
        rules.check(seq % (2 * cp) == 0, "model.seq_length % (2*CP) == 0", f"{seq} % {2 * cp}", "MB")
    if pp > 1:
        rules.check(o.get("model.pipeline_dtype") is not None, "pipeline_dtype is required for PP > 1", "model.pipeline_dtype unset", "MPC")
    rules.check(o["model.seq_length"] == o["dataset.seq_length"], "model.seq_length == dataset.seq_length",
                f"{o['model.seq_length']} != {o['dataset.seq_length']}", "MB")
    iters = [k for k in ("train.train_iters", "train.train_samples", "train.num_epochs") if o.get(k) is not None]
    rules.check(len(iters) == 1, "exactly one of train_iters, train_samples, num_epochs", f"set: {iters}", "MB TrainingConfig.finalize")
    if o.get("model.cp_comm_type") == "a2a+p2p":
        sizes = o.get("model.hierarchical_context_parallel_sizes") or []
        prod = 1
        for s in sizes:
            prod *= s
        rules.check(prod == cp, "a2a+p2p needs hierarchical CP sizes whose product is CP", f"{sizes}, cp={cp}", "MB")
    return rules


def check_bridge(job: EmitJob) -> tuple[Rules, dict | None]:
    rules = Rules(FRAMEWORK)
    check_common(job, rules)
    if rules.found:
        return rules, None
    o = bridge_overrides(job)
    validate_bridge(o, job.num_gpus, rules)
    for v in check_megatron(job).found:  # delegated to Megatron Core
        if v not in rules.found and v.rule != "pretraining only":
            rules.found.append(v)
    return rules, o


def _yaml_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"  # flow style: ints only
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def render_yaml(job: EmitJob, o: dict) -> str:
    notes = ["YAML overrides for a Megatron-Bridge recipe script (e.g. examples/.../pretrain_*.py --config-file this.yaml).",
             "comm_overlap must be a CommOverlapConfig in the recipe for comm_overlap.tp_comm_overlap to apply."]
    sections: dict[str, list[str]] = {}
    top: list[str] = []
    for key, value in o.items():
        if "." in key:
            head, rest = key.split(".", 1)
            sections.setdefault(head, []).append(f"  {rest}: {_yaml_value(value)}")
        else:
            top.append(f"{key}: {_yaml_value(value)}")
    body = "".join(f"{name}:\n" + "\n".join(lines) + "\n" for name, lines in sections.items())
    return comment_block(header_lines(job, FRAMEWORK, notes)) + body + "\n".join(top) + "\n"


def _py_value(key: str, value: object) -> str:
    if key == "model.pipeline_dtype" and isinstance(value, str):
        return value  # torch.bfloat16
    return repr(value)


def render_script(job: EmitJob, o: dict) -> str:
    module, fn = recipe_for(job)
    notes = [f"Recipe: {module}.{fn}(); the overrides below resize and re-plan it.",
             "Launch with launch_megatron_bridge.sh (torchrun on every node)."]
    if job.model.name not in RECIPES:
        notes.append(f"No Megatron-Bridge recipe for {job.model.name}: check the settings autopar does not model "
                     "(normalization, qk-layernorm, router scoring, RoPE) against your checkpoint.")
    lines = "\n".join(f"    {k!r}: {_py_value(k, v)}," for k, v in o.items())
    return f'''{comment_block(header_lines(job, FRAMEWORK, notes)).rstrip()}
"""Megatron-Bridge pretraining with the autopar plan applied to the {fn} recipe."""

import torch

from {module} import {fn}
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.gpt_step import forward_step
from megatron.bridge.training.pretrain import pretrain

OVERRIDES = {{
{lines}
}}


def apply_overrides(cfg, overrides):
    for path, value in overrides.items():
        *parents, name = path.split(".")
        target = cfg
        for part in parents:
            if getattr(target, part) is None and part == "comm_overlap":
                setattr(target, part, CommOverlapConfig(tp_comm_overlap=False))
            target = getattr(target, part)
        setattr(target, name, value)
    return cfg


def autopar_config():
    return apply_overrides({fn}(), OVERRIDES)


if __name__ == "__main__":
    pretrain(autopar_config(), forward_step)
'''


def render_launcher(job: EmitJob) -> str:
    env = "export CUDA_DEVICE_MAX_CONNECTIONS=1  # tp or cp > 1 before Blackwell (Megatron Core)\n" if needs_max_connections_1(job) else ""
    return f"""#!/usr/bin/env bash
{comment_block(header_lines(job, FRAMEWORK)).rstrip()}
set -euo pipefail
HERE=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)
{rendezvous_block(job)}
{env}
exec python -m torch.distributed.run --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE" --node-rank "$NODE_RANK" \\
  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$HERE/pretrain_megatron_bridge.py" "$@"
"""


def emit_bridge(job: EmitJob) -> list[Artefact]:
    rules, o = check_bridge(job)
    rules.refuse_if_any(job.plan.text())
    return [
        Artefact("pretrain_megatron_bridge.py", render_script(job, o)),
        Artefact("megatron_bridge_overrides.yaml", render_yaml(job, o)),
        Artefact("launch_megatron_bridge.sh", render_launcher(job), executable=True),
    ]
