"""Gated DeltaNet (linear-attention) layers, as Qwen3-Next mixes them with softmax attention (three
of every four layers): parameters and FLOPs as Megatron-LM counts them, the chunked kernels'
HBM traffic, the saved activations, the TP x CP head split and the ModelZoo row that states such layers. Hand numbers for Qwen3-Next-80B-A3B's shape: hidden 2048,
16 key heads x 128, 32 value heads x 128, convolution 4 (profiles/models/qwen3-next-80b-a3b.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autopar.cost.context import Batch
from autopar.cost.flops import attention_core_flops_per_token, layer_gemms, layer_params, total_params
from autopar.cost.layer import linear_attention_seconds
from autopar.cost.memory import layer_activation_bytes
from autopar.cost.rules import plan_violations
from autopar.cost.table import PlanTable
from autopar.errors import InputError
from autopar.specs import TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan
from autopar.validation.rows import not_modelled, row_model

NEXT = "qwen3-next-80b-a3b"
DATA = Path(__file__).resolve().parents[1] / "data"


def test_layer_pattern_and_shape_from_the_hf_config():
    m = load_model(NEXT)
    # full_attention_interval 4: layers 3, 7, ..., 47 are softmax attention, the other 36 linear
    assert len(m.linear_attention_layers) == 36
    assert not m.is_linear_attention_layer(3) and m.is_linear_attention_layer(0) and m.is_linear_attention_layer(46)
    assert m.attention_output_gate
    la = m.linear_attention
    assert (la.qk_dim, la.v_dim, la.in_proj_width, la.conv_width) == (2048, 4096, 12352, 8192)
    # the model card's "80B in total": 79.67B counted (embedding and output 2 x 151936 x 2048 included)
    assert total_params(m) == pytest.approx(80e9, rel=0.01)


def test_gdn_params_and_flops_match_megatron():
    m = load_model(NEXT)
    # in_proj 2048 x 12352 + conv 4 x 8192 + A_log, dt_bias 2 x 32 + gated norm 128 + out 4096 x 2048
    mixer = 2048 * 12352 + 4 * 8192 + 64 + 128 + 4096 * 2048
    assert mixer == 33_718_464
    moe_part = layer_params(m, 3)[0] - (2048 * 256 * 16 * 2 + 2 * 2048 * 256 * 2 + 256 * 16 * 2048)  # layer 3: softmax attention
    assert layer_params(m, 0)[0] - mixer == pytest.approx(moe_part)  # same MoE, norms in both
    # Megatron-LM training.py gdn_layer_flops per token: 2 (h in_proj + K conv + 4 n_v d_v^2 + h v_dim)
    megatron = 2 * (2048 * 12352 + 4 * 8192 + 32 * 128 ** 2 * 4 + 2048 * 4096)
    assert megatron == 71_630_848
    gemm = sum(g.flops for g in layer_gemms(m, 0, 1.0, 1, 1, 1) if g.name.startswith("linear/"))
    core = attention_core_flops_per_token(m, 0, 4096, causal=True)
    assert gemm + core == pytest.approx(megatron, rel=1e-12)
    # the recurrence costs the same per token at any length and with or without the causal convention
    assert attention_core_flops_per_token(m, 0, 65536, causal=False) == core


def test_gated_attention_query_projection():
    m = load_model(NEXT)
    qkv = next(g for g in layer_gemms(m, 3, 1.0, 1, 1, 1) if g.name == "attention/qkv")
    # query 16 x 256, its gate 16 x 256, K and V 2 x 2 x 256
    assert qkv.n == 16 * 256 * 2 + 2 * 2 * 256


def _batch(tp: int = 1, cp: int = 1, seq: int = 4096) -> Batch:
    m, cluster = load_model(NEXT), load_cluster("dgx-h100").with_gpus(128)
    plan = Plan(tp=tp, pp=1, dp=128 // (tp * cp), cp=cp, ep=8, mbs=1)
    return Batch(m, cluster, TrainingSpec(seq_len=seq, global_batch_size=1024), load_cost_params(), PlanTable.from_plans([plan], 128))


def test_chunked_kernel_traffic_by_hand():
    b = _batch()
    fwd, bwd = linear_attention_seconds(b)
    # per value head and token, forward: 2 B x (6 x 128 + 6 x 128 + 2 x 128 x 128 / 64) + fp32 A 4 x 64
    head = 2 * (6 * 128 + 6 * 128 + 2 * 256) + 4 * 64
    assert head == 4352
    # around it: convolution 4 B x 8192 channels, Q/K L2 norms 4 B x 4096, gated norm 6 B x 4096
    per_token = 32 * head + 4 * 8192 + 4 * 2 * 2048 + 6 * 4096
    assert per_token == 212_992
    assert float(fwd[0]) == pytest.approx(b.hbm_seconds(per_token * 4096), rel=1e-12)
    # backward: key 21, value 16, state 4 widths, A read twice; around it twice the forward's bytes
    head_bwd = 2 * (21 * 128 + 16 * 128 + 4 * 256) + 4 * 2 * 64
    assert float(bwd[0]) == pytest.approx(b.hbm_seconds((32 * head_bwd + 2 * (per_token - 32 * head)) * 4096), rel=1e-12)
    # TP splits the heads: half the traffic per GPU at tp=2
    assert float(linear_attention_seconds(_batch(tp=2))[0][0]) == pytest.approx(float(fwd[0]) / 2, rel=1e-12)


def test_saved_activations_by_hand():
    b = _batch()
    gdn, softmax = float(layer_activation_bytes(b, 0)[0]), float(layer_activation_bytes(b, 3)[0])
    # the mixer's part per token (bf16): in_proj out 12352, conv out 8192, Q, K at 32 heads x 128 x 2,
    # output 4096, fp32 A 4 x 32 x 64, out_proj input 4096
    mixer = 2 * (12352 + 8192 + 2 * 32 * 128 + 4096) + 4 * 32 * 64 + 2 * 4096
    assert mixer == 82_048
    # the softmax layer's: Q 4096, its gate rides in the projection (not saved separately), K, V 2 x 512,
    # output 4096, fp32 log-sum-exp 4 x 16
    attention = 2 * (4096 + 2 * 512) + 2 * 4096 + 4 * 16
    assert gdn - softmax == pytest.approx((mixer - attention) * 4096, rel=1e-12)


def test_heads_split_over_tp_and_cp():
    m, cluster = load_model(NEXT), load_cluster("dgx-h100").with_gpus(128)
    training = TrainingSpec(seq_len=8192, global_batch_size=256)
    bad = plan_violations(m, cluster, training, Plan(tp=4, pp=1, dp=4, cp=8, ep=8, mbs=1, cp_algo="ring"))
    assert any("linear_attention.num_key_heads=16" in msg for _, _, msg in bad)
    assert not plan_violations(m, cluster, training, Plan(tp=2, pp=1, dp=8, cp=8, ep=8, mbs=1, cp_algo="ring"))


def test_modelzoo_row_is_modelled_with_the_preset_shape():
    rows = json.loads((DATA / "moe_runs.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    row = next(r for r in rows if r["id"] == "new-modelzoo-qwen3next-80b-h100")
    assert not_modelled(row) is None
    m = row_model(row)
    assert m.linear_attention == load_model(NEXT).linear_attention and len(m.linear_attention_layers) == 36
    # a row that states Gated DeltaNet layers for a model without a preset names the missing fact
    with pytest.raises(InputError) as info:
        row_model({**row, "model_name": "Some-Hybrid-7B"})
    assert "model_name" in str(info.value)
    # the row's own dims plus the preset's GDN shape give the preset's 79,674,286,848 parameters
    assert total_params(m) == total_params(load_model(NEXT)) == 79_674_286_848
