"""QK norm (Qwen3, OLMo-2, Llama-4; MLA's latent norms) is one more norm kernel per layer over the
query and key elements a rank holds: read 2 + write 2 bytes each in the forward, twice that in
the backward, as the layer's two other norms are counted (autopar.cost.layer.qk_norm_width)."""

from __future__ import annotations

import numpy as np
import pytest

from autopar.cost.context import Batch
from autopar.cost.layer import layer_forward, qk_norm_width
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan

# Qwen3-style GQA: 32 heads x 128 on a 2,048 width, 4 KV heads
GQA = ModelSpec(name="m", num_layers=2, hidden_size=2048, num_attention_heads=32, num_kv_heads=4, head_dim=128,
                ffn_hidden_size=6144, vocab_size=151936)


def _batch(model: ModelSpec, tp: int) -> Batch:
    cluster = load_cluster("dgx-h100").with_gpus(8)
    plan = Plan(tp=tp, pp=1, dp=8 // tp)
    return Batch(model, cluster, TrainingSpec(seq_len=4096, global_batch_size=64), load_cost_params(),
                 PlanTable.from_plans([plan], 8))


@pytest.mark.parametrize("tp, width", [
    (1, 32 * 128 + 4 * 128),          # every query and KV head: 4,608
    (8, 32 * 128 / 8 + 4 * 128 / 4),  # 4 query heads; 4 KV heads replicated over tp 8, one per rank: 640
])
def test_qk_norm_bytes_by_hand(tp, width):
    normed, plain = _batch(GQA.model_copy(update={"qk_layernorm": True}), tp), _batch(GQA, tp)
    assert float(np.ravel(qk_norm_width(normed, no_softmax=False))[0]) == pytest.approx(width)
    f, g = layer_forward(normed, 0), layer_forward(plain, 0)
    tokens = 4096  # one micro-batch of one sequence
    fwd = normed.hbm_seconds(4 * tokens * width)  # read 2 + write 2 bytes per element
    assert float(f["elem"][0] - g["elem"][0]) == pytest.approx(fwd, rel=1e-9)
    assert float(f["elem_bwd"][0] - g["elem_bwd"][0]) == pytest.approx(2 * fwd, rel=1e-9)


def test_mla_norms_its_latents_whole():
    """DeepSeek-V3's q_a_layernorm and kv_a_layernorm run on the 1,536 + 512 latent elements of
    each token, on every TP rank (the down projections are not split)."""
    b = _batch(load_model("deepseek-v3").model_copy(update={"num_layers": 4, "moe_first_k_dense_layers": 4}), 8)
    assert qk_norm_width(b, no_softmax=False) == 1536 + 512
    assert qk_norm_width(b, no_softmax=True) == 0.0
