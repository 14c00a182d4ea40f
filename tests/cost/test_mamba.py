"""Hybrid Mamba-2 models (Nemotron-H: one block per layer from hybrid_override_pattern, M Mamba-2,
* attention, - MLP, E MoE): shape from the HF config, parameters against the model cards, FLOPs
as Megatron-LM counts them (training.py mamba_layer_flops), the SSD kernels' HBM traffic, the saved
activations, the TP x CP split of heads and groups, validation rows and the emitters' refusal.
Hand numbers for Nemotron-H-56B-Base-8K: hidden 8192, 256 Mamba heads x 64, state 256, 8 groups,
convolution 4 (profiles/models/nemotron-h-56b.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autopar.cost.context import Batch
from autopar.cost.flops import (active_params_per_token, attention_core_flops_per_token, layer_gemms, layer_params,
                                mamba_params, total_params)
from autopar.cost.layer import layer_forward, mamba_seconds
from autopar.cost.memory import layer_activation_bytes
from autopar.cost.rules import plan_violations
from autopar.cost.table import PlanTable
from autopar.errors import InputError
from autopar.specs import TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import load_cost_params
from autopar.specs.model import load_model as load_any
from autopar.specs.plan import Plan
from autopar.validation.rows import not_modelled, row_model

H56 = "nemotron-h-56b"
NANO = "nemotron-3-nano-30b-a3b"
PRESETS = Path(__file__).resolve().parents[2] / "profiles" / "models"


def test_pattern_and_shape_from_the_hf_config():
    m = load_model(H56)
    p = m.hybrid_layer_pattern
    # NVIDIA's Nemotron-H blog: "54 Mamba-2, 54 MLP, and 10 Self-Attention layers"
    assert (len(p), p.count("M"), p.count("-"), p.count("*")) == (118, 54, 54, 10)
    assert m.is_mamba_layer(0) and not m.has_ffn(0) and m.has_ffn(1) and not m.has_mixer(1)
    mb = m.mamba
    assert (mb.inner_dim, mb.in_proj_width, mb.conv_width) == (16384, 2 * 16384 + 2 * 8 * 256 + 256, 16384 + 2 * 8 * 256)
    # squared-ReLU MLP (two matrices), no position embedding in the attention layers
    assert (m.gated_mlp, m.activation, m.position_embedding, m.head_size) == (False, "relu2", "none", 128)


def test_params_match_the_model_cards():
    m = load_model(H56)
    # in_proj 8192 x 37120 + conv (4 + bias) x 20480 + dt_bias, A_log, D 3 x 256 + norm 16384 + out 16384 x 8192
    assert mamba_params(m) == 8192 * 37120 + 5 * 20480 + 768 + 16384 + 16384 * 8192 == 438_424_320
    # one block and one norm per hybrid layer: an MLP layer is 2 x 8192 x 32768 + 8192
    assert layer_params(m, 1) == (2 * 8192 * 32768 + 8192, 0.0)
    # NGC card: "This model has 56B model parameters"
    assert total_params(m) == pytest.approx(56e9, rel=0.01)
    # Nemotron-H-8B card: 8B (8.10B counted: 24 Mamba-2, 24 MLP, 4 attention layers)
    assert total_params(load_model("nemotron-h-8b")) == pytest.approx(8.1e9, rel=0.01)
    nano = load_model(NANO)
    # Nemotron 3 Nano card: 31.6B total, 3.2B active (3.6B with embeddings)
    assert total_params(nano) == pytest.approx(31.6e9, rel=0.01)
    assert active_params_per_token(nano) - nano.vocab_size * nano.hidden_size == pytest.approx(2.9e9, rel=0.05)


def test_mamba_flops_match_megatron():
    m = load_model(H56)
    # Megatron-LM training.py mamba_layer_flops per token: 2 h (2 d_in + 2 G N + H) + 7 d_in N + 2 d_in h, d_in = 2h
    megatron = 2 * 8192 * (2 * 16384 + 2 * 8 * 256 + 256) + 7 * 16384 * 256 + 2 * 16384 * 8192
    assert megatron == 905_969_664
    gemm = sum(g.flops for g in layer_gemms(m, 0, 1.0, 1, 1, 1))
    core = attention_core_flops_per_token(m, 0, 8192, causal=True)
    conv = 2 * 4 * 20480  # the causal convolution, which Megatron does not count
    assert gemm + core - conv == pytest.approx(megatron, rel=1e-12)
    # an MLP layer has no mixer, a Mamba layer no MLP
    assert {g.name for g in layer_gemms(m, 1, 1.0, 1, 1, 1)} == {"mlp/fc1", "mlp/fc2"}
    assert attention_core_flops_per_token(m, 1, 8192, causal=True) == 0.0
    assert {g.name for g in layer_gemms(m, 0, 1.0, 1, 1, 1)} == {"mamba/in_proj", "mamba/out"}


def _batch(tp: int = 8, cp: int = 1, seq: int = 8192, tp_overlap: bool | None = None) -> Batch:
    m, cluster = load_model(H56), load_cluster("dgx-h100").with_gpus(64)
    plan = Plan(tp=tp, pp=1, dp=64 // (tp * cp), cp=cp, mbs=1, tp_overlap=tp_overlap)
    return Batch(m, cluster, TrainingSpec(seq_len=seq, global_batch_size=192), load_cost_params(), PlanTable.from_plans([plan], 64))


def test_ssd_kernel_traffic_by_hand():
    b = _batch()
    flops = np.asarray([(7 * 16384 * 256 + 2 * 4 * 20480) * 8192 / 8])
    fwd, bwd = mamba_seconds(b, flops)
    # per head and token, forward: 2 B x (6 x 64 + 2 x 256) + fp32 (3 chunk-state passes x 64 x 256 / 128 + 128)
    head = 2 * (6 * 64 + 2 * 256) + 4 * (3 * 128 + 128)
    assert head == 3840
    # around the scan: convolution 4 B x 20480 channels, gated norm 6 B x 16384; all split over tp 8
    per_token = (256 * head + 4 * 20480 + 6 * 16384) / 8
    assert per_token == 145_408
    assert float(fwd[0]) == pytest.approx(b.hbm_seconds(per_token * 8192), rel=1e-12)
    # ~22 FLOP/B: memory-bound on H100 (the roofline's longer leg is the traffic)
    assert float(flops[0]) / b.cluster.gpu.peak_flops_per_second("bf16") < float(fwd[0])
    head_bwd = 2 * (14 * 64 + 8 * 256) + 4 * (6 * 128 + 4 * 128)
    assert float(bwd[0]) == pytest.approx(b.hbm_seconds((256 * head_bwd + 8 * 20480 + 12 * 16384) / 8 * 8192), rel=1e-12)
    # and the layer uses it as its mixer time
    assert float(layer_forward(b, 0)["attn"][0]) == pytest.approx(float(fwd[0]), rel=1e-12)


def test_one_tp_collective_pair_per_hybrid_layer():
    b = _batch(tp_overlap=False)  # without the overlap's SM share, which follows each layer's GEMMs
    mamba, mlp = layer_forward(b, 0), layer_forward(b, 1)
    m = b.model
    # a transformer layer has two AllGather + ReduceScatter pairs; a hybrid layer one. The Mamba
    # and MLP layers move the same B T h messages, so the same exposed seconds
    assert float(mamba["tp"][0]) == pytest.approx(float(mlp["tp"][0]), rel=1e-12)
    dense = b.model.model_copy(update={"hybrid_layer_pattern": None, "mamba": None})
    both = layer_forward(Batch(dense, b.cluster, b.training, b.params, b.tab), 0)
    assert float(both["tp"][0]) == pytest.approx(2 * float(mlp["tp"][0]), rel=1e-12)
    assert m.layer_norms(0) == m.layer_norms(1) == 1


def test_saved_activations_by_hand():
    b = _batch()
    mamba, mlp = float(layer_activation_bytes(b, 0)[0]), float(layer_activation_bytes(b, 1)[0])
    T, sp = 8192, 8  # tokens of the micro-batch; SP shards the norm and input copies over tp
    block = (2 + 2) * T * 8192 / sp  # norm input and the projection's input, bf16
    # Mamba: zxbcdt 37120 and out_x 16384 (bf16), rstd 4 B x 8 groups, out_proj input 16384, over tp 8
    assert mamba == pytest.approx(block + (2 * (37120 + 16384) + 4 * 8 + 2 * 16384) * T / 8, rel=1e-12)
    # MLP (squared ReLU): fc1 output and activation output, 32768 each over tp 8
    assert mlp == pytest.approx(block + (2 * 32768 + 2 * 32768) * T / 8, rel=1e-12)


def test_heads_and_groups_split_over_tp_and_cp():
    m, cluster = load_model(H56), load_cluster("dgx-h100").with_gpus(128)
    training = TrainingSpec(seq_len=8192, global_batch_size=256)
    bad = plan_violations(m, cluster, training, Plan(tp=16, pp=1, dp=8, cp=1, mbs=1))
    assert any("mamba.num_groups=8" in msg for _, _, msg in bad)
    bad = plan_violations(m, cluster, training, Plan(tp=4, pp=1, dp=8, cp=4, mbs=1, cp_algo="ring"))
    assert any("tp*cp=16" in msg for _, _, msg in bad)
    assert not plan_violations(m, cluster, training, Plan(tp=8, pp=2, dp=8, cp=1, mbs=1))


def test_hf_variants(tmp_path):
    cfg = json.loads((PRESETS / f"{H56}.json").read_text(), parse_constant=float)
    # newer Nemotron configs list the blocks by name instead of the pattern string
    blocks = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    listed = {k: v for k, v in cfg.items() if k not in ("hybrid_override_pattern", "time_step_limit")}
    listed["layers_block_type"] = [blocks[c] for c in cfg["hybrid_override_pattern"]]
    path = tmp_path / "listed.json"
    path.write_text(json.dumps(listed))
    assert load_any(str(path)).hybrid_layer_pattern == load_model(H56).hybrid_layer_pattern
    # the hub file's Infinity (time_step_limit, not read) loads; one in a key autopar reads is refused
    assert '"time_step_limit"' in (PRESETS / f"{H56}.json").read_text() and "Infinity" in (PRESETS / f"{H56}.json").read_text()
    bad = tmp_path / "bad.json"
    bad.write_text((PRESETS / f"{H56}.json").read_text().replace('"layer_norm_epsilon": 1e-05', '"layer_norm_epsilon": Infinity'))
    with pytest.raises(InputError, match="norm_eps"):
        load_any(str(bad))


def _row(**kw) -> dict:
    row = {"id": "x", "model_name": "Nemotron-H 56B", "num_layers": 118, "hidden_size": 8192, "num_attention_heads": 64,
           "num_kv_heads": 8, "ffn_hidden_size": 32768, "seq_len": 8192}
    return {**row, **kw}


def test_validation_rows_take_the_hybrid_preset():
    m = row_model(_row())
    assert m.mamba == load_model(H56).mamba and m.hybrid_layer_pattern == load_model(H56).hybrid_layer_pattern
    assert total_params(m) == total_params(load_model(H56))
    assert not_modelled(_row(), m) is None
    # a hybrid state-space model without a preset is still reported, with the fact named
    jamba = _row(model_name="Jamba-1.5-Large", num_layers=72)
    assert "Mamba" in not_modelled(jamba, row_model(jamba))


def test_only_megatron_core_emitters_write_hybrid_models():
    from types import SimpleNamespace

    from autopar.emit.common import Rules, check_common

    # every emitter runs check_common first; `autopar search --framework torchtitan` on the 56B
    # preset ends with this rule as its one-line error; Megatron-LM (pretrain_hybrid.py) and
    # Megatron-Bridge (HybridModelProvider) build Mamba-2 layers
    job = SimpleNamespace(model=load_model(H56), training=TrainingSpec(seq_len=8192, global_batch_size=192),
                          plan=Plan(tp=8, pp=1, dp=8, mbs=1), num_gpus=64)
    for framework in ("torchtitan", "deepspeed"):
        rules = Rules(framework)
        check_common(job, rules)
        assert [v.rule for v in rules.found] == ["decoder layers of attention plus MLP"]
        assert "--format megatron" in rules.found[0].detail and "--format megatron-bridge" in rules.found[0].detail
    for framework in ("megatron", "megatron-bridge"):
        rules = Rules(framework)
        check_common(job, rules)
        assert not rules.found
