"""Sliding-window and chunked attention (gpt-oss, Mistral-7B v0.1, Gemma-2/3, Llama-4): a local
layer scores only the keys its span lets a query see. Hand calculations in each test."""

from __future__ import annotations

import pytest

from autopar.cost.context import Batch
from autopar.cost.flops import model_flops_per_token
from autopar.cost.layer import layer_forward
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan

# gpt-oss-120b's attention (64 heads of 64, 8 KV heads), dense here to isolate attention;
# window 128 on even layers, odd layers global
GLOBAL = ModelSpec(name="oss-like", num_layers=4, hidden_size=2880, num_attention_heads=64, num_kv_heads=8, head_dim=64,
                   ffn_hidden_size=2880, vocab_size=201088)
LOCAL = GLOBAL.model_copy(update={"attention_window": 128, "global_attention_layers": (1, 3)})
SEQ = 4096


def test_keys_per_query():
    # causal sliding window: query i sees min(i, W) keys: mean W - W^2 / 2s = 128 - 2 = 126
    assert LOCAL.attention_keys_per_query(0, SEQ, causal=True) == pytest.approx(126.0)
    assert LOCAL.attention_keys_per_query(1, SEQ, causal=True) == pytest.approx(2048.0)  # global: s / 2
    assert LOCAL.attention_keys_per_query(0, SEQ, causal=False) == 128.0  # counted: the window
    assert LOCAL.attention_keys_per_query(0, 64, causal=True) == 32.0  # window beyond the sequence: global
    chunked = GLOBAL.model_copy(update={"attention_window": 1024, "attention_chunked": True})
    assert chunked.attention_keys_per_query(2, SEQ, causal=True) == 512.0  # causal within a chunk: C / 2


def test_model_flops_count_the_window():
    # 2 local layers x 4 a d (16384 FLOPs per key) x (4096 - 128) keys fewer, x 3 (forward + backward)
    fewer = 3 * 2 * 4 * 64 * 64 * (SEQ - 128)
    assert model_flops_per_token(GLOBAL, SEQ) - model_flops_per_token(LOCAL, SEQ) == pytest.approx(fewer, rel=1e-12)


def test_local_layer_attention_time_scales_with_its_keys():
    cluster = load_cluster("dgx-h100").with_gpus(8)
    tab = PlanTable.from_plans([Plan(tp=1, pp=1, dp=8, mbs=1)], 8)
    b = Batch(LOCAL, cluster, TrainingSpec(seq_len=SEQ, global_batch_size=8), load_cost_params(), tab)
    local, glob = layer_forward(b, 0), layer_forward(b, 1)
    # the flash kernel's time follows its FLOPs, 126 / 2048 keys per query, over its efficiency at the
    # keys a call streams (cuDNN on Hopper, FA3 paper Fig. 5-6, head dim 64 panels as gpt-oss's heads:
    # attention.head_dim_64_curves): the window's calls at the shortest bar (512, causal 225), the
    # global layer's at 4k (causal 363); backward 266 x 225/335 against 417 x 363/408
    assert local["attn"][0] / glob["attn"][0] == pytest.approx(126 / 2048 * 363 / 225, rel=1e-9)
    assert local["attn_bwd"][0] / glob["attn_bwd"][0] == pytest.approx(126 / 2048 * (417 * 363 / 408) / (266 * 225 / 335), rel=1e-9)
    assert local["gemm"][0] == pytest.approx(glob["gemm"][0], rel=1e-12)  # projections unchanged


def test_window_needs_a_span():
    with pytest.raises(ValueError, match="need attention_window"):
        ModelSpec(**{**GLOBAL.model_dump(), "global_attention_layers": (1,)})
    with pytest.raises(ValueError, match=r"global_attention_layers=\[9\]"):
        ModelSpec(**{**GLOBAL.model_dump(), "attention_window": 128, "global_attention_layers": (9,)})
