"""The network a DeepSpeed run trains. DeepSpeed's JSON has no model keys: the training script
builds the model, and DeepSpeed's AutoEP acts on HuggingFace transformers models (DeepSpeed
edaa722 deepspeed/module_inject/auto_ep_presets: hf_model_types mixtral, qwen2_moe, qwen3_moe,
deepseek_v2/v3). So the helper carries the ModelSpec as a transformers config -- model_type and
config.json keys, the MLP activation (hidden_act / activation_function) and the RoPE (rope_theta,
rope_scaling) included -- and the script builds it with AutoModelForCausalLM.from_config.

The config is read back with autopar's own importer (autopar.specs.hf) before it is written: one
that reads back as another network (presets.architecture: every field but the name, the loss
weights and a RoPE model's max_position_embeddings) is refused naming the fields that differ, so a
Llama config is never written for a model whose MLP, norms, biases or RoPE Llama does not build.
Features transformers' modeling code does not train are refused with the reason first.
"""

from __future__ import annotations

from functools import lru_cache

from autopar.emit.common import Violation
from autopar.errors import InputError
from autopar.specs.model import ModelSpec, RouterBalance

HF_RULE = "a transformers model of the model's network"
SOURCE = "transformers 5.12 models/*/modeling_*.py; autopar.specs.hf reads the config back"

# transformers 5.12 activations.py ACT2CLS: the activation names its modeling code resolves (ACT2FN)
ACT2FN_NAMES = ("gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh", "gelu_python_tanh",
                "gelu_accurate", "hardswish", "laplace", "leaky_relu", "linear", "mish", "quick_gelu", "relu", "relu2",
                "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh", "prelu", "xielu")


def _not_trained(m: ModelSpec) -> list[str]:
    """What transformers' modeling code (or autopar's mapping onto it) cannot train of the model."""
    out = []
    if m.mla is not None:
        out.append("multi-head latent attention (DeepSeek): autopar writes no transformers DeepSeek config")
    if m.linear_attention is not None:
        out.append("Gated DeltaNet layers (Qwen3-Next): autopar writes no transformers Qwen3-Next config")
    if m.attention_sinks or m.swiglu_limit:
        out.append("attention sinks and a clamped GLU (gpt-oss): autopar writes no transformers gpt-oss config")
    if m.attention_chunked:
        out.append("chunked local attention (Llama-4): autopar writes no transformers Llama-4 config")
    if m.norm_zero_centered_gamma:
        out.append("norms that scale by 1 + weight (Gemma, Qwen3-Next): the families autopar writes scale by the weight, "
                   "and a Gemma config would also need Gemma's embedding scale and Gemma-2's logit soft-capping, which the "
                   "model spec does not carry")
    if m.rotary_percent < 1:
        out.append(f"rotary_percent={m.rotary_percent:g}: the Llama-style transformers models autopar writes rotate the whole head")
    if m.gated_mlp is False and m.position_embedding == "rope":
        out.append(f"a non-gated {m.activation} MLP with RoPE: the transformers families autopar writes with RoPE "
                   "(Llama, Mistral, Qwen) all gate their MLP")
    if m.activation not in ACT2FN_NAMES:
        out.append(f"activation={m.activation}: not a transformers activation (activations.py ACT2FN)")
    if m.is_moe and m.moe_router_expert_bias:
        out.append("an expert-bias router (aux-loss-free balancing): transformers' routers train no expert bias "
                   "(DeepseekV3TopkRouter keeps e_score_correction_bias as a fixed buffer)")
    if m.is_moe and m.moe_aux_loss_per_sequence:
        out.append(f"a sequence-wise balance loss (weight {m.moe_aux_loss_coeff:g}): transformers' load_balancing_loss_func "
                   "balances all tokens of a forward pass, not each sequence")
    if m.is_moe and m.moe_router_balance == RouterBalance.global_batch:
        out.append("a balance loss over the global batch (Qwen3-MoE): transformers' load_balancing_loss_func balances "
                   "the tokens of one forward pass (a micro-batch)")
    return out


def hf_model_type(m: ModelSpec) -> str:
    """The transformers family whose modeling code builds the model (checked by the read-back)."""
    if m.position_embedding == "learned_absolute":
        return "gpt2"
    if m.is_moe:
        if m.moe_shared_expert_ffn_size:
            return "qwen2_moe"  # shared expert with a sigmoid gate, QKV bias
        return "qwen3_moe" if m.qk_layernorm else "mixtral"
    if m.qk_layernorm:
        return "qwen3"
    if m.qkv_bias and not m.linear_bias or (m.attention_window is not None and m.global_attention_layers):
        return "qwen2"  # QKV bias only; sliding window after max_window_layers full layers
    return "mistral" if m.attention_window is not None else "llama"


def _rope_keys(m: ModelSpec) -> dict:
    out: dict = {} if m.rope_theta is None else {"rope_theta": m.rope_theta}
    if m.rope_scaling is not None:
        s = m.rope_scaling.model_dump(exclude_none=True)
        kind = s.pop("type")
        out["rope_scaling"] = {"rope_type": kind, **{k: list(v) if isinstance(v, tuple) else v for k, v in s.items()}}
    return out


def _gpt2_config(m: ModelSpec, seq_len: int) -> dict:
    # transformers GPT2Config: dropout keys default to 0.1; the model spec trains without dropout
    return {"model_type": "gpt2", "vocab_size": m.vocab_size, "n_positions": m.max_position_embeddings or seq_len, "n_embd": m.hidden_size,
            "n_layer": m.num_layers, "n_head": m.num_attention_heads, "n_inner": m.ffn_hidden_size,
            "activation_function": m.activation, "layer_norm_epsilon": m.norm_eps, "tie_word_embeddings": m.tied_embeddings,
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def _moe_keys(m: ModelSpec, kind: str) -> dict:
    dense = [i for i in range(m.num_layers) if not m.is_moe_layer(i)]
    out: dict = {"num_experts_per_tok": m.moe_top_k}
    if kind == "mixtral":  # every layer MoE, the expert FFN intermediate_size, top-k always renormalised
        out.update({"num_local_experts": m.num_experts, "intermediate_size": m.moe_ffn_hidden_size, "router_jitter_noise": 0.0})
    else:  # Qwen2/3-MoE: layer i is MoE unless in mlp_only_layers (decoder_sparse_step 1)
        out.update({"num_experts": m.num_experts, "moe_intermediate_size": m.moe_ffn_hidden_size, "decoder_sparse_step": 1,
                    "mlp_only_layers": dense, "norm_topk_prob": m.moe_router_topk_norm})
        if kind == "qwen2_moe":
            out["shared_expert_intermediate_size"] = m.moe_shared_expert_ffn_size
    # transformers adds load_balancing_loss_func's loss only with output_router_logits; no weight = no loss
    # (as Megatron's default weight 0)
    if m.moe_aux_loss_coeff is not None:
        out.update({"router_aux_loss_coef": m.moe_aux_loss_coeff, "output_router_logits": True})
    else:
        out["output_router_logits"] = False
    return out


def hf_config(m: ModelSpec, seq_len: int) -> dict:
    """The model as transformers config.json keys (before the read-back check)."""
    kind = hf_model_type(m)
    if kind == "gpt2":
        return _gpt2_config(m, seq_len)
    cfg: dict = {"model_type": kind, "vocab_size": m.vocab_size, "hidden_size": m.hidden_size, "intermediate_size": m.ffn_hidden_size,
                 "num_hidden_layers": m.num_layers, "num_attention_heads": m.num_attention_heads,
                 "num_key_value_heads": m.kv_heads, "hidden_act": m.activation,
                 # the RoPE scalings read it (dynamic, longrope without a factor); a RoPE model has no table to outgrow
                 "max_position_embeddings": m.max_position_embeddings or seq_len,
                 "rms_norm_eps": m.norm_eps, "tie_word_embeddings": m.tied_embeddings, "attention_dropout": 0.0, **_rope_keys(m)}
    if m.head_dim is not None:  # else hidden_size / num_attention_heads, in transformers as in the model spec
        cfg["head_dim"] = m.head_dim
    if kind in ("llama", "qwen3", "qwen3_moe"):
        cfg["attention_bias"] = m.qkv_bias
    if kind == "llama":
        cfg["mlp_bias"] = m.linear_bias
    if kind != "llama":  # Mistral's config defaults to a 4096-token window: say none unless the model has one
        cfg["sliding_window"] = m.attention_window
    if m.attention_window is not None and kind.startswith("qwen"):  # layers from max_window_layers on slide
        cfg.update({"use_sliding_window": True, "max_window_layers": len(m.global_attention_layers)})
    if m.is_moe:
        cfg.update(_moe_keys(m, kind))
    return cfg


def read_back_differences(m: ModelSpec, cfg: dict) -> list[str]:
    """'field: model X, config Y' for every architecture field the config reads back differently."""
    from autopar.emit.presets import architecture
    from autopar.specs.model import model_from_mapping

    try:
        back = model_from_mapping(cfg, m.name)
    except InputError as exc:
        return [str(exc)]
    ours, theirs = architecture(m), architecture(back)
    return [f"{k}: model {ours[k]!r}, config {theirs.get(k)!r}" for k in sorted(ours) if ours[k] != theirs.get(k)]


@lru_cache(maxsize=256)  # a search asks once per plan it checks: the same model each time
def model_violations(m: ModelSpec, seq_len: int) -> tuple[dict | None, list[Violation]]:
    """The transformers config of the model (shared: do not modify it), or the reasons none trains it."""
    if m.hybrid_layer_pattern is not None or m.moe_latent_size is not None:
        return None, []  # check_common refuses them (HYBRID_RULE, LATENT_MOE_RULE)
    reasons = _not_trained(m)
    if reasons:
        return None, [Violation(HF_RULE, f"{m.name}: " + "; ".join(reasons), SOURCE)]
    cfg = hf_config(m, seq_len)
    diff = read_back_differences(m, cfg)
    if diff:
        return None, [Violation(HF_RULE, f"{m.name}: the transformers {cfg['model_type']} config autopar writes for it reads "
                                f"back as another network ({'; '.join(diff)})", SOURCE)]
    return cfg, []
