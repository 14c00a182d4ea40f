"""ModelSpec: transformer shape, dense or MoE; loads presets, autopar model files and
HuggingFace config.json files (field names: shared/reference/launchers.md section 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autopar.errors import InputError, ProfileNotFound
from autopar.specs._files import looks_like_path, preset_files, read_mapping


class MlaSpec(BaseModel):
    """DeepSeek multi-head latent attention (low-rank Q and KV projections).

    Approximation: FLOPs and parameters follow the low-rank factors exactly; activations are
    counted as MHA with head_dim = qk head dim for Q/K and v_head_dim for V, i.e. the
    decompressed K/V are stored (Megatron's MLA stores them), not the 512-wide latent.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    q_lora_rank: int | None = Field(description="Rank of the Q down-projection; null = full-rank Q")
    kv_lora_rank: int = Field(gt=0, description="Rank of the joint KV latent")
    qk_nope_head_dim: int = Field(gt=0, description="Per-head Q/K dim without RoPE")
    qk_rope_head_dim: int = Field(ge=0, description="Per-head decoupled RoPE dim (K part shared by heads)")
    v_head_dim: int = Field(gt=0, description="Per-head V dim")


class ModelSpec(BaseModel):
    """A decoder-only transformer. Letters in formulas: L layers, h hidden, a heads,
    g KV heads, d head dim, F FFN size, V vocab, E experts, k top-k."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Model name")
    num_layers: int = Field(gt=0, description="L, transformer layers")
    hidden_size: int = Field(gt=0, description="h, model width")
    num_attention_heads: int = Field(gt=0, description="a, query heads")
    num_kv_heads: int | None = Field(None, gt=0, description="g, KV heads (GQA); null = a (MHA)")
    head_dim: int | None = Field(None, gt=0, description="d, per-head dim; null = h / a")
    ffn_hidden_size: int = Field(gt=0, description="F, dense MLP width (per matrix)")
    gated_mlp: bool = Field(True, description="SwiGLU-style gated MLP (3 matrices) instead of 2")
    vocab_size: int = Field(gt=0, description="V, vocabulary")
    tied_embeddings: bool = Field(False, description="Input embedding shared with the output layer")
    max_position_embeddings: int | None = Field(None, gt=0, description="Longest trained sequence, tokens")
    dropout: bool = Field(False, description="Dropout after attention and MLP (adds 1-byte masks to activations)")
    num_experts: int = Field(0, ge=0, description="E, routed experts per MoE layer; 0 = dense")
    moe_top_k: int = Field(0, ge=0, description="k, routed experts per token")
    moe_ffn_hidden_size: int | None = Field(None, gt=0, description="FFN width of one routed expert")
    moe_shared_expert_ffn_size: int = Field(0, ge=0, description="Total FFN width of the shared experts; 0 = none")
    moe_first_k_dense_layers: int = Field(0, ge=0, description="Leading layers with a dense MLP")
    moe_layer_freq: int = Field(1, gt=0, description="Every n-th layer (after the dense prefix) is MoE")
    mla: MlaSpec | None = Field(None, description="Multi-head latent attention; null = standard (GQA) attention")
    mtp_num_layers: int = Field(0, ge=0, description="Multi-token prediction modules after the decoder (DeepSeek-V3: 1), each a "
                                "transformer layer of the last layer's kind with its own output layer")

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.num_kv_heads is not None and self.num_attention_heads % self.num_kv_heads:
            raise ValueError(f"num_attention_heads={self.num_attention_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size={self.hidden_size} must divide by num_attention_heads={self.num_attention_heads} when head_dim is not given")
        if self.num_experts:
            if not 0 < self.moe_top_k <= self.num_experts:
                raise ValueError(f"moe_top_k={self.moe_top_k} must be in 1..num_experts={self.num_experts}")
            if self.moe_ffn_hidden_size is None:
                raise ValueError("moe_ffn_hidden_size is required when num_experts > 0")
            if self.moe_first_k_dense_layers > self.num_layers:
                raise ValueError(f"moe_first_k_dense_layers={self.moe_first_k_dense_layers} exceeds num_layers={self.num_layers}")
        return self

    # ---- derived shape -------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, index: int) -> bool:
        """Layer `index` (0-based) has routed experts (Megatron --moe-layer-freq pattern)."""
        if not self.is_moe or index < self.moe_first_k_dense_layers:
            return False
        return (index - self.moe_first_k_dense_layers) % self.moe_layer_freq == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))


# ---- loading ----------------------------------------------------------------------

def _hf_moe_fields(cfg: dict[str, Any], mtype: str) -> dict[str, Any]:
    num_experts = cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0
    if not num_experts:
        return {}
    out: dict[str, Any] = {
        "num_experts": num_experts,
        "moe_top_k": cfg.get("num_experts_per_tok", 2),
        # Mixtral has no moe_intermediate_size: the expert FFN is intermediate_size.
        "moe_ffn_hidden_size": cfg.get("moe_intermediate_size") or cfg["intermediate_size"],
    }
    if "n_shared_experts" in cfg:  # DeepSeek: shared width = n_shared x expert width
        out["moe_shared_expert_ffn_size"] = (cfg["n_shared_experts"] or 0) * out["moe_ffn_hidden_size"]
    elif cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE
        out["moe_shared_expert_ffn_size"] = cfg["shared_expert_intermediate_size"]
    out["moe_first_k_dense_layers"] = cfg.get("first_k_dense_replace", 0) or 0
    step = cfg.get("decoder_sparse_step") or cfg.get("moe_layer_freq") or 1
    if isinstance(step, int):
        out["moe_layer_freq"] = step
    return out


def from_hf_config(cfg: dict[str, Any], name: str) -> ModelSpec:
    """A ModelSpec from a HuggingFace config.json dict (Llama, Mistral, Mixtral, Qwen2(-MoE),
    DeepSeek-V2/V3 field names)."""
    mtype = str(cfg.get("model_type", ""))
    heads = cfg["num_attention_heads"]
    act = str(cfg.get("hidden_act", "silu"))
    fields: dict[str, Any] = {
        "name": name,
        "num_layers": cfg["num_hidden_layers"],
        "hidden_size": cfg["hidden_size"],
        "num_attention_heads": heads,
        "num_kv_heads": cfg.get("num_key_value_heads") or heads,
        "head_dim": cfg.get("head_dim"),
        "ffn_hidden_size": cfg["intermediate_size"],
        "gated_mlp": act in ("silu", "swiglu", "swish", "gelu_pytorch_tanh") or "llama" in mtype or "mistral" in mtype,
        "vocab_size": cfg["vocab_size"],
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "max_position_embeddings": cfg.get("max_position_embeddings"),
    }
    fields.update(_hf_moe_fields(cfg, mtype))
    if "kv_lora_rank" in cfg:  # DeepSeek MLA
        fields["mla"] = MlaSpec(
            q_lora_rank=cfg.get("q_lora_rank"),
            kv_lora_rank=cfg["kv_lora_rank"],
            qk_nope_head_dim=cfg["qk_nope_head_dim"],
            qk_rope_head_dim=cfg.get("qk_rope_head_dim", 0),
            v_head_dim=cfg["v_head_dim"],
        )
        fields["num_kv_heads"] = heads
        fields["head_dim"] = cfg["qk_nope_head_dim"] + cfg.get("qk_rope_head_dim", 0)
    return ModelSpec.model_validate(fields)


def is_hf_config(data: dict[str, Any]) -> bool:
    return "num_hidden_layers" in data and "hidden_size" in data


def model_from_mapping(data: dict[str, Any], name: str, field: str = "model") -> ModelSpec:
    try:
        if is_hf_config(data):
            return from_hf_config(data, name)
        return ModelSpec.model_validate({"name": name, **data})
    except KeyError as exc:
        raise InputError(field, name, f"HuggingFace config lacks required key {exc.args[0]!r}") from None
    except ValidationError as exc:
        raise InputError.from_validation(exc, field) from None


def load_model(name_or_path: str) -> ModelSpec:
    """A model preset (profiles/models/NAME.json|yaml), an autopar model file or an HF config.json."""
    presets = preset_files("models")
    if name_or_path in presets:
        return model_from_mapping(read_mapping(presets[name_or_path], "model"), name_or_path)
    path = Path(name_or_path)
    if looks_like_path(name_or_path) or path.is_file():
        name = path.parent.name if path.name == "config.json" else path.stem
        return model_from_mapping(read_mapping(path, "model"), name or path.stem)
    raise ProfileNotFound("model", name_or_path, list(presets))
