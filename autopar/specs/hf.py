"""HuggingFace config.json -> ModelSpec fields, as the checkpoint's own modeling code reads them
(transformers models/{llama,mistral,mixtral,qwen2,qwen2_moe,qwen3,qwen3_moe,deepseek_v3,llama4,
gpt2}/configuration_*.py; Megatron-Bridge's HF->Megatron mappings for the routing options).

Handled: Llama/Mistral/Qwen2/Qwen3 (dense), Mixtral, Qwen2-MoE/Qwen3-MoE (decoder_sparse_step,
mlp_only_layers, shared expert gate), DeepSeek-V2/V3 (MLA, group-limited sigmoid routing with
expert bias, first-k dense, MTP), Llama-4 (nested text_config, interleaved MoE, shared expert),
GPT-2 style (n_layer, n_embd, n_head, n_inner, learned positions, LayerNorm, tied); local
attention (layer_types sliding/chunked, Mistral/Qwen/Gemma sliding windows, Llama-4 chunks:
gpt-oss, Gemma-2/3); Gemma-3's multimodal wrapper (Gemma3ForConditionalGeneration, whose
text_config leaves out the keys at Gemma3TextConfig's defaults: TEXT_CONFIG_DEFAULTS); Qwen3-Next's Gated DeltaNet layers (linear_* keys, layer_types or
full_attention_interval); Nemotron-H's hybrid Mamba-2 models (transformers-style
configuration_nemotron_h.py: hybrid_override_pattern or a layers_block_type list, mamba_* and
ssm_state_size keys, squared-ReLU MLP, MoE layers 'E', Nemotron 3 Super/Ultra's LatentMoE
moe_latent_size). Other hybrid linear-attention / state-space models are refused by name.

A config's model_type must be one of MODEL_TYPES (a config without one is read as Llama-style):
an encoder (BERT), an encoder-decoder (T5) or another hybrid (Jamba) has layers autopar does not
cost, and reading its keys as a decoder's would cost another network. A number written as text
("hidden_size": "4096") is refused naming the key: pydantic would read it as a number silently.
"""

from __future__ import annotations

import re
from typing import Any

from autopar.errors import InputError, Missing

GPT2_KEYS = {"n_layer": "num_hidden_layers", "n_embd": "hidden_size", "n_head": "num_attention_heads",
             "n_positions": "max_position_embeddings", "layer_norm_epsilon": "layer_norm_eps"}
GATED_ACTIVATIONS = ("silu", "swiglu", "swish")
# families whose MLP is gated (gate, up and down projections) whatever the activation: Gemma's
# GeGLU runs gelu_pytorch_tanh (transformers GemmaMLP / Gemma2MLP / Gemma3MLP)
GATED_FAMILIES = ("llama", "mistral", "mixtral", "qwen", "deepseek", "gemma", "gpt_oss", "glm", "olmo", "phi3", "granite")
# families whose routers were balanced over the global batch, not per micro-batch: Qwen3-MoE
# (Qwen3 Technical Report, arXiv 2505.09388, section 2: "the global-batch load balancing loss is
# adopted to encourage expert specialization") and Qwen3-Next (Megatron-Bridge
# models/qwen/qwen3_next_bridge.py sets moe_router_load_balancing_type = "global_aux_loss")
GLOBAL_BATCH_BALANCED = ("qwen3_moe", "qwen3_next")
# layer kinds of transformers' config.layer_types that autopar costs
ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
# keys that describe the non-attention layers of hybrid models autopar has no cost for
# (Jamba, MiniMax, Mamba-1 mixers): state-space and other linear-attention layers; Gated
# DeltaNet layers (Qwen3-Next, linear_attention in layer_types) and Nemotron-H's Mamba-2 layers
# (_nemotron_h) are costed
HYBRID_KEYS = ("hybrid_override_pattern", "layers_block_type", "attn_type_list", "mamba_d_state")
LINEAR_ATTENTION = "linear_attention"
# HF model_type values whose config.json this module reads (the text model's, under text_config):
# the families named above, and the Llama-style decoders of GATED_FAMILIES (GLM-4, OLMo, Phi-3,
# Granite); Kimi K2 is DeepSeek-V3's network under its own name
MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "gemma", "gemma2", "gemma3", "gemma3_text", "glm", "glm4", "glm4_moe", "gpt2",
               "gpt_oss", "granite", "granitemoe", "kimi_k2", "llama", "llama4", "llama4_text", "mistral", "mixtral", "nemotron_h",
               "olmo", "olmo2", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next")
# model types refused with the reason: what their layers are that autopar has no cost for
UNSUPPORTED_KINDS = {
    "jamba": "a hybrid of attention and Mamba-1 layers", "falcon_h1": "a hybrid of attention and Mamba-2 heads in one layer",
    "zamba": "a hybrid of Mamba and shared attention layers", "zamba2": "a hybrid of Mamba-2 and shared attention layers",
    "minimax": "a hybrid of lightning (linear) and softmax attention layers", "mamba": "a state-space model", "mamba2": "a state-space model",
    "rwkv": "a linear-recurrence model", "bert": "an encoder (bidirectional, no causal LM head)", "roberta": "an encoder",
    "deberta": "an encoder", "deberta-v2": "an encoder", "electra": "an encoder", "t5": "an encoder-decoder", "bart": "an encoder-decoder",
    "mt5": "an encoder-decoder", "whisper": "a speech encoder-decoder",
}
# keys this module reads as numbers: a string there ("4096") is refused, not coerced by pydantic
NUMBER_KEYS = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
    "intermediate_size_mlp", "vocab_size", "max_position_embeddings", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
    "norm_eps", "num_nextn_predict_layers", "swiglu_limit", "rope_theta", "partial_rotary_factor", "rotary_pct",
    "n_routed_experts", "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts",
    "shared_expert_intermediate_size", "first_k_dense_replace", "decoder_sparse_step", "interleave_moe_layer_step",
    "moe_layer_freq", "n_group", "topk_group", "routed_scaling_factor", "sliding_window", "attention_chunk_size",
    "max_window_layers", "sliding_window_pattern", "no_rope_layer_interval", "full_attention_interval", "linear_num_key_heads",
    "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "mamba_num_heads",
    "mamba_head_dim", "ssm_state_size", "n_groups", "mamba_n_groups", "conv_kernel", "mamba_d_conv", "chunk_size",
    "mamba_chunk_size", "moe_shared_expert_intermediate_size", "moe_latent_size", "attention_head_dim", "kv_lora_rank",
    "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_layer", "n_embd", "n_head", "n_positions", "n_inner",
    "router_aux_loss_coef", "aux_loss_alpha", "rope_local_base_freq",
)
# ModelSpec field (dotted into its nested specs) -> the HF keys hf_fields reads it from, in its
# order: an error about the field names the key the file holds (the first of these it names), as
# the user wrote it (a GPT-2 file's n_layer ... through GPT2_KEYS).
SPEC_KEYS: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers",), "hidden_size": ("hidden_size",),
    "num_attention_heads": ("num_attention_heads",), "num_kv_heads": ("num_key_value_heads",), "head_dim": ("head_dim", "attention_head_dim"),
    "ffn_hidden_size": ("intermediate_size_mlp", "intermediate_size", "n_inner"), "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("max_position_embeddings",), "norm_eps": ("rms_norm_eps", "layer_norm_eps", "norm_eps"),
    "num_experts": ("n_routed_experts", "num_local_experts", "num_experts"), "moe_top_k": ("num_experts_per_tok",),
    "moe_ffn_hidden_size": ("moe_intermediate_size", "intermediate_size"), "moe_first_k_dense_layers": ("first_k_dense_replace",),
    "moe_router_num_groups": ("n_group",), "moe_router_group_topk": ("topk_group",),
    "moe_router_topk_scaling_factor": ("routed_scaling_factor",), "moe_aux_loss_coeff": ("router_aux_loss_coef", "aux_loss_alpha"),
    "moe_latent_size": ("moe_latent_size",), "mtp_num_layers": ("num_nextn_predict_layers",), "rope_theta": ("rope_theta",),
    "rotary_percent": ("partial_rotary_factor", "rotary_pct"), "rope_local_theta": ("rope_local_base_freq",),
    "attention_window": ("attention_chunk_size", "sliding_window"), "swiglu_limit": ("swiglu_limit",),
    "mla.q_lora_rank": ("q_lora_rank",), "mla.kv_lora_rank": ("kv_lora_rank",), "mla.qk_nope_head_dim": ("qk_nope_head_dim",),
    "mla.qk_rope_head_dim": ("qk_rope_head_dim",), "mla.v_head_dim": ("v_head_dim",),
    "linear_attention.num_key_heads": ("linear_num_key_heads",), "linear_attention.num_value_heads": ("linear_num_value_heads",),
    "linear_attention.key_head_dim": ("linear_key_head_dim",), "linear_attention.value_head_dim": ("linear_value_head_dim",),
    "linear_attention.conv_kernel_dim": ("linear_conv_kernel_dim",),
    "mamba.num_heads": ("mamba_num_heads",), "mamba.head_dim": ("mamba_head_dim",),
    "mamba.state_dim": ("ssm_state_size",), "mamba.num_groups": ("n_groups", "mamba_n_groups"),
    "mamba.conv_kernel_dim": ("conv_kernel", "mamba_d_conv"), "mamba.chunk_tokens": ("chunk_size", "mamba_chunk_size"),
}
# DeepSeek-V3's sequence-wise balance loss weight when its config.json names none (the released
# V3 file has no aux_loss_alpha): DeepSeek-V3 Technical Report (arXiv 2412.19437) section 4.2,
# alpha = 0.0001; Megatron-Bridge 067f987 models/deepseek/deepseek_v3_bridge.py and Megatron-LM
# d98e8a6 examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh (seq_aux_loss, 1e-4) use the same
DEEPSEEK_V3_SEQ_AUX_LOSS = 1e-4
# Nemotron-H MoE (Nemotron 3 Nano/Super/Ultra): transformers' NemotronHConfig has no balance-loss
# key (router_aux_loss_coef / aux_loss_alpha), and its routers train with a sigmoid score, an expert
# bias and a sequence-wise loss of weight 1e-4: Megatron-Bridge 067f987
# models/nemotronh/nemotron_h_bridge.py provider_bridge and recipes/nemotronh/h100/nemotron_3_nano.py
# (moe_aux_loss_coeff 0.0001, seq_aux_loss); Megatron-LM d98e8a6
# examples/post_training/modelopt/conf/nvidia/NVIDIA-Nemotron-3-{Nano,Super,Ultra}-*.sh alike
NEMOTRON_H_SEQ_AUX_LOSS = 1e-4
# The text model class's defaults, by model_type, for the keys this module reads: transformers'
# save_pretrained writes a nested text_config as its difference from the class defaults
# (configuration_utils.py to_diff_dict), so a multimodal checkpoint omits every key at its
# default and its modeling code reads the class's value (google/gemma-3-27b-it's text_config has
# no vocab_size, max_position_embeddings or rope_theta; google/gemma-3-4b-it's no head count or
# head_dim either). A key the file names, null included, is the file's.
TEXT_CONFIG_DEFAULTS = {
    # transformers models/gemma3/configuration_gemma3.py Gemma3TextConfig.__init__ (4.50, the same at
    # d98ac17): vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
    # num_attention_heads=8, num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh",
    # max_position_embeddings=131_072, rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1_000_000.0,
    # attention_bias=False, sliding_window=4096, rope_local_base_freq=10_000.0, sliding_window_pattern=6
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                    "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                    "rope_theta": 1_000_000.0, "attention_bias": False, "sliding_window": 4096,
                    "rope_local_base_freq": 10_000.0, "sliding_window_pattern": 6},
}
# Gemma3Config (model_type gemma3, Gemma3ForConditionalGeneration) builds its text_config as a
# Gemma3TextConfig (sub_configs["text_config"]), whether or not the nested block names its model_type
TEXT_CONFIG_DEFAULTS["gemma3"] = TEXT_CONFIG_DEFAULTS["gemma3_text"]
# transformers 4 RoPE keys: a transformers 5 file states them inside rope_parameters instead
# (_rope, _rope_local read them there), so they are not defaulted beside a rope_parameters block
V4_ROPE_KEYS = ("rope_theta", "rope_local_base_freq")
ROPE_NUMBER_KEYS = ("rope_theta", "factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor", "beta_fast",
                    "beta_slow", "mscale", "mscale_all_dim", "partial_rotary_factor", "attention_factor")


def is_hf_config(data: dict[str, Any]) -> bool:
    """A HuggingFace config (flat, GPT-2 style or nested under text_config)."""
    if isinstance(data.get("text_config"), dict):
        return is_hf_config(data["text_config"])
    layers = "num_hidden_layers" in data or isinstance(data.get("layers_block_type"), list)  # Nemotron 3 Ultra: one entry per layer
    # num_hidden_layers alone is HF's spelling (an autopar model file says num_layers), so a config
    # that lacks hidden_size is still read as HF and its error names hidden_size
    return layers or ("model_type" in data and "num_layers" not in data) or ("n_layer" in data and "n_embd" in data)


def _flatten(cfg: dict[str, Any]) -> dict[str, Any]:
    """The text model's keys: nested text_config (Llama-4, multimodal checkpoints) merged over
    the top level; GPT-2 names mapped to Llama names."""
    if isinstance(cfg.get("text_config"), dict):
        top = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config")}
        # which keys the text_config holds, so that an error names the key where it sits (_get)
        cfg = {**top, **cfg["text_config"], "_text_config_keys": frozenset(cfg["text_config"])}
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("layers_block_type"), list):
        # newer NemotronHConfig files (Nemotron 3 Ultra) derive the layer count from the block list
        cfg = {**cfg, "num_hidden_layers": len(cfg["layers_block_type"])}
    if "n_layer" in cfg:
        cfg = {**cfg, **{new: cfg[old] for old, new in GPT2_KEYS.items() if old in cfg}}
        cfg.setdefault("intermediate_size", cfg.get("n_inner") or 4 * cfg["hidden_size"])
        cfg.setdefault("hidden_act", cfg.get("activation_function", "gelu_new"))
        cfg.setdefault("tie_word_embeddings", True)
        cfg["_gpt2"] = True
    return cfg


def _class_defaults(cfg: dict[str, Any], mtype: str) -> dict[str, Any]:
    """The flattened config with the text model class's defaults (TEXT_CONFIG_DEFAULTS) for the
    keys neither the text_config nor the top level names."""
    defaults = TEXT_CONFIG_DEFAULTS.get(mtype, {})
    skip = V4_ROPE_KEYS if isinstance(cfg.get("rope_parameters"), dict) else ()
    return {**{k: v for k, v in defaults.items() if k not in skip}, **cfg}


def _check_numbers(cfg: dict[str, Any], field: str) -> None:
    """Refuse a number written as text in a key the importer reads (and in the RoPE scaling
    mappings), naming the key: JSON "4096" is a string, which pydantic would take as 4096."""
    for key in NUMBER_KEYS:
        if isinstance(cfg.get(key), str):
            raise InputError(f"{field}.{key}", cfg[key], "must be a JSON number, not a string (write 4096, not \"4096\")")
    for group in ("rope_scaling", "rope_parameters"):
        values = cfg.get(group)
        for key in ROPE_NUMBER_KEYS if isinstance(values, dict) else ():
            if isinstance(values.get(key), str):
                raise InputError(f"{field}.{group}.{key}", values[key], "must be a JSON number, not a string")
    if isinstance(cfg.get("text_config"), dict):
        _check_numbers(cfg["text_config"], f"{field}.text_config")


def _check_model_type(cfg: dict[str, Any], field: str) -> str:
    """The text model's model_type, lower case ('' when the config names none: read as
    Llama-style); a type outside MODEL_TYPES is refused naming it and the supported ones."""
    nested = isinstance(cfg.get("text_config"), dict) and "model_type" in cfg["text_config"]
    key = f"{field}.text_config.model_type" if nested else f"{field}.model_type"
    value = cfg["text_config"]["model_type"] if nested else cfg.get("model_type")
    if value is None or value == "":
        return ""
    mtype = str(value).lower()
    if mtype not in MODEL_TYPES:
        kind = UNSUPPORTED_KINDS.get(mtype)
        why = (f"{kind}, not a decoder of the layers autopar costs (softmax attention, GatedDeltaNet, Nemotron-H's "
               "Mamba-2, MLP/MoE)" if kind else "not a HuggingFace model type autopar reads")
        raise InputError(key, value, f"{why}; supported model types: {', '.join(MODEL_TYPES)}")
    return mtype


def _first(cfg: dict[str, Any], spec_field: str) -> Any:
    """The value of the first of SPEC_KEYS[spec_field] the config gives (not null), else None."""
    return next((cfg[k] for k in SPEC_KEYS[spec_field] if cfg.get(k)), None)


def _user_key(cfg: dict[str, Any], spec_field: str, field: str) -> str | None:
    """The config.json key a ModelSpec field was read from, as the file spells it and where it
    sits (text_config.<key> when nested); None when the field comes from no one key."""
    nested = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    gpt2 = {new: old for old, new in GPT2_KEYS.items()}
    for key in (k for name in SPEC_KEYS.get(spec_field, ()) for k in (name, gpt2.get(name)) if k):
        for where, block in (("text_config.", nested), ("", cfg)):
            if block.get(key) is not None:
                return f"{field}.{where}{key}"
    return None


def hf_input_error(err: InputError, cfg: dict[str, Any], field: str = "model") -> InputError:
    """A ModelSpec error about a HuggingFace config, re-stated with the config.json keys the file
    holds (model.num_key_value_heads=7, not model.num_kv_heads=7), in its field and its rule."""
    spec_field = err.field.removeprefix(f"{field}.")
    key = _user_key(cfg, spec_field, field) if err.field.startswith(f"{field}.") else None

    def rename(match: re.Match) -> str:  # a field the rule names beside its own: the key alone
        named = _user_key(cfg, match[1], field)
        return f"{named.removeprefix(f'{field}.').removeprefix('text_config.')}=" if named else match[0]

    rule = re.sub(r"\b([a-z_]+)=", rename, err.rule)
    return InputError(key or err.field, err.value, rule)


def _get(cfg: dict[str, Any], key: str, field: str, name: str) -> Any:
    if key not in cfg or cfg[key] is None:
        # a nested config's text model keys belong in its text_config: a key missing from both
        # levels is named there, a null one where the file holds it
        nested = "_text_config_keys" in cfg and (key not in cfg or key in cfg["_text_config_keys"])
        raise InputError(f"{field}.{'text_config.' if nested else ''}{key}", Missing() if key not in cfg else None,
                         f"HuggingFace config of {name} lacks this required key")
    return cfg[key]


# RoPE types: the keys transformers' RoPE of each type reads (5.12 modeling_rope_utils.py
# _compute_*_parameters) and those its config validation requires (_validate_*_rope_parameters;
# original_max_position_embeddings is defaulted by standardize_rope_params, so not required here)
ROPE_TYPE_KEYS = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
             "mscale_all_dim", "truncate"),
    "longrope": ("factor", "original_max_position_embeddings", "attention_factor", "short_factor", "long_factor"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
}
ROPE_REQUIRED_KEYS = {"linear": ("factor",), "dynamic": ("factor",), "yarn": ("factor",), "longrope": ("short_factor", "long_factor"),
                      "llama3": ("factor", "low_freq_factor", "high_freq_factor")}
# RoPE types refused with the reason (an unknown one by its name): autopar's model has one 1-D RoPE
ROPE_REFUSED = {
    "mrope": "multimodal RoPE (Qwen2-VL): each token's rotation comes from a temporal, a height and a width position over "
             "mrope_section's parts of the head, not one position per token",
    "proportional": "Gemma-4's proportional RoPE, a family autopar does not read",
}


def _rope_block(cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The RoPE mapping and its key: rope_scaling (transformers 4 files) over rope_parameters (5).
    transformers 5 writes one rope_parameters block per layer type when they differ (Gemma-3);
    the full-attention layers' one is read, as a transformers 4 file's rope_theta / rope_scaling
    describe those layers (Gemma-3's sliding layers' own base is rope_local_base_freq)."""
    if isinstance(cfg.get("rope_scaling"), dict) and cfg["rope_scaling"]:
        return cfg["rope_scaling"], "rope_scaling"
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    if params and all(isinstance(v, dict) for v in params.values()):
        layer_type = "full_attention" if "full_attention" in params else sorted(params)[0]
        return params[layer_type], f"rope_parameters.{layer_type}"
    return params, "rope_parameters"


def _rope(cfg: dict[str, Any], field: str) -> dict[str, Any]:
    block, key = _rope_block(cfg)
    params = block if key.startswith("rope_parameters") else (cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {})
    theta = cfg.get("rope_theta") or params.get("rope_theta")
    out: dict[str, Any] = {"rope_theta": theta}
    # partial RoPE: transformers' partial_rotary_factor (Qwen3-Next, GLM-4, Phi), GPT-NeoX's rotary_pct
    partial = cfg.get("partial_rotary_factor") or params.get("partial_rotary_factor") or cfg.get("rotary_pct")
    if partial is not None and "kv_lora_rank" not in cfg:
        out["rotary_percent"] = partial
    kind_key = "rope_type" if block.get("rope_type") is not None else "type"
    kind = block.get(kind_key) or "default"
    if kind == "default":  # transformers' unscaled RoPE ('default' ignores every scaling key)
        return out
    if kind in ROPE_REFUSED or kind not in ROPE_TYPE_KEYS:
        why = ROPE_REFUSED.get(kind, "not a RoPE type transformers builds")
        raise InputError(f"{field}.{key}.{kind_key}", kind, f"{why}; autopar reads {', '.join(['default', *ROPE_TYPE_KEYS])}")
    for name in ROPE_REQUIRED_KEYS[kind]:
        if block.get(name) is None:
            raise InputError(f"{field}.{key}.{name}", Missing() if name not in block else None,
                             f"RoPE type {kind} needs it (transformers modeling_rope_utils.py _validate_{kind}_rope_parameters)")
    for name in ("short_factor", "long_factor"):
        values = block.get(name)
        if values is not None and not (isinstance(values, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
            raise InputError(f"{field}.{key}.{name}", values, "must be a list of numbers, one per rotated frequency")
    scaling = {k: block[k] for k in ROPE_TYPE_KEYS[kind] if block.get(k) is not None}
    if kind in ("yarn", "longrope", "llama3") and "original_max_position_embeddings" not in scaling:
        # transformers standardize_rope_params: Phi-3's top-level original_max_position_embeddings, else max_position_embeddings
        original = cfg.get("original_max_position_embeddings") or cfg.get("max_position_embeddings")
        if original is not None:
            scaling["original_max_position_embeddings"] = original
    out["rope_scaling"] = {"type": kind, **scaling}
    return out


def _rope_local(cfg: dict[str, Any], mtype: str, fields: dict[str, Any], field: str) -> dict[str, Any]:
    """The local layers' own RoPE: Gemma-3's sliding layers rotate by rope_local_base_freq
    (Gemma3TextConfig default 10,000), unscaled (transformers 4 Gemma3TextModel.rotary_emb_local);
    transformers 5 writes it as rope_parameters.sliding_attention. Kept where it differs from the
    global layers' RoPE, so that a launcher with one RoPE for every layer refuses the model."""
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    local = params.get("sliding_attention") if isinstance(params.get("sliding_attention"), dict) else {}
    if local.get("rope_type") not in (None, "default"):
        raise InputError(f"{field}.rope_parameters.sliding_attention.rope_type", local["rope_type"],
                         "RoPE scaling on the local layers: autopar reads their base only (Gemma-3's are unscaled)")
    theta = cfg.get("rope_local_base_freq") or params.get("rope_local_base_freq") or local.get("rope_theta")
    theta = theta or (10_000.0 if "gemma3" in mtype else None)
    if fields.get("attention_window") is None or theta is None or (theta == fields.get("rope_theta") and not fields.get("rope_scaling")):
        return {}
    return {"rope_local_theta": float(theta)}


def _moe_fields(cfg: dict[str, Any], mtype: str) -> dict[str, Any]:
    num_experts = _first(cfg, "num_experts") or 0
    if not num_experts:
        return {}
    llama4 = "llama4" in mtype
    out: dict[str, Any] = {
        "num_experts": num_experts,
        "moe_top_k": cfg.get("num_experts_per_tok", 2),
        # Mixtral and Llama-4 have no moe_intermediate_size: the expert FFN is intermediate_size
        "moe_ffn_hidden_size": cfg.get("moe_intermediate_size") or cfg["intermediate_size"],
        "moe_router_topk_norm": bool(cfg.get("norm_topk_prob", "mixtral" in mtype)),
    }
    if "n_shared_experts" in cfg:  # DeepSeek: shared width = n_shared x expert width
        out["moe_shared_expert_ffn_size"] = (cfg["n_shared_experts"] or 0) * out["moe_ffn_hidden_size"]
    elif cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE, with a sigmoid gate
        out["moe_shared_expert_ffn_size"] = cfg["shared_expert_intermediate_size"]
        out["moe_shared_expert_gate"] = True
    elif llama4:  # one shared expert as wide as a routed one
        out["moe_shared_expert_ffn_size"] = out["moe_ffn_hidden_size"]
    out["moe_first_k_dense_layers"] = cfg.get("first_k_dense_replace", 0) or 0
    step = cfg.get("decoder_sparse_step") or cfg.get("interleave_moe_layer_step") or cfg.get("moe_layer_freq") or 1
    if isinstance(step, int) and step > 1:
        # Qwen: layer i is MoE iff (i + 1) % step == 0; Llama-4: the same with interleave_moe_layer_step
        out["moe_dense_layers"] = tuple(i for i in range(cfg["num_hidden_layers"]) if (i + 1) % step)
    if cfg.get("mlp_only_layers"):
        out["moe_dense_layers"] = tuple(sorted(set(out.get("moe_dense_layers", ())) | set(cfg["mlp_only_layers"])))
    if cfg.get("scoring_func") == "sigmoid":
        out["moe_router_score_function"] = "sigmoid"
    if cfg.get("topk_method") == "noaux_tc":
        out["moe_router_expert_bias"] = True
    if mtype in GLOBAL_BATCH_BALANCED:
        out["moe_router_balance"] = "global_batch"
    if cfg.get("n_group") and cfg.get("topk_group") and cfg["n_group"] > 1:
        out["moe_router_num_groups"], out["moe_router_group_topk"] = cfg["n_group"], cfg["topk_group"]
    if cfg.get("routed_scaling_factor"):
        out["moe_router_topk_scaling_factor"] = float(cfg["routed_scaling_factor"])
    out.update(_balance_loss(cfg))
    return out


def _balance_loss(cfg: dict[str, Any]) -> dict[str, Any]:
    """The router's balance-loss weight: router_aux_loss_coef (transformers' Mixtral, Qwen-MoE,
    Llama-4 ... load_balancing_loss_func) or DeepSeek's aux_loss_alpha, which seq_aux computes per
    sequence. DeepSeek-V3's aux-loss-free routing (noaux_tc) keeps a small sequence-wise loss
    beside its expert bias (V3 report section 2.1.2): DEEPSEEK_V3_SEQ_AUX_LOSS when the file has none."""
    coeff = cfg.get("router_aux_loss_coef")
    if coeff is None:
        coeff = cfg.get("aux_loss_alpha")
    per_sequence = bool(cfg.get("seq_aux"))
    if cfg.get("topk_method") == "noaux_tc":
        per_sequence = True
        coeff = DEEPSEEK_V3_SEQ_AUX_LOSS if coeff is None else coeff
    if coeff is None:
        return {}
    return {"moe_aux_loss_coeff": float(coeff), "moe_aux_loss_per_sequence": per_sequence}


def _attention_span(cfg: dict[str, Any], mtype: str, layers: int, field: str, name: str) -> dict[str, Any]:
    """Local attention: which layers attend within a sliding window or a chunk, and its span.
    transformers' layer_types names each layer's kind; older configs imply it: Mistral's
    sliding_window covers every layer, Qwen2/3 only with use_sliding_window and from layer
    max_window_layers on, Gemma-2 every even layer, Gemma-3 all but every sliding_window_pattern-th
    (6), Llama-4 the RoPE layers of no_rope_layers (1 = RoPE and chunked, 0 = NoPE and global)."""
    if _is_nemotron_h(cfg):  # its layer_types / layers_block_type restate hybrid_override_pattern
        return {}
    hybrid = [k for k in HYBRID_KEYS if k in cfg]
    types = cfg.get("layer_types")
    if isinstance(types, list) and "linear_num_value_heads" in cfg:  # Gated DeltaNet layers: _linear_attention
        types = ["full_attention" if t == LINEAR_ATTENTION else t for t in types]
    other = sorted({str(t) for t in types if t not in ATTENTION_LAYER_TYPES}) if isinstance(types, list) else []
    if hybrid or other:
        # the offending key and its value (the layer kinds autopar has no cost for), not the model's name
        key, value = ("layer_types", other) if other else (hybrid[0], cfg[hybrid[0]])
        raise InputError(f"{field}.{key}", value, f"names layers of a hybrid model ({name}): autopar costs softmax attention "
                         "layers (full, sliding-window, chunked), MLP/MoE blocks, GatedDeltaNet layers given their linear_* "
                         "shape keys (Qwen3-Next) and Mamba-2 blocks given mamba_num_heads (Nemotron-H), not other "
                         "linear-attention or state-space layers")
    if isinstance(types, list) and types:
        if len(types) != layers:
            raise InputError(f"{field}.layer_types", len(types), f"must name one kind per layer (num_hidden_layers={layers})")
        kinds = {t for t in types if t != "full_attention"}
        if not kinds:
            return {}
        if len(kinds) > 1:
            raise InputError(f"{field}.layer_types", sorted(kinds), "one local kind per model: sliding and chunked layers together are not modelled")
        chunked = kinds == {"chunked_attention"}
        span = cfg.get("attention_chunk_size") if chunked else cfg.get("sliding_window")
        if not span:
            key = "attention_chunk_size" if chunked else "sliding_window"
            raise InputError(f"{field}.{key}", span, f"layer_types names {kinds.pop()} layers, so the span is required")
        return {"attention_window": span, "attention_chunked": chunked,
                "global_attention_layers": tuple(i for i, t in enumerate(types) if t == "full_attention")}
    if "llama4" in mtype and cfg.get("attention_chunk_size"):
        rope = cfg.get("no_rope_layers")
        if not isinstance(rope, list) or len(rope) != layers:
            every = cfg.get("no_rope_layer_interval") or 4
            rope = [int((i + 1) % every != 0) for i in range(layers)]
        return {"attention_window": cfg["attention_chunk_size"], "attention_chunked": True,
                "global_attention_layers": tuple(i for i, r in enumerate(rope) if not r)}
    window = cfg.get("sliding_window")
    if not window or ("qwen" in mtype and not cfg.get("use_sliding_window")):
        return {}
    if "qwen" in mtype:
        full = range(min(cfg.get("max_window_layers") or 0, layers))
    elif "gemma3" in mtype:
        every = cfg.get("sliding_window_pattern") or 6
        full = [i for i in range(layers) if (i + 1) % every == 0]
    elif "gemma2" in mtype or "gpt_oss" in mtype:  # transformers' default layer_types: sliding, full, sliding, ...
        full = range(1, layers, 2)
    else:
        full = []
    if len(full) == layers:
        return {}
    return {"attention_window": window, "global_attention_layers": tuple(full)}


def _linear_attention(cfg: dict[str, Any], mtype: str, layers: int, field: str, name: str) -> dict[str, Any]:
    """Gated DeltaNet layers (transformers models/qwen3_next/configuration_qwen3_next.py): their
    shape from the linear_* keys, which layers from layer_types ('linear_attention') or, without
    it, full_attention_interval (layer i is softmax attention iff (i + 1) % interval == 0).
    Qwen3-Next's softmax-attention layers gate their output (q_proj emits query and gate)."""
    if "linear_num_value_heads" not in cfg:
        return {}
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:  # its length was checked by _attention_span
        linear = tuple(i for i, t in enumerate(types) if t == LINEAR_ATTENTION)
    else:
        every = cfg.get("full_attention_interval") or 4
        linear = tuple(i for i in range(layers) if (i + 1) % every)
    if not linear:
        return {}
    shape = {"num_key_heads": _get(cfg, "linear_num_key_heads", field, name), "num_value_heads": cfg["linear_num_value_heads"],
             "key_head_dim": _get(cfg, "linear_key_head_dim", field, name), "value_head_dim": _get(cfg, "linear_value_head_dim", field, name),
             "conv_kernel_dim": cfg.get("linear_conv_kernel_dim") or 4}
    return {"linear_attention": shape, "linear_attention_layers": linear, "attention_output_gate": "qwen3_next" in mtype}


# layers_block_type names (newer Nemotron configs list the blocks instead of the pattern string)
NEMOTRON_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _is_nemotron_h(cfg: dict[str, Any]) -> bool:
    return "mamba_num_heads" in cfg and ("hybrid_override_pattern" in cfg or "layers_block_type" in cfg)


def _hybrid_pattern(cfg: dict[str, Any], field: str, name: str, pattern_key: str = "hybrid_override_pattern",
                    blocks_key: str = "layers_block_type") -> str:
    """A pattern string (hybrid_override_pattern), or the same letters from a block-name list
    (layers_block_type); '' when the config has neither."""
    if cfg.get(pattern_key):
        return str(cfg[pattern_key])
    blocks = cfg.get(blocks_key)
    if blocks is None:
        return ""
    unknown = sorted({str(b) for b in blocks if b not in NEMOTRON_BLOCKS}) if isinstance(blocks, list) else ["(not a list)"]
    if unknown:
        raise InputError(f"{field}.{blocks_key}", unknown, f"names blocks autopar does not know; it costs {sorted(NEMOTRON_BLOCKS)}")
    return "".join(NEMOTRON_BLOCKS[b] for b in blocks)


def _nemotron_h(cfg: dict[str, Any], field: str, name: str) -> dict[str, Any]:
    """Nemotron-H (transformers-style configuration_nemotron_h.py, NVIDIA's hub checkpoints): one
    block per layer from hybrid_override_pattern (M Mamba-2, * attention, - MLP, E MoE), the
    Mamba-2 shape from mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups (mamba_n_groups
    as an argument), conv_kernel and chunk_size, a non-gated MLP of mlp_hidden_act (squared ReLU);
    MoE layers route with sigmoid scores and an expert bias (Megatron-Bridge NemotronHModelProvider)
    and, with moe_latent_size, run their routed experts at that latent width (LatentMoE)."""
    pattern = _hybrid_pattern(cfg, field, name)
    mamba = {"num_heads": cfg["mamba_num_heads"], "head_dim": _get(cfg, "mamba_head_dim", field, name),
             "state_dim": _get(cfg, "ssm_state_size", field, name),
             "num_groups": cfg.get("n_groups") or cfg.get("mamba_n_groups") or 8,
             "conv_kernel_dim": cfg.get("conv_kernel") or cfg.get("mamba_d_conv") or 4,
             "chunk_tokens": cfg.get("chunk_size") or cfg.get("mamba_chunk_size") or 128}
    act = str(cfg.get("mlp_hidden_act") or "relu2").lower()
    # no position embedding: Megatron-Core's MambaModel default position_embedding_type 'none'
    # (the attention layers of Nemotron-H apply no RoPE; HF NemotronHAttention has no rotary)
    out: dict[str, Any] = {"hybrid_layer_pattern": pattern, "mamba": mamba if "M" in pattern else None,
                           "head_dim": cfg.get("head_dim") or cfg.get("attention_head_dim"), "position_embedding": "none",
                           "rope_theta": None, "rope_scaling": None,
                           "activation": act, "gated_mlp": False, "norm_eps": cfg.get("layer_norm_epsilon") or 1e-5,
                           "qkv_bias": bool(cfg.get("attention_bias")), "linear_bias": bool(cfg.get("mlp_bias"))}
    if cfg.get("num_nextn_predict_layers"):  # each MTP module's blocks: Nemotron 3 Super '*E', Ultra ["attention", "moe"]
        mtp = _hybrid_pattern(cfg, field, name, "mtp_hybrid_override_pattern", "mtp_layers_block_type")
        out["mtp_hybrid_pattern"] = mtp or None
    if "E" not in pattern:  # the config's n_routed_experts default describes no layer
        return {**out, "num_experts": 0, "moe_top_k": 0, "moe_ffn_hidden_size": None, "moe_shared_expert_ffn_size": 0,
                "moe_router_topk_norm": False, "moe_router_num_groups": None, "moe_router_group_topk": None,
                "moe_router_topk_scaling_factor": None, "moe_aux_loss_coeff": None, "moe_aux_loss_per_sequence": False}
    shared = (cfg.get("moe_shared_expert_intermediate_size") or 0) * (cfg.get("n_shared_experts") or 1)
    # the balance loss: the file's weight when it names one (_balance_loss), else NEMOTRON_H_SEQ_AUX_LOSS,
    # computed per sequence either way (Megatron-Bridge's provider sets seq_aux_loss for the family)
    coeff = _balance_loss(cfg).get("moe_aux_loss_coeff", NEMOTRON_H_SEQ_AUX_LOSS)
    # LatentMoE (Nemotron 3 Super/Ultra): routed experts work at moe_latent_size
    return {**out, "moe_shared_expert_ffn_size": shared, "moe_router_score_function": "sigmoid", "moe_router_expert_bias": True,
            "moe_latent_size": cfg.get("moe_latent_size"), "moe_aux_loss_coeff": coeff, "moe_aux_loss_per_sequence": True}


def _activation(cfg: dict[str, Any], mtype: str) -> str:
    """The MLP activation the modeling code applies: Gemma-2/3's MLP reads hidden_activation, not
    hidden_act (transformers 5.12 Gemma2MLP / Gemma3MLP: ACT2FN[config.hidden_activation], default
    gelu_pytorch_tanh); Gemma's reads hidden_act (default gelu_pytorch_tanh); the others hidden_act."""
    if mtype.startswith(("gemma2", "gemma3")):
        act = cfg.get("hidden_activation") or "gelu_pytorch_tanh"
    elif mtype.startswith("gemma"):
        act = cfg.get("hidden_act") or "gelu_pytorch_tanh"
    else:
        act = cfg.get("hidden_act") or "silu"
    return str(act).lower()


def hf_fields(cfg: dict[str, Any], name: str, field: str = "model") -> dict[str, Any]:
    """ModelSpec fields from a HuggingFace config.json mapping."""
    _check_numbers(cfg, field)
    mtype = _check_model_type(cfg, field)
    cfg = _class_defaults(_flatten(cfg), mtype)
    layers = _get(cfg, "num_hidden_layers", field, name)
    heads = _get(cfg, "num_attention_heads", field, name)
    act = _activation(cfg, mtype)
    gpt2 = bool(cfg.get("_gpt2"))
    dense_ffn = cfg.get("intermediate_size_mlp") or _get(cfg, "intermediate_size", field, name)  # Llama-4's dense layers
    fields: dict[str, Any] = {
        "name": name,
        "num_layers": layers,
        "hidden_size": _get(cfg, "hidden_size", field, name),
        "num_attention_heads": heads,
        "num_kv_heads": heads if cfg.get("num_key_value_heads") is None else cfg["num_key_value_heads"],
        "head_dim": cfg.get("head_dim"),
        "ffn_hidden_size": dense_ffn,
        "gated_mlp": act in GATED_ACTIVATIONS or any(f in mtype for f in GATED_FAMILIES),
        "activation": act,
        "vocab_size": _get(cfg, "vocab_size", field, name),
        # transformers' Gemma, Gemma-2 and Gemma-3 configs tie by default (their config.json files omit the key)
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", mtype.startswith("gemma"))),
        "max_position_embeddings": cfg.get("max_position_embeddings"),
        "normalization": "layernorm" if gpt2 else "rmsnorm",
        "norm_eps": _first(cfg, "norm_eps") or 1e-5,
        # Gemma-3's and OLMo-2's attention always norms queries and keys (no config key; transformers 5.12
        # Gemma3Attention q_norm over head_dim, Olmo2Attention q_norm over num_heads x head_dim)
        "qk_layernorm": ("qwen3" in mtype or mtype.startswith(("gemma3", "olmo2")) or bool(cfg.get("use_qk_norm"))
                         or "kv_lora_rank" in cfg),
        "qk_norm_across_heads": mtype.startswith("olmo2"),
        # GemmaRMSNorm and Qwen3NextRMSNorm compute x_normed * (1 + weight) (transformers modeling files)
        "norm_zero_centered_gamma": mtype.startswith("gemma") or "qwen3_next" in mtype,
        "qkv_bias": bool(cfg.get("attention_bias") or cfg.get("qkv_bias") or "qwen2" in mtype) or gpt2,
        "linear_bias": bool(cfg.get("mlp_bias")) or gpt2,
        "position_embedding": "learned_absolute" if gpt2 else "rope",
        "mtp_num_layers": cfg.get("num_nextn_predict_layers") or 0,
        # transformers' GptOssAttention always has its `sinks` parameter; GptOssExperts clamp at swiglu_limit
        "attention_sinks": "gpt_oss" in mtype,
        "swiglu_limit": cfg.get("swiglu_limit") if "gpt_oss" in mtype else None,
    }
    if not gpt2:
        fields.update(_rope(cfg, field))
    fields.update(_moe_fields(cfg, mtype))
    fields.update(_attention_span(cfg, mtype, layers, field, name))
    if not gpt2:
        fields.update(_rope_local(cfg, mtype, fields, field))
    fields.update(_linear_attention(cfg, mtype, layers, field, name))
    if _is_nemotron_h(cfg):
        fields.update(_nemotron_h(cfg, field, name))
    if "kv_lora_rank" in cfg:  # DeepSeek MLA
        fields["mla"] = {
            "q_lora_rank": cfg.get("q_lora_rank"), "kv_lora_rank": cfg["kv_lora_rank"],
            "qk_nope_head_dim": _get(cfg, "qk_nope_head_dim", field, name),
            "qk_rope_head_dim": cfg.get("qk_rope_head_dim") or 0, "v_head_dim": _get(cfg, "v_head_dim", field, name),
        }
        fields["num_kv_heads"] = heads
        fields["head_dim"] = cfg["qk_nope_head_dim"] + (cfg.get("qk_rope_head_dim") or 0)
    return fields
