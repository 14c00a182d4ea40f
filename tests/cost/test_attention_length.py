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
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import AttentionLengthCurve, load_cost_params
from autopar.specs.plan import Plan
from autopar.specs.training import Stack

MODEL = ModelSpec(name="llama3-8b", num_layers=2, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                  ffn_hidden_size=14336, vocab_size=128256)


def _batch(seq: int, cp: int = 1) -> Batch:
    cluster = load_cluster("dgx-h100").with_gpus(8)
    tab = PlanTable.from_plans([Plan(tp=1, pp=1, dp=8 // cp, cp=cp, mbs=1, zero=1)], 8)
    training = TrainingSpec(seq_len=seq, global_batch_size=8 // cp, stack=Stack.megatron)  # cuDNN on Hopper
    return Batch(MODEL, cluster, training, load_cost_params(), tab)


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
