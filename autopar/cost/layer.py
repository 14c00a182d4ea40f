"""Per-layer, per-micro-batch times of one GPU (docs/design.md 'Compute time', 'Per-strategy
traffic'), one value per plan of a Batch. A layer is dense or MoE, with global or local
attention (ModelSpec.layer_kind); every layer of a kind costs the same."""

from __future__ import annotations

import numpy as np

from autopar.cost.comm import Collective, sm_slowdown
from autopar.cost.context import Batch, sac_reruns_sdpa
from autopar.cost.flops import activation_message_bytes, attention_core_flops_per_token, layer_gemms, projection_shares
from autopar.cost.gemm import gemm_seconds
from autopar.cost.memory import attention_kv_bytes, attention_kv_elements, mla_latent_widths, qkv_bytes, query_elements
from autopar.cost.moe import (dispatch_seconds, expert_load_factor, local_experts, moe_elementwise_bytes, overlap_exposed, routed_tokens,
                              sort_permutations)
from autopar.cost.table import CP_ALGO, vmap
from autopar.specs.plan import CpAlgo
from autopar.specs.training import Fp8Recipe, Stack

RING, ULYSSES, HYBRID = (CP_ALGO.index(a) for a in (CpAlgo.ring, CpAlgo.ulysses, CpAlgo.hybrid))


def gemm_time(batch: Batch, m, n, k, dtype: str) -> np.ndarray:
    gpu, params = batch.cluster.gpu, batch.params
    return vmap(lambda a, b, c: gemm_seconds(a, b, c, dtype, gpu, params), m, n, k)


def layer_forward(batch: Batch, index: int) -> dict[str, np.ndarray]:
    """Forward seconds (and FLOPs) of layer `index` for one micro-batch on one GPU."""
    m, t, tr, prm = batch.model, batch.tab, batch.training, batch.params
    dtype, T, B = tr.precision.gemm_dtype, batch.tokens, tr.activation_bytes
    load = expert_load_factor(batch)
    moe_tokens = routed_tokens(T, t.tp, t.etp, t.sp == 1)
    gemms = layer_gemms(m, index, T, t.tp, t.ep, t.etp, load, moe_tokens)
    # a stack without fused input projections runs one narrower GEMM per linear layer
    shares = [projection_shares(g.name, m) if batch.stack.separate_projections else (1.0,) for g in gemms]
    times = [sum(gemm_time(batch, g.m, g.n * s, g.k, dtype) for s in sh) * g.count for g, sh in zip(gemms, shares)]
    out = {"gemm": sum(times)}
    # the routed experts' GEMMs: what the host issues after a MoE layer's token-count sync (layer_parts)
    out["gemm_experts"] = sum((tm for g, tm in zip(gemms, times) if g.name.startswith("moe/experts")), np.zeros(len(t)))
    # FLOPs executed by the mean rank: the routed experts' GEMMs are costed at the most-loaded
    # rank's `load` x share (the step waits for it), but the other ranks do less, not idle work
    flops = [g.flops / load if g.name.startswith("moe/experts") else g.flops for g in gemms]
    out["gemm_flops"] = sum(flops)
    # forward GEMM seconds and FLOPs of the submodules selective recompute may name (RecomputeModule)
    # (mla_up: what MLA's up-projection checkpoint reruns, the full-rank Q projection included)
    for key, of in (("mlp", lambda n: n.startswith("mlp/")), ("moe", lambda n: n.startswith("moe/")),
                    ("shared", lambda n: n.startswith("moe/shared")), ("mla_up", lambda n: n in MLA_UP_GEMMS)):
        out[f"gemm_{key}"] = sum((tm for g, tm in zip(gemms, times) if of(g.name)), np.zeros(len(t)))
        out[f"flops_{key}"] = sum((fl for g, fl in zip(gemms, flops) if of(g.name)), 0.0)
    # fp8/fp4 GEMMs cast their bf16 inputs (forward: activations M x K; backward: output
    # gradients M x N): memory-bound work on top of the GEMM (Transformer Engine)
    cast = prm.memory.low_precision_cast_bytes_per_element if dtype in ("fp8", "fp4") else 0.0
    cast_bytes = cast * sum((g.m * g.k + g.m * g.n) * g.count for g in gemms)
    cast_fwd, cast_bwd = cast_bytes / 3, 2 * cast_bytes / 3  # fwd + bwd share the casts
    if dtype == "fp8" and tr.fp8_scaling == Fp8Recipe.rowwise:  # profiles/cost/defaults.yaml memory.rowwise_*
        rw, fw = prm.memory.rowwise_cast_bytes_per_element, prm.memory.rowwise_forward_cast_bytes_per_element
        rescale = prm.memory.rowwise_rescale_bytes_per_element
        cast_fwd = sum((fw.input * g.m * g.k + fw.weight * g.k * g.n + fw.grad_output * g.m * g.n) * g.count for g in gemms)
        cast_bwd = sum(((rw.input - fw.input) * g.m * g.k + (rw.weight - fw.weight) * g.k * g.n
                        + (rw.grad_output - fw.grad_output) * g.m * g.n + rescale * (g.m * g.k + g.k * g.n)) * g.count for g in gemms)
    out["attn_flops"] = attention_core_flops_per_token(m, index, tr.seq_len, causal=tr.flash_attention) * T / t.tp
    # FLOPs as counted for HFU: attention non-causal, the convention of model FLOPs (MFU)
    out["attn_flops_counted"] = attention_core_flops_per_token(m, index, tr.seq_len, causal=False) * T / t.tp
    linear = m.is_linear_attention_layer(index)
    softmax = m.has_softmax_attention(index)
    if not m.has_mixer(index):  # a hybrid MLP or MoE layer
        out["attn"] = out["attn_bwd"] = np.zeros(len(t))
    elif m.is_mamba_layer(index):  # Mamba-2: the SSD scan's memory-bound chunked kernels
        out["attn"], out["attn_bwd"] = mamba_seconds(batch, out["attn_flops"])
    elif linear:  # Gated DeltaNet: memory-bound chunked kernels, whatever the stack's attention kernel
        out["attn"], out["attn_bwd"] = linear_attention_seconds(batch)
    elif tr.flash_attention:  # the stack's fused kernel; backward work is 2.5x the forward's
        out["attn"], out["attn_bwd"] = flash_attention_seconds(batch, index, out["attn_flops"])
    else:  # batched GEMMs over the whole score matrix plus a memory-bound softmax
        per_head = 2 * gemm_time(batch, T, tr.seq_len, m.head_size, batch.cluster.gpu.half_dtype)
        scores = m.num_attention_heads / t.tp * T * tr.seq_len
        out["attn"] = per_head * m.num_attention_heads / t.tp + batch.hbm_seconds(scores * prm.attention.unfused_extra_bytes_per_score)
        out["attn_bwd"] = 2.5 * out["attn"]
    if m.is_moe_layer(index):  # routed activations per token of T (moe_tokens k copies over T)
        f_act = moe_tokens / T * m.moe_top_k * load * (m.moe_ffn_hidden_size or 0) / t.etp + m.moe_shared_expert_ffn_size / t.tp
    else:
        f_act = m.ffn_hidden_size / t.tp if m.has_ffn(index) else 0.0
    # the per-hidden count is of a transformer layer's two blocks (a norm, a residual add and the
    # buffers around each); a hybrid layer holds one block, so half of it
    blocks = m.layer_norms(index)
    elem_bytes = prm.memory.elementwise_bytes_per_token_per_hidden * blocks / 2 * T * m.hidden_size / batch.sp_divisor + 3 * B * T * f_act
    # QK norm: one more norm kernel over each query and key element, read and written once in
    # the forward like the layer's two norms (the per-hidden count above has those two only)
    elem_bytes = elem_bytes + 2 * B * T * qk_norm_width(batch, not softmax)
    # element-wise forward work of the recomputable submodules: the norms recompute_modules
    # 'layernorm' reruns, the ones not fused into a GEMM (ModelSpec.separate_norms; read and write
    # T h each), the activation function (3 B per F element as above), the MoE router and permutes
    out["norm_elem"] = batch.hbm_seconds(m.separate_norms(index) * 2 * B * T * m.hidden_size / batch.sp_divisor)
    # MLA's up-projection checkpoint also reruns the latent norms (read and write each latent)
    # and RoPE with the concatenation that writes Q and K whole (read and write once)
    latent, _ = mla_latent_widths(batch)
    qk_width = 2 * m.num_attention_heads / t.tp * m.head_size if m.mla is not None and softmax else 0.0
    out["mla_up_elem"] = batch.hbm_seconds(2 * B * T * (latent / batch.sp_divisor + qk_width))
    out["act_elem"] = batch.hbm_seconds(3 * B * T * f_act)
    if m.is_moe_layer(index):
        routed_f = moe_tokens / T * m.moe_top_k * load * (m.moe_ffn_hidden_size or 0) / t.etp
        clamp_fwd, clamp_bwd = (b * T * routed_f for b in _eager_clamped_glu_bytes(batch))
        out["moe_act_elem"] = batch.hbm_seconds(3 * B * T * routed_f + clamp_fwd)
        moe_bytes = moe_elementwise_bytes(m, moe_tokens, load, B, sort_permutations(m, t.ep, t.dispatcher))
        out["moe_elem"] = batch.hbm_seconds(moe_bytes + clamp_fwd) + out["act_elem"]
        elem_bytes = elem_bytes + moe_bytes
    else:
        out["moe_act_elem"] = out["moe_elem"] = np.zeros(len(t))
        clamp_fwd = clamp_bwd = 0.0
    if batch.stack.elementwise == "eager":
        extra_fwd, extra_bwd = _eager_extra_bytes(batch, f_act, index)
    elif batch.stack.rope_complex_fallback:
        extra_fwd, extra_bwd = (b * batch.tokens for b in _eager_rope_per_token(batch, index))
    else:
        extra_fwd, extra_bwd = 0.0, 0.0
    out["elem"] = batch.hbm_seconds(elem_bytes + extra_fwd + cast_fwd + clamp_fwd)
    out["elem_bwd"] = batch.hbm_seconds(2 * elem_bytes + extra_bwd + cast_bwd + clamp_bwd + input_gradient_sum_bytes(batch, gemms, shares))
    out["sac_gemm"] = sum(tm * per_op_recomputed(g.name, m, dtype) for g, tm in zip(gemms, times))
    # one AllReduce (SP: AllGather + ReduceScatter) around each block with TP-split weights: the
    # mixer and the MLP; a MoE block without shared experts has none (see _tp_seconds)
    pairs = int(m.has_mixer(index)) + int(m.has_ffn(index) and not (m.is_moe_layer(index) and not m.moe_shared_expert_ffn_size))
    out["tp"], out["tp_bwd"], out["sac_tp"] = _tp_seconds(batch, pairs)
    sm_fwd, sm_bwd = _userbuffers_sm_seconds(batch, gemms, times)
    out["tp"], out["tp_bwd"] = out["tp"] + sm_fwd, out["tp_bwd"] + sm_bwd
    if not softmax:
        out["cp"] = out["cp_bwd"] = recurrent_cp_seconds(batch, index)
        out["cp_merge"] = out["cp_merge_bwd"] = np.zeros(len(t))
    else:
        out["cp"], out["cp_bwd"] = _cp_exposed(batch, out["attn"], out["attn_bwd"])
        out["cp_merge"], out["cp_merge_bwd"] = torch_cp_merge_seconds(batch)
    if m.is_moe_layer(index):  # dispatch and combine, forward (the backward moves the same)
        out["ep"] = 2 * dispatch_seconds(batch, moe_tokens, load)
    else:
        out["ep"] = np.zeros(len(t))
    return out


def moe_host_parts(batch: Batch, index: int) -> tuple[np.ndarray, np.ndarray]:
    """moe_host_seconds in its two parts: the layer's own ops, and the per-expert GEMM
    submissions (zero where the stack groups them)."""
    m, t, prm = batch.model, batch.tab, batch.params.moe
    zero = np.zeros(len(t))
    if not m.is_moe_layer(index):
        return zero, zero
    per_expert = local_experts(m, t.ep) if batch.stack.expert_gemm_launches == "per_expert" else zero
    return zero + prm.host_layer_forward_seconds, prm.host_expert_forward_seconds * per_expert


def moe_host_seconds(batch: Batch, index: int) -> np.ndarray:
    """Host seconds to issue one MoE layer's forward for one micro-batch: the layer's own ops, and
    two GEMM submissions per local expert where the stack submits one GEMM per expert
    (StackSpec.expert_gemm_launches; profiles/cost/defaults.yaml moe.host_*). Zero for a layer
    without routed experts: a dense layer does not block the host, which runs ahead."""
    layer, experts = moe_host_parts(batch, index)
    return layer + experts


def input_gradient_sum_bytes(batch: Batch, gemms: list, shares: list[tuple[float, ...]]) -> np.ndarray:
    """Backward HBM bytes of summing the input gradients of p separate linear layers that read
    one input (StackSpec.separate_projections; a fused GEMM's dgrad writes the sum itself).
    Eager autograd accumulates them pairwise (torch/csrc/autograd/input_buffer.cpp
    InputBuffer::accumulate: add in place or out of place, read 2 and write 1 per element):
    3 (p - 1) element transfers. Compiled, Inductor sums them in one pointwise kernel (read p,
    write 1) before a collective or an index op it cannot fuse with (the TP ReduceScatter, the
    experts' unpermute), or folds the sum into the norm's backward reduction that reads the
    gradient anyway (p - 1 more reads) when nothing stands between them (TP 1)."""
    t, B = batch.tab, batch.training.activation_bytes
    eager = batch.stack.elementwise == "eager"
    total = np.zeros(len(t))
    for g, sh in zip(gemms, shares):
        p = len(sh)
        if p == 1:
            continue
        folded = (t.tp == 1) & (g.name != "moe/experts_fc1")
        transfers = 3.0 * (p - 1) if eager else np.where(folded, p - 1.0, p + 1.0)
        total = total + transfers * B * g.m * g.k * g.count
    return total


# the GEMMs of an MLA layer's up-projection checkpoint (Megatron-Core qkv_up_proj_and_rope_apply)
MLA_UP_GEMMS = ("attention/q", "attention/q_up", "attention/kv_up")

# the GEMMs Transformer Engine's userbuffers overlap with the 'pipeline' method (forward, row
# parallel, ReduceScatter after) and the 'bulk' method (backward dgrad and wgrad of the column
# parallel GEMMs, beside their ReduceScatter / AllGather)
USERBUFFERS_PIPELINE = ("attention/out", "linear/out", "mamba/out", "mlp/fc2", "moe/shared_fc2")
USERBUFFERS_BULK = ("attention/qkv", "linear/in_proj", "mamba/in_proj", "mlp/fc1", "moe/shared_fc1")


def _userbuffers_sm_seconds(batch: Batch, gemms, times) -> tuple[np.ndarray, np.ndarray]:
    """GEMM seconds lost to the SMs TE's TP-overlap kernels hold (forward, backward): a GEMM
    overlapped by the 'pipeline' or 'bulk' method launches with an SM margin of
    comm.userbuffers_sms (TE initialize_ub: num_sm 16, set_sm_margin), so it runs at
    (SMs - margin) / SMs of its speed; backward runs a dgrad and a wgrad the forward GEMM's size."""
    t = batch.tab
    zero = np.zeros(len(t))
    if batch.stack.tp_overlap != "userbuffers":
        return zero, zero
    on = (t.tp_overlap == 1) & (t.tp > 1)
    slow = sm_slowdown(batch.params.comm.userbuffers_sms, batch.cluster.gpu.num_sms) * on
    of = lambda names: sum((tm for g, tm in zip(gemms, times) if g.name in names), zero)  # noqa: E731
    return slow * of(USERBUFFERS_PIPELINE), slow * 2 * of(USERBUFFERS_BULK)


def qk_norm_width(batch: Batch, no_softmax: bool):
    """Elements per token the QK norms of one layer touch on a rank (ModelSpec.qk_layernorm:
    Qwen3, OLMo-2, Llama-4 per head; MLA's norms on the Q and KV latents): the query and key heads
    this TP rank holds (KV heads replicated when fewer than TP), MLA's latents whole (its down
    projections are not split over TP); none without QK norm or in a layer without softmax
    attention (a linear-attention layer's Q/K L2 norms linear_attention_seconds counts)."""
    m, t = batch.model, batch.tab
    if not m.qk_layernorm or no_softmax:
        return 0.0
    if m.mla is not None:
        return float((m.mla.q_lora_rank or 0) + m.mla.kv_lora_rank)
    return m.num_attention_heads * m.head_size / t.tp + m.kv_heads * m.head_size / np.minimum(t.tp, m.kv_heads)


def _rope_widths(batch: Batch, index: int) -> tuple[float, float]:
    """Query and key widths per token on this TP rank that RoPE touches (0, 0 without softmax attention)."""
    m, t = batch.model, batch.tab
    if not m.has_softmax_attention(index):
        return 0.0, 0.0
    return m.num_attention_heads * m.head_size / t.tp, m.kv_heads * m.head_size / np.minimum(t.tp, m.kv_heads)


def _eager_rope_per_token(batch: Batch, index: int) -> tuple[np.ndarray | float, np.ndarray | float]:
    """HBM bytes per token [forward, backward] that eager RoPE moves beyond a fused kernel
    (memory.eager_extra_bytes.rope on the query and key heads): eager stacks, and fused ones whose
    RoPE the compiler leaves to eager kernels (StackSpec.rope_complex_fallback: torchtitan's
    apply_rotary_emb casts Q and K to fp32, multiplies them as complex numbers (view_as_complex)
    and casts back, torchtitan@9dec370 torchtitan/models/llama/model.py L108-109, the same in
    models/common/rope.py today; Inductor generates no code for complex operators)."""
    if batch.model.position_embedding != "rope":
        return 0.0, 0.0
    q, k = _rope_widths(batch, index)
    x = batch.params.memory.eager_extra_bytes.rope
    return x[0] * (q + k), x[1] * (q + k)


def _eager_clamped_glu_bytes(batch: Batch) -> tuple[float, float]:
    """HBM bytes per routed expert F element [forward, backward] of the eager clamps and
    concatenation Megatron-Core runs around gpt-oss's clamped GLU before its fused grouped MLP
    (TrainingSpec.fused_clamped_glu; memory.eager_extra_bytes.clamped_glu); zero for a model
    without a clamp, on other stacks and where the GLU is fused."""
    tr = batch.training
    if batch.model.swiglu_limit is None or tr.stack != Stack.megatron or tr.fused_clamped_glu:
        return 0.0, 0.0
    return batch.params.memory.eager_extra_bytes.clamped_glu


def _eager_extra_bytes(batch: Batch, f_act, index: int) -> tuple[np.ndarray, np.ndarray]:
    """HBM bytes that eager element-wise kernels move beyond fused ones, per micro-batch layer
    [forward, backward]: the norms (h per token, sequence-sharded with SP) and the QK norms, RoPE on the query
    and key heads, the gated product's F elements, the attention output's layout copy
    (profiles/cost/defaults.yaml memory.eager_extra_bytes). A layer without softmax attention has
    no RoPE and no softmax-attention output (its own kernels: linear_attention_seconds)."""
    m, T, x = batch.model, batch.tokens, batch.params.memory.eager_extra_bytes
    no_softmax = not m.has_softmax_attention(index)
    q, _ = _rope_widths(batch, index)
    gated = 1.0 if m.gated_mlp else 0.0
    rope = _eager_rope_per_token(batch, index)
    out = []
    for i in (0, 1):
        per_token = x.norm[i] * (m.layer_norms(index) * m.hidden_size / batch.sp_divisor + qk_norm_width(batch, no_softmax)) \
            + rope[i] + gated * x.activation[i] * f_act + x.attention_layout[i] * q
        out.append(per_token * T)
    return out[0], out[1]


# torchtitan per-op SAC saves every other aten.mm of a block in forward order (wq, wk, wv, wo,
# w1, w3, w2 for a gated MLP): wk, wo and w3 are recomputed -- 36.5% of Llama-3 8B's linear
# FLOPs; float8 linears run aten._scaled_mm, which no save list names, so all are recomputed;
# grouped expert GEMMs (aten._grouped_mm) likewise (torchtitan@3f20451b parallelize_llama.py
# L214-286). Fractions per GEMM of our layer_gemms split.
def per_op_recomputed(name: str, model, dtype: str) -> float:
    """Share of a forward GEMM's work per-op SAC recomputes in backward."""
    if dtype in ("fp8", "fp4") or name.startswith("moe/experts"):
        return 1.0
    if name == "attention/qkv":
        a, g = model.num_attention_heads, model.kv_heads
        return g / (a + 2 * g)  # wk of [wq | wk | wv]
    if name.startswith("attention/"):
        return 1.0 if name == "attention/out" else 0.5  # MLA projections: every other one
    if name in ("mlp/fc1", "moe/shared_fc1"):
        return 0.5 if model.gated_mlp else 0.0  # w3 of [w1 | w3]
    if name in ("mlp/fc2", "moe/shared_fc2"):
        return 0.0 if model.gated_mlp else 1.0
    return 0.0


def _tp_seconds(batch: Batch, pairs: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`pairs` AllReduce (SP: AllGather + ReduceScatter pairs) of B T h per layer forward (two in
    a transformer layer, one per block with TP-split weights), as many
    backward (seed 000 'Тензорный параллелизм'): exposed seconds (forward, backward, and the
    forward AllGathers per-op SAC runs again in backward), partly hidden with TP overlap.
    Transformer Engine's userbuffers overlap both passes; PyTorch's async TP (Inductor
    micro-pipeline TP) shows its gain in the forward only: up to 29% / 20% forward-pass speedup
    but ~8% end to end on Llama3 7B / 70B (the PyTorch dev-discuss post 'Introducing Async
    Tensor Parallelism in PyTorch', 2024), the forward's share of the step."""
    t, prm, tr = batch.tab, batch.params, batch.training
    message = activation_message_bytes(batch.tokens, batch.model.hidden_size, tr.activation_bytes)
    group = batch.group("tp")
    # tensorwise FP8 gathers the 1-byte cast forward (StackSpec fp8_tp_gathers_fp8); the backward's
    # gathers and scatters carry bf16 gradients
    fp8_gather = batch.stack.fp8_tp_gathers_fp8 and tr.precision.gemm_dtype == "fp8" and tr.fp8_scaling == Fp8Recipe.tensorwise
    gathered = message / tr.activation_bytes if fp8_gather else message
    gather = batch.collective(Collective.all_gather, message, group)
    gather_fwd = batch.collective(Collective.all_gather, gathered, group) if fp8_gather else gather
    scatter = batch.collective(Collective.reduce_scatter, message, group)
    allreduce = batch.collective(Collective.all_reduce, message, group)
    # a MoE layer without shared experts has no TP collective around its MLP half: the router and
    # the dispatch work on each rank's sequence shard, and expert TP gathers what the dispatch
    # brought (autopar.cost.moe.dispatch_seconds; Megatron MoEAlltoAllTokenDispatcher)
    fwd = pairs * np.where(t.sp == 1, gather_fwd + scatter, allreduce)
    bwd = pairs * np.where(t.sp == 1, gather + scatter, allreduce)
    hidden = np.where(t.tp_overlap == 1, prm.comm.tp_overlap, 0.0)
    backward_hidden = hidden if batch.stack.tp_overlap != "async_tp" else 0.0
    # a stack whose SP shards dim 1 of [b, s, h] copies the whole gathered tensor after each
    # AllGather and the whole input before each ReduceScatter (read + write, StackSpec
    # sequence_dim_copies): memory work on the compute stream, not hidden by overlap
    gather_copies = copies_fwd = copies_bwd = 0.0
    if batch.stack.sequence_dim_copies:
        on = (t.sp == 1) & (t.tp > 1)
        gather_copies = np.where(on, pairs * batch.hbm_seconds(2 * gathered), 0.0)
        copies_fwd = gather_copies + np.where(on, pairs * batch.hbm_seconds(2 * message), 0.0)
        copies_bwd = np.where(on, pairs * batch.hbm_seconds(4 * message), 0.0)
    # torchtitan's per-op SAC saves the outputs of mm, SDPA, reduce_scatter_tensor and max, not
    # all_gather_into_tensor (torchtitan@3f20451b parallelize_llama.py _save_list): recomputing
    # the block in backward gathers each SP input again (with its dim-1 copy) before the
    # recomputed matmuls that read it; Inductor's async TP fuses the recomputed gather-matmul as
    # it does the forward's (same exposed share)
    regather = np.where(t.sp == 1, pairs * gather_fwd * (1 - hidden), 0.0) + gather_copies
    return fwd * (1 - hidden) + copies_fwd, bwd * (1 - backward_hidden) + copies_bwd, regather


def linear_attention_seconds(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of a Gated DeltaNet mixer's kernels on one micro-batch: the
    chunked delta rule's HBM traffic per value head on this TP rank (heads split across TP as
    Megatron-Core's GDN splits them) and the convolution, Q/K L2 norms and gated output norm
    around it (profiles/cost/defaults.yaml attention.linear_attention; memory-bound, see there)."""
    la, p, t = batch.model.linear_attention, batch.params.attention.linear_attention, batch.tab
    state = la.key_head_dim * la.value_head_dim / p.chunk_tokens

    def moved(i: int) -> np.ndarray:
        per_head = p.element_bytes * (p.key_elements[i] * la.key_head_dim + p.value_elements[i] * la.value_head_dim
                                      + p.state_elements[i] * state) + 4.0 * p.chunk_matrix_fp32[i] * p.chunk_tokens
        around = p.conv_bytes[i] * la.conv_width + p.l2norm_bytes[i] * 2 * la.qk_dim + p.gated_norm_bytes[i] * la.v_dim
        return batch.tokens * (la.num_value_heads * per_head + around) / t.tp

    return batch.hbm_seconds(moved(0)), batch.hbm_seconds(moved(1))


def recurrent_cp_seconds(batch: Batch, index: int) -> np.ndarray:
    """Seconds of a recurrent mixer's CP exchange, each pass: the recurrence needs the whole
    sequence, so Megatron-Core trades sequence shards for head shards before it (a2a_cp_to_hp on
    the in-projection's output) and back after (the output), two AllToAll on the CP group, not
    overlapped (megatron/core/ssm/gated_delta_net; mamba_context_parallel.py for Mamba-2). A
    layer without a mixer exchanges nothing."""
    m, t, B = batch.model, batch.tab, batch.training.activation_bytes
    if m.is_mamba_layer(index):
        widths = (m.mamba.in_proj_width, m.mamba.inner_dim)
    elif m.is_linear_attention_layer(index):
        widths = (m.linear_attention.in_proj_width, m.linear_attention.v_dim)
    else:
        return np.zeros(len(t))
    group = batch.group("cp")
    inbound = batch.collective(Collective.all_to_all, B * batch.tokens * widths[0] / t.tp, group)
    outbound = batch.collective(Collective.all_to_all, B * batch.tokens * widths[1] / t.tp, group)
    return np.where(t.cp > 1, inbound + outbound, 0.0)


def mamba_seconds(batch: Batch, flops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of a Mamba-2 mixer's kernels on one micro-batch: the causal
    convolution, the SSD chunked scan and the gated RMSNorm (mamba_ssm ssd_combined.py and
    Megatron-Core's mem-efficient path, profiles/cost/defaults.yaml attention.mamba), heads and
    groups split across TP as Megatron-Core's MambaMixer splits them. Each pass takes the longer
    of its HBM traffic and its state products (`flops`, forward; backward twice) at the 16-bit peak."""
    mb, p, t = batch.model.mamba, batch.params.attention.mamba, batch.tab
    states = mb.head_dim * mb.state_dim / mb.chunk_tokens
    peak = batch.cluster.gpu.peak_flops_per_second(batch.cluster.gpu.half_dtype)

    def moved(i: int) -> np.ndarray:
        per_head = p.element_bytes * (p.head_elements[i] * mb.head_dim + p.state_elements[i] * mb.state_dim) \
            + 4.0 * (p.chunk_state_fp32[i] * states + p.chunk_matrix_fp32[i] * mb.chunk_tokens)
        around = p.conv_bytes[i] * mb.conv_width + p.gated_norm_bytes[i] * mb.inner_dim
        return batch.tokens * (mb.num_heads * per_head + around) / t.tp

    return np.maximum(batch.hbm_seconds(moved(0)), flops / peak), np.maximum(batch.hbm_seconds(moved(1)), 2 * flops / peak)


def flash_attention_seconds(batch: Batch, index: int, flops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of the stack's fused attention kernel on `flops` forward
    FLOPs (causal count; backward work 2.5x). Its efficiency is the kernel's long-call figure
    scaled by the keys each call streams per query and the causal mask (profiles/cost/defaults.yaml
    attention.length_curves, FA3 paper Fig. 5-6), and by the query/key head dim (head_dim_64_curves:
    a narrower head does less matrix work per score). Without CP, or with Ulysses (whole sequences
    per head group), one causal call over the sequence. Ring CP with load balancing (Transformer
    Engine's AttnFuncWithCPAndKVP2P; PyTorch's _templated_ring_attention) holds two chunks of
    c = S / 2cp per rank: the first step is one causal call over the local 2c tokens, every later
    step a non-causal call of the same work (1/cp each), half with all 2c queries against an
    earlier rank's first chunk (c keys), half with the second chunk's c queries against a later
    rank's 2c keys. A sliding-window layer's calls stream at most the window."""
    m, t, tr = batch.model, batch.tab, batch.training
    arch = batch.cluster.gpu.architecture
    kernel = batch.attention_kernel
    e_fwd, e_bwd = batch.params.attention.efficiency(kernel, arch, batch.cluster.gpu.compute_capability)
    attention, head_dim = batch.params.attention, m.attention_head_dim
    peak = batch.cluster.gpu.peak_flops_per_second(batch.cluster.gpu.half_dtype)
    window = m.attention_window if m.is_local_attention_layer(index) else tr.seq_len
    cp = np.where(ring_context_parallel(batch), t.cp, 1)
    local = np.minimum(tr.seq_len / cp, window)  # the causal call's keys: the whole sequence, or a rank's 2c

    def seconds_per_flop(keys, causal: bool) -> tuple[np.ndarray, np.ndarray]:
        fwd, bwd = attention.relative(kernel, arch, keys, causal, head_dim)
        return 1.0 / (peak * e_fwd * fwd), 2.5 / (peak * e_bwd * bwd)

    diag_f, diag_b = seconds_per_flop(local, True)
    short_f, short_b = seconds_per_flop(local / 2, False)
    long_f, long_b = seconds_per_flop(local, False)
    later = (cp - 1) / cp
    fwd = diag_f / cp + later * (short_f + long_f) / 2
    bwd = diag_b / cp + later * (short_b + long_b) / 2
    return flops * fwd, flops * bwd


def ring_context_parallel(batch: Batch) -> np.ndarray:
    """Whether each plan's CP passes K, V around a ring (ring, or hybrid across nodes) rather
    than running Ulysses' AllToAll."""
    t = batch.tab
    return (t.cp_algo == RING) | ((t.cp_algo == HYBRID) & (batch.group("cp").nodes > 1))


def cp_comm_seconds(batch: Batch) -> np.ndarray:
    """Forward CP traffic of one layer (seed 000 'Параллелизм по контексту: Ring Attention
    против Ulysses'): ring passes the local K, V chunk cp - 1 times; Ulysses runs two AllToAll
    (q, k, v in; output back); hybrid is Ulysses inside a node and ring across nodes."""
    t, B = batch.tab, batch.training.activation_bytes
    group = batch.group("cp")
    ring = (t.cp - 1) * batch.collective(Collective.send_recv, attention_kv_bytes(batch), batch.neighbour(group))
    out = B * query_elements(batch)
    ulysses = batch.collective(Collective.all_to_all, qkv_bytes(batch), group) + batch.collective(Collective.all_to_all, out, group)
    use_ring = ring_context_parallel(batch)
    return np.where(t.cp > 1, np.where(use_ring, ring, ulysses), 0.0), use_ring


def _cp_exposed(batch: Batch, attn_seconds: np.ndarray, attn_bwd_seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exposed CP seconds (forward, backward). Ring passes hide behind the attention of the
    chunk in hand when S/cp >= FLOP/s / link bandwidth; the backward moves K, V and their
    gradients (2x) behind the backward attention work."""
    comm, use_ring = cp_comm_seconds(batch)
    if batch.stack.torch_context_parallel:
        return _torch_cp_exposed(batch, attn_seconds, attn_bwd_seconds, use_ring, comm)
    fwd = np.where(use_ring, np.maximum(0.0, comm - attn_seconds), comm)
    bwd = np.where(use_ring, np.maximum(0.0, 2 * comm - attn_bwd_seconds), comm)
    return fwd, bwd


def _torch_cp_exposed(batch: Batch, attn_seconds: np.ndarray, attn_bwd_seconds: np.ndarray,
                      use_ring: np.ndarray, ulysses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's context_parallel (torch/distributed/tensor/experimental/_attention.py, the
    default rotate_method ALL_GATHER; torchtitan's context_parallel_rotate_method 'allgather'):
    the forward all-gathers every rank's K, V once, issued with the first block and waited
    before the second, so only the first of the cp load-balanced blocks (1/cp of the work) hides
    it; the backward gathers K, V again the same way and passes the fp32 dK, dV one hop per
    block, each exchange waited after the next block's kernel and the last one after the loop."""
    t, group = batch.tab, batch.group("cp")
    kv = attention_kv_bytes(batch)
    gather = batch.collective(Collective.all_gather, t.cp * kv, group)
    grads = batch.collective(Collective.send_recv, 2 * kv, batch.neighbour(group))  # fp32: twice the bf16 bytes
    block, block_bwd = attn_seconds / t.cp, attn_bwd_seconds / t.cp
    fwd = np.maximum(0.0, gather - block)
    bwd = np.maximum(0.0, gather - block_bwd) + (t.cp - 1) * np.maximum(0.0, grads - block_bwd) + grads
    on = t.cp > 1
    return np.where(on, np.where(use_ring, fwd, ulysses), 0.0), np.where(on, np.where(use_ring, bwd, ulysses), 0.0)


def torch_cp_merge_seconds(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of PyTorch ring attention's eager fp32 merges and gradient
    accumulations (profiles/cost/defaults.yaml attention.torch_cp_bytes): memory-bound kernels
    on the compute stream, zero for other stacks and without CP."""
    t = batch.tab
    if not batch.stack.torch_context_parallel:
        zero = np.zeros(len(t))
        return zero, zero
    nb = batch.params.attention.torch_cp_bytes
    out_elems, kv_elems = query_elements(batch), attention_kv_elements(batch)
    steps, on = t.cp - 1, t.cp > 1

    def seconds(per_out: tuple[float, float], per_kv: tuple[float, float]) -> np.ndarray:
        moved = (per_out[0] * steps + per_out[1]) * out_elems + (per_kv[0] * steps + per_kv[1]) * kv_elems
        return np.where(on, batch.hbm_seconds(moved), 0.0)

    return seconds(nb.forward_output, nb.forward_kv), seconds(nb.backward_query, nb.backward_kv)


def layer_parts(batch: Batch, index: int, alone=None) -> dict[str, np.ndarray]:
    """Per-micro-batch seconds of one layer by breakdown part (forward + backward), plus the
    pieces recompute and the pipeline need. `alone`: the share of passes whose EP AllToAll
    nothing hides under ep_overlap (default Batch.ep_unpaired); the parts are linear in it."""
    f = layer_forward(batch, index)
    w = batch.wgrad
    # EP dispatch and combine run forward and backward; with ep_overlap (Megatron 1F1B A2A
    # overlap, DualPipe) another micro-batch's compute of this layer hides them, but while they
    # run the dispatch kernels hold SMs the compute loses (autopar.cost.moe.overlap_exposed);
    # the warmup and cooldown passes have no partner (Batch.ep_unpaired)
    merge, merge_bwd = f["cp_merge"], f["cp_merge_bwd"]
    alone = batch.ep_unpaired if alone is None else alone
    paired = (1 - alone) * _paired_ep_exposed(batch, f, w) + alone * 2 * f["ep"]
    ep_exposed = np.where(batch.tab.ep_overlap == 1, paired, 2 * f["ep"])
    f["ep"] = ep_exposed / 2
    layer_fwd = f["gemm"] + f["attn"] + f["elem"] + merge + f["tp"] + f["cp"] + f["ep"]
    layer_bwd = (1 + w) * f["gemm"] + f["elem_bwd"] + merge_bwd + 2 * (f["tp_bwd"] + f["ep"]) + f["attn_bwd"] + f["cp_bwd"]
    # a MoE layer blocks the host at its token-count sync (moe_host_seconds): where issuing the
    # layer's kernels takes the host longer than the GPU needs to run them, the GPU waits; the
    # backward issues twice the forward's ops (input and weight gradients) and has no sync.
    # In the forward the sync splits the layer in two segments run one after the other: after
    # it the host issues the dispatch, the per-expert GEMMs and the combine while the GPU,
    # drained by the sync, runs them as they arrive; only then the rest of the layer (norms,
    # attention, router up to the next layer's sync). The host time of one segment cannot hide
    # under the GPU time of the other (the GPU has nothing queued), so each segment takes the
    # longer of its host and GPU times (a queue fed by a slower producer finishes with it)
    host_layer, host_experts = moe_host_parts(batch, index)
    experts_gpu = f["gemm_experts"] + f["ep"] + f["moe_elem"]
    rest_gpu = np.maximum(layer_fwd - experts_gpu, 0.0)
    host_fwd = np.maximum(host_experts - experts_gpu, 0.0) + np.maximum(host_layer - rest_gpu, 0.0)
    host_bwd = np.maximum(2 * (host_layer + host_experts) - layer_bwd, 0.0)
    return {
        "compute_gemm": (2 + w) * f["gemm"],
        "compute_attention": f["attn"] + f["attn_bwd"],
        # with PyTorch CP the ring attention's fp32 merges (torch_cp_merge_seconds)
        "compute_elementwise": f["elem"] + f["elem_bwd"] + merge + merge_bwd,
        "tp_comm": f["tp"] + f["tp_bwd"],
        "cp_comm": f["cp"] + f["cp_bwd"],
        "ep_comm": 2 * f["ep"],
        "host_launch": host_fwd + host_bwd,
        "fwd": layer_fwd + host_fwd,
        "bwd": layer_bwd + host_bwd,
        "flops": (2 + w) * f["gemm_flops"] + 3 * f["attn_flops_counted"],
        "fwd_flops": f["gemm_flops"] + f["attn_flops_counted"],
        # per-op SAC (torchtitan): the recomputed GEMMs, every element-wise forward kernel and
        # the SP AllGathers (not in its save list); the attention forward where the list lacks
        # the kernel that ran (Batch.sac_reruns_attention)
        "sac": f["sac_gemm"] + f["elem"] + f["sac_tp"] + (f["attn"] if sac_reruns_sdpa(batch, index) else 0.0),
        # forward seconds (and FLOPs) each RecomputeModule adds when selective recompute names it
        # (Megatron-Core recompute_modules): the module's forward runs again in backward; 'moe'
        # reruns the router, the permutes, the dispatch and combine collectives and the experts
        **module_recompute_parts(f, batch.model.is_moe_layer(index), not batch.model.has_softmax_attention(index)),
    }


def _paired_ep_exposed(batch: Batch, f: dict[str, np.ndarray], w: float) -> np.ndarray:
    """Exposed seconds of a layer's four EP AllToAlls (forward dispatch and combine, and their
    backward twins) when a forward and another micro-batch's backward of the layer run paired.
    Megatron-Core's combined 1F1B (megatron/core/models/common/model_chunk_schedule_plan.py
    schedule_layer_1f1b) puts each AllToAll on the communication stream beside one compute node
    of the other micro-batch, not beside the whole layer: backward combine | forward attention
    block; forward dispatch | backward MLP (dgrad); backward dispatch | forward MLP and the
    backward MLP's weight gradients (mlp.dw); forward combine | backward attention block and its
    weight gradients (attn.dw, the next layer's pre_backward). DualPipe pairs the same components
    of a forward and a backward chunk (DeepSeek-V3 report, arXiv 2412.19437, Fig. 4). Each
    AllToAll outlasts its partner alone; the hidden part still costs the SMs the dispatch kernels
    hold (overlap_exposed)."""
    one = f["ep"] / 2  # one AllToAll: dispatch and combine move the same tokens
    moe_gemm = f["gemm_moe"] + f["gemm_mlp"]
    attn_gemm = f["gemm"] - moe_gemm
    moe_share = np.divide(f["moe_elem"], f["elem"], out=np.zeros_like(f["elem"]), where=f["elem"] > 0)
    attn_fwd = attn_gemm + f["attn"] + f["elem"] - f["moe_elem"] + f["cp_merge"] + f["tp"]
    attn_bwd = (1 + w) * attn_gemm + f["attn_bwd"] + (1 - moe_share) * f["elem_bwd"] + f["cp_merge_bwd"] + f["tp_bwd"]
    mlp_fwd = moe_gemm + f["moe_elem"]
    mlp_dgrad = moe_gemm + moe_share * f["elem_bwd"]
    partners = (attn_fwd, mlp_dgrad, mlp_fwd + w * moe_gemm, attn_bwd)
    return sum(overlap_exposed(batch, one, partner) for partner in partners)


def module_recompute_parts(f: dict[str, np.ndarray], moe_layer: bool, no_softmax: bool) -> dict[str, np.ndarray]:
    zero = np.zeros_like(f["gemm"])
    # core_attn names the softmax attention's core: a layer without one (Gated DeltaNet, Mamba-2,
    # a hybrid MLP layer) reruns nothing for it (and saves nothing: memory.module_dropped_bytes)
    core = zero if no_softmax else f["attn"] + f["cp"] + f["cp_merge"]
    return {
        "rc_core_attn": core, "rcf_core_attn": zero + (0.0 if no_softmax else f["attn_flops_counted"]),
        "rc_layernorm": f["norm_elem"], "rcf_layernorm": zero,
        "rc_mlp": zero if moe_layer else f["gemm_mlp"] + f["act_elem"], "rcf_mlp": zero + (0.0 if moe_layer else f["flops_mlp"]),
        "rc_moe": f["gemm_moe"] + f["moe_elem"] + f["ep"] if moe_layer else zero, "rcf_moe": zero + (f["flops_moe"] if moe_layer else 0.0),
        "rc_moe_act": f["moe_act_elem"], "rcf_moe_act": zero,
        "rc_shared_experts": f["gemm_shared"] if moe_layer else zero, "rcf_shared_experts": zero + (f["flops_shared"] if moe_layer else 0.0),
        # MLA: the Q (or full-rank Q) and KV up-projections, the latent norms and RoPE (none
        # without MLA or softmax attention: gemm_mla_up and mla_up_elem are 0 there)
        "rc_mla_up_proj": f["gemm_mla_up"] + f["mla_up_elem"], "rcf_mla_up_proj": zero + f["flops_mla_up"],
    }
