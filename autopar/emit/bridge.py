"""Megatron-Bridge: recipe overrides (cfg.model.*, cfg.train.*, cfg.dataset.seq_length,
cfg.ddp.*) plus the mixed-precision and comm-overlap objects, as a runnable Python script.
Every recipe default that changes the plan is set explicitly: the pipeline layout, uneven stages
and account_for_* split, MTP layers, MoE dispatcher and router, and the precision recipe's
grad_reduce_in_fp32 (Bridge's runtime_config_update applies the precision recipe over cfg.ddp).
YAML overrides are not written: merged into a recipe whose comm_overlap or mixed_precision is not
a dataclass they become plain dicts (a crash), and they cannot carry the precision object.

Names and rules: docs/reference/launchers.md section 4.2 (Megatron-Bridge 067f987d). Bridge
checks world/DP, the eval batch, CP sequence length and the PP dtype itself and delegates the
rest to Megatron Core, so the Megatron-LM rules are applied to the same plan as well.
"""

from __future__ import annotations

from autopar.emit.common import (
    Artefact, EmitJob, Rules, Violation, check_common, checkpoint_interval_steps, comment_block, fp8_param_gather, header_lines,
    lines_of, rendezvous_block,
)
from autopar.emit.megatron import (
    CLI_ONLY_RULES, CP_COMM_TYPE, FSDP_STRATEGY, _layout_flags, check_megatron, cp_notes, env_lines, fp8_notes, full_recompute_layers,
    hierarchical_cp_sizes,
)
from autopar.emit.megatron_model import DISPATCHER, hybrid_stage_pattern, load_balancing_type
from autopar.emit.presets import preset_of, refuse
from autopar.specs.plan import CpAlgo, RankOrder, Recompute
from autopar.specs.training import Precision

FRAMEWORK = "megatron-bridge"

# autopar preset whose architecture the recipe builds -> (recipe module, recipe function); a
# model matches by its architecture, not its name (autopar.emit.presets)
RECIPES = {
    "llama3-8b": ("megatron.bridge.recipes.llama", "llama3_8b_pretrain_config"),
    "llama3-70b": ("megatron.bridge.recipes.llama", "llama3_70b_pretrain_config"),
    "llama3-405b": ("megatron.bridge.recipes.llama", "llama31_405b_pretrain_config"),
    "deepseek-v3": ("megatron.bridge.recipes.deepseek", "deepseek_v3_pretrain_config"),
    # Qwen3-MoE: AutoBridge providers from the hub config (recipes/qwen/h100/qwen3_moe.py, 067f987 and
    # 0.6.2); for 30B-A3B the 8-GPU recipe, as the generic alias (the 16-GPU one) turns on TE CUDA graphs
    "qwen3-30b-a3b": ("megatron.bridge.recipes.qwen.h100.qwen3_moe", "qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config"),
    "qwen3-235b-a22b": ("megatron.bridge.recipes.qwen", "qwen3_235b_a22b_pretrain_config"),
    # hybrid Mamba-2 models: HybridModelProvider recipes (megatron/bridge/recipes/nemotronh/__init__.py)
    "nemotron-h-8b": ("megatron.bridge.recipes.nemotronh", "nemotronh_8b_pretrain_config"),
    "nemotron-h-56b": ("megatron.bridge.recipes.nemotronh", "nemotronh_56b_pretrain_config"),
    "nemotron-3-nano-30b-a3b": ("megatron.bridge.recipes.nemotronh", "nemotron_3_nano_pretrain_config"),
    "nemotron-3-super-120b-a12b": ("megatron.bridge.recipes.nemotronh", "nemotron_3_super_pretrain_config"),
    "nemotron-3-ultra-550b-a55b": ("megatron.bridge.recipes.nemotronh", "nemotron_3_ultra_pretrain_config"),
}
# Adam state bytes per parameter (TrainingSpec.optimizer_bytes_per_param) -> OptimizerConfig's
# precision-aware dtypes (main params, both moments); the recipes' own choice differs (Nemotron 3
# Super: fp16 main params and bf16 moments, 6 bytes), so it is always written
OPTIMIZER_DTYPES = {12.0: ("float32", "float32"), 10.0: ("float16", "float32"), 8.0: ("float32", "bfloat16"),
                    6.0: ("float16", "bfloat16")}


RECIPE_RULE = "a Megatron-Bridge recipe for the model"


def recipe_preset(model) -> str | None:
    """The preset of RECIPES whose network the model is (an HF config.json of it under any name)."""
    return preset_of(model, tuple(RECIPES))


def recipe_for(job: EmitJob) -> tuple[str, str]:
    return RECIPES[recipe_preset(job.model)]


def model_violations(model) -> list[Violation]:
    """What Megatron-Bridge refuses about the model itself, whatever the plan (checked before a
    search for its plans: autopar.cli.framework)."""
    if recipe_preset(model) is not None:
        return []
    return [Violation(RECIPE_RULE, f"{model.name}: its architecture is none of the presets autopar maps to recipes "
                      f"({', '.join(sorted(RECIPES))}; an HF config.json of one of them matches under any name); another "
                      "recipe would train a different network", "megatron/bridge/recipes")]


def precision_name(job: EmitJob) -> str:
    """A mixed-precision recipe name registered in megatron/bridge/training/mixed_precision.py."""
    p, blackwell = job.training.precision, job.cluster.gpu.compute_capability >= 10
    if p == Precision.fp16:
        return "fp16_mixed"
    if p == Precision.fp8:  # Hopper: TE per-tensor current scaling, as Megatron-LM's launcher (megatron.TE_TENSORWISE_WHY)
        return "bf16_with_mxfp8_mixed" if blackwell else "bf16_with_fp8_current_scaling_mixed"
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
    o.update(_pipeline_overrides(job))
    if plan.cp > 1:
        o["model.cp_comm_type"] = CP_COMM_TYPE[plan.cp_algo]
        if plan.cp_algo == CpAlgo.hybrid:
            o["model.hierarchical_context_parallel_sizes"] = list(hierarchical_cp_sizes(job))
    if m.is_moe:
        o["model.expert_model_parallel_size"] = plan.ep
        o["model.expert_tensor_parallel_size"] = plan.expert_tp
    if plan.recompute == Recompute.selective:
        o.update({"model.recompute_granularity": "selective", "model.recompute_method": None, "model.recompute_num_layers": None})
        if plan.recompute_modules:
            o["model.recompute_modules"] = [m.value for m in plan.recompute_modules]
    elif plan.recompute == Recompute.full:
        n = full_recompute_layers(plan)
        o.update({"model.recompute_granularity": "full", "model.recompute_method": "uniform" if n is None else "block",
                  "model.recompute_num_layers": 1 if n is None else max(1, n // plan.vpp)})
    else:
        o["model.recompute_granularity"] = None
    if plan.offload_num_layers:  # TransformerConfig fields behind --cpu-offloading / --cpu-offloading-num-layers
        o.update({"model.cpu_offloading": True, "model.cpu_offloading_num_layers": plan.offload_num_layers,
                  "model.cpu_offloading_activations": True, "model.cpu_offloading_weights": False})
    if plan.offload_modules:  # TransformerConfig fields behind --fine-grained-activation-offloading / --offload-modules
        o["model.fine_grained_activation_offloading"] = True
        o["model.offload_modules"] = [m.value for m in plan.offload_modules]
    # The recipe's provider is resized to the autopar ModelSpec (a no-op for a matching recipe).
    o.update({"model.num_layers": m.num_layers, "model.hidden_size": m.hidden_size, "model.ffn_hidden_size": m.ffn_hidden_size,
              "model.num_attention_heads": m.num_attention_heads, "model.vocab_size": m.vocab_size})
    o["model.gated_linear_unit"] = m.gated_mlp
    o["model.share_embeddings_and_output_weights"] = m.tied_embeddings
    o["model.layernorm_zero_centered_gamma"] = m.norm_zero_centered_gamma
    if m.position_embedding == "rope" and m.mla is None:
        o["model.rotary_percent"] = m.rotary_percent
    if m.mla is None:
        o["model.num_query_groups"] = m.kv_heads
        o["model.kv_channels"] = m.head_size
    else:  # MLATransformerConfig names
        o.update({"model.q_lora_rank": m.mla.q_lora_rank, "model.kv_lora_rank": m.mla.kv_lora_rank,
                  "model.qk_head_dim": m.mla.qk_nope_head_dim, "model.qk_pos_emb_head_dim": m.mla.qk_rope_head_dim,
                  "model.v_head_dim": m.mla.v_head_dim})
    # recipes carry MTP and MoE defaults of their own (DeepSeek-V3: MTP 1, flex dispatcher): set them all
    o["model.mtp_num_layers"] = m.mtp_num_layers or None
    if m.hybrid_layer_pattern is not None:
        o.update(_hybrid_overrides(job))
    if m.is_moe:
        o.update({"model.num_moe_experts": m.num_experts, "model.moe_router_topk": m.moe_top_k,
                  "model.moe_ffn_hidden_size": m.moe_ffn_hidden_size,
                  "model.moe_shared_expert_intermediate_size": m.moe_shared_expert_ffn_size or None,
                  "model.moe_router_score_function": m.moe_router_score_function.value,
                  "model.moe_router_enable_expert_bias": m.moe_router_expert_bias,
                  "model.moe_router_num_groups": m.moe_router_num_groups, "model.moe_router_group_topk": m.moe_router_group_topk,
                  "model.moe_router_topk_scaling_factor": m.moe_router_topk_scaling_factor,
                  "model.moe_token_dispatcher_type": DISPATCHER[plan.dispatcher],
                  "model.overlap_moe_expert_parallel_comm": plan.ep_overlap, "model.moe_latent_size": m.moe_latent_size})
        # the balance loss as Megatron-LM's launcher sets it (megatron_model.load_balancing_type): Qwen3
        # over the global batch, DeepSeek per sequence; the recipe's own weight is the HF file's or
        # none (Bridge's Qwen3-MoE provider: aux_loss, 1e-3; Mixtral: router_aux_loss_coef)
        balance = load_balancing_type(m)
        if balance is not None:
            o["model.moe_router_load_balancing_type"] = balance
        if m.moe_aux_loss_coeff is not None:
            o["model.moe_aux_loss_coeff"] = m.moe_aux_loss_coeff
        if m.hybrid_layer_pattern is None:  # a hybrid pattern's E letters are its MoE layers
            o["model.moe_layer_freq"] = [int(m.is_moe_layer(i)) for i in range(m.num_layers)]
        if DISPATCHER[plan.dispatcher] == "flex":
            o["model.moe_flex_dispatcher_backend"] = "deepep"
    return o


def _hybrid_overrides(job: EmitJob) -> dict:
    """HybridModelProvider (megatron/bridge/models/hybrid/hybrid_provider.py): the staged main
    pattern (its '|' segments are the pipeline split, as --hybrid-layer-pattern in Megatron-LM);
    finalize() appends '/' + mtp_hybrid_override_pattern once per MTP layer when
    mtp_use_repeated_layer is off (the Super recipe turns it on and runs 2 passes of one module);
    the recipes set the deprecated hybrid_override_pattern, which may not be set beside it."""
    m = job.model
    o: dict = {"model.hybrid_override_pattern": None, "model.hybrid_layer_pattern": hybrid_stage_pattern(job),
               "model.mtp_hybrid_override_pattern": m.mtp_hybrid_blocks if m.mtp_num_layers else None,
               "model.mtp_use_repeated_layer": False}
    if m.mamba is not None:
        o.update({"model.mamba_num_heads": m.mamba.num_heads, "model.mamba_head_dim": m.mamba.head_dim,
                  "model.mamba_state_dim": m.mamba.state_dim, "model.mamba_num_groups": m.mamba.num_groups})
    return o


def _pipeline_overrides(job: EmitJob) -> dict:
    """Every pipeline-split field set explicitly (the recipe may carry a layout, uneven stages or
    account_for_* of its own): the layout string or first/last counts Megatron-LM would get."""
    plan, t = job.plan, job.training
    o: dict = {"model.pipeline_model_parallel_layout": None, "model.virtual_pipeline_model_parallel_size": None,
               "model.num_layers_in_first_pipeline_stage": None, "model.num_layers_in_last_pipeline_stage": None,
               "model.account_for_embedding_in_pipeline_split": False, "model.account_for_loss_in_pipeline_split": False,
               "model.pipeline_dtype": None}
    if plan.pp == 1:
        return o
    o["model.pipeline_dtype"] = "torch.float16" if t.precision == Precision.fp16 else "torch.bfloat16"
    if job.model.hybrid_layer_pattern is not None:  # the pattern's '|' segments split it (_hybrid_overrides)
        return o
    for group in _layout_flags(job):
        key = {"--pipeline-model-parallel-layout": "model.pipeline_model_parallel_layout",
               "--num-virtual-stages-per-pipeline-rank": "model.virtual_pipeline_model_parallel_size",
               "--decoder-first-pipeline-num-layers": "model.num_layers_in_first_pipeline_stage",
               "--decoder-last-pipeline-num-layers": "model.num_layers_in_last_pipeline_stage"}[group[0]]
        o[key] = group[1] if key.endswith("layout") else int(group[1])
    if o["model.pipeline_model_parallel_layout"] is not None and plan.vpp > 1:
        o["model.virtual_pipeline_model_parallel_size"] = plan.vpp
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
        "ddp.use_distributed_optimizer": plan.zero >= 1,
        "optimizer.use_distributed_optimizer": plan.zero >= 1,
        "ddp.overlap_grad_reduce": True,
        "ddp.overlap_param_gather": plan.zero >= 1,
        "ddp.use_megatron_fsdp": plan.zero >= 2,
        "dist.use_tp_pp_dp_mapping": plan.order == RankOrder.tp_cp_ep_pp_dp,
    })
    dtypes = OPTIMIZER_DTYPES.get(t.optimizer_bytes_per_param)
    if dtypes is not None:  # check_bridge refuses the other sizes
        main, moments = dtypes
        o.update({"optimizer.use_precision_aware_optimizer": dtypes != ("float32", "float32"),
                  "optimizer.main_grads_dtype": "torch.float32",  # the only one without the precision-aware optimizer
                  "optimizer.main_params_dtype": f"torch.{main}", "optimizer.exp_avg_dtype": f"torch.{moments}",
                  "optimizer.exp_avg_sq_dtype": f"torch.{moments}"})
    steps = checkpoint_interval_steps(job)  # Young-Daly, from the cluster file's storage and MTBF
    if steps:
        o["checkpoint.save_interval"] = steps
    if plan.zero >= 2:
        o["ddp.data_parallel_sharding_strategy"] = FSDP_STRATEGY[plan.zero]
        o["checkpoint.ckpt_format"] = "fsdp_dtensor"
    if plan.zero >= 1 and plan.zero_shard_size is not None and (job.dp * plan.cp) // plan.zero_shard_size > 1:
        o["ddp.num_distributed_optimizer_instances"] = (job.dp * plan.cp) // plan.zero_shard_size
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
    rules.found.extend(model_violations(job.model))
    rules.check(job.model.hybrid_layer_pattern is None or job.plan.vpp == 1, "no virtual pipeline stages for hybrid models",
                f"vpp={job.plan.vpp}: HybridModelProvider.provide asserts virtual_pipeline_model_parallel_size is None "
                "(Megatron-LM's pretrain_hybrid.py runs it: --format megatron)", "megatron/bridge/models/hybrid/hybrid_provider.py provide")
    rules.check(job.plan.zero < 2 or job.plan.order != RankOrder.tp_cp_ep_pp_dp, "Megatron-FSDP with the default rank order",
                f"zero={job.plan.zero} with order={job.plan.order.value}: ConfigContainer asserts 'use_tp_pp_dp_mapping is not "
                "supported with Megatron FSDP'", "megatron/bridge/training/config.py")
    bytes_ = job.training.optimizer_bytes_per_param
    rules.check(bytes_ in OPTIMIZER_DTYPES, "Adam state of fp32 or 16-bit main params and moments",
                f"optimizer_bytes_per_param={bytes_:g}: OptimizerConfig's precision-aware dtypes give "
                f"{', '.join(f'{b:g}' for b in sorted(OPTIMIZER_DTYPES))} bytes", "megatron/core/optimizer/optimizer_config.py")
    if rules.found:
        return rules, None
    o = bridge_overrides(job)
    validate_bridge(o, job.num_gpus, rules)
    for v in check_megatron(job).found:  # delegated to Megatron Core; the recipe's provider sets what flags cannot
        if v not in rules.found and v.rule != "pretraining only" and v.rule not in CLI_ONLY_RULES:
            rules.found.append(v)
    return rules, o


def _py_value(key: str, value: object) -> str:
    if key.endswith("_dtype") and isinstance(value, str):
        return value  # torch.bfloat16
    return repr(value)


def render_script(job: EmitJob, o: dict) -> str:
    module, fn = recipe_for(job)
    notes = [f"Recipe: {module}.{fn}(); the overrides below re-plan it and set every recipe default that would change the plan.",
             "Launch with launch_megatron_bridge.sh (torchrun on every node).", *fp8_notes(job), *cp_notes(job)]
    lines = "\n".join(f"    {k!r}: {_py_value(k, v)}," for k, v in o.items())
    # torch is named only by the pipeline dtype (pp > 1): no unused import otherwise
    torch_import = "import torch\n\n" if "torch." in lines else ""
    # the NVFP4 recipe gathers weights in FP4 (mixed_precision.py bf16_with_nvfp4_mixed:
    # fp4_param_gather=True); autopar costs an FP4 plan's weight gathers in bf16, so the plan wins
    fp4_gather = ("\n    precision.fp4_param_gather = False  # the recipe's FP4 weight gathers are not in the costed plan"
                  if job.training.precision == Precision.fp4 else "")
    # the current-scaling recipe keeps the first and last layers in bf16 (mixed_precision.py
    # bf16_with_fp8_current_scaling_mixed: first_last_layers_bf16=True); the plan costs every layer in
    # FP8, as Bridge's own performance configs run it (scripts/performance/utils/precision.py fp8_cs)
    fp8_layers = ("\n    precision.first_last_layers_bf16 = False  # the plan runs every layer in FP8"
                  if precision_name(job) == "bf16_with_fp8_current_scaling_mixed" else "")
    return f'''{comment_block(header_lines(job, FRAMEWORK, notes)).rstrip()}
"""Megatron-Bridge pretraining with the autopar plan applied to the {fn} recipe."""

{torch_import}from {module} import {fn}
from megatron.bridge.training.comm_overlap import CommOverlapConfig
from megatron.bridge.training.mixed_precision import get_mixed_precision_config

OVERRIDES = {{
{lines}
}}
MIXED_PRECISION = {precision_name(job)!r}
GRAD_REDUCE_IN_FP32 = {job.training.grad_reduce_bytes_per_param >= 4!r}  # the precision recipe's own default would win otherwise
# every FP8 recipe gathers weights in FP8 (mixed_precision.py fp8_param_gather=True); the plan's choice wins
FP8_PARAM_GATHER = {fp8_param_gather(job)!r}
TP_COMM_OVERLAP = {job.plan.tp > 1 and job.plan.tp_comm_overlap!r}
# Bridge's comm-overlap setup runs after the overrides and writes its own EP-overlap choice back
# onto the model (comm_overlap.py: default False), so the plan's choice goes here too
EP_COMM_OVERLAP = {job.plan.ep > 1 and job.plan.ep_overlap!r}


def declares(target, name):
    """A dataclass field of target, or of its nested transformer config (Bridge's GPT model config
    keeps TransformerConfig's fields there and forwards assignments to it)."""
    owners = [target, getattr(target, "transformer", None)]
    return any(name in getattr(type(o), "__dataclass_fields__", {{}}) for o in owners if o is not None)


def apply_overrides(cfg, overrides):
    for path, value in overrides.items():
        *parents, name = path.split(".")
        target = cfg
        for part in parents:
            target = getattr(target, part)
        if not declares(target, name):
            raise AttributeError(f"{{type(target).__name__}} has no field {{name!r}}: this Megatron-Bridge does not match the plan")
        setattr(target, name, value)
    return cfg


def autopar_config():
    cfg = apply_overrides({fn}(), OVERRIDES)
    precision = get_mixed_precision_config(MIXED_PRECISION)
    precision.grad_reduce_in_fp32 = GRAD_REDUCE_IN_FP32
    precision.fp8_param_gather = FP8_PARAM_GATHER{fp4_gather}{fp8_layers}
    # MXFP8 recipes reuse the gradient buffer for the weight gathers, which Megatron Core allows only
    # with them (distributed_data_parallel_config.py: 'Reuse grad buffer only when keeping params in MXFP8.')
    precision.reuse_grad_buf_for_mxfp8_param_ag = getattr(precision, "reuse_grad_buf_for_mxfp8_param_ag", False) and FP8_PARAM_GATHER
    cfg.mixed_precision = precision
    # the recipe's own CommOverlapConfig keeps its tuning (Llama-3 70B: a userbuffers tp_comm_overlap_cfg
    # tuned for H100; Llama-3.1 405B: embedding wgrad deferral); only the overlaps the plan decides are set
    overlap = cfg.comm_overlap if cfg.comm_overlap is not None else CommOverlapConfig(tp_comm_overlap=TP_COMM_OVERLAP)
    overlap.tp_comm_overlap = TP_COMM_OVERLAP
    overlap.overlap_moe_expert_parallel_comm = EP_COMM_OVERLAP
    if not EP_COMM_OVERLAP:  # comm_overlap.py asserts EP overlap for delay_wgrad_compute
        overlap.delay_wgrad_compute = False
    cfg.comm_overlap = overlap
    return cfg


if __name__ == "__main__":
    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain

    pretrain(autopar_config(), forward_step)
'''


def render_launcher(job: EmitJob) -> str:
    env = lines_of(*env_lines(job))  # Megatron Core under Bridge needs what the Megatron-LM launcher exports
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
    refuse(FRAMEWORK, job.model.name, job.plan.text(), rules.found, {RECIPE_RULE})
    return [
        Artefact("pretrain_megatron_bridge.py", render_script(job, o)),
        Artefact("launch_megatron_bridge.sh", render_launcher(job), executable=True),
    ]
