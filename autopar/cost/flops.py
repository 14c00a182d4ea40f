"""Parameter counts and FLOPs of a decoder layer (docs/design.md "Cost model: FLOPs").

Legend: h hidden, a heads, g KV heads, d head dim, F FFN width, V vocab, E experts, k top-k,
s sequence length, T tokens in one GEMM (micro-batch tokens on this GPU).
Forward FLOPs per token: QKV 2h(a d + 2 g d), attention core 4 s a d (half when causal with
flash kernels), output 2 a d h, MLP 2 h F x (3 gated | 2), router 2 h E, experts k x MLP,
logits 2 h V (Narayanan et al. 2021 eq. 3 generalised; PaLM appendix B). Backward = 2 x forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from autopar.specs.model import ModelSpec


@dataclass(frozen=True)
class Gemm:
    """One forward GEMM on one GPU: (m x k) @ (k x n), repeated `count` times."""

    name: str
    m: float
    n: float
    k: float
    count: float = 1.0

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count


def mlp_matrices(model: ModelSpec) -> int:
    return 3 if model.gated_mlp else 2


def query_projection_width(model: ModelSpec) -> int:
    """Output width of a softmax-attention layer's query projection: heads x head size, twice that
    where the model gates its attention output (the gate's projection rides with the query's)."""
    return model.num_attention_heads * model.head_size * (2 if model.attention_output_gate else 1)


def attention_params(model: ModelSpec) -> float:
    """Weights of a softmax-attention block: Q, K, V and output projections (MLA: its low-rank
    factors), plus the output gate's query-wide projection where the model has one."""
    h, a, g, d = model.hidden_size, model.num_attention_heads, model.kv_heads, model.head_size
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = h * a * qk if m.q_lora_rank is None else h * m.q_lora_rank + m.q_lora_rank * a * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + a * m.v_head_dim * h
    return h * query_projection_width(model) + 2 * h * g * d + a * d * h


def linear_attention_params(model: ModelSpec) -> float:
    """Weights of a Gated DeltaNet block (Megatron gdn.py, HF Qwen3NextGatedDeltaNet): the
    in-projection, the depthwise convolution, a decay rate and a time-step bias per value head,
    the gated norm's weight and the out-projection."""
    la, h = model.linear_attention, model.hidden_size
    return h * la.in_proj_width + la.conv_kernel_dim * la.conv_width + 2 * la.num_value_heads + la.value_head_dim + la.v_dim * h


def mamba_params(model: ModelSpec) -> float:
    """Weights of a Mamba-2 block (Megatron-Core MambaMixer, HF NemotronHMamba2Mixer): the
    in-projection, the depthwise convolution with its bias, dt_bias, A_log and D per head, the
    gated norm's weight and the out-projection."""
    mb, h = model.mamba, model.hidden_size
    return h * mb.in_proj_width + (mb.conv_kernel_dim + 1) * mb.conv_width + 3 * mb.num_heads + mb.inner_dim + mb.inner_dim * h


def mixer_matmul_params(model: ModelSpec, index: int) -> float:
    """The part of mixer_params that multiplies every token as a matrix: a Mamba-2 or Gated
    DeltaNet block's in- and out-projections, not its convolution (counted as the layer's core
    FLOPs: attention_core_flops_per_token), biases, per-head decay and step vectors or gated-norm
    weight, which scale or add element-wise."""
    if not model.has_mixer(index):
        return 0.0
    h = model.hidden_size
    if model.is_mamba_layer(index):
        return h * model.mamba.in_proj_width + model.mamba.inner_dim * h
    if model.is_linear_attention_layer(index):
        return h * model.linear_attention.in_proj_width + model.linear_attention.v_dim * h
    return attention_params(model)


def mixer_params(model: ModelSpec, index: int) -> float:
    """Weights of layer `index`'s token mixer: linear or softmax attention, Mamba-2, or none (a
    hybrid MLP or MoE layer)."""
    if not model.has_mixer(index):
        return 0.0
    if model.is_mamba_layer(index):
        return mamba_params(model)
    return linear_attention_params(model) if model.is_linear_attention_layer(index) else attention_params(model)


def dense_mlp_params(model: ModelSpec) -> float:
    return mlp_matrices(model) * model.hidden_size * model.ffn_hidden_size


def expert_params(model: ModelSpec) -> float:
    """Parameters of one routed expert (its matrices take and return the expert width: the
    LatentMoE width or h)."""
    return mlp_matrices(model) * model.moe_expert_width * (model.moe_ffn_hidden_size or 0)


def latent_projection_params(model: ModelSpec) -> float:
    """LatentMoE's two projections of one MoE layer, h -> latent before the dispatch and latent
    -> h after the combine (Megatron-Core moe_layer.py fc1_latent_proj / fc2_latent_proj,
    TELinear without bias); 0 without a latent width. Megatron keeps them whole on every TP rank
    (parallel_mode 'duplicated'); autopar splits a layer's dense-like weights over TP, as it
    does the norms, so per GPU they are under-counted by (tp - 1) / tp: 8.4M of a Nemotron 3
    Super layer's 10.5M dense-like weights at tp 8."""
    return 2 * model.hidden_size * model.moe_latent_size if model.moe_latent_size else 0.0


def moe_nonexpert_mlp_params(model: ModelSpec) -> float:
    """Shared experts, router and latent projections of one MoE layer (replicated like dense
    weights)."""
    return (mlp_matrices(model) * model.hidden_size * model.moe_shared_expert_ffn_size + model.hidden_size * model.num_experts
            + latent_projection_params(model))


def layer_params(model: ModelSpec, index: int) -> tuple[float, float]:
    """(dense-like params, routed-expert params) of layer `index`, norms included in dense."""
    norms = model.layer_norms(index) * model.hidden_size
    if model.is_moe_layer(index):
        return mixer_params(model, index) + moe_nonexpert_mlp_params(model) + norms, model.num_experts * expert_params(model)
    mlp = dense_mlp_params(model) if model.has_ffn(index) else 0.0
    return mixer_params(model, index) + mlp + norms, 0.0


def layer_weight_modules(model: ModelSpec, index: int) -> tuple[int, int]:
    """(linear modules of the dense-like weights, linear modules of the routed experts) of layer
    `index` as a HuggingFace implementation builds them, one nn.Linear each (what DeepSpeed
    ZeRO-3 fetches one at a time): q, k, v, o (MLA: q or q_a and q_b, kv_a, kv_b, o), the MLP's
    3 (gated) or 2 matrices, an MoE layer's router and shared-expert matrices, and E x 3 (or 2)
    expert matrices. Norms stay gathered (under DeepSpeed's persistence threshold). A Gated
    DeltaNet mixer: in_proj_qkvz, in_proj_ba, the convolution and out_proj (HF Qwen3-Next). A
    Mamba-2 mixer: in_proj, the convolution and out_proj (HF NemotronHMamba2Mixer); a hybrid
    layer holds one block only."""
    if not model.has_mixer(index):
        attention = 0
    elif model.is_mamba_layer(index):
        attention = 3
    elif model.mla is not None and not model.is_linear_attention_layer(index):
        attention = 4 + (model.mla.q_lora_rank is not None)
    else:
        attention = 4
    if not model.is_moe_layer(index):
        return attention + (mlp_matrices(model) if model.has_ffn(index) else 0), 0
    shared = mlp_matrices(model) if model.moe_shared_expert_ffn_size else 0
    latent = 2 if model.moe_latent_size else 0
    return attention + 1 + shared + latent, model.num_experts * mlp_matrices(model)


def embedding_params(model: ModelSpec) -> float:
    return model.vocab_size * model.hidden_size


def mtp_module_params(model: ModelSpec) -> float:
    """One multi-token-prediction module besides its transformer layer (DeepSeek-V3 report
    section 2.2): the 2h -> h projection and two norms; it shares the embedding and output layer."""
    return 2 * model.hidden_size * model.hidden_size + 2 * model.hidden_size


def total_params(model: ModelSpec) -> float:
    """All parameters (tied embeddings counted once; MTP modules included: DeepSeek-V3 671B +
    14B of MTP = 685B on the hub)."""
    layers = sum(sum(layer_params(model, i)) for i in range(model.num_layers))
    mtp = model.mtp_num_layers * (sum(sum(layer_params(model, i)) for i in model.mtp_block_indices()) + mtp_module_params(model))
    head = 0 if model.tied_embeddings else embedding_params(model)
    return layers + mtp + embedding_params(model) + head + model.hidden_size  # + final norm


def active_params_per_token(model: ModelSpec) -> float:
    """Matmul parameters touched per token (routed experts: k of E), embedding lookup excluded."""
    def active(i: int) -> float:
        dense, routed = layer_params(model, i)
        elementwise = model.layer_norms(i) * model.hidden_size + mixer_params(model, i) - mixer_matmul_params(model, i)
        return dense - elementwise + (model.moe_top_k * expert_params(model) if routed else 0.0)

    total = sum(active(i) for i in range(model.num_layers))
    # each MTP module: its layer, its projection and its own pass through the output layer
    total += model.mtp_num_layers * (sum(active(i) for i in model.mtp_block_indices()) + 2 * model.hidden_size ** 2
                                     + embedding_params(model))
    return total + embedding_params(model)  # logits GEMM


def attention_core_flops_per_token(model: ModelSpec, index: int, seq_len: int, causal: bool) -> float:
    """Scores (Q K^T) and values (P V) forward FLOPs of layer `index` per query token, over the
    keys the layer's span lets a query see (ModelSpec.attention_keys_per_query). A linear-attention
    layer: its causal convolution and its delta rule's four state products per value head
    (K K^T, V K^T, the decayed state update, S Q: 4 d_k d_v multiply-adds; Megatron-LM
    training.py gdn_layer_flops), the same for every token whatever the sequence length. A
    Mamba-2 layer: its scan as Megatron-LM counts it (training.py mamba_layer_flops: 7 d_inner N
    per token, the SSD kernels' state products) plus the causal convolution. A hybrid MLP or MoE
    layer: none."""
    if not model.has_mixer(index):
        return 0.0
    if model.is_mamba_layer(index):
        mb = model.mamba
        return 7.0 * mb.inner_dim * mb.state_dim + 2.0 * mb.conv_kernel_dim * mb.conv_width
    if model.is_linear_attention_layer(index):
        la = model.linear_attention
        return 2.0 * (la.conv_kernel_dim * la.conv_width + 4 * la.num_value_heads * la.key_head_dim * la.value_head_dim)
    a = model.num_attention_heads
    if model.mla is not None:
        per_key = 2 * a * (model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim + model.mla.v_head_dim)
    else:
        per_key = 4 * a * model.head_size
    return per_key * model.attention_keys_per_query(index, seq_len, causal)


def model_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = False, frozen_weights: bool = False) -> float:
    """Training FLOPs per token without recompute: 3 x forward (MFU numerator); 2 x forward
    with frozen weights (LoRA: no weight gradients), as NeMo counts LoRA.

    Convention: attention counted non-causal (causal=False), as in Narayanan et al. 2021 and
    Megatron-LM's reported model TFLOP/s, so MFU is comparable with published figures.
    """
    # MTP modules' blocks attend like the main layers they copy (ModelSpec.mtp_block_indices)
    layers = [*range(model.num_layers), *model.mtp_block_indices() * model.mtp_num_layers]
    forward = 2 * active_params_per_token(model) + sum(attention_core_flops_per_token(model, i, seq_len, causal) for i in layers)
    return (2 if frozen_weights else 3) * forward


def layer_gemms(model: ModelSpec, index: int, tokens: float, tp: int, ep: int, etp: int, load: float = 1.0,
                moe_tokens: float | None = None) -> list[Gemm]:
    """Forward GEMMs of layer `index` on one GPU for `tokens` tokens (Megatron TP splits). A MoE
    layer routes `moe_tokens` tokens per GPU (default `tokens`; autopar.cost.moe.routed_tokens),
    and its experts process `load` x their balanced share of those tokens' k copies."""
    routed = tokens if moe_tokens is None else moe_tokens
    h, a, g, d = model.hidden_size, model.num_attention_heads, model.kv_heads, model.head_size
    out: list[Gemm] = []
    if not model.has_mixer(index):
        pass
    elif model.is_mamba_layer(index):  # Megatron MambaMixer: in_proj column-, out_proj row-parallel
        mb = model.mamba
        out += [Gemm("mamba/in_proj", tokens, mb.in_proj_width / tp, h), Gemm("mamba/out", tokens, h, mb.inner_dim / tp)]
    elif model.is_linear_attention_layer(index):
        la = model.linear_attention
        out += [Gemm("linear/in_proj", tokens, la.in_proj_width / tp, h), Gemm("linear/out", tokens, h, la.v_dim / tp)]
    elif model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            out.append(Gemm("attention/q", tokens, a * qk / tp, h))
        else:
            out += [Gemm("attention/q_down", tokens, m.q_lora_rank, h), Gemm("attention/q_up", tokens, a * qk / tp, m.q_lora_rank)]
        out += [Gemm("attention/kv_down", tokens, m.kv_lora_rank + m.qk_rope_head_dim, h),
                Gemm("attention/kv_up", tokens, a * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank),
                Gemm("attention/out", tokens, h, a * m.v_head_dim / tp)]
    else:
        out += [Gemm("attention/qkv", tokens, (query_projection_width(model) + 2 * g * d) / tp, h),
                Gemm("attention/out", tokens, h, a * d / tp)]
    mats = mlp_matrices(model)
    if model.is_moe_layer(index):
        f_e, w = model.moe_ffn_hidden_size or 0, model.moe_expert_width
        local_experts = model.num_experts / ep
        # balanced routing: each GPU's experts receive tokens x k assignments in total
        per_expert = routed * model.moe_top_k * ep / model.num_experts * load
        out.append(Gemm("moe/router", routed / etp, model.num_experts, h))
        if model.moe_latent_size:  # LatentMoE: the router's tokens down before the dispatch, back up after the combine
            out += [Gemm("moe/latent_down", routed / etp, w, h), Gemm("moe/latent_up", routed / etp, h, w)]
        out += [Gemm("moe/experts_fc1", per_expert, (mats - 1) * f_e / etp, w, local_experts),
                Gemm("moe/experts_fc2", per_expert, w, f_e / etp, local_experts)]
        if model.moe_shared_expert_ffn_size:
            f_s = model.moe_shared_expert_ffn_size
            out += [Gemm("moe/shared_fc1", tokens, (mats - 1) * f_s / tp, h), Gemm("moe/shared_fc2", tokens, h, f_s / tp)]
    elif model.has_ffn(index):
        f = model.ffn_hidden_size
        out += [Gemm("mlp/fc1", tokens, (mats - 1) * f / tp, h), Gemm("mlp/fc2", tokens, h, f / tp)]
    return out


# GEMMs a stack may run as separate linear layers on one input (StackSpec.separate_projections)
GATED_INPUT_PROJECTIONS = ("mlp/fc1", "moe/shared_fc1", "moe/experts_fc1")


def projection_shares(name: str, model: ModelSpec) -> tuple[float, ...]:
    """Shares of a fused input projection's output width that separate linear layers produce on
    a stack that does not fuse them: the query (with an output gate's projection), the key and
    the value of "attention/qkv" (torchtitan wq, wk, wv); the gate and the up halves of a gated
    MLP's fc1 (torchtitan w1, w3; the experts' two grouped GEMMs). (1.0,) for every other GEMM."""
    if name == "attention/qkv":
        q, kv = query_projection_width(model), model.kv_heads * model.head_size
        return (q / (q + 2 * kv), kv / (q + 2 * kv), kv / (q + 2 * kv))
    if name in GATED_INPUT_PROJECTIONS and model.gated_mlp:
        return (0.5, 0.5)
    return (1.0,)


def activation_message_bytes(tokens: float, hidden_size: int, bytes_per_element: float) -> float:
    """One hidden-state tensor of `tokens` tokens: the TP AllReduce / PP send payload
    (seed 000 'Тензорный параллелизм': 4 x 2048 x 4096 x 2 B = 67 MB)."""
    return tokens * hidden_size * bytes_per_element


def logits_gemm(model: ModelSpec, tokens: float, tp: int) -> Gemm:
    return Gemm("logits", tokens, model.vocab_size / tp, model.hidden_size)
