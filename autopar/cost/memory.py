"""Memory per GPU (docs/design.md 'Memory'; seed 000 'ZeRO: экономия памяти'; Korthikanti et al.
2022 'Reducing Activation Recomputation', section 4). Functions take a Batch and return one
value per plan.

Activations are derived tensor by tensor, so GQA, gated MLPs, MoE, flash attention, dropout,
SP and CP change the constant 34 of s b h (34 + 5 a s / h) the way they change the tensors.
Legend: T tokens of a micro-batch on this GPU, h hidden, a heads, g KV heads, d head dim,
F FFN width, t tp, B bytes per activation element, Bi bytes per element of a linear layer's
saved input (B, or the FP8 / FP4 copy on Transformer Engine: gemm_input_bytes).
"""

from __future__ import annotations

import numpy as np

from autopar.cost.context import Batch, sac_reruns_sdpa
from autopar.cost.gemm import INPUT_BYTES
from autopar.cost.moe import expert_load_factor, routed_tokens
from autopar.cost.table import NONE, SCHEDULE, has_module, selective_modules
from autopar.specs.plan import OffloadModule, RecomputeModule, Schedule


def kv_heads_per_rank(batch: Batch) -> np.ndarray:
    """KV heads on one TP rank (replicated when g < tp)."""
    return np.maximum(batch.model.kv_heads, batch.tab.tp) / batch.tab.tp


# Block-scale bytes per element of the quantized copy a Transformer Engine linear keeps for its
# weight gradient (column-wise data only: linear.py discards the row-wise data after the forward
# GEMM), on top of the value's own width (gemm.INPUT_BYTES). FP8: none counted (MXFP8's E8M0 scale
# per 32 elements, 3%, left out). NVFP4, TE's FP4 training recipe: one E4M3 scale byte per
# 16-element block (NVFP4 format, TE NVFP4BlockScaling): 0.5 + 1/16 bytes in all.
SAVED_INPUT_SCALE_BYTES = {"fp8": 0.0, "fp4": 1.0 / 16}


def gemm_input_bytes(batch: Batch) -> float:
    """Bytes per element a linear layer keeps of its input for the weight gradient: the FP8 or FP4
    copy it cast, with its block scales, on a stack that saves that copy (Transformer Engine), else
    the activation width."""
    dtype = batch.training.precision.gemm_dtype
    if batch.stack.fp8_saves_gemm_inputs and dtype in SAVED_INPUT_SCALE_BYTES:
        return INPUT_BYTES[dtype] + SAVED_INPUT_SCALE_BYTES[dtype]
    return batch.training.activation_bytes


def routed_copies(batch: Batch) -> np.ndarray:
    """Token copies a MoE layer's busiest expert rank holds per micro-batch: k per token it
    routes, times the routing imbalance (moe.expert_load_factor)."""
    t = batch.tab
    return routed_tokens(batch.tokens, t.tp, t.etp, t.sp == 1) * batch.model.moe_top_k * expert_load_factor(batch)


def attention_kv_heads(batch: Batch) -> np.ndarray:
    """K and V heads per TP rank as the attention kernel receives them: the KV heads (GQA), or
    every query head on a stack that repeats K, V before the kernel (StackSpec kv_heads_repeated;
    autograd then keeps the repeated copies for the kernel's backward)."""
    return batch.model.num_attention_heads / batch.tab.tp if batch.stack.kv_heads_repeated else kv_heads_per_rank(batch)


def attention_kv_elements(batch: Batch) -> np.ndarray:
    """Elements of K plus V of one micro-batch on a TP rank as the attention kernel receives
    them (and a CP exchange carries them)."""
    return 2 * batch.tokens * attention_kv_heads(batch) * batch.model.head_size


def attention_kv_bytes(batch: Batch) -> np.ndarray:
    """attention_kv_elements in the activation dtype, bytes."""
    return batch.training.activation_bytes * attention_kv_elements(batch)


def query_elements(batch: Batch) -> np.ndarray:
    """Elements of one micro-batch's queries on a TP rank (as many as the attention output)."""
    return batch.tokens * batch.model.num_attention_heads / batch.tab.tp * batch.model.head_size


def qkv_bytes(batch: Batch) -> np.ndarray:
    """Q, K and V of one micro-batch on a TP rank (the attention core's inputs)."""
    m = batch.model
    return batch.training.activation_bytes * batch.tokens * (m.num_attention_heads / batch.tab.tp + 2 * attention_kv_heads(batch)) * m.head_size


def torch_cp_buffer_bytes(batch: Batch) -> np.ndarray:
    """Transient HBM of PyTorch's ring attention in one layer (StackSpec context_parallel
    torch_allgather): the all-gathered K, V of the whole sequence (cp x the local K, V) and the
    fp32 dQ, dK, dV accumulators of the backward (torch/distributed/tensor/experimental/_attention.py)."""
    t = batch.tab
    if not batch.stack.torch_context_parallel:
        return np.zeros(len(t))
    accumulators = 4 * (attention_kv_elements(batch) + query_elements(batch))
    return np.where(t.cp > 1, t.cp * attention_kv_bytes(batch) + accumulators, 0.0)


def attention_output_bytes(batch: Batch) -> np.ndarray:
    """The attention output the output projection keeps (the fused kernel's backward reads it;
    an FP8 stack keeps the projection its own 1-byte copy)."""
    m, B, Bi = batch.model, batch.training.activation_bytes, gemm_input_bytes(batch)
    d_v = m.mla.v_head_dim if m.mla else m.head_size
    return (B + (Bi if Bi < B else 0.0)) * batch.tokens * m.num_attention_heads / batch.tab.tp * d_v


def layer_activation_bytes(batch: Batch, index: int) -> np.ndarray:
    """Bytes one micro-batch leaves stored by layer `index` with no recomputation."""
    m, t = batch.model, batch.tab.tp
    T, B, tsp = batch.tokens, batch.training.activation_bytes, batch.sp_divisor
    Bi = gemm_input_bytes(batch)
    h = m.hidden_size
    drop = 1.0 if m.dropout else 0.0
    # attention block: norm input, QKV input, Q, K, V, attention output, dropout mask (a hybrid
    # layer without a mixer has none of it; a Mamba-2 mixer: mamba_activation_bytes)
    total = np.zeros(len(batch.tab))
    if m.has_mixer(index):
        total = total + (B + Bi) * T * h / tsp + drop * T * h / tsp + _mixer_activation_bytes(batch, index)
    if not m.has_ffn(index):  # a hybrid attention or Mamba layer
        return total
    # MLP block: norm input, MLP input, dropout mask
    total = total + (B + Bi) * T * h / tsp + drop * T * h / tsp
    mats = 3 if m.gated_mlp else 2
    if m.is_moe_layer(index):
        f_e, et = m.moe_ffn_hidden_size or 0, batch.tab.etp
        # token copies at the busiest rank's experts (the grouped fc1's input), fc1 outputs,
        # activation output (fc2's input)
        routed = routed_copies(batch)
        total = total + 4 * T * m.num_experts  # fp32 router probabilities
        total = total + Bi * routed * m.moe_expert_width + B * routed * (mats - 1) * f_e / et + Bi * routed * f_e / et
        total = total + latent_up_input_bytes(batch)
        f_s = m.moe_shared_expert_ffn_size
        total = total + B * T * (mats - 1) * f_s / t + Bi * T * f_s / t
    else:
        f = m.ffn_hidden_size
        total = total + B * T * (mats - 1) * f / t + Bi * T * f / t  # fc1 output(s), activation output
    return total


def latent_up_input_bytes(batch: Batch) -> np.ndarray | float:
    """What a LatentMoE layer's up-projection saves for its backward: the combined expert output
    at the latent width, on the tokens this rank routed (Megatron-Core moe_layer.py
    fc2_latent_proj, a linear that keeps its input); its down-projection reads the MLP input,
    counted once with the router's. 0 without a latent width."""
    m = batch.model
    if not m.moe_latent_size:
        return 0.0
    return gemm_input_bytes(batch) * batch.tokens * m.moe_latent_size / batch.sp_divisor


def linear_attention_activation_bytes(batch: Batch) -> np.ndarray:
    """What a Gated DeltaNet mixer saves for its backward per micro-batch on a TP rank
    (Megatron-Core gated_delta_net, flash-linear-attention ChunkGatedDeltaRuleFunction): the
    in-projection's output (Q, K, V, gate Z, decay and write strength), the convolution's output,
    the normalised Q and K as the chunk kernel receives them (repeated to the value heads), its
    fp32 chunk matrix A (chunk_tokens per value head and token), its output, and the
    out-projection's input."""
    la, t = batch.model.linear_attention, batch.tab.tp
    T, B, Bi = batch.tokens, batch.training.activation_bytes, gemm_input_bytes(batch)
    chunk = batch.params.attention.linear_attention.chunk_tokens
    per_token = B * (la.in_proj_width + la.conv_width + 2 * la.num_value_heads * la.key_head_dim + la.v_dim) \
        + 4 * la.num_value_heads * chunk + Bi * la.v_dim
    return per_token * T / t


def _mixer_activation_bytes(batch: Batch, index: int) -> np.ndarray:
    """What layer `index`'s token mixer saves beyond its norm and input: Q, K, V, the attention
    output and the softmax statistics (or the score tensors of unfused attention), or the
    recurrent mixer's own tensors."""
    m, T = batch.model, batch.tokens
    if m.is_mamba_layer(index):
        return mamba_activation_bytes(batch)
    if m.is_linear_attention_layer(index):
        return linear_attention_activation_bytes(batch)
    stored = qkv_bytes(batch) + attention_output_bytes(batch) + mla_latent_bytes(batch)
    if batch.training.flash_attention:  # fp32 softmax log-sum-exp per query and head
        return stored + 4 * T * m.num_attention_heads / batch.tab.tp
    return stored + attention_core_bytes(batch)


def mla_latent_widths(batch: Batch) -> tuple[float, float]:
    """(latent elements per token that norms and up-projections read, the RoPE key part) of an
    MLA layer: the Q latent (none with a full-rank Q) and the joint KV latent, and the shared
    RoPE key; (0, 0) without MLA."""
    mla = batch.model.mla
    if mla is None:
        return 0.0, 0.0
    return float((mla.q_lora_rank or 0) + mla.kv_lora_rank), float(mla.qk_rope_head_dim)


def mla_normed_latent_bytes(batch: Batch) -> np.ndarray | float:
    """The normed latents an MLA layer keeps per micro-batch on a TP rank (the up-projections'
    inputs, at the GEMM-input width): what the up-projection checkpoint drops besides Q, K, V.
    The down-projections run on the sequence-parallel shard (Megatron-Core
    multi_latent_attention.py: 'kv_compressed: [s / TP, b, kv_lora_rank]'); 0 without MLA."""
    latent, _ = mla_latent_widths(batch)
    return gemm_input_bytes(batch) * latent * batch.tokens / batch.sp_divisor


def mla_latent_bytes(batch: Batch) -> np.ndarray | float:
    """What an MLA layer keeps of its latents per micro-batch on a TP rank: the down-projections'
    outputs (the latent norms' inputs, and the RoPE key) at the activation width, and the normed
    latents (mla_normed_latent_bytes); 0 without MLA."""
    latent, rope = mla_latent_widths(batch)
    return batch.training.activation_bytes * (latent + rope) * batch.tokens / batch.sp_divisor + mla_normed_latent_bytes(batch)


def mamba_activation_bytes(batch: Batch) -> np.ndarray:
    """What a Mamba-2 mixer saves for its backward per micro-batch on a TP rank (Megatron-Core
    MambaMixer on the mem-efficient path, mamba_ssm mamba_split_conv1d_scan_combined: its
    autograd function keeps the in-projection's output zxbcdt and the scan's output out_x and
    recomputes the convolution and the gating in backward; fp32 rstd per group and token), and
    the out-projection's input."""
    mb, t = batch.model.mamba, batch.tab.tp
    T, B, Bi = batch.tokens, batch.training.activation_bytes, gemm_input_bytes(batch)
    per_token = B * (mb.in_proj_width + mb.inner_dim) + 4 * mb.num_groups + Bi * mb.inner_dim
    return per_token * T / t


def attention_core_bytes(batch: Batch) -> np.ndarray:
    """Score tensors of unfused attention: softmax output B a T s, plus dropout mask and
    output (3 more bytes per score) -- the part selective recompute drops."""
    drop = 3.0 if batch.model.dropout else 0.0
    return (batch.training.activation_bytes + drop) * batch.model.num_attention_heads / batch.tab.tp * batch.tokens * batch.training.seq_len


def stored_activation_bytes(batch: Batch, index: int) -> np.ndarray:
    """Bytes kept in HBM per micro-batch by a layer that is not fully recomputed (selective
    recompute drops what its modules hold, module_dropped_bytes; without named modules, the
    attention core's, or with the stack's per-op SAC keeps only what per_op_saved_bytes lists),
    less what the plan's offload_modules send to host memory (offloaded_bytes)."""
    saved = saved_activation_bytes(batch, index)
    return saved - offloaded_bytes(batch, index, saved)


def saved_activation_bytes(batch: Batch, index: int) -> np.ndarray:
    """Bytes a layer that is not fully recomputed saves for its backward per micro-batch, in HBM
    or host memory (stored_activation_bytes without offloading)."""
    full = layer_activation_bytes(batch, index)
    per_op = batch.stack.selective_recompute == "per_op"
    modules = selective_modules(batch.tab, per_op)
    kept = np.where(modules != NONE, full - module_dropped_bytes(batch, index, modules), full)
    if per_op:
        return np.where((batch.tab.recompute == 1) & (modules == NONE), per_op_saved_bytes(batch, index), kept)
    return kept


def offloaded_bytes(batch: Batch, index: int, saved: np.ndarray | None = None) -> np.ndarray:
    """Bytes per micro-batch of layer `index` (not fully recomputed) that fine-grained activation
    offloading moves to host memory: the saved inputs of the plan's offload_modules (Megatron-LM
    docs/user-guide/features/fine_grained_activation_offloading.md: 'modules whose inputs are
    offloaded'; terms of layer_activation_bytes). A tensor selective recompute already drops is
    not offloaded (qkv_linear's input with MLA's input norm recomputed; expert_fc1's and moe_act's with
    moe recomputed); capped at what the layer saves (`saved`: saved_activation_bytes; a per-op
    SAC stack saves less)."""
    m, t = batch.model, batch.tab
    column = t.offload
    if not bool(np.any(column != NONE)):
        return np.zeros(len(t))
    on = lambda mod: has_module(column, mod)  # noqa: E731
    T, B, tsp = batch.tokens, batch.training.activation_bytes, batch.sp_divisor
    Bi = gemm_input_bytes(batch)
    per_op = batch.stack.selective_recompute == "per_op"
    recomputed = selective_modules(t, per_op)
    out = np.where(on(OffloadModule.attn_norm), B * T * m.hidden_size / tsp, 0.0)
    out = out + np.where(on(OffloadModule.mlp_norm), B * T * m.hidden_size / tsp, 0.0)
    # layernorm recompute drops the QKV input only where the input norm is a module of its own (MLA)
    input_norm_dropped = has_module(recomputed, RecomputeModule.layernorm) & m.separate_input_norm(index)
    out = out + np.where(on(OffloadModule.qkv_linear) & ~input_norm_dropped, Bi * T * m.hidden_size / tsp, 0.0)
    out = out + np.where(on(OffloadModule.core_attn), qkv_bytes(batch), 0.0)
    out = out + np.where(on(OffloadModule.attn_proj), attention_output_bytes(batch), 0.0)
    if m.is_moe_layer(index):
        mats = 3 if m.gated_mlp else 2
        routed = routed_copies(batch)
        kept = ~has_module(recomputed, RecomputeModule.moe)
        out = out + np.where(on(OffloadModule.expert_fc1) & kept, Bi * routed * m.moe_expert_width, 0.0)
        out = out + np.where(on(OffloadModule.moe_act) & kept, B * routed * (mats - 1) * (m.moe_ffn_hidden_size or 0) / t.etp, 0.0)
    return np.minimum(out, saved_activation_bytes(batch, index) if saved is None else saved)


def module_dropped_bytes(batch: Batch, index: int, modules: np.ndarray | None = None) -> np.ndarray:
    """Bytes per micro-batch that layer `index` does not store when selective recompute runs
    `modules` (a modules_code column; default the plans' recompute_modules; Megatron-Core
    recompute_modules; terms of layer_activation_bytes). core_attn: the score tensors of unfused
    attention, or the fused kernel's fp32 log-sum-exp (its inputs and output are stored by the
    projections); layernorm: the outputs of the norms that are modules of their own
    (ModelSpec.separate_norms: MLA's QKV input, a MoE layer's MLP input); mlp: a dense layer's
    fc1 output(s) and activation output; moe: router
    probabilities, the routed copies and the experts' and shared experts' intermediates (the
    checkpoint keeps the layer input); moe_act: the experts' activation output; shared_experts:
    the shared experts' intermediates; mla_up_proj: MLA's Q, K, V and normed latents (the
    up-projections' outputs and inputs)."""
    m, t = batch.model, batch.tab
    T, B, tsp = batch.tokens, batch.training.activation_bytes, batch.sp_divisor
    Bi = gemm_input_bytes(batch)  # the inputs of linear layers (norm outputs, activation outputs)
    mats = 3 if m.gated_mlp else 2
    column = t.rc_modules if modules is None else modules
    on = lambda mod: has_module(column, mod)  # noqa: E731
    core = 4 * T * m.num_attention_heads / t.tp if batch.training.flash_attention else attention_core_bytes(batch)
    if not m.has_softmax_attention(index):
        core = 0.0  # core_attn names the softmax attention's core; a Gated DeltaNet or Mamba-2 layer has none
    norms = m.separate_norms(index) * Bi * T * m.hidden_size / tsp  # a norm fused into its GEMM stays stored
    out = np.where(on(RecomputeModule.core_attn), core, 0.0) + np.where(on(RecomputeModule.layernorm), norms, 0.0)
    if m.mla is not None and m.has_softmax_attention(index):
        # the checkpoint keeps its inputs (the latents and the RoPE key at the activation width)
        out = out + np.where(on(RecomputeModule.mla_up_proj), qkv_bytes(batch) + mla_normed_latent_bytes(batch), 0.0)
    if m.is_moe_layer(index):
        f_e, f_s = m.moe_ffn_hidden_size or 0, m.moe_shared_expert_ffn_size
        routed = routed_copies(batch)
        shared = (B * (mats - 1) + Bi) * T * f_s / t.tp
        experts = 4 * T * m.num_experts + Bi * routed * m.moe_expert_width + (B * (mats - 1) + Bi) * routed * f_e / t.etp \
            + latent_up_input_bytes(batch)
        out = out + np.where(on(RecomputeModule.moe), experts + shared,
                             np.where(on(RecomputeModule.moe_act), Bi * routed * f_e / t.etp, 0.0)
                             + np.where(on(RecomputeModule.shared_experts), shared, 0.0))
    elif m.has_ffn(index):
        out = out + np.where(on(RecomputeModule.mlp), (B * (mats - 1) + Bi) * T * m.ffn_hidden_size / t.tp, 0.0)
    return out


def per_op_saved_bytes(batch: Batch, index: int) -> np.ndarray:
    """torchtitan per-op SAC keeps the block input, the outputs of the saved matmuls (wq, wv,
    w1, w2), the attention output and its fp32 log-sum-exp (not where the save list lacks the
    attention kernel: sac_reruns_sdpa); a MoE block keeps its dispatched tokens and
    router probabilities (grouped GEMMs are recomputed). Bytes per micro-batch."""
    m, t = batch.model, batch.tab.tp
    T, B, tsp = batch.tokens, batch.training.activation_bytes, batch.sp_divisor
    q = m.num_attention_heads / t * (m.mla.v_head_dim if m.mla else m.head_size)
    v = kv_heads_per_rank(batch) * (m.mla.v_head_dim if m.mla else m.head_size)
    attention_output = 0.0 if sac_reruns_sdpa(batch, index) else B * T * q + 4 * T * m.num_attention_heads / t
    out = B * T * (2 * m.hidden_size / tsp + q + v) + attention_output
    if m.is_moe_layer(index):
        routed = routed_copies(batch)
        return out + B * routed * m.moe_expert_width + 4 * T * m.num_experts
    return out + B * T * m.ffn_hidden_size / t


def recomputed_input_bytes(batch: Batch) -> np.ndarray:
    """Full recompute keeps only each layer's input: 2 s b h (/t with SP), in HBM unless the plan
    offloads it (offload_modules=layer_input)."""
    return checkpoint_input_bytes(batch) - offloaded_input_bytes(batch)


def offloaded_input_bytes(batch: Batch) -> np.ndarray:
    """A fully recomputed layer's checkpointed input when the plan offloads it (layer_input), else 0."""
    return np.where(has_module(batch.tab.offload, OffloadModule.layer_input), checkpoint_input_bytes(batch), 0.0)


def checkpoint_input_bytes(batch: Batch) -> np.ndarray:
    """A fully recomputed layer's checkpointed input, bytes per micro-batch: 2 s b h (/t with SP)."""
    return batch.training.activation_bytes * batch.tokens * batch.model.hidden_size / batch.sp_divisor


def in_flight_microbatches(stage, p, m, v, schedule):
    """Micro-batches whose activations a stage holds at its peak (in units of the stage's
    layers; seed 000 'Конвейерный параллелизм', footnote 7). 1F1B: p - i; interleaved (Megatron
    warm-up): ((p-i-1) 2 + (v-1) p + 1) / v chunks, i.e. p + (p-1)/v on stage 0; GPipe: m;
    ZB-H2: 2 (p - i) - 1; DualPipeV: PP + 1 = 2p + 1 chunks of half a rank's layers, p + 1/2, on
    every rank (DualPipe README table; a V schedule balances memory over the ranks). Capped at m.
    `schedule` is a Schedule or an index into SCHEDULE."""
    code = np.asarray(SCHEDULE.index(schedule) if isinstance(schedule, Schedule) else schedule)
    held = np.select(
        [code == SCHEDULE.index(Schedule.gpipe), code == SCHEDULE.index(Schedule.interleaved), code == SCHEDULE.index(Schedule.zero_bubble),
         code == SCHEDULE.index(Schedule.dualpipev)],
        [np.asarray(m, dtype=float) + 0 * np.asarray(stage), ((p - stage - 1) * 2 + (v - 1) * p + 1) / v, 2.0 * (p - stage) - 1,
         p + 0.5 + 0 * np.asarray(stage, dtype=float)],
        default=np.asarray(p - stage, dtype=float),
    )
    return np.minimum(held, m)


def static_bytes_per_gpu(total_params: float, bytes_per_param: float, shards: int) -> float:
    """Seed 000 'ZeRO: экономия памяти': state bytes / shards (7B x 16 B / 64 = 1.75 GB)."""
    return total_params * bytes_per_param / shards


def kv_cache_bytes(num_layers: int, kv_heads: int, head_dim: int, tokens: int, sequences: int, bytes_per_element: float = 2.0) -> float:
    """Inference KV cache: 2 (K and V) L g d tokens sequences bytes (seed 000 'Асимметрия
    инфраструктуры': 70B GQA, 1024 tokens, 256 prompts -> 85.9 GB)."""
    return 2 * num_layers * kv_heads * head_dim * tokens * sequences * bytes_per_element


def cheap_checkpoints(model) -> tuple[RecomputeModule, ...]:
    """The output-discarding checkpoints (Megatron-Core CheckpointWithoutOutput) a model has,
    each of which drops one output and reruns only a norm, an activation or an up-projection in
    backward: layernorm where a norm is a module of its own (ModelSpec.separate_norms: MLA or
    routed experts), mla_up_proj with MLA (multi_latent_attention.py qkv_up_checkpoint), moe_act
    with routed experts (moe/experts.py activation_checkpoint). Empty for a dense model without MLA."""
    separate = any(model.separate_norms(i) for i in range(model.num_layers))
    return tuple(([RecomputeModule.layernorm] if separate else []) + ([RecomputeModule.moe_act] if model.is_moe else [])
                 + ([RecomputeModule.mla_up_proj] if model.mla is not None else []))
