"""ModelSpec: transformer shape, dense or MoE; loads presets, autopar model files and
HuggingFace config.json files (field names: docs/reference/launchers.md section 5)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field, ValidationError, model_validator

from autopar.errors import InputError, ProfileNotFound
from autopar.limits import (
    MAX_EXPERTS,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_SEQ_LEN,
    MAX_VOCAB,
    MAX_WIDTH,
)
from autopar.specs._base import StrictModel
from autopar.specs._files import looks_like_path, preset_files, read_mapping, refuse_non_finite


class MlaSpec(StrictModel):
    """DeepSeek multi-head latent attention (low-rank Q and KV projections).

    FLOPs and parameters follow the low-rank factors exactly. Activations: the decompressed
    Q, K, V are stored as MHA with head_dim = qk head dim (Megatron's MLA stores them), plus the
    latents (autopar.cost.memory.mla_latent_bytes); recompute_modules mla_up_proj drops Q, K, V
    and the normed latents.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    q_lora_rank: int | None = Field(description="Rank of the Q down-projection; null = full-rank Q")
    kv_lora_rank: int = Field(gt=0, description="Rank of the joint KV latent")
    qk_nope_head_dim: int = Field(gt=0, description="Per-head Q/K dim without RoPE")
    qk_rope_head_dim: int = Field(ge=0, description="Per-head decoupled RoPE dim (K part shared by heads)")
    v_head_dim: int = Field(gt=0, description="Per-head V dim")


class LinearAttentionSpec(StrictModel):
    """Gated DeltaNet linear attention (Yang, Kautz, Hatamizadeh 2025, 'Gated Delta Networks';
    Qwen3-Next's linear_attention layers; Megatron-Core megatron/core/ssm/gated_delta_net): one
    in-projection to Q, K (key heads), V and the output gate Z (value heads) plus a decay and a
    write strength per value head, a causal depthwise convolution over Q, K, V, the chunked
    delta-rule recurrence on a key_head_dim x value_head_dim state per value head, a gated
    RMSNorm and the out-projection. No key/value cache grows with the sequence."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    num_key_heads: int = Field(gt=0, le=MAX_HEADS, description="Q and K heads (HF linear_num_key_heads)")
    num_value_heads: int = Field(gt=0, le=MAX_HEADS, description="V heads, one recurrent state each (HF linear_num_value_heads)")
    key_head_dim: int = Field(gt=0, le=MAX_WIDTH, description="Per-head Q/K width (HF linear_key_head_dim)")
    value_head_dim: int = Field(gt=0, le=MAX_WIDTH, description="Per-head V width (HF linear_value_head_dim)")
    conv_kernel_dim: int = Field(4, gt=0, le=64, description="Causal convolution width, tokens (HF linear_conv_kernel_dim)")

    @model_validator(mode="after")
    def _check(self) -> "LinearAttentionSpec":
        if self.num_value_heads % self.num_key_heads:
            raise ValueError(f"num_value_heads={self.num_value_heads} must be a multiple of num_key_heads={self.num_key_heads}")
        return self

    @property
    def qk_dim(self) -> int:
        """Width of Q (and of K): key heads x key head dim."""
        return self.num_key_heads * self.key_head_dim

    @property
    def v_dim(self) -> int:
        """Width of V (and of the gate Z and the output): value heads x value head dim."""
        return self.num_value_heads * self.value_head_dim

    @property
    def in_proj_width(self) -> int:
        """Outputs of the in-projection per token: Q, K, V, Z and the decay and write strength
        per value head (Megatron gdn.py in_proj_split_sections; HF in_proj_qkvz + in_proj_ba)."""
        return 2 * self.qk_dim + 2 * self.v_dim + 2 * self.num_value_heads

    @property
    def conv_width(self) -> int:
        """Channels of the causal convolution: Q, K and V."""
        return 2 * self.qk_dim + self.v_dim


class MambaSpec(StrictModel):
    """Mamba-2 mixer (Dao and Gu 2024, 'Transformers are SSMs', the SSD layer; Megatron-Core
    megatron/core/ssm/mamba_mixer.py; HF NemotronHMamba2Mixer): an in-projection to the gate z
    and x (num_heads x head_dim each), B and C (num_groups x state_dim each) and one time step
    per head; a causal depthwise convolution over x, B and C; the chunked state-space scan with a
    head_dim x state_dim state per head; a gated RMSNorm and the out-projection."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    num_heads: int = Field(gt=0, le=4 * MAX_HEADS, description="SSM heads (Megatron --mamba-num-heads; HF mamba_num_heads)")
    head_dim: int = Field(gt=0, le=MAX_WIDTH, description="Channels per head (Megatron --mamba-head-dim; HF mamba_head_dim)")
    state_dim: int = Field(gt=0, le=MAX_WIDTH, description="State size N (Megatron --mamba-state-dim; HF ssm_state_size)")
    num_groups: int = Field(gt=0, le=MAX_HEADS, description="B and C groups (Megatron --mamba-num-groups; HF n_groups)")
    conv_kernel_dim: int = Field(4, gt=0, le=64, description="Causal convolution width, tokens (HF conv_kernel)")
    chunk_tokens: int = Field(128, gt=0, le=MAX_SEQ_LEN, description="Chunk of the SSD scan, tokens (Megatron MambaMixer "
                              "chunk_size 128; HF chunk_size)")

    @model_validator(mode="after")
    def _check(self) -> "MambaSpec":
        if self.num_heads % self.num_groups:
            raise ValueError(f"num_heads={self.num_heads} must be a multiple of num_groups={self.num_groups}")
        return self

    @property
    def inner_dim(self) -> int:
        """Width of x, of the gate z and of the scan's output: heads x head dim."""
        return self.num_heads * self.head_dim

    @property
    def in_proj_width(self) -> int:
        """Outputs of the in-projection per token: z, x, B, C and dt (Megatron MambaMixer in_proj)."""
        return 2 * self.inner_dim + 2 * self.num_groups * self.state_dim + self.num_heads

    @property
    def conv_width(self) -> int:
        """Channels of the causal convolution: x, B and C."""
        return self.inner_dim + 2 * self.num_groups * self.state_dim


# the letters of a hybrid layer pattern (Megatron-LM --hybrid-layer-pattern, HF
# hybrid_override_pattern): each letter is one layer holding one block, with its own norm
HYBRID_MAMBA, HYBRID_ATTENTION, HYBRID_MLP, HYBRID_MOE = "M", "*", "-", "E"
HYBRID_LETTERS = HYBRID_MAMBA + HYBRID_ATTENTION + HYBRID_MLP + HYBRID_MOE


class RouterScore(str, Enum):
    """How the MoE router turns logits into expert scores."""

    softmax = "softmax"
    """Softmax over the experts (Mixtral, Qwen)."""
    sigmoid = "sigmoid"
    """Independent sigmoids (DeepSeek-V3)."""


class RouterBalance(str, Enum):
    """Over which tokens the router was balanced in training: what a micro-batch's routing looks like."""

    micro_batch = "micro_batch"
    """The balance loss per micro-batch (Megatron aux_loss, HF load_balancing_loss_func): each
    sequence is spread over all experts, so a micro-batch routes about as evenly as the corpus."""
    global_batch = "global_batch"
    """The balance loss over the global batch (Qiu et al. 2025, arXiv 2501.11873; Megatron
    global_aux_loss): experts specialise by domain, so one sequence's tokens crowd its domain's
    experts and only a mix of many sequences routes evenly (Qwen3-MoE, Qwen3-Next)."""


class Norm(str, Enum):
    """Normalization layer type."""

    rmsnorm = "rmsnorm"
    """RMSNorm (Llama and successors)."""
    layernorm = "layernorm"
    """LayerNorm with bias (GPT-2/3, MPT)."""


# the RoPE scalings transformers builds (5.12 modeling_rope_utils.py ROPE_INIT_FUNCTIONS, 'proportional'
# aside: Gemma-4's, a family autopar does not read); an unscaled RoPE is rope_scaling null
RopeScalingType = Literal["linear", "dynamic", "yarn", "longrope", "llama3"]


class RopeScaling(StrictModel):
    """RoPE frequency scaling as HF config.json gives it (rope_scaling / rope_parameters), with the
    keys transformers' RoPE of that type reads (modeling_rope_utils.py _compute_*_parameters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: RopeScalingType = Field(description="linear | dynamic | yarn | longrope | llama3")
    factor: float | None = Field(None, gt=0, description="Context extension factor; null only for longrope, where transformers "
                                 "takes max_position_embeddings / original_max_position_embeddings (Phi-3 128K files)")
    original_max_position_embeddings: int | None = Field(None, gt=0, description="Pre-extension context, tokens (yarn, longrope, "
                                                         "llama3: transformers defaults it to max_position_embeddings)")
    low_freq_factor: float | None = Field(None, description="llama3 scaling")
    high_freq_factor: float | None = Field(None, description="llama3 scaling")
    beta_fast: float | None = Field(None, description="yarn")
    beta_slow: float | None = Field(None, description="yarn")
    mscale: float | None = Field(None, description="yarn")
    mscale_all_dim: float | None = Field(None, description="yarn")
    attention_factor: float | None = Field(None, ge=0, description="yarn, longrope: the cos/sin scale; null = derived from the factor")
    truncate: bool | None = Field(None, description="yarn: round the correction range to whole dims (transformers default true; "
                                  "gpt-oss false)")
    short_factor: tuple[float, ...] | None = Field(None, description="longrope: per-frequency factors within the original context")
    long_factor: tuple[float, ...] | None = Field(None, description="longrope: per-frequency factors beyond the original context")

    @model_validator(mode="after")
    def _check(self) -> "RopeScaling":
        if self.type == "longrope":
            if self.short_factor is None or self.long_factor is None:
                raise ValueError("longrope scaling needs short_factor and long_factor (one factor per rotated frequency)")
        elif self.factor is None:
            raise ValueError(f"{self.type} scaling needs its factor")
        return self


class ModelSpec(StrictModel):
    """A decoder-only transformer. Letters in formulas: L layers, h hidden, a heads,
    g KV heads, d head dim, F FFN size, V vocab, E experts, k top-k."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Model name")
    num_layers: int = Field(gt=0, le=MAX_LAYERS, description="L, transformer layers")
    hidden_size: int = Field(gt=0, le=MAX_WIDTH, description="h, model width")
    num_attention_heads: int = Field(gt=0, le=MAX_HEADS, description="a, query heads")
    num_kv_heads: int | None = Field(None, gt=0, le=MAX_HEADS, description="g, KV heads (GQA); null = a (MHA)")
    head_dim: int | None = Field(None, gt=0, le=MAX_WIDTH, description="d, per-head dim; null = h / a")
    ffn_hidden_size: int = Field(gt=0, le=MAX_WIDTH, description="F, dense MLP width (per matrix)")
    gated_mlp: bool = Field(True, description="SwiGLU-style gated MLP (3 matrices) instead of 2")
    vocab_size: int = Field(gt=0, le=MAX_VOCAB, description="V, vocabulary")
    tied_embeddings: bool = Field(False, description="Input embedding shared with the output layer")
    max_position_embeddings: int | None = Field(None, gt=0, le=MAX_SEQ_LEN, description="Longest trained sequence, tokens")
    dropout: bool = Field(False, description="Dropout after attention and MLP (adds 1-byte masks to activations)")
    num_experts: int = Field(0, ge=0, le=MAX_EXPERTS, description="E, routed experts per MoE layer; 0 = dense")
    moe_top_k: int = Field(0, ge=0, le=MAX_EXPERTS, description="k, routed experts per token")
    moe_ffn_hidden_size: int | None = Field(None, gt=0, le=MAX_WIDTH, description="FFN width of one routed expert")
    moe_shared_expert_ffn_size: int = Field(0, ge=0, le=MAX_WIDTH, description="Total FFN width of the shared experts; 0 = none")
    moe_latent_size: int | None = Field(None, gt=0, le=MAX_WIDTH, description="LatentMoE width (Nemotron 3 Super/Ultra; Megatron "
                                        "--moe-latent-size): each MoE layer projects its tokens down to this width before the "
                                        "dispatch, its routed experts work in it, and a second projection brings the combined "
                                        "output back to the model width; null = experts at the model width")
    moe_first_k_dense_layers: int = Field(0, ge=0, description="Leading layers with a dense MLP")
    moe_layer_freq: int = Field(1, gt=0, description="Every n-th layer (after the dense prefix) is MoE")
    mla: MlaSpec | None = Field(None, description="Multi-head latent attention; null = standard (GQA) attention")
    moe_dense_layers: tuple[int, ...] = Field((), description="0-based layers that keep a dense MLP in a MoE model besides the first-k prefix (Qwen mlp_only_layers)")
    moe_router_score_function: RouterScore = Field(RouterScore.softmax, description="softmax | sigmoid router scores")
    moe_router_expert_bias: bool = Field(False, description="Aux-loss-free balancing bias on the router scores (DeepSeek-V3 noaux_tc)")
    moe_router_balance: RouterBalance = Field(RouterBalance.micro_batch, description="micro_batch | global_batch: over which "
                                              "tokens the router was balanced in training (global_batch: Qwen3 Technical Report "
                                              "section 2, arXiv 2505.09388); global_batch routes a micro-batch of few sequences unevenly")
    moe_router_num_groups: int | None = Field(None, gt=0, description="Expert groups for group-limited routing (DeepSeek-V3 n_group: one per node of EP64)")
    moe_router_group_topk: int | None = Field(None, gt=0, description="Groups a token may route to (DeepSeek-V3 topk_group = 4: at most 4 nodes)")
    moe_router_topk_scaling_factor: float | None = Field(None, gt=0, description="Scale of the routed experts' weights (DeepSeek routed_scaling_factor)")
    moe_router_topk_norm: bool = Field(False, description="Top-k probabilities renormalised to sum to 1 (HF norm_topk_prob)")
    moe_shared_expert_gate: bool = Field(False, description="Sigmoid gate on the shared expert output (Qwen2-MoE)")
    moe_aux_loss_coeff: float | None = Field(None, ge=0, description="Weight of the router's load-balancing loss in the "
                                             "training loss (HF router_aux_loss_coef: Mixtral-8x7B 0.02, Qwen3-MoE 0.001; "
                                             "DeepSeek aux_loss_alpha; Megatron --moe-aux-loss-coeff); null = the config "
                                             "gives none (the framework's default: 0 in Megatron-LM)")
    moe_aux_loss_per_sequence: bool = Field(False, description="The balance loss is computed per sequence, not per "
                                            "micro-batch (DeepSeek seq_aux, the V3 report's complementary sequence-wise "
                                            "loss; Megatron --moe-router-load-balancing-type seq_aux_loss)")
    normalization: Norm = Field(Norm.rmsnorm, description="rmsnorm | layernorm")
    norm_eps: float = Field(1e-5, gt=0, description="Epsilon of the normalization layers")
    qk_layernorm: bool = Field(False, description="Norm on queries and keys (Qwen3, Gemma-3, OLMo-2; DeepSeek MLA's latent norms), "
                               "per head unless qk_norm_across_heads")
    qk_norm_across_heads: bool = Field(False, description="The query and key norms span the whole projection, all heads "
                                       "together (OLMo-2: Olmo2RMSNorm(num_heads x head_dim)), not each head's head_dim")
    activation: str = Field("silu", description="MLP activation (HF hidden_act, Gemma-2/3 hidden_activation: silu, gelu, "
                            "gelu_new, gelu_pytorch_tanh, relu ...); with gated_mlp the gate's activation")
    qkv_bias: bool = Field(False, description="Bias on the QKV projection (Qwen2)")
    linear_bias: bool = Field(False, description="Bias on the other linear layers (GPT-2, GPT-3)")
    position_embedding: str = Field("rope", description="rope | learned_absolute | none (Nemotron-H's attention layers)")
    rope_theta: float | None = Field(None, gt=0, description="RoPE base frequency")
    rope_scaling: RopeScaling | None = Field(None, description="RoPE scaling (Llama-3.1 llama3, DeepSeek yarn); null = none")
    rope_local_theta: float | None = Field(None, gt=0, description="RoPE base of the local (sliding-window) attention layers, "
                                           "unscaled, where they rotate apart from the global layers (Gemma-3: HF "
                                           "rope_local_base_freq 10,000 beside rope_theta 1,000,000, rope_scaling on the "
                                           "global layers only); null = every layer rotates by rope_theta and rope_scaling")
    rotary_percent: float = Field(1.0, gt=0, le=1, description="Share of each query/key head's dims RoPE rotates, the rest pass "
                                  "through (HF partial_rotary_factor: Qwen3-Next 0.25, GLM-4 0.5; Megatron --rotary-percent)")
    norm_zero_centered_gamma: bool = Field(False, description="The norms scale by 1 + weight, the weight stored around zero (Gemma, "
                                           "Qwen3-Next RMSNorm; Megatron --apply-layernorm-1p, TransformerConfig "
                                           "layernorm_zero_centered_gamma)")
    mtp_num_layers: int = Field(0, ge=0, description="Multi-token prediction modules after the decoder (DeepSeek-V3: 1), each a "
                                "transformer layer of the last layer's kind with its own output layer")
    attention_window: int | None = Field(None, gt=0, le=MAX_SEQ_LEN, description="Span of the local attention layers, tokens: a sliding "
                                         "window (a query sees its last W keys: Mistral-7B v0.1, Gemma-2/3, gpt-oss) or, with "
                                         "attention_chunked, a chunk (a query sees the keys of its own chunk: Llama-4); null = "
                                         "every layer attends to the whole sequence")
    attention_chunked: bool = Field(False, description="The local span is a fixed chunk (Llama-4 attention_chunk_size), not a sliding window")
    global_attention_layers: tuple[int, ...] = Field((), description="0-based layers that attend to the whole sequence when "
                                                     "attention_window is set (gpt-oss full_attention layers, Gemma-3 every 6th, "
                                                     "Llama-4 NoPE layers); empty = every layer local")
    attention_output_gate: bool = Field(False, description="The softmax-attention layers gate their output by a sigmoid of a second "
                                        "query-wide projection (Qwen3-Next: q_proj emits query and gate; Megatron --attention-output-gate)")
    attention_sinks: bool = Field(False, description="A learned sink logit per head joins each softmax (gpt-oss sinks; Megatron-Core "
                                  "TransformerConfig softmax_type 'learnable'); costs one scalar per head and row")
    swiglu_limit: float | None = Field(None, gt=0, description="gpt-oss's clamped GLU: both halves clamped at this value, the gate "
                                       "as x sigmoid(1.702 x), 1 added to the linear half (HF swiglu_limit; Megatron-Core "
                                       "activation_func_clamp_value with glu_linear_offset 1); null = plain SwiGLU")
    linear_attention: LinearAttentionSpec | None = Field(None, description="Shape of the linear-attention (Gated DeltaNet) layers; "
                                                         "null = every layer is softmax attention")
    linear_attention_layers: tuple[int, ...] = Field((), description="0-based layers whose mixer is linear attention (Qwen3-Next: "
                                                     "three of every four, HF layer_types linear_attention)")
    mamba: MambaSpec | None = Field(None, description="Shape of the Mamba-2 layers of a hybrid model; null = none")
    hybrid_layer_pattern: str | None = Field(None, description="One letter per layer of a hybrid model, each layer one block "
                                             "with its own norm: M Mamba-2 mixer, * softmax attention, - dense MLP, E MoE "
                                             "(Megatron-LM --hybrid-layer-pattern; Nemotron-H); null = every layer is "
                                             "attention plus MLP")
    mtp_hybrid_pattern: str | None = Field(None, description="The blocks of each MTP module of a hybrid model, one letter each, "
                                           "costed like the main layers of the same letter (HF mtp_hybrid_override_pattern; "
                                           "Megatron-LM --hybrid-layer-pattern after '/': Nemotron 3 Super '*E'); null = one "
                                           "block of the last layer's kind")

    def check_positions(self, seq_len: int, framework: str | None = None) -> None:
        """A learned absolute position embedding has one trained row per position, so a launcher
        cannot run sequences longer than its table (Megatron-LM refuses max_position_embeddings <
        seq_length for it; RoPE has no table). The cost model does not depend on the table, so
        only a search for a framework's launcher checks this. InputError names the rule."""
        if self.position_embedding == "learned_absolute" and self.max_position_embeddings is not None and seq_len > self.max_position_embeddings:
            raise InputError("seq-len", seq_len, f"exceeds {self.name}'s learned position table (max_position_embeddings="
                             f"{self.max_position_embeddings}, position_embedding={self.position_embedding}); a learned table "
                             f"has one row per trained position, so {framework or 'a launcher'} refuses every plan -- use a config "
                             "with a larger table or a RoPE model")

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.num_kv_heads is not None and self.num_attention_heads % self.num_kv_heads:
            # the KV heads are at fault: each serves an equal group of query heads (GQA)
            raise ValueError(f"num_kv_heads={self.num_kv_heads} must divide num_attention_heads={self.num_attention_heads} "
                             "(each KV head serves an equal group of query heads)")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size={self.hidden_size} must divide by num_attention_heads={self.num_attention_heads} when head_dim is not given")
        if self.num_experts:
            if not 0 < self.moe_top_k <= self.num_experts:
                raise ValueError(f"moe_top_k={self.moe_top_k} must be in 1..num_experts={self.num_experts}")
            if self.moe_ffn_hidden_size is None:
                raise ValueError("moe_ffn_hidden_size is required when num_experts > 0")
            if self.moe_first_k_dense_layers > self.num_layers:
                raise ValueError(f"moe_first_k_dense_layers={self.moe_first_k_dense_layers} exceeds num_layers={self.num_layers}")
            self._check_router_groups()
        elif self.moe_latent_size is not None:
            raise ValueError("moe_latent_size needs routed experts (num_experts > 0)")
        if self.qk_norm_across_heads and not self.qk_layernorm:
            raise ValueError("qk_norm_across_heads needs qk_layernorm (it says how wide the query and key norms are)")
        if self.attention_window is None and (self.global_attention_layers or self.attention_chunked):
            raise ValueError("global_attention_layers and attention_chunked need attention_window (the local layers' span)")
        outside = [i for i in self.global_attention_layers if not 0 <= i < self.num_layers]
        if outside:
            raise ValueError(f"global_attention_layers={outside} must be layer indices in 0..{self.num_layers - 1}")
        if bool(self.linear_attention_layers) != (self.linear_attention is not None):
            raise ValueError("linear_attention (the layers' shape) and linear_attention_layers (which layers) come together")
        outside = [i for i in self.linear_attention_layers if not 0 <= i < self.num_layers]
        if outside:
            raise ValueError(f"linear_attention_layers={outside} must be layer indices in 0..{self.num_layers - 1}")
        rotary = self.head_size * self.rotary_percent
        if self.rotary_percent < 1 and (self.mla is not None or rotary != int(rotary) or int(rotary) % 2):
            raise ValueError(f"rotary_percent={self.rotary_percent:g}: must rotate an even whole number of a standard "
                             f"attention head's {self.head_size} dims (RoPE turns dims in pairs; MLA has qk_rope_head_dim)")
        if self.hybrid_layer_pattern is not None:
            self._check_hybrid(self.hybrid_layer_pattern)
        elif self.mamba is not None:
            raise ValueError("mamba (the Mamba-2 layers' shape) needs hybrid_layer_pattern (which layers are Mamba)")
        if self.mtp_hybrid_pattern is not None:
            self._check_mtp_hybrid(self.mtp_hybrid_pattern)
        return self

    def _check_router_groups(self) -> None:
        """Group-limited routing (DeepSeek-V3 n_group / topk_group): the experts split into equal
        groups, a token picks topk_group of them and its top-k experts inside those."""
        groups, picked = self.moe_router_num_groups, self.moe_router_group_topk
        if groups is None:
            return
        if self.num_experts % groups:
            raise ValueError(f"moe_router_num_groups={groups} must divide num_experts={self.num_experts} (equal expert groups)")
        if picked is not None and picked > groups:
            raise ValueError(f"moe_router_group_topk={picked} must be at most moe_router_num_groups={groups}")
        if picked is not None and self.moe_top_k > picked * (self.num_experts // groups):
            raise ValueError(f"moe_top_k={self.moe_top_k} exceeds the {picked * (self.num_experts // groups)} experts of "
                             f"moe_router_group_topk={picked} groups of {self.num_experts // groups}")

    def _check_mtp_hybrid(self, mtp: str) -> None:
        if self.hybrid_layer_pattern is None or not self.mtp_num_layers:
            raise ValueError("mtp_hybrid_pattern (the blocks of each MTP module) needs hybrid_layer_pattern and mtp_num_layers > 0")
        # each MTP block is costed as the first main layer of its letter, so that letter must exist
        missing = sorted(set(mtp) - set(self.hybrid_layer_pattern))
        if not mtp or missing:
            raise ValueError(f"mtp_hybrid_pattern={mtp!r}: needs one or more letters, each also in hybrid_layer_pattern "
                             f"(missing {missing})")

    def _check_hybrid(self, pattern: str) -> None:
        if len(pattern) != self.num_layers:
            raise ValueError(f"hybrid_layer_pattern has {len(pattern)} letters; it must have one per layer (num_layers={self.num_layers})")
        wrong = sorted(set(pattern) - set(HYBRID_LETTERS))
        if wrong:
            raise ValueError(f"hybrid_layer_pattern letters {wrong} are not M (Mamba), * (attention), - (MLP) or E (MoE)")
        if (HYBRID_MAMBA in pattern) != (self.mamba is not None):
            raise ValueError("hybrid_layer_pattern has Mamba layers (M) exactly when mamba (their shape) is given")
        if (HYBRID_MOE in pattern) != bool(self.num_experts):
            raise ValueError("hybrid_layer_pattern has MoE layers (E) exactly when num_experts > 0")
        if self.linear_attention is not None or self.moe_first_k_dense_layers or self.moe_dense_layers or self.moe_layer_freq != 1:
            raise ValueError("a hybrid_layer_pattern names each layer's block itself: linear_attention, moe_first_k_dense_layers, "
                             "moe_dense_layers and moe_layer_freq do not apply")

    # ---- derived shape -------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def attention_head_dim(self) -> int:
        """Per-head Q/K width the attention kernel runs at: MLA's nope + rope dims (Megatron
        stores its Q, K as MHA at that width), else the head size."""
        return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim if self.mla else self.head_size

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def moe_expert_width(self) -> int:
        """Width of the tokens the routed experts receive, dispatch and return: the LatentMoE
        width when there is one, else the model width h (Megatron-Core experts.py and
        token_dispatcher.py: moe_latent_size or hidden_size)."""
        return self.moe_latent_size or self.hidden_size

    def _hybrid_letter(self, index: int) -> str | None:
        """Layer `index`'s letter of hybrid_layer_pattern (an MTP module, index >= num_layers, is
        of the last layer's kind); None for a model without one."""
        if self.hybrid_layer_pattern is None:
            return None
        return self.hybrid_layer_pattern[min(index, self.num_layers - 1)]

    @property
    def mtp_hybrid_blocks(self) -> str | None:
        """The letters of one MTP module of a hybrid model: mtp_hybrid_pattern, else one block of
        the last layer's letter; None for a model without a hybrid pattern."""
        if self.hybrid_layer_pattern is None:
            return None
        return self.mtp_hybrid_pattern or self.hybrid_layer_pattern[-1]

    def mtp_block_indices(self) -> list[int]:
        """For each block of one MTP module, the main layer whose costs it shares: the first
        layer of its letter in a hybrid model, else the last layer (a transformer layer of the
        last layer's kind, DeepSeek-V3 report section 2.2)."""
        blocks = self.mtp_hybrid_blocks
        if blocks is None:
            return [self.num_layers - 1]
        return [self.hybrid_layer_pattern.index(letter) for letter in blocks]

    @property
    def mtp_layout_units(self) -> int:
        """What one MTP module weighs in the balanced pipeline split, in decoder layers: its blocks
        plus its own output layer (2 for a transformer layer; 3 for Nemotron 3 Super's '*E')."""
        return len(self.mtp_block_indices()) + 1

    def has_mixer(self, index: int) -> bool:
        """Layer `index` has a token mixer (attention, linear attention or Mamba): every layer of
        a transformer; the M and * layers of a hybrid pattern."""
        return self._hybrid_letter(index) in (None, HYBRID_MAMBA, HYBRID_ATTENTION)

    def has_ffn(self, index: int) -> bool:
        """Layer `index` has an MLP or MoE block: every layer of a transformer; the - and E
        layers of a hybrid pattern."""
        return self._hybrid_letter(index) in (None, HYBRID_MLP, HYBRID_MOE)

    def is_mamba_layer(self, index: int) -> bool:
        """Layer `index`'s mixer is a Mamba-2 SSM (hybrid pattern letter M)."""
        return self._hybrid_letter(index) == HYBRID_MAMBA

    def has_softmax_attention(self, index: int) -> bool:
        """Layer `index` runs softmax attention (not linear attention, Mamba, or no mixer)."""
        return self.has_mixer(index) and not self.is_mamba_layer(index) and not self.is_linear_attention_layer(index)

    def layer_norms(self, index: int) -> int:
        """Norms of layer `index`: one before each block (two in a transformer layer, one in a
        hybrid layer)."""
        return int(self.has_mixer(index)) + int(self.has_ffn(index))

    def separate_norms(self, index: int) -> int:
        """Norms of layer `index` that Megatron-Core's Transformer Engine layer spec builds as a
        module of their own, the ones recompute_modules 'layernorm' can checkpoint
        (megatron/core/models/gpt/gpt_layer_specs.py get_gpt_layer_with_transformer_engine_submodules
        @d98e8a64dd, 2026-08-22: a standard attention's input norm is fused into linear_qkv
        (TELayerNormColumnParallelLinear, input_layernorm IdentityOp), a dense MLP's into linear_fc1
        (pre_mlp_layernorm IdentityOp 'if num_experts' is unset); MLA's input_layernorm and a MoE
        layer's pre_mlp_layernorm are TENorm). A fused norm's output is the GEMM's saved input, so
        transformer_layer.py's input_layernorm_checkpoint / pre_mlp_norm_checkpoint (set only for a
        norm that is not IdentityOp) neither drops nor reruns it."""
        return int(self.separate_input_norm(index)) + int(self.is_moe_layer(index))

    def separate_input_norm(self, index: int) -> bool:
        """Layer `index`'s input norm is a module of its own, not fused into the QKV GEMM: MLA's
        (separate_norms)."""
        return self.mla is not None and self.has_softmax_attention(index)

    def is_moe_layer(self, index: int) -> bool:
        """Layer `index` (0-based) has routed experts (Megatron --moe-layer-freq pattern; a hybrid
        pattern's E layers)."""
        letter = self._hybrid_letter(index)
        if letter is not None:
            return letter == HYBRID_MOE
        if not self.is_moe or index < self.moe_first_k_dense_layers or index in self.moe_dense_layers:
            return False
        return (index - self.moe_first_k_dense_layers) % self.moe_layer_freq == 0

    def is_local_attention_layer(self, index: int) -> bool:
        """Layer `index` attends within attention_window only (an MTP module, index >= num_layers,
        is of the last layer's kind)."""
        index = min(index, self.num_layers - 1)
        return self.attention_window is not None and index not in self.global_attention_layers

    def attention_keys_per_query(self, index: int, seq_len: int, causal: bool) -> float:
        """Mean keys a query of layer `index` scores in a sequence of s tokens. Global layers:
        s, or s / 2 under a causal mask (the flash kernels skip the masked half). A sliding
        window W < s: W counted as model FLOPs (the keys a query may see, the non-causal
        convention); under the causal mask query i sees min(i, W) keys, mean W - W^2 / 2s. A
        chunk C < s: C counted, C / 2 causal (a causal mask within each chunk)."""
        s = float(seq_len)
        if not self.is_local_attention_layer(index) or self.attention_window >= seq_len:
            return s * (0.5 if causal else 1.0)
        w = float(self.attention_window)
        if not causal:
            return w
        return 0.5 * w if self.attention_chunked else w - w * w / (2.0 * s)

    def is_linear_attention_layer(self, index: int) -> bool:
        """Layer `index` mixes tokens with linear attention (Gated DeltaNet), not softmax
        attention (an MTP module, index >= num_layers, is of the last layer's kind)."""
        return min(index, self.num_layers - 1) in self.linear_attention_layers

    def layer_kind(self, index: int) -> tuple[bool, bool, bool, str | None]:
        """What sets a layer's costs apart: (routed experts, local attention, linear attention,
        hybrid pattern letter)."""
        index = min(index, self.num_layers - 1)
        return self.is_moe_layer(index), self.is_local_attention_layer(index), self.is_linear_attention_layer(index), self._hybrid_letter(index)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))


# ---- loading ----------------------------------------------------------------------

def _whole_number_rule(exc: ValidationError) -> str | None:
    """A plain rule for an integer field given a number too large to be one (JSON 1e30: pydantic
    says 'Unable to parse input string as an integer, exceeded maximum size'): the field's range
    from its bounds (autopar/limits.py); None for every other error."""
    err = exc.errors()[0]
    if err.get("type") != "int_parsing_size":
        return None
    spec: Any = ModelSpec
    info = None
    for part in err["loc"]:
        info = spec.model_fields.get(part) if isinstance(spec, type) and hasattr(spec, "model_fields") else None
        if info is None:
            return None
        spec = next((a for a in get_args(info.annotation) if isinstance(a, type) and issubclass(a, StrictModel)), info.annotation)
    bounds = {type(m).__name__: m for m in info.metadata}
    low = "a positive whole number" if "Gt" in bounds else "a whole number"
    most = bounds["Le"].le if "Le" in bounds else 2**63 - 1  # the widest integer pydantic parses
    return f"must be {low} of at most {most:,}"


def model_from_mapping(data: dict[str, Any], name: str, field: str = "model") -> ModelSpec:
    """A ModelSpec from an autopar model mapping or a HuggingFace config; an error names the
    field as the file spells it (a HF file's config.json key: autopar.specs.hf.hf_input_error)."""
    from autopar.specs.hf import hf_fields, hf_input_error, is_hf_config

    hf = is_hf_config(data)
    try:
        fields = hf_fields(data, name, field) if hf else {"name": name, **data}
        refuse_non_finite(fields, field, name)  # the file may hold infinities only in keys autopar does not read
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        err = InputError.from_validation(exc, field)
        rule = _whole_number_rule(exc)
        err = InputError(err.field, err.value, rule) if rule else err
        raise (hf_input_error(err, data, field) if hf else err) from None


def load_model(name_or_path: str) -> ModelSpec:
    """A model preset (profiles/models/NAME.json|yaml), an autopar model file, an HF config.json
    or an HF checkpoint directory holding one."""
    presets = preset_files("models")
    if name_or_path in presets:
        return model_from_mapping(read_mapping(presets[name_or_path], "model", non_finite=True), name_or_path)
    path = Path(name_or_path)
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise InputError("model", name_or_path, "directory holds no config.json (a HuggingFace checkpoint directory has one)")
        return model_from_mapping(read_mapping(config, "model", non_finite=True), path.resolve().name)
    if looks_like_path(name_or_path) or path.is_file():
        name = path.parent.name if path.name == "config.json" else path.stem
        return model_from_mapping(read_mapping(path, "model", non_finite=True), name or path.stem)
    raise ProfileNotFound("model", name_or_path, list(presets))
