"""DeepSpeed: ds_config.json and the `deepspeed` launcher line for the user's training script,
which builds the plan's network from the helper's transformers config (autopar.emit.deepspeed_model).

Keys and rules: docs/reference/launchers.md section 2 (DeepSpeed edaa7221, 2026-08-22), plus
the removed-key list of deepspeed/runtime/config.py 0.19.8 (MiCS mics_shard_size is gone).
DeepSpeed without Megatron-DeepSpeed has no tensor parallelism for a generic script, no
interleaved pipeline, no fp8 switch and no selective recompute; such plans are refused.
JSON has no comments, so the header lives under the top-level "_autopar" key, which DeepSpeed
ignores (the training script never reads it).
"""

from __future__ import annotations

import json

from autopar.emit.common import (HYBRID_RULE, LATENT_MOE_RULE, Artefact, EmitJob, Rules, Violation, allocator_export, check_common,
                                 check_common_model, comment_block, header_lines, lines_of)
from autopar.emit.deepspeed_model import HF_RULE, model_violations
from autopar.emit.deepspeed_script import HELPER, render_helper
from autopar.emit.presets import refuse
from autopar.specs.model import ModelSpec
from autopar.specs.plan import CpAlgo, Plan, RankOrder, Recompute, Schedule
from autopar.specs.stack import load_stack
from autopar.specs.training import Precision, Stack, TrainingSpec

FRAMEWORK = "deepspeed"
CONFIG = "ds_config.json"
SCRIPT = "launch_deepspeed.sh"

# DeepSpeedZeroConfig is pydantic with extra="forbid" (Z): only these keys may appear.
ZERO_KEYS = {
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "allgather_partitions",
    "allgather_bucket_size", "use_multi_rank_bucket_allreduce", "overlap_comm", "load_from_fp32_weights",
    "sub_group_size", "round_robin_gradients", "ignore_unused_parameters", "offload_param", "offload_optimizer",
    "prefetch_bucket_size", "stage3_prefetch_bucket_size", "param_persistence_threshold",
    "stage3_param_persistence_threshold", "model_persistence_threshold", "stage3_model_persistence_threshold",
    "max_live_parameters", "stage3_max_live_parameters", "max_reuse_distance", "stage3_max_reuse_distance",
    "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
    "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients",
}
REMOVED_ZERO_KEYS = {"mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param"}
# rules about the model whatever the plan: refused as model=NAME (presets.refuse)
MODEL_RULES = {HF_RULE, HYBRID_RULE, LATENT_MOE_RULE}


def plan_checks(job: EmitJob, rules: Rules) -> None:
    """Plan features a plain DeepSpeed config cannot express."""
    plan, t = job.plan, job.training
    rules.check(plan.offload_modules is None, "no per-module activation offloading",
                f"offload_modules={'+'.join(m.value for m in plan.offload_modules or ())}: DeepSpeed offloads optimizer states and "
                "parameters (offload_optimizer, offload_param) and checkpointed activations (cpu_checkpointing), not module inputs")
    rules.check(plan.offload_num_layers is None, "no layer-level activation offloading",
                f"offload_num_layers={plan.offload_num_layers}: DeepSpeed offloads checkpointed activations (cpu_checkpointing) "
                "with recompute, not the saved activations of layers that are not recomputed (Megatron-Core --cpu-offloading)")
    rules.check(plan.tp == 1, "tp == 1 without Megatron-DeepSpeed",
                f"tp={plan.tp}: DeepSpeed has no tensor parallelism for a generic training script; use --format megatron")
    rules.check(plan.cp == 1 or plan.cp_algo == CpAlgo.ulysses, "context parallel = Ulysses (sequence_parallel_size)",
                f"cp={plan.cp} with cp_algo={plan.cp_algo.value}: DeepSpeed's sequence parallelism is Ulysses all-to-all")
    rules.check(plan.cp == 1 or plan.pp == 1, "Ulysses sequence parallelism without pipeline parallelism",
                f"cp={plan.cp} with pp={plan.pp}: a PipelineModule's grid counts DP as world / pp (runtime/pipe/module.py), and "
                "deepspeed.initialize asserts 'mpu must be None with pipeline parallelism', so the Ulysses groups cannot be passed")
    rules.check(plan.cp == 1 or plan.ep == 1, "Ulysses sequence parallelism without AutoEP",
                f"cp={plan.cp} with ep={plan.ep}: the Ulysses mpu reports its sequence group as model parallel, and AutoEP "
                "refuses tensor model parallelism from mpu (runtime/engine.py)")
    rules.check(plan.order == RankOrder.tp_cp_ep_dp_pp, "rank order pipe outermost, data inner (PipeDataParallelTopology)",
                f"order={plan.order.value}: DeepSpeed's default topology fixes the rank order (runtime/pipe/topology.py)")
    if plan.cp > 1 and plan.cp_algo == CpAlgo.ulysses:
        heads = job.model.num_attention_heads
        rules.check(heads % plan.cp == 0, "Ulysses: num_attention_heads % sp == 0", f"heads({heads}) % cp({plan.cp}) = {heads % plan.cp}")
    rules.check(plan.vpp == 1 and plan.pipeline_schedule == Schedule.one_f_one_b, "pipeline schedule = 1F1B (PipelineEngine TrainSchedule)",
                f"schedule={plan.pipeline_schedule.value}, vpp={plan.vpp}")
    rules.check(t.precision in (Precision.bf16, Precision.fp16), "precision in {bf16, fp16}",
                f"precision={t.precision.value}: DeepSpeed's JSON has no fp8/fp4 switch (it comes from model code, e.g. Transformer Engine)")
    rules.check(plan.recompute != Recompute.selective, "recompute in {none, full}",
                "DeepSpeed checkpoints whole modules; selective (attention-core) recompute needs model code")
    rules.check(plan.zero_shard_size is None or plan.zero_shard_size == job.dp * plan.cp, "no hybrid-sharded ZeRO",
                f"zero_shard_size={plan.zero_shard_size}: MiCS (mics_shard_size) was removed from DeepSpeed 0.19")
    if job.model.is_moe and plan.ep > 1:
        rules.check(plan.expert_tp == 1, "AutoEP expert_tensor_parallel_size == 1", f"etp={plan.expert_tp}")
    rules.check(plan.recompute_num_layers is None and plan.stage_recompute_layers is None,
                "activation_checkpoint_interval recomputes every layer",
                f"recompute_num_layers={plan.recompute_num_layers}, stage_recompute_layers={plan.stage_recompute_layers}: "
                "PipelineModule checkpoints every interval-th layer of every stage alike", "deepspeed/runtime/pipe/module.py")
    rules.check(not job.model.mtp_num_layers, "no MTP modules", f"mtp_num_layers={job.model.mtp_num_layers}: "
                "a PipelineModule of decoder LayerSpecs has no multi-token-prediction head", "")
    m = job.model
    rules.check(m.position_embedding != "learned_absolute" or m.max_position_embeddings is None or t.seq_len <= m.max_position_embeddings,
                "sequence within the learned position table", f"seq_len={t.seq_len} exceeds {m.name}'s max_position_embeddings="
                f"{m.max_position_embeddings}: transformers' GPT-2 has one trained position row per token (n_positions)",
                "transformers models/gpt2/modeling_gpt2.py wpe")
    if job.model.is_moe:
        rules.check(plan.dispatcher.value == "alltoall" and not plan.ep_overlap, "MoE dispatch = all-to-all (AutoEP), no EP overlap",
                    f"dispatcher={plan.dispatcher.value}, ep_overlap={plan.ep_overlap}", "EP")


def build_config(job: EmitJob) -> dict:
    plan, t, model = job.plan, job.training, job.model
    m = job.num_microbatches
    config: dict = {
        "_autopar": {"header": header_lines(job, FRAMEWORK), "plan": plan.text(), "seq_len": t.seq_len, "num_gpus": job.num_gpus},
        "train_batch_size": t.global_batch_size,
        "train_micro_batch_size_per_gpu": plan.mbs,
        "gradient_accumulation_steps": m,
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }
    if t.precision == Precision.fp16:
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                          "hysteresis": 2, "min_loss_scale": 1}
    else:
        config["bf16"] = {"enabled": True}
    # dtype of the gradient reduction on the wire (the plan's grad_reduce_bytes_per_param)
    config["communication_data_type"] = "fp32" if t.grad_reduce_bytes_per_param >= 4 else ("fp16" if t.precision == Precision.fp16 else "bf16")
    if plan.cp > 1:  # under Ulysses DeepSpeed reduces in this dtype instead (default fp32: runtime/constants.py)
        config["seq_parallel_communication_data_type"] = config["communication_data_type"]
    # the reduce bucket and live-parameter window the cost model's ZeRO-3 terms assume
    # (profiles/stacks/deepspeed.yaml), written out so that config and estimate agree
    stack = load_stack(Stack.deepspeed)
    zero: dict = {"stage": plan.zero, "overlap_comm": True, "contiguous_gradients": True,
                  "reduce_bucket_size": stack.zero3_reduce_bucket_elements, "allgather_bucket_size": 500_000_000}
    if plan.zero == 3:
        zero.update({"stage3_prefetch_bucket_size": 50_000_000, "stage3_param_persistence_threshold": 100_000,
                     "stage3_max_live_parameters": stack.zero3_live_elements, "stage3_gather_16bit_weights_on_model_save": True})
    config["zero_optimization"] = zero
    if plan.recompute == Recompute.full:
        config["activation_checkpointing"] = {
            "partition_activations": False, "contiguous_memory_optimization": False,
            "number_checkpoints": plan.recompute_num_layers or max(plan.layers_per_stage(model.num_layers)),
            "synchronize_checkpoint_boundary": False, "profile": False, "cpu_checkpointing": False,
        }
    if plan.pp > 1:
        stages = plan.layers_per_stage(model.num_layers)
        config["pipeline"] = {"stages": plan.pp, "partition": "uniform" if len(set(stages)) == 1 else "parameters",
                              "activation_checkpoint_interval": 1 if plan.recompute == Recompute.full else 0,
                              "pipe_partitioned": True, "grad_partitioned": True}
    if plan.cp > 1:
        config["sequence_parallel_size"] = plan.cp
    if model.is_moe and plan.ep > 1:
        config["expert_parallel"] = {"enabled": True, "autoep_size": plan.ep, "expert_tensor_parallel_size": 1,
                                     "top_k": model.moe_top_k}
    config["optimizer"] = {"type": "AdamW", "params": {"lr": 3.0e-4, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1}}
    return config


def validate_config(config: dict, world_size: int, rules: Rules) -> Rules:
    """DeepSpeed's own checks on a config dict (DSC _batch_assertion, PC, Z, PE, EP folding)."""
    pipe = config.get("pipeline", {})
    pp = pipe.get("stages", 1) if isinstance(pipe.get("stages", 1), int) else 1
    sp = config.get("sequence_parallel_size", 1)
    dp_world = world_size // (pp * sp) if world_size % (pp * sp) == 0 else 0
    rules.check(dp_world > 0, "pipeline stages * sequence_parallel_size divide the world size",
                f"world({world_size}) % (stages({pp}) * sp({sp})) = {world_size % (pp * sp)}", "PE")
    train, micro, gas = (config.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"))
    if rules.check(all(isinstance(v, int) and v > 0 for v in (train, micro, gas)), "batch sizes > 0",
                   f"train_batch_size={train}, micro={micro}, gradient_accumulation_steps={gas}", "DSC _batch_assertion"):
        rules.check(train == micro * gas * dp_world, "train_batch_size == micro_batch * gradient_accumulation_steps * dp_world_size",
                    f"{train} != {micro} * {gas} * {dp_world}", "DSC _batch_assertion")
    bf16 = config.get("bf16", config.get("bfloat16", {})).get("enabled", False)
    rules.check(not (bf16 and config.get("fp16", {}).get("enabled", False)), "bf16 and fp16 not both enabled", "both enabled", "DSC")
    zero = config.get("zero_optimization", {})
    stage = zero.get("stage", 0)
    rules.check(stage in (0, 1, 2, 3), "zero_optimization.stage in 0..3", f"stage={stage}", "Z")
    unknown = sorted(set(zero) - ZERO_KEYS)
    rules.check(not unknown, "zero_optimization has no unknown or removed keys (extra=forbid)",
                f"keys {unknown}" + (" (removed in DeepSpeed 0.19)" if set(unknown) & REMOVED_ZERO_KEYS else ""), "Z")
    if pp > 1:
        rules.check(stage < 2, "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
                    f"zero stage {stage} with {pp} pipeline stages", "PE")
    ep = config.get("expert_parallel", {})
    if ep.get("enabled"):
        size, etp = ep.get("autoep_size", 1), ep.get("expert_tensor_parallel_size", 1)
        rules.check(etp == 1, "AutoEP expert_tensor_parallel_size must be 1", f"expert_tensor_parallel_size={etp}", "EP")
        rules.check(world_size % pp == 0 and (world_size // pp) % (size * etp) == 0, "autoep_size * etp divides world / pp",
                    f"world({world_size}) / pp({pp}) with autoep_size({size}) * etp({etp})", "EP folding")
    return rules


def model_refusals(model: ModelSpec, seq_len: int) -> list[Violation]:
    """What DeepSpeed refuses about the model itself, whatever the plan (MODEL_RULES, in
    check_deepspeed's order; checked before a search for its plans: autopar.cli.framework)."""
    rules = Rules(FRAMEWORK)
    check_common_model(model, rules)
    return rules.found + model_violations(model, seq_len)[1]


def check_deepspeed(job: EmitJob) -> tuple[Rules, dict | None]:
    rules = Rules(FRAMEWORK)
    check_common(job, rules)
    rules.found.extend(model_violations(job.model, job.training.seq_len)[1])
    plan_checks(job, rules)
    if rules.found or not job.num_microbatches:
        rules.check(bool(job.num_microbatches), "train_batch_size == micro_batch * gradient_accumulation_steps * dp_world_size",
                    f"global batch {job.training.global_batch_size} does not divide by dp({job.dp}) * mbs({job.plan.mbs})", "DSC _batch_assertion")
        return rules, None
    config = build_config(job)
    return validate_config(config, job.num_gpus, rules), config


def render_launcher(job: EmitJob) -> str:
    c = job.cluster
    notes = ["Run on the head node; the pdsh launcher starts every node listed in HOSTFILE (hostname slots=N).",
             f"TRAIN_SCRIPT must build the model from {HELPER}'s model_config() (the plan's network as a transformers config: "
             "AutoModelForCausalLM.from_config), call deepspeed.initialize(..., config='ds_config.json') and take the pipeline "
             f"partition, activation checkpointing and Ulysses groups from {HELPER} (next to this script)."]
    return f"""#!/usr/bin/env bash
{comment_block(header_lines(job, FRAMEWORK, notes)).rstrip()}
set -euo pipefail
HERE=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)
NNODES=${{NNODES:-{c.num_nodes}}}
GPUS_PER_NODE=${{GPUS_PER_NODE:-{c.gpus_per_node}}}
MASTER_ADDR=${{MASTER_ADDR:-127.0.0.1}}
MASTER_PORT=${{MASTER_PORT:-29500}}
TRAIN_SCRIPT=${{TRAIN_SCRIPT:-train.py}}
if [ $((NNODES * GPUS_PER_NODE)) -ne {job.num_gpus} ]; then
  echo "this plan needs {job.num_gpus} GPUs; NNODES * GPUS_PER_NODE = $((NNODES * GPUS_PER_NODE))" >&2
  exit 1
fi
export PYTHONPATH="$HERE${{PYTHONPATH:+:$PYTHONPATH}}"
{lines_of(allocator_export(job))}HOSTFILE_ARGS=()
if [ "$NNODES" -gt 1 ]; then HOSTFILE_ARGS=(--hostfile "${{HOSTFILE:-hostfile}}"); fi

exec deepspeed ${{HOSTFILE_ARGS[@]+"${{HOSTFILE_ARGS[@]}}"}} --num_nodes "$NNODES" --num_gpus "$GPUS_PER_NODE" \\
  --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \\
  "$TRAIN_SCRIPT" --deepspeed --deepspeed_config "$HERE/{CONFIG}" "$@"
"""


def emit_deepspeed(job: EmitJob) -> list[Artefact]:
    rules, config = check_deepspeed(job)
    refuse(FRAMEWORK, job.model.name, job.plan.text(), rules.found, MODEL_RULES)
    return [Artefact(CONFIG, json.dumps(config, indent=2) + "\n"), Artefact(HELPER, render_helper(job)),
            Artefact(SCRIPT, render_launcher(job), executable=True)]


# ---- round trip ------------------------------------------------------------------------

def parse_deepspeed_config(config: dict, world_size: int, num_layers: int) -> tuple[Plan, TrainingSpec]:
    """Plan and training spec of a ds_config (seq_len from the _autopar block: DeepSpeed has no key for it)."""
    pipe = config.get("pipeline", {})
    pp = pipe.get("stages", 1)
    cp = config.get("sequence_parallel_size", 1)
    micro, gas = config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]
    dp = config["train_batch_size"] // (micro * gas)
    ep_cfg = config.get("expert_parallel", {})
    ckpt = config.get("activation_checkpointing")
    recompute = Recompute.full if ckpt is not None or pipe.get("activation_checkpoint_interval", 0) else Recompute.none
    plan = Plan(tp=1, pp=pp, dp=dp, cp=cp, ep=ep_cfg.get("autoep_size", 1) if ep_cfg.get("enabled") else 1,
                mbs=micro, zero=config.get("zero_optimization", {}).get("stage", 0), recompute=recompute,
                cp_algo=CpAlgo.ulysses if cp > 1 else CpAlgo.ring)
    if recompute == Recompute.full and ckpt and ckpt.get("number_checkpoints") != max(plan.layers_per_stage(num_layers)):
        plan = Plan.model_validate({**plan.model_dump(), "recompute_num_layers": ckpt.get("number_checkpoints")})
    precision = Precision.fp16 if config.get("fp16", {}).get("enabled") else Precision.bf16
    reduce_bytes = 4.0 if config.get("communication_data_type") == "fp32" else 2.0
    training = TrainingSpec(seq_len=config["_autopar"]["seq_len"], global_batch_size=config["train_batch_size"],
                            precision=precision, grad_reduce_bytes_per_param=reduce_bytes, grad_bytes_per_param=reduce_bytes)
    return plan, training
