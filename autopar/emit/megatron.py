"""Megatron-LM: a torchrun launch script for pretrain_gpt.py (pretrain_hybrid.py for a hybrid
Mamba model).

Flag names and defaults: docs/reference/launchers.md section 1 (Megatron-LM d98e8a64,
2026-08-22). VPP is set with --num-virtual-stages-per-pipeline-rank (there is no
--virtual-pipeline-model-parallel-size flag); uneven stages use
--decoder-first/last-pipeline-num-layers, or a --pipeline-model-parallel-layout string when the
middle stages differ or the end stages do not divide by VPP. A hybrid model's stages are '|'
segments of its --hybrid-layer-pattern instead (Megatron-LM arguments.py refuses the other
layout flags with it).
"""

from __future__ import annotations

import shlex

from autopar.cost.rules import hybrid_a2a_size
from autopar.errors import InputError
from autopar.specs.layout import megatron_layout
from autopar.emit.common import (
    Artefact, EmitJob, Rules, Violation, allocator_export, check_common, check_common_model, checkpoint_interval_steps, comment_block, fp8_param_gather, header_lines, rendezvous_block, uneven_first_last,
)
from autopar.emit.megatron_model import (
    EXACT_GELU, GATED_FLAGS, LLAMA3_FIXED, MLA_YARN_FIXED, SQUARED_RELU, TANH_GELU, max_position_embeddings, mla_flags,
    mla_yarn_unexpressed, model_flags, moe_flags, plain_mlp_flags, rope_scaling_unexpressed,
)
from autopar.emit.megatron_rules import validate_megatron
from autopar.emit.presets import refuse
from autopar.specs.model import ModelSpec
from autopar.specs.plan import CpAlgo, Plan, RankOrder, Recompute, Schedule
from autopar.specs.training import Fp8Recipe, Precision

FRAMEWORK = "megatron"
SCRIPT = "launch_megatron.sh"

# plan.cp_algo -> --cp-comm-type (values passed verbatim to Transformer Engine; launchers.md 1.1)
CP_COMM_TYPE = {CpAlgo.ring: "p2p", CpAlgo.ulysses: "a2a", CpAlgo.hybrid: "a2a+p2p"}
# ZeRO 2/3 -> Megatron-FSDP sharding strategy (launchers.md 1.2 --data-parallel-sharding-strategy)
FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}

Group = list[str]
Section = tuple[str, list[Group]]

# The plan's FP8 tensorwise (specs/training.py Fp8Recipe.tensorwise: one scale per tensor, costed alike
# for Transformer Engine's delayed and current scaling) runs as TE per-tensor current scaling:
# Megatron-LM d98e8a6 --fp8-recipe tensorwise builds TE Float8CurrentScaling (megatron/core/fp8_utils.py
# get_fp8_recipe), Megatron-Bridge bf16_with_fp8_current_scaling_mixed sets the same recipe.
TE_TENSORWISE = "tensorwise"
TE_TENSORWISE_WHY = (
    "FP8 tensorwise runs as Transformer Engine per-tensor current scaling (Float8CurrentScaling), not Megatron-LM's "
    "default delayed scaling (amax history, examples/llama/train_llama3_8b_h100_fp8.sh): the same recipe as torchao's "
    "tensorwise, the one Megatron-Bridge's H100 performance configs run (scripts/performance/utils/precision.py "
    "fp8_cs), and the one Megatron Core allows with layernorm or moe_act recompute (transformer_config.py: 'Delayed "
    "scaling does not support moe_act and layernorm recompute for fp8')")


def _save_interval_why(job: EmitJob) -> str:
    if checkpoint_interval_steps(job):
        return "Young-Daly interval sqrt(2 x checkpoint write time x job MTBF) / step, from the cluster file"
    return "the cluster file gives no storage bandwidth; 500 steps"


def uses_megatron_fsdp(plan: Plan) -> bool:
    return plan.zero >= 2


def needs_max_connections_1(job: EmitJob) -> bool:
    """CUDA_DEVICE_MAX_CONNECTIONS=1 is required with tp or cp > 1 before Blackwell (compute
    capability < 10), except under FSDP, which asserts it is NOT 1 (megatron validate_args)."""
    plan = job.plan
    return (plan.tp > 1 or plan.cp > 1) and job.cluster.gpu.compute_capability < 10 and not uses_megatron_fsdp(plan)


def hierarchical_cp_sizes(job: EmitJob) -> tuple[int, int]:
    """Hybrid CP sizes [a2a, p2p] (autopar.cost.rules.hybrid_a2a_size, which the head rule checks)."""
    a2a = hybrid_a2a_size(job.plan.cp, job.plan.tp, job.cluster.gpus_per_node)
    return a2a, job.plan.cp // a2a


def stage_layout_string(stages: list[int], vpp: int) -> str:
    """A --pipeline-model-parallel-layout string: pp*vpp stages in virtual order (all pp ranks'
    chunk 0, then chunk 1, ...), E = embedding first, L = loss last, t*n = n decoder layers."""
    pp = len(stages)
    chunks = [[n // vpp + (1 if v < n % vpp else 0) for v in range(vpp)] for n in stages]
    parts = []
    for v in range(vpp):
        for p in range(pp):
            text = f"t*{chunks[p][v]}" if chunks[p][v] > 1 else "t" * chunks[p][v]
            if v == 0 and p == 0:
                text = "E" + text
            if v == vpp - 1 and p == pp - 1:
                text += "L"
            parts.append(text)
    return "|".join(parts)


def _layout_flags(job: EmitJob) -> list[Group]:
    """First/last stage flags and --num-virtual-stages-per-pipeline-rank when they build the
    plan's layout; otherwise the layout string itself."""
    plan, model = job.plan, job.model
    layout = plan.model_layout(model)
    stages = layout.rank_decoders()
    try:
        ends = uneven_first_last(stages)
        flags = megatron_layout(model.num_layers, plan.pp, plan.vpp, *(ends or (None, None)), mtp_layers=model.mtp_num_layers)
    except (ValueError, InputError):
        flags = None
    if flags != layout or (ends is not None and (ends[0] % plan.vpp or ends[1] % plan.vpp or stages[1 % len(stages)] % plan.vpp)) \
            or (ends is None and plan.pp > 1 and stages[0] % plan.vpp):
        return [["--pipeline-model-parallel-layout", layout.text()]]
    out: list[Group] = []
    if plan.vpp > 1:
        out.append(["--num-virtual-stages-per-pipeline-rank", str(plan.vpp)])
    if ends is not None:
        out.append(["--decoder-first-pipeline-num-layers", str(ends[0])])
        out.append(["--decoder-last-pipeline-num-layers", str(ends[1])])
    return out


def parallel_flags(job: EmitJob) -> list[Group]:
    plan, model = job.plan, job.model
    out: list[Group] = [
        ["--tensor-model-parallel-size", str(plan.tp)],
        ["--pipeline-model-parallel-size", str(plan.pp)],
        ["--context-parallel-size", str(plan.cp)],
    ]
    if plan.cp > 1:
        out.append(["--cp-comm-type", CP_COMM_TYPE[plan.cp_algo]])
        if plan.cp_algo == CpAlgo.hybrid:
            out.append(["--hierarchical-context-parallel-sizes", *map(str, hierarchical_cp_sizes(job))])
    if model.is_moe or plan.ep > 1:
        out.append(["--expert-model-parallel-size", str(plan.ep)])
        out.append(["--expert-tensor-parallel-size", str(plan.expert_tp)])
    if plan.sequence_parallel:
        out.append(["--sequence-parallel"])
    if plan.tp > 1 and plan.tp_comm_overlap:  # TE userbuffers GEMM/collective overlap; needs SP
        out.append(["--tp-comm-overlap"])
    if plan.pp > 1 and model.hybrid_layer_pattern is None:  # a hybrid pattern carries its stages
        out += _layout_flags(job)
    if plan.order == RankOrder.tp_cp_ep_pp_dp:
        out.append(["--use-tp-pp-dp-mapping"])
    return out


def batch_flags(job: EmitJob) -> list[Group]:
    t = job.training
    return [
        ["--micro-batch-size", str(job.plan.mbs)],
        ["--global-batch-size", str(t.global_batch_size)],
        ["--seq-length", str(t.seq_len)],
        ["--max-position-embeddings", str(max_position_embeddings(job.model, t.seq_len))],
    ]


def precision_flags(job: EmitJob) -> list[Group]:
    t, blackwell = job.training, job.cluster.gpu.compute_capability >= 10
    out: list[Group] = [["--fp16"]] if t.precision == Precision.fp16 else [["--bf16"]]
    if t.precision == Precision.fp8:
        if blackwell:  # MXFP8 block scaling on Blackwell
            out.append(["--fp8-format", "e4m3"])
            out.append(["--fp8-recipe", "mxfp8"])
        else:  # the plan's tensorwise as TE per-tensor current scaling (TE_TENSORWISE_WHY)
            out += [["--fp8-format", "hybrid"], ["--fp8-recipe", TE_TENSORWISE]]
    elif t.precision == Precision.fp4:
        out += [["--fp4-format", "e2m1"], ["--fp4-recipe", "nvfp4"]]
    if fp8_param_gather(job):
        out.append(["--fp8-param-gather"])
    # Gradient reduction dtype: bf16 runs reduce in fp32 unless --grad-reduce-in-bf16 (1.4 Precision);
    # fp16 runs reduce in fp16 unless --accumulate-allreduce-grads-in-fp32.
    if t.precision == Precision.fp16:
        if t.grad_reduce_bytes_per_param >= 4:
            out.append(["--accumulate-allreduce-grads-in-fp32"])
    elif t.grad_reduce_bytes_per_param < 4:
        out.append(["--grad-reduce-in-bf16"])
    return out


def fp8_notes(job: EmitJob) -> list[str]:
    """The launcher's word on the FP8 recipe it runs for the plan's tensorwise (precision_flags)."""
    if job.training.precision != Precision.fp8:
        return []
    if job.cluster.gpu.compute_capability >= 10:
        return ["FP8 runs as MXFP8 block scaling (one scale per 32 elements), the Blackwell recipe of Megatron-LM and "
                "Megatron-Bridge (--fp8-recipe mxfp8, bf16_with_mxfp8_mixed)."]
    return [TE_TENSORWISE_WHY + "."]


# TE context_parallel.py attn_forward_func_with_cp, v2.5 to v2.14: 'enable_mla = k.shape[-1] != v.shape[-1];
# assert not enable_mla or cp_comm_type in ["p2p", "a2a+p2p"]'. v2.15 (commit ee5dcec22, "open up a2a for
# mla", "enable mla ag") dropped it; Megatron-LM d98e8a6 pins TE 2.17.1 (pyproject.toml), which runs MLA on
# every CP type, so the launcher says which TE it needs rather than refusing the plan
MLA_CP_MIN_TE = "2.15"


def cp_notes(job: EmitJob) -> list[str]:
    """The launcher's word on the Transformer Engine its CP type needs for the model."""
    from autopar.emit.megatron_rules import te_cp_comm_type

    plan, mla = job.plan, job.model.mla
    if plan.cp <= 1 or mla is None or mla.qk_nope_head_dim + mla.qk_rope_head_dim == mla.v_head_dim:
        return []
    written = CP_COMM_TYPE[plan.cp_algo]
    runs = te_cp_comm_type(written, list(hierarchical_cp_sizes(job)) if plan.cp_algo == CpAlgo.hybrid else None)
    if runs in ("p2p", "a2a+p2p"):
        return []
    return [f"MLA (K head dim {mla.qk_nope_head_dim + mla.qk_rope_head_dim}, V head dim {mla.v_head_dim}) with context "
            f"parallelism on cp_comm_type {runs} needs Transformer Engine >= {MLA_CP_MIN_TE} (Megatron-LM d98e8a6 pins 2.17.1); "
            "TE 2.5 to 2.14 assert 'Context parallelism does not support MLA' unless cp_comm_type is p2p or a2a+p2p "
            "(cp_algo=ring or hybrid)."]


def full_recompute_layers(plan: Plan) -> int | None:
    """Layers each stage recomputes in full (None = all). Megatron has one count for every
    stage, so per-stage counts pass only when they are all equal (check_megatron refuses others)."""
    if plan.stage_recompute_layers is not None:
        return plan.stage_recompute_layers[0]
    return plan.recompute_num_layers


def recompute_flags(job: EmitJob) -> list[Group]:
    plan = job.plan
    if plan.recompute == Recompute.selective:
        if plan.recompute_modules:
            return [["--recompute-granularity", "selective"], ["--recompute-modules", *(m.value for m in plan.recompute_modules)]]
        return [["--recompute-granularity", "selective"]]
    if plan.recompute == Recompute.full:
        n = full_recompute_layers(plan)
        if n is None:  # every layer its own checkpoint
            return [["--recompute-granularity", "full"], ["--recompute-method", "uniform"], ["--recompute-num-layers", "1"]]
        # block: the first N layers of each model chunk; the plan counts layers per stage
        per_chunk = max(1, n // plan.vpp)
        return [["--recompute-granularity", "full"], ["--recompute-method", "block"], ["--recompute-num-layers", str(per_chunk)]]
    return []


def offload_flags(job: EmitJob) -> list[Group]:
    """Activation offloading: layer-level (offload_num_layers) or fine-grained (offload_modules;
    Megatron-Core >= 0.15, Megatron-LM docs/user-guide/features/fine_grained_activation_offloading.md)."""
    modules = job.plan.offload_modules
    if job.plan.offload_num_layers:
        # layer-level offloading: Megatron-LM arguments.py turns cpu_offloading on when
        # cpu_offloading_num_layers > 0 (TransformerConfig cpu_offloading, cpu_offloading_num_layers)
        return [["--cpu-offloading-num-layers", str(job.plan.offload_num_layers)]]
    if not modules:
        return []
    return [["--fine-grained-activation-offloading"], ["--offload-modules", *(m.value for m in modules)]]


def optimizer_flags(job: EmitJob) -> list[Group]:
    plan = job.plan
    out: list[Group] = []
    if uses_megatron_fsdp(plan):
        out += [["--use-megatron-fsdp"], ["--data-parallel-sharding-strategy", FSDP_STRATEGY[plan.zero]],
                ["--ckpt-format", "fsdp_dtensor"]]
    elif plan.zero == 1:
        out += [["--use-distributed-optimizer"], ["--ckpt-format", "torch_dist"]]
    out.append(["--overlap-grad-reduce"])
    if plan.zero >= 1:
        out.append(["--overlap-param-gather"])
    if plan.zero >= 1 and plan.zero_shard_size is not None:
        instances = (job.dp * plan.cp) // plan.zero_shard_size
        if instances > 1:
            out.append(["--num-distributed-optimizer-instances", str(instances)])
    return out


def megatron_sections(job: EmitJob) -> list[Section]:
    sections: list[Section] = [
        ("parallelism", parallel_flags(job)),
        ("batch and sequence", batch_flags(job)),
        ("precision", precision_flags(job)),
        ("activation recompute", recompute_flags(job)),
        ("activation offloading", offload_flags(job)),
        ("optimizer sharding and overlap", optimizer_flags(job)),
        ("model shape", model_flags(job)),
        ("mixture of experts", moe_flags(job)),
        ("multi-latent attention", mla_flags(job)),
    ]
    return [(name, groups) for name, groups in sections if groups]


def megatron_argv(job: EmitJob) -> list[str]:
    return [tok for _, groups in megatron_sections(job) for group in groups for tok in group]


# what each exported variable is for (the launcher's comment beside it)
ENV_REASONS = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "tp or cp > 1 on compute capability < 10 (Megatron validate_args)",
    "NVTE_CPU_OFFLOAD_V1": "fine-grained activation offloading with Transformer Engine >= 2.10 (Megatron validate_args asserts it)",
}


def megatron_env(job: EmitJob) -> dict[str, str]:
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if needs_max_connections_1(job) else {}
    if job.plan.offload_modules and not job.plan.offload_num_layers:  # offload_flags: fine-grained offloading
        env["NVTE_CPU_OFFLOAD_V1"] = "1"
    return env


def env_lines(job: EmitJob) -> list[str]:
    """The launcher's exports (megatron_env), Megatron-FSDP's unset (Megatron-LM validate_args
    and Bridge training/config.py assert CUDA_DEVICE_MAX_CONNECTIONS is not 1), and the allocator
    setting the plan was costed with (allocator_export)."""
    lines = [f"export {k}={v}  # {ENV_REASONS[k]}" for k, v in megatron_env(job).items()]
    if uses_megatron_fsdp(job.plan):
        lines.append("unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP asserts it is not 1")
    allocator = allocator_export(job)
    return lines + ([allocator] if allocator else [])


# rules about what pretrain_gpt.py's flags cannot set on TransformerConfig; Megatron-Bridge builds
# the model from its recipe's provider (fields, not flags), so it does not take them over
SINKS_RULE = "the model's softmax and GLU have pretrain_gpt.py flags"
GATED_RULE = "a gated MLP is SwiGLU (--swiglu) or quick GeGLU (--quick-geglu)"
PLAIN_MLP_RULE = "a non-gated MLP is GeLU (exact, or tanh with linear biases) or squared ReLU (--squared-relu)"
MLA_ROPE_RULE = "MLA's RoPE is plain or YaRN with the flags' reach"
ROPE_SCALING_RULE = "RoPE scaling is llama3 (low 1, high 4, original 8192), linear by an integer factor, or YaRN"
LOCAL_ROPE_RULE = "one RoPE for every layer (--rotary-base)"
QK_NORM_RULE = "query and key norms per head (--qk-layernorm)"
CLI_ONLY_RULES = {SINKS_RULE, GATED_RULE, PLAIN_MLP_RULE, MLA_ROPE_RULE, ROPE_SCALING_RULE, LOCAL_ROPE_RULE, QK_NORM_RULE}


CHUNKED_RULE = "local attention is a sliding window (--window-size)"
# the rules about the model itself, whatever the plan: emit refuses them as model=NAME, and
# search --framework megatron before the search (autopar.cli.framework.refuse_model)
MODEL_RULES = CLI_ONLY_RULES | {CHUNKED_RULE}


def model_violations(m: ModelSpec) -> list[Violation]:
    """What Megatron-LM refuses about the model itself, whatever the plan (MODEL_RULES, in
    check_megatron's order)."""
    rules = Rules(FRAMEWORK)
    check_common_model(m, rules)
    _model_checks(m, rules)
    return rules.found


def _model_checks(m: ModelSpec, rules: Rules) -> None:
    """The model's features Megatron-LM cannot build: CLI_ONLY_RULES (flags pretrain_gpt.py lacks)
    and chunked local attention (which Megatron-Core lacks, so Megatron-Bridge refuses it too)."""
    rules.check(not m.attention_chunked, CHUNKED_RULE,
                f"{m.name} attends within {m.attention_window}-token chunks (Llama-4 chunked attention); "
                "Megatron-LM's --window-size / --window-attn-skip-freq describe sliding windows only",
                "megatron/training/arguments.py --window-size")
    rules.check(not (m.attention_sinks or m.swiglu_limit), SINKS_RULE,
                f"{m.name} has attention sinks and a clamped GLU (gpt-oss): TransformerConfig softmax_type 'learnable', "
                "activation_func_clamp_value and glu_linear_offset have no command-line flags in Megatron-LM "
                "(Megatron-Bridge's GPT-OSS model provider sets them); without them the run trains a different network",
                "megatron/core/transformer/transformer_config.py softmax_type, glu_linear_offset, activation_func_clamp_value")
    rules.check(not m.gated_mlp or m.activation in GATED_FLAGS, GATED_RULE,
                f"{m.name}: activation={m.activation} (HF hidden_activation / hidden_act) with a gated MLP: Megatron-LM "
                "builds a gated MLP only as SwiGLU (--swiglu: silu) or quick GeGLU (--quick-geglu: x sigmoid(1.702 x)); "
                "TransformerConfig.activation_func has no flag, so the run would train another activation",
                "megatron/training/argument_utils.py core_transformer_config_from_args (d98e8a6)")
    if not m.gated_mlp:
        tanh_only = m.activation in TANH_GELU
        rules.check(plain_mlp_flags(m) is not None, PLAIN_MLP_RULE,
                    f"{m.name}: activation={m.activation} (HF hidden_act) with a non-gated MLP"
                    + (" and no linear biases: Megatron-LM applies the tanh GeLU only in its bias-GeLU fusion, which "
                       "arguments.py turns off without biases, leaving the exact F.gelu" if tanh_only else
                       f": Megatron-LM builds {'/'.join(EXACT_GELU + TANH_GELU)} GeLU and {'/'.join(SQUARED_RELU)} "
                       "(--squared-relu) only; TransformerConfig.activation_func has no flag, so the run would train GeLU")
                    + "; --openai-gelu is parsed and read nowhere",
                    "megatron/training/argument_utils.py core_transformer_config_from_args; core/transformer/mlp.py MLP.forward (d98e8a6)")
    if m.rope_local_theta is not None:
        rules.check(False, LOCAL_ROPE_RULE,
                    f"{m.name}: rope_local_theta={m.rope_local_theta:g} (HF rope_local_base_freq): its sliding-window layers rotate "
                    f"by their own unscaled RoPE, its global layers by rope_theta={m.rope_theta:g}"
                    + (f" with {m.rope_scaling.type} scaling" if m.rope_scaling else "") + "; GPTModel builds one rotary "
                    "embedding for every layer (--rotary-base), so the run would train the local layers at the global base "
                    "(Megatron-Bridge's Gemma3ModelProvider takes the pair)",
                    "megatron/core/models/gpt/gpt_model.py rotary_pos_emb (d98e8a6); Megatron-Bridge models/gemma/gemma3_provider.py")
    if m.qk_norm_across_heads:
        rules.check(False, QK_NORM_RULE,
                    f"{m.name}: qk_norm_across_heads (OLMo-2's Olmo2RMSNorm over num_heads x head_dim = "
                    f"{m.num_attention_heads * m.head_size}): --qk-layernorm builds TE's q_layernorm and k_layernorm over "
                    f"head_dim={m.head_size}, each head normed alone, so the run would train another network",
                    "megatron/core/transformer/attention.py SelfAttention q_layernorm hidden_size=self.hidden_size_per_attention_head (d98e8a6)")
    unexpressed = rope_scaling_unexpressed(m)
    if unexpressed:
        given = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in
                          {"type": m.rope_scaling.type, **unexpressed}.items())
        rules.check(False, ROPE_SCALING_RULE,
                    f"{m.name}: rope_scaling {given}: Megatron-LM builds llama3 scaling with only its factor settable "
                    f"(--use-rope-scaling --rope-scaling-factor; {', '.join(f'{k} {v:g}' for k, v in LLAMA3_FIXED.items())}), "
                    "linear scaling by an integer --rotary-seq-len-interpolation-factor, and YaRN "
                    "(--position-embedding-type yarn, without a flag for its attention_factor); the run would train another "
                    "position encoding",
                    "megatron/training/arguments.py --use-rope-scaling, --rotary-seq-len-interpolation-factor; "
                    "core/models/common/embeddings/rotary_pos_embedding.py _apply_scaling (d98e8a6)")
    scaling = m.rope_scaling
    if m.mla is not None and scaling is not None:
        fixed = mla_yarn_unexpressed(m)
        given = ", ".join([f"type={scaling.type}", *(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in fixed.items())])
        reach = ", ".join(f"{k} {v:g}" for k, v in MLA_YARN_FIXED.items())
        rules.check(scaling.type == "yarn" and not fixed, MLA_ROPE_RULE,
                    f"{m.name}: rope_scaling {given}: MLA builds its RoPE from MLATransformerConfig (rope_type rope or "
                    f"yarn), and no Megatron-LM flag sets its YaRN {reach}, an attention_factor or an unrounded correction range "
                    "(the --yarn-* flags reach non-MLA models only); "
                    "the run would train another position encoding",
                    "megatron/training/argument_utils.py _apply_yarn_config_from_args; transformer_config.py MLATransformerConfig (d98e8a6)")


def check_megatron(job: EmitJob) -> Rules:
    """Plan features Megatron-LM cannot express, then its own rules on the emitted argv."""
    rules = Rules(FRAMEWORK)
    check_common(job, rules)
    t = job.training
    rules.check(t.precision != Precision.fp8 or t.fp8_scaling == Fp8Recipe.tensorwise, "fp8 recipe in {tensorwise, delayed, mxfp8, blockwise}",
                f"fp8_recipe={t.fp8_scaling.value}: Transformer Engine has no per-row FP8 scaling "
                "(--fp8-recipe tensorwise|delayed|mxfp8|blockwise); that recipe is torchao's (torchtitan)",
                "megatron/training/arguments.py --fp8-recipe")
    m = job.model
    _model_checks(m, rules)
    schedule = job.plan.pipeline_schedule
    rules.check(schedule in (Schedule.one_f_one_b, Schedule.interleaved), "schedule in {1f1b, interleaved}",
                f"Megatron-LM pretrain_gpt runs 1F1B or interleaved 1F1B; plan asks for {schedule.value}",
                "megatron/core/pipeline_parallel/schedules.py")
    counts = job.plan.stage_recompute_layers
    if counts is not None:
        rules.check(len(set(counts)) == 1, "one recompute-num-layers for every pipeline stage",
                    f"stage_recompute_layers={'/'.join(map(str, counts))}: Megatron-LM recomputes the same number of layers "
                    "(--recompute-num-layers) on every pipeline stage", "megatron/core/transformer/transformer_block.py _checkpointed_forward")
    n = full_recompute_layers(job.plan)
    if job.plan.recompute == Recompute.full and n is not None:
        rules.check(n % job.plan.vpp == 0, "recompute-num-layers per model chunk",
                    f"block recompute counts layers per virtual stage: recompute_num_layers({n}) must divide by vpp({job.plan.vpp})")
    if m.hybrid_layer_pattern is not None and m.mtp_num_layers:
        mtp = job.plan.model_layout(m).mtp
        rules.check(mtp[-1] == m.mtp_num_layers, "a hybrid model's MTP modules run on the last pipeline stage",
                    f"the layout places MTP layers on virtual stages {[j for j, k in enumerate(mtp) if k]}; "
                    "--hybrid-layer-pattern puts its '/' segments after the last stage's layers",
                    "megatron/core/models/hybrid/hybrid_layer_allocation.py parse_hybrid_pattern")
    validate_megatron(megatron_argv(job), job.num_gpus, megatron_env(job), job.cluster.gpu.compute_capability, rules)
    return rules


def entry_point(job: EmitJob) -> str:
    """The training script: pretrain_hybrid.py builds a HybridModel from --hybrid-layer-pattern
    (Megatron-LM examples/mamba/train.sh), pretrain_gpt.py a GPTModel."""
    return "pretrain_hybrid.py" if job.model.hybrid_layer_pattern is not None else "pretrain_gpt.py"


def _render_sections(sections: list[Section], indent: str = "  ") -> str:
    lines = []
    for name, groups in sections:
        lines.append(f"{indent}# {name}")
        lines += [indent + " ".join(shlex.quote(tok) for tok in group) for group in groups]
    return "\n".join(lines)


def render_script(job: EmitJob) -> str:
    m = job.model
    notes = ["Set MEGATRON_LM to a Megatron-LM checkout; run this script once on every node with NODE_RANK set.",
             "Without DATA_PATH the run uses --mock-data and a NullTokenizer of the model's vocab size.", *fp8_notes(job),
             *cp_notes(job)]
    exports = env_lines(job)
    return f"""#!/usr/bin/env bash
{comment_block(header_lines(job, FRAMEWORK, notes)).rstrip()}
set -euo pipefail

MEGATRON_LM=${{MEGATRON_LM:-/opt/megatron-lm}}
{rendezvous_block(job)}
{chr(10).join(exports)}

MEGATRON_ARGS=(
{_render_sections(megatron_sections(job))}
)

if [ -n "${{DATA_PATH:-}}" ]; then
  DATA_ARGS=(--data-path "$DATA_PATH" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "${{TOKENIZER_MODEL:?set TOKENIZER_MODEL}}")
else
  DATA_ARGS=(--mock-data --tokenizer-type NullTokenizer --vocab-size {m.vocab_size})
fi
TRAIN_ARGS=(
  --train-iters "${{TRAIN_ITERS:-1000}}"
  --lr "${{LR:-3.0e-4}}" --min-lr "${{MIN_LR:-3.0e-5}}" --lr-decay-style cosine --lr-warmup-iters "${{WARMUP_ITERS:-100}}"
  --weight-decay 0.1 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95
  --log-interval 1
)
# --save-interval: {_save_interval_why(job)}
if [ -n "${{CKPT_DIR:-}}" ]; then
  TRAIN_ARGS+=(--save "$CKPT_DIR" --load "$CKPT_DIR" --save-interval "${{SAVE_INTERVAL:-{checkpoint_interval_steps(job) or 500}}}")
fi

exec torchrun --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE" --node-rank "$NODE_RANK" \\
  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\
  "$MEGATRON_LM/{entry_point(job)}" "${{MEGATRON_ARGS[@]}}" "${{DATA_ARGS[@]}}" "${{TRAIN_ARGS[@]}}" "$@"
"""


def emit_megatron(job: EmitJob) -> list[Artefact]:
    refuse(FRAMEWORK, job.model.name, job.plan.text(), check_megatron(job).found, MODEL_RULES)
    return [Artefact(SCRIPT, render_script(job), executable=True)]
