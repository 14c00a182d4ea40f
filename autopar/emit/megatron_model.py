"""Megatron-LM flags that build the plan's model as itself: shape, normalization, position
embedding and RoPE scaling, biases, MoE router (score function, expert bias, group-limited
routing, scaling), token dispatcher, MTP and MLA. Without them Megatron's defaults build a
different model (LayerNorm, learned positions, softmax router, no MTP).

Flag names: Megatron-LM megatron/training/arguments.py and the TransformerConfig fields it turns
into flags (megatron-core 0.19.2; docs/reference/launchers.md 1.1-1.3), checked by the
integration tests with Megatron-LM's own parse_args/validate_args.
"""

from __future__ import annotations

from autopar.emit.common import EmitJob
from autopar.specs.model import ModelSpec, Norm, RouterBalance, RouterScore
from autopar.specs.plan import Dispatcher
from autopar.specs.training import Precision

Group = list[str]

# plan.dispatcher -> --moe-token-dispatcher-type (DeepEP runs under Megatron's 'flex' dispatcher)
DISPATCHER = {Dispatcher.alltoall: "alltoall", Dispatcher.allgather: "allgather", Dispatcher.deepep: "flex"}


def max_position_embeddings(model: ModelSpec, seq_len: int) -> int:
    """RoPE models only size a cache (and models without position embeddings have none), so
    raise it to seq_len; learned absolute embeddings are parameters, so keep the model's value
    and let the validator refuse."""
    if model.max_position_embeddings is None:
        return seq_len
    learned = model.position_embedding == "learned_absolute"
    return model.max_position_embeddings if learned else max(model.max_position_embeddings, seq_len)


# MLATransformerConfig's YaRN fields that no Megatron-LM flag reaches (d98e8a6
# transformer_config.py defaults; argument_utils.py core_transformer_config_from_args copies only
# args of the same name, and _apply_yarn_config_from_args returns early for MLA, so
# --yarn-original-max-position-embeddings / --yarn-beta-fast / --yarn-beta-slow are ignored)
MLA_YARN_FIXED = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}


def mla_yarn_unexpressed(m: ModelSpec) -> dict[str, object]:
    """An MLA model's YaRN values Megatron-LM's command line cannot set (field -> HF value)."""
    scaling = m.rope_scaling
    if m.mla is None or scaling is None or scaling.type != "yarn":
        return {}
    given = {k: getattr(scaling, k) for k in MLA_YARN_FIXED}
    out: dict[str, object] = {k: v for k, v in given.items() if v is not None and v != MLA_YARN_FIXED[k]}
    if scaling.attention_factor is not None:  # no MLA field: the cos/sin scale comes from the mscales
        out["attention_factor"] = scaling.attention_factor
    if scaling.truncate is False:  # MLATransformerConfig rounds the correction range (no field to turn it off)
        out["truncate"] = False
    return out


def _mla_rope_flags(m: ModelSpec) -> list[Group]:
    """MLA builds its own RoPE from MLATransformerConfig (multi_latent_attention.py): rope_type
    'yarn' by default (factor 40), so a model without YaRN asks for plain RoPE, which the fused
    MLA RoPE refuses (MLATransformerConfig.__post_init__: 'apply_rope_fusion for MLA only works
    with YARN RoPE'). YaRN's factor and mscales are the MLA args --rotary-scaling-factor, --mscale
    and --mscale-all-dim; the rest is MLA_YARN_FIXED (check_megatron refuses other values)."""
    scaling = m.rope_scaling
    if scaling is None:
        return [["--rope-type", "rope"], ["--no-rope-fusion"]]
    out: list[Group] = [["--rotary-scaling-factor", f"{scaling.factor:g}"]]
    if scaling.mscale is not None:
        out.append(["--mscale", f"{scaling.mscale:g}"])
    if scaling.mscale_all_dim is not None:
        out.append(["--mscale-all-dim", f"{scaling.mscale_all_dim:g}"])
    return out


# Megatron-LM d98e8a6's non-MLA RoPE scaling: --use-rope-scaling applies llama3 scaling with only the
# factor from --rope-scaling-factor, the rest _apply_scaling's defaults (rotary_pos_embedding.py);
# --rotary-seq-len-interpolation-factor (an int flag, arguments.py) divides the positions (linear);
# --position-embedding-type yarn with --rotary-scaling-factor / --mscale* / --yarn-* builds YaRN.
# Other HF types (dynamic, longrope, mrope, ...) have no flag: check_megatron refuses them.
LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
ROPE_SCALING_TYPES = ("llama3", "linear", "yarn")


def rope_scaling_unexpressed(m: ModelSpec) -> dict[str, object]:
    """A non-MLA model's RoPE scaling values Megatron-LM's flags cannot set (field -> HF value)."""
    scaling = m.rope_scaling
    if m.mla is not None or scaling is None or m.position_embedding != "rope":
        return {}
    if scaling.type not in ROPE_SCALING_TYPES:
        return {"type": scaling.type}
    if scaling.type == "llama3":
        given = {k: getattr(scaling, k) for k in LLAMA3_FIXED}
        return {k: v for k, v in given.items() if v is not None and v != LLAMA3_FIXED[k]}
    if scaling.type == "linear" and scaling.factor != int(scaling.factor):
        return {"factor": scaling.factor}
    if scaling.type == "yarn" and scaling.attention_factor is not None:  # no flag sets YaRN's cos/sin scale directly
        return {"attention_factor": scaling.attention_factor}
    return {}


def yarn_mscale_flags(scaling) -> list[Group]:
    """YaRN's cos/sin scale: transformers (modeling_rope_utils.py _compute_yarn_parameters) takes the
    mscale ratio only when mscale and mscale_all_dim are both given and non-zero, else 0.1 ln(factor)
    + 1; Megatron's YarnRotaryEmbedding always takes the ratio, and its defaults (--mscale 1,
    --mscale-all-dim 0) give 0.1 ln(factor) + 1. So the flags go out only as a pair."""
    if not (scaling.mscale and scaling.mscale_all_dim):
        return []
    return [["--mscale", f"{scaling.mscale:g}"], ["--mscale-all-dim", f"{scaling.mscale_all_dim:g}"]]


def _rope_flags(m: ModelSpec) -> list[Group]:
    out: list[Group] = []
    if m.rope_theta is not None:
        out.append(["--rotary-base", str(int(m.rope_theta))])  # an int flag in Megatron-LM
    if m.mla is not None:  # check_megatron refuses MLA scaling other than yarn
        return out + _mla_rope_flags(m)
    scaling = m.rope_scaling
    if scaling is None:
        return out
    if scaling.type == "llama3":  # Megatron's llama3 scaling: factor given, the rest LLAMA3_FIXED
        out += [["--use-rope-scaling"], ["--rope-scaling-factor", f"{scaling.factor:g}"]]
    elif scaling.type == "linear":  # RotaryEmbedding divides the positions by the factor, as HF's linear type
        out.append(["--rotary-seq-len-interpolation-factor", f"{scaling.factor:g}"])
    elif scaling.type == "yarn":
        out += [["--rotary-scaling-factor", f"{scaling.factor:g}"], *yarn_mscale_flags(scaling)]
        if scaling.original_max_position_embeddings is not None:
            out.append(["--yarn-original-max-position-embeddings", str(scaling.original_max_position_embeddings)])
        if scaling.beta_fast is not None:
            out.append(["--yarn-beta-fast", f"{scaling.beta_fast:g}"])
        if scaling.beta_slow is not None:
            out.append(["--yarn-beta-slow", f"{scaling.beta_slow:g}"])
        if scaling.truncate is False:  # transformers' truncate false: the correction range is not rounded (gpt-oss)
            out.append(["--no-yarn-correction-range-round-to-int"])
    return out


# HF hidden_act names of squared ReLU (Nemotron-4 'squared_relu', Nemotron-H 'relu2'): Megatron --squared-relu
SQUARED_RELU = ("squared_relu", "relu2")
# The non-gated GeLU Megatron-LM d98e8a6's command line builds: activation_func F.gelu (exact, erf),
# and bias_activation_fusion = --bias-gelu-fusion (on by default; arguments.py turns it off without
# linear biases) (argument_utils.py core_transformer_config_from_args). With the fusion on, mlp.py
# MLP.forward applies fusions/fused_bias_gelu.py bias_gelu, the tanh approximation; --openai-gelu
# is parsed and read nowhere. HF ACT2FN names (transformers activations.py): 'gelu' is the exact
# GELUActivation, 'gelu_new' / 'gelu_fast' / 'gelu_pytorch_tanh' the tanh approximation.
EXACT_GELU = ("gelu",)
TANH_GELU = ("gelu_new", "gelu_fast", "gelu_pytorch_tanh")


def plain_mlp_flags(m: ModelSpec) -> list[Group] | None:
    """A non-gated MLP's activation as Megatron-LM flags, None when no flag builds it (check_megatron
    refuses): squared ReLU is --squared-relu; GeLU exact or tanh as the bias fusion makes it: exact
    without biases (no fusion) or with --no-bias-gelu-fusion, tanh with biases and the fusion (the
    default). TransformerConfig refuses the fusion with squared ReLU ('When bias_activation_fusion is
    True, activation function should be either gelu, swiglu, or quick_geglu'), so a biased squared
    ReLU turns it off."""
    no_fusion = [["--no-bias-gelu-fusion"]] if m.linear_bias else []
    if m.activation in SQUARED_RELU:
        return [["--squared-relu"], *no_fusion]
    if m.activation in EXACT_GELU:
        return no_fusion
    if m.activation in TANH_GELU and m.linear_bias:
        return []
    return None
# the gated MLPs Megatron-LM d98e8a6's command line builds (argument_utils.py
# core_transformer_config_from_args): --swiglu sets F.silu, --quick-geglu quick_gelu (x sigmoid(1.702 x));
# TransformerConfig.activation_func and gated_linear_unit have no flag (arguments.py excludes them)
GATED_FLAGS = {"silu": "--swiglu", "swish": "--swiglu", "swiglu": "--swiglu", "quick_gelu": "--quick-geglu"}


def hybrid_stage_pattern(job: EmitJob) -> str:
    """A hybrid model's main pattern, one letter per layer, with '|' between the plan's virtual
    pipeline stages in virtual order (segment v * pp + p runs on rank p as its chunk v:
    hybrid_layer_allocation.py select_pipeline_segment)."""
    m, plan = job.model, job.plan
    text = m.hybrid_layer_pattern
    if plan.pp == 1:
        return text
    parts, start = [], 0
    for n in plan.model_layout(m).decoders:
        parts.append(text[start:start + n])
        start += n
    return "|".join(parts)


def hybrid_layer_pattern(job: EmitJob) -> str:
    """Megatron-LM --hybrid-layer-pattern: the staged main pattern, then '/' and the blocks of
    each MTP module (they run on the last stage)."""
    m = job.model
    return hybrid_stage_pattern(job) + ("/" + m.mtp_hybrid_blocks) * m.mtp_num_layers


def hybrid_flags(job: EmitJob) -> list[Group]:
    """A hybrid model's layers (pretrain_hybrid.py): the pattern sets the layer count, the
    pipeline split and the MTP depth; the Mamba-2 shape is TransformerConfig's mamba_* fields."""
    m = job.model
    out: list[Group] = [["--hybrid-layer-pattern", hybrid_layer_pattern(job)]]
    if m.mamba is not None:
        out += [["--mamba-num-heads", str(m.mamba.num_heads)], ["--mamba-head-dim", str(m.mamba.head_dim)],
                ["--mamba-state-dim", str(m.mamba.state_dim)], ["--mamba-num-groups", str(m.mamba.num_groups)]]
    return out


def model_flags(job: EmitJob) -> list[Group]:
    m = job.model
    hybrid = m.hybrid_layer_pattern is not None
    out: list[Group] = hybrid_flags(job) if hybrid else [["--num-layers", str(m.num_layers)]]
    out += [
        ["--hidden-size", str(m.hidden_size)],
        ["--ffn-hidden-size", str(m.ffn_hidden_size)],
        ["--num-attention-heads", str(m.num_attention_heads)],
    ]
    if m.mla is None:
        out.append(["--kv-channels", str(m.head_size)])
        if m.kv_heads < m.num_attention_heads:
            out.append(["--group-query-attention"])
            out.append(["--num-query-groups", str(m.kv_heads)])
    out.append(["--normalization", "RMSNorm" if m.normalization == Norm.rmsnorm else "LayerNorm"])
    out.append(["--norm-epsilon", f"{m.norm_eps:g}"])
    if m.norm_zero_centered_gamma:  # TransformerConfig layernorm_zero_centered_gamma: x_normed * (1 + weight)
        out.append(["--apply-layernorm-1p"])
    if m.qk_layernorm:  # with MLA it builds the q and kv latent norms (gpt_layer_specs: only when qk_layernorm is set)
        out.append(["--qk-layernorm"])
    if m.gated_mlp:
        if m.activation in GATED_FLAGS:  # check_megatron refuses the other gated activations
            out.append([GATED_FLAGS[m.activation]])
    else:  # check_megatron refuses the activations no flag builds
        out += plain_mlp_flags(m) or []
    if m.position_embedding == "rope":
        # GPTModel builds YarnRotaryEmbedding only for position_embedding_type 'yarn', and
        # argument_utils.py _apply_yarn_config_from_args reads the --yarn-* flags only then
        # (d98e8a6); MLA builds its own RoPE whatever this says (_mla_rope_flags)
        yarn = m.mla is None and m.rope_scaling is not None and m.rope_scaling.type == "yarn"
        out.append(["--position-embedding-type", "yarn" if yarn else "rope"])
        if m.rotary_percent < 1:  # RotaryEmbedding rotates int(kv_channels * rotary_percent) dims
            out.append(["--rotary-percent", f"{m.rotary_percent:g}"])
        out += _rope_flags(m)
    elif m.position_embedding == "none":  # Megatron's default is learned_absolute
        out.append(["--position-embedding-type", "none"])
    if not m.linear_bias:
        out.append(["--disable-bias-linear"])
    if m.qkv_bias:
        out.append(["--add-qkv-bias"])
    if not m.tied_embeddings:
        out.append(["--untie-embeddings-and-output-weights"])
    if not m.dropout:
        out += [["--attention-dropout", "0.0"], ["--hidden-dropout", "0.0"]]
    if not job.training.flash_attention:
        out.append(["--attention-backend", "unfused"])
    if m.mtp_num_layers and not hybrid:  # a hybrid pattern's '/' segments give the MTP depth
        out.append(["--mtp-num-layers", str(m.mtp_num_layers)])
    if m.attention_output_gate:
        out.append(["--attention-output-gate"])
    if m.linear_attention is not None:
        # Gated DeltaNet layers (Megatron-Core megatron/core/ssm/gated_delta_net; TransformerConfig
        # experimental_attention_variant, linear_attention_freq and the linear_* shape fields)
        la = m.linear_attention
        out += [["--experimental-attention-variant", "gated_delta_net"], ["--linear-attention-freq", linear_attention_freq(m)],
                ["--linear-conv-kernel-dim", str(la.conv_kernel_dim)], ["--linear-key-head-dim", str(la.key_head_dim)],
                ["--linear-value-head-dim", str(la.value_head_dim)], ["--linear-num-key-heads", str(la.num_key_heads)],
                ["--linear-num-value-heads", str(la.num_value_heads)]]
    if m.attention_window is not None and not m.attention_chunked:
        # sliding window (left W, right 0: causal); without global layers every layer slides
        out.append(["--window-size", f"{m.attention_window},0"])
        if m.global_attention_layers:
            out.append(["--window-attn-skip-freq", window_attn_skip_freq(m)])
    return out


def window_attn_skip_freq(m: ModelSpec) -> str:
    """Megatron-LM --window-attn-skip-freq: N when every N-th layer is global ((N-1) sliding
    layers, then one full), else the per-layer list (1 = sliding, 0 = full)."""
    return _every_nth_or_runs([int(m.is_local_attention_layer(i)) for i in range(m.num_layers)])


def linear_attention_freq(m: ModelSpec) -> str:
    """Megatron-LM --linear-attention-freq: N when every N-th layer is softmax attention ((N-1)
    linear-attention layers, then one), else the per-layer list (1 = linear, 0 = softmax)."""
    return _every_nth_or_runs([int(m.is_linear_attention_layer(i)) for i in range(m.num_layers)])


def _every_nth_or_runs(pattern: list[int]) -> str:
    n_layers = len(pattern)
    every = next((n for n in range(2, n_layers + 1) if pattern == [int((i + 1) % n != 0) for i in range(n_layers)]), None)
    return str(every) if every else _runs(pattern)


def moe_layer_freq(m: ModelSpec) -> str:
    pattern = [int(m.is_moe_layer(i)) for i in range(m.num_layers)]
    if pattern == [int(i % m.moe_layer_freq == 0) for i in range(m.num_layers)]:
        return str(m.moe_layer_freq)
    return _runs(pattern)


def _runs(pattern: list[int]) -> str:
    """A per-layer 0/1 pattern as the Python list expression Megatron-LM evaluates: ([1]*3+[0]*1)."""
    runs: list[list[int]] = []
    for f in pattern:
        if runs and runs[-1][0] == f:
            runs[-1][1] += 1
        else:
            runs.append([f, 1])
    return "(" + "+".join(f"[{f}]*{n}" for f, n in runs) + ")"


def load_balancing_type(m: ModelSpec) -> str | None:
    """Megatron's moe_router_load_balancing_type for the model's balance loss, None for its default
    aux_loss (per micro-batch): global_aux_loss for Qwen3 (the loss over the global batch),
    seq_aux_loss for DeepSeek's per-sequence loss (Megatron-LM d98e8a6 arguments.py choices)."""
    if m.moe_router_balance == RouterBalance.global_batch:
        return "global_aux_loss"
    if m.moe_aux_loss_per_sequence:
        return "seq_aux_loss"
    return None


def _router_flags(m: ModelSpec) -> list[Group]:
    out: list[Group] = [["--moe-router-score-function", m.moe_router_score_function.value]]
    if m.moe_router_expert_bias:  # DeepSeek-V3 aux-loss-free balancing
        out.append(["--moe-router-enable-expert-bias"])
    balance = load_balancing_type(m)
    if balance is not None:
        out.append(["--moe-router-load-balancing-type", balance])
    if m.moe_aux_loss_coeff is not None:  # Megatron's default is 0: no balance loss at all
        out.append(["--moe-aux-loss-coeff", f"{m.moe_aux_loss_coeff:g}"])
    if m.moe_router_num_groups is not None and m.moe_router_group_topk is not None:
        out += [["--moe-router-num-groups", str(m.moe_router_num_groups)], ["--moe-router-group-topk", str(m.moe_router_group_topk)]]
    if m.moe_router_topk_scaling_factor is not None:
        out.append(["--moe-router-topk-scaling-factor", f"{m.moe_router_topk_scaling_factor:g}"])
    if m.moe_top_k == 1 and m.moe_router_score_function == RouterScore.softmax:  # topk 1 with softmax needs pre-softmax
        out.append(["--moe-router-pre-softmax"])
    if m.moe_shared_expert_gate:
        out.append(["--moe-shared-expert-gate"])
    return out


def moe_flags(job: EmitJob) -> list[Group]:
    m, plan = job.model, job.plan
    if not m.is_moe:
        return []
    out: list[Group] = [
        ["--num-experts", str(m.num_experts)],
        ["--moe-router-topk", str(m.moe_top_k)],
        ["--moe-ffn-hidden-size", str(m.moe_ffn_hidden_size)],
    ]
    if m.hybrid_layer_pattern is None:  # a hybrid pattern's E letters place the MoE layers
        out.append(["--moe-layer-freq", moe_layer_freq(m)])
    if m.moe_shared_expert_ffn_size:
        out.append(["--moe-shared-expert-intermediate-size", str(m.moe_shared_expert_ffn_size)])
    if m.moe_latent_size:
        out.append(["--moe-latent-size", str(m.moe_latent_size)])
    out += _router_flags(m)
    if job.training.precision != Precision.fp16:  # grouped GEMM is bf16-only
        out.append(["--moe-grouped-gemm"])
    out.append(["--moe-token-dispatcher-type", DISPATCHER[plan.dispatcher]])
    if plan.dispatcher == Dispatcher.deepep:
        out.append(["--moe-flex-dispatcher-backend", "deepep"])
    if plan.ep_overlap:
        out.append(["--overlap-moe-expert-parallel-comm"])
    return out


def mla_flags(job: EmitJob) -> list[Group]:
    mla = job.model.mla
    if mla is None:
        return []
    out: list[Group] = [["--multi-latent-attention"]]
    if mla.q_lora_rank is not None:
        out.append(["--q-lora-rank", str(mla.q_lora_rank)])
    out += [["--kv-lora-rank", str(mla.kv_lora_rank)], ["--qk-head-dim", str(mla.qk_nope_head_dim)],
            ["--qk-pos-emb-head-dim", str(mla.qk_rope_head_dim)], ["--v-head-dim", str(mla.v_head_dim)]]
    return out
