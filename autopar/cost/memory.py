"""Memory per GPU for each pipeline stage (DESIGN.md 'Memory'; seed 000 'ZeRO: экономия
памяти'; Korthikanti et al. 2022 'Reducing Activation Recomputation', section 4).

Activations are derived tensor by tensor, so GQA, gated MLPs, MoE, flash attention, dropout,
SP and CP change the constant 34 of s b h (34 + 5 a s / h) the way they change the tensors.
Legend: T tokens of a micro-batch on this GPU, h hidden, a heads, g KV heads, d head dim,
F FFN width, t tp, B bytes per activation element.
"""

from __future__ import annotations

from autopar.cost.flops import embedding_params, layer_params
from autopar.cost.pipeline import in_flight_microbatches
from autopar.cost.setup import Setup
from autopar.specs.plan import Recompute


def layer_activation_bytes(s: Setup, index: int, flash: bool) -> float:
    """Bytes one micro-batch leaves stored by layer `index` with no recomputation."""
    m, p = s.model, s.plan
    T, B, t, tsp = s.tokens_per_microbatch, s.training.activation_bytes, p.tp, s.sp_divisor
    h, a, d = m.hidden_size, m.num_attention_heads, m.head_size
    kv_per_rank = max(m.kv_heads, t) / t  # KV heads are replicated when g < tp
    d_v = m.mla.v_head_dim if m.mla else d
    drop = 1.0 if m.dropout else 0.0
    total = 0.0
    # attention block: norm input, QKV input, Q, K, V, output-projection input, dropout mask
    total += 2 * B * T * h / tsp
    total += B * T * (a / t * d + 2 * kv_per_rank * d)
    total += B * T * a / t * d_v
    total += drop * T * h / tsp
    if flash:
        total += 4 * T * a / t  # fp32 softmax log-sum-exp per query and head
    else:
        # softmax output B a T s (+ dropout mask and output: 3 more bytes per score)
        total += (B + 3 * drop) * a / t * T * s.training.seq_len
    # MLP block: norm input, MLP input, dropout mask
    total += 2 * B * T * h / tsp + drop * T * h / tsp
    mats = 3 if m.gated_mlp else 2
    if m.is_moe_layer(index):
        k, f_e, et = m.moe_top_k, m.moe_ffn_hidden_size or 0, p.expert_tp
        routed = T * k  # balanced routing: tokens x k rows arrive at this GPU's experts
        total += 4 * T * m.num_experts  # fp32 router probabilities
        total += B * routed * h + B * routed * (mats - 1) * f_e / et + B * routed * f_e / et
        if m.moe_shared_expert_ffn_size:
            total += B * T * (mats - 1) * m.moe_shared_expert_ffn_size / t + B * T * m.moe_shared_expert_ffn_size / t
    else:
        f = m.ffn_hidden_size
        total += B * T * (mats - 1) * f / t + B * T * f / t  # fc1 output(s) and activation output
    return total


def attention_core_bytes(s: Setup) -> float:
    """The part selective recompute drops: the score tensors (absent with flash kernels)."""
    m = s.model
    drop = 1.0 if m.dropout else 0.0
    return (s.training.activation_bytes + 3 * drop) * m.num_attention_heads / s.plan.tp * s.tokens_per_microbatch * s.training.seq_len


def stored_activation_bytes(s: Setup, index: int, flash: bool, recomputed: bool) -> float:
    """Bytes kept per micro-batch by one layer under the plan's recompute mode."""
    if recomputed:  # full recompute keeps only the layer input
        return s.training.activation_bytes * s.tokens_per_microbatch * s.model.hidden_size / s.sp_divisor
    full = layer_activation_bytes(s, index, flash)
    if s.plan.recompute == Recompute.selective and not flash:
        return full - attention_core_bytes(s)
    return full


def recomputed_layers(s: Setup, stage: int) -> int:
    if s.plan.recompute != Recompute.full:
        return 0
    n = s.stage_layers[stage]
    return n if s.plan.recompute_num_layers is None else min(n, s.plan.recompute_num_layers)


def stage_params(s: Setup, stage: int) -> tuple[float, float]:
    """(dense params, routed-expert params) held by one GPU of `stage`."""
    m, p = s.model, s.plan
    dense = routed = 0.0
    for i in s.stage_layer_indices[stage]:
        dl, rl = layer_params(m, i)
        dense += dl
        routed += rl
    dense /= p.tp
    routed /= p.ep * p.expert_tp
    if stage == 0:
        dense += embedding_params(m) / p.tp
    if stage == p.pp - 1 and (not m.tied_embeddings or p.pp > 1):
        dense += embedding_params(m) / p.tp
    return dense, routed


def memory_breakdown(s: Setup, stage: int, flash: bool) -> dict[str, float]:
    """Bytes per GPU on `stage` by component; the parts sum to the total."""
    tr, p, mem = s.training, s.plan, s.params.memory
    dense, routed = stage_params(s, stage)
    shard_dense, shard_routed = s.zero_shard, max(1, s.expert_dp)

    def sharded(from_stage: int, bytes_per: float) -> float:
        on = p.zero >= from_stage
        return bytes_per * (dense / (shard_dense if on else 1) + routed / (shard_routed if on else 1))

    trained = 0.0 if tr.frozen_weights else 1.0  # LoRA: adapters' state is negligible
    out: dict[str, float] = {
        "weights": sharded(3, tr.weight_bytes_per_param),
        "gradients": trained * sharded(2, tr.grad_bytes_per_param),
        "optimizer_states": trained * sharded(1, tr.optimizer_bytes_per_param),
    }
    layers = list(s.stage_layer_indices[stage])
    n_recomputed = recomputed_layers(s, stage)
    per_mb = sum(stored_activation_bytes(s, i, flash, k < n_recomputed) for k, i in enumerate(layers))
    held = in_flight_microbatches(stage, p.pp, s.num_microbatches, p.vpp, s.schedule)
    out["activations"] = per_mb * held
    working = 0.0
    if n_recomputed and layers:  # one layer's full activations rebuilt during its backward
        working += layer_activation_bytes(s, layers[0], flash)
    if stage == p.pp - 1:  # logits in bf16 and fp32 for the loss, one micro-batch
        working += 6 * s.tokens_per_microbatch * s.model.vocab_size / p.tp
    if p.zero == 3 and layers:  # two layers' gathered weights (current + prefetch)
        dl, rl = layer_params(s.model, layers[0])
        working += 2 * tr.weight_bytes_per_param * (dl / p.tp + rl / (p.ep * p.expert_tp))
    out["working_buffers"] = working
    allocated = sum(out.values())
    out["fragmentation"] = allocated * mem.fragmentation
    out["framework_reserve"] = mem.reserve_bytes
    return out


def static_bytes_per_gpu(total_params: float, bytes_per_param: float, shards: int) -> float:
    """Seed 000 'ZeRO: экономия памяти': state bytes / shards (7B x 16 B / 64 = 1.75 GB)."""
    return total_params * bytes_per_param / shards


def kv_cache_bytes(num_layers: int, kv_heads: int, head_dim: int, tokens: int, sequences: int, bytes_per_element: float = 2.0) -> float:
    """Inference KV cache: 2 (K and V) L g d tokens sequences bytes (seed 000 'Асимметрия
    инфраструктуры': 70B GQA, 1024 tokens, 256 prompts -> 85.9 GB)."""
    return 2 * num_layers * kv_heads * head_dim * tokens * sequences * bytes_per_element

