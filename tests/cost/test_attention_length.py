"""A fused attention kernel's efficiency by the keys each call streams and the causal mask
(profiles/cost/defaults.yaml attention.length_curves; FA3 paper, Shah et al. 2024, arXiv
2407.08608, Fig. 5-6: H100 SXM5, head dim 128, BF16). The model's long-call figures are the
16k non-causal bars, so a causal call over a training sequence runs below them, and ring CP's
later steps are non-causal calls over S / 2cp or S / cp keys."""

from __future__ import annotations

import pytest

from autopar.cost.context import Batch
from autopar.cost.layer import flash_attention_seconds
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import AttentionLengthCurve, load_cost_params
from autopar.specs.plan import Plan
from autopar.specs.training import Stack

MODEL = ModelSpec(name="llama3-8b", num_layers=2, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                  ffn_hidden_size=14336, vocab_size=128256)


def _batch(seq: int, cp: int = 1, model: ModelSpec = MODEL, cluster: str = "dgx-h100") -> Batch:
    nodes = load_cluster(cluster).with_gpus(8)
    tab = PlanTable.from_plans([Plan(tp=1, pp=1, dp=8 // cp, cp=cp, mbs=1, zero=1)], 8)
    training = TrainingSpec(seq_len=seq, global_batch_size=8 // cp, stack=Stack.megatron)  # cuDNN on Hopper
    return Batch(model, nodes, training, load_cost_params(), tab)


def test_causal_call_runs_at_the_figures_causal_bar():
    # 4k causal, cuDNN: Fig. 5 (with causal mask) 518 TFLOP/s forward. Backward: no causal bar;
    # the non-causal 499 times the forward's causal ratio 518 / 609 = 424.4 TFLOP/s.
    flops = 1e12
    fwd, bwd = flash_attention_seconds(_batch(4096), 0, flops)
    assert flops / fwd[0] == pytest.approx(518e12, rel=2e-3)
    assert 2.5 * flops / bwd[0] == pytest.approx(499e12 * 518 / 609, rel=2e-3)
    # at 16k the model's long-call figure (595) falls to the causal bar 539: 9.4% slower
    fwd16, _ = flash_attention_seconds(_batch(16384), 0, flops)
    assert flops / fwd16[0] == pytest.approx(539e12, rel=2e-3)


def test_ring_cp_steps_are_one_causal_and_later_non_causal_calls():
    # S = 32k on CP 4: a rank's 8k tokens in two 4k chunks. Step 0 causal over 8k (529 TFLOP/s,
    # 1/4 of the work); the other 3/4 non-causal, half over 4k keys (609), half over 8k (600).
    flops = 1e12
    fwd, _ = flash_attention_seconds(_batch(32768, cp=4), 0, flops)
    expected = flops * (0.25 / 529e12 + 0.75 * 0.5 * (1 / 609e12 + 1 / 600e12))
    assert fwd[0] == pytest.approx(expected, rel=2e-3)
    # faster per FLOP than one causal call over the whole 32k (the 16k bar, 539): only one step
    # in four carries the mask
    whole, _ = flash_attention_seconds(_batch(32768), 0, flops)
    assert fwd[0] < whole[0]
    assert whole[0] / fwd[0] == pytest.approx((1 / 539) / (0.25 / 529 + 0.375 / 609 + 0.375 / 600), rel=1e-3)


def test_curve_rejects_a_value_per_length_mismatch():
    with pytest.raises(ValueError, match="forward_causal=.*one positive TFLOP/s per keys value"):
        AttentionLengthCurve(keys=[512, 1024], forward=[1, 2], forward_causal=[1], backward=[1, 2])


def _tflops(batch: Batch, flops: float = 1e12) -> tuple[float, float]:
    fwd, bwd = flash_attention_seconds(batch, 0, flops)
    return flops / fwd[0] / 1e12, 2.5 * flops / bwd[0] / 1e12


def test_narrow_heads_run_at_the_head_dim_64_bars_on_hopper():
    # gpt-oss's 64 heads of 64 (attention.head_dim_64_curves, FA3 paper Fig. 5-6 head dim 64
    # panels, cuDNN): 4k causal forward 363 TFLOP/s (518 at head dim 128); backward 417 x 363/408
    oss = MODEL.model_copy(update={"num_attention_heads": 64, "head_dim": 64})
    fwd, bwd = _tflops(_batch(4096, model=oss))
    assert fwd == pytest.approx(363, rel=2e-3)
    assert bwd == pytest.approx(417 * 363 / 408, rel=2e-3)
    # head dim 96 lies log2(96 / 64) = 0.585 of the way to the head-dim-128 bars, the
    # efficiency (so the TFLOP/s) interpolated there: 363 + 0.585 x (518 - 363) = 453.7
    mid = MODEL.model_copy(update={"num_attention_heads": 32, "head_dim": 96})
    w = 0.5849625
    assert _tflops(_batch(4096, model=mid))[0] == pytest.approx(363 + w * (518 - 363), rel=2e-3)
    # wider heads keep the head-dim-128 bars (no wider panel is used): head dim 256 as 128
    wide = MODEL.model_copy(update={"num_attention_heads": 16, "head_dim": 256})
    assert _tflops(_batch(4096, model=wide))[0] == pytest.approx(518, rel=2e-3)


def test_narrow_heads_keep_the_head_dim_128_shape_on_ampere():
    # A100: 312 TFLOP/s of matmul over 2.4 TFLOP/s of exponentials is 128 FLOPs per exponential,
    # below head dim 64's 4 d = 256 per score, so no narrow-head slowdown: the same time per FLOP
    # at head dim 64 as at 128 (FA2 on Ampere under Megatron, its length and mask shape only)
    oss = MODEL.model_copy(update={"num_attention_heads": 64, "head_dim": 64})
    narrow, wide = _tflops(_batch(4096, model=oss, cluster="dgx-a100")), _tflops(_batch(4096, cluster="dgx-a100"))
    assert narrow == pytest.approx(wide, rel=1e-12)


def test_mla_runs_at_its_query_key_width():
    # DeepSeek-V3's MLA: 128 heads over hidden 7168 is 56 per head, but the kernel runs Q, K at
    # 128 + 64 = 192 (Megatron stores them as MHA at that width): the head-dim-128 bars, 518
    v3 = load_model("deepseek-v3")
    assert v3.hidden_size // v3.num_attention_heads == 56 and v3.attention_head_dim == 192
    fwd, _ = _tflops(_batch(4096, model=v3.model_copy(update={"num_layers": 4})))
    assert fwd == pytest.approx(518, rel=2e-3)
