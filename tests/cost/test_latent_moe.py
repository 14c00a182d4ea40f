"""LatentMoE (Nemotron 3 Super / Ultra; Megatron-Core moe_layer.py fc1_latent_proj and
fc2_latent_proj, --moe-latent-size): each MoE layer projects its tokens from the model width h
down to the latent width l before the dispatch, its routed experts work at l, and the combined
output is projected back to h. Hand numbers for NVIDIA-Nemotron-3-Super-120B-A12B
(profiles/models/nemotron-3-super-120b-a12b.json): h 4096, l 1024, 512 experts top-22 of
squared-ReLU width 2688, shared expert 5376, 40 Mamba-2 + 40 MoE + 8 attention layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autopar.cost.context import Batch
from autopar.cost.flops import active_params_per_token, layer_gemms, layer_params, total_params
from autopar.cost.memory import layer_activation_bytes
from autopar.cost.moe import dispatch_seconds, moe_elementwise_bytes
from autopar.cost.table import PlanTable
from autopar.emit.common import Rules, check_common
from autopar.errors import InputError
from autopar.specs import TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import load_cost_params
from autopar.specs.model import ModelSpec
from autopar.specs.model import load_model as load_any
from autopar.specs.plan import Plan
from autopar.validation.rows import row_model

SUPER, ULTRA = "nemotron-3-super-120b-a12b", "nemotron-3-ultra-550b-a55b"
MOE_LAYER = 1  # pattern "MEMEMEM*E...": layer 1 is an E layer


def _no_mtp(m: ModelSpec) -> ModelSpec:
    return m.model_copy(update={"mtp_num_layers": 0})


def test_shape_from_the_hf_config():
    m = load_model(SUPER)
    p = m.hybrid_layer_pattern
    assert (len(p), p.count("M"), p.count("E"), p.count("*")) == (88, 40, 40, 8)
    assert (m.moe_latent_size, m.moe_expert_width, m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size) == (1024, 1024, 512, 22, 2688)
    assert (m.moe_shared_expert_ffn_size, m.gated_mlp, m.mtp_num_layers) == (5376, False, 1)
    # Ultra's file has no num_hidden_layers: the layer count is its layers_block_type list's length
    u = load_model(ULTRA)
    assert (u.num_layers, u.moe_latent_size, u.hidden_size) == (108, 2048, 8192)
    # a model without a latent width dispatches at h
    assert load_model("nemotron-3-nano-30b-a3b").moe_expert_width == 2688


def test_params_match_the_model_cards():
    m = _no_mtp(load_model(SUPER))
    # an E layer: 512 experts x 2 x 1024 x 2688, shared 2 x 4096 x 5376, router 4096 x 512,
    # latent projections 2 x 4096 x 1024, one norm
    experts = 512 * 2 * 1024 * 2688
    assert layer_params(m, MOE_LAYER) == (2 * 4096 * 5376 + 4096 * 512 + 2 * 4096 * 1024 + 4096, experts)
    # 40 Mamba (109,640,064 each with its norm) + 8 attention (35,655,680) + 40 E layers
    # (2,873,102,336) + untied embeddings 2 x 131072 x 4096 + final norm
    assert total_params(m) == 40 * 109_640_064 + 8 * 35_655_680 + 40 * 2_873_102_336 + 2 * 131072 * 4096 + 4096 \
        == 120_668_687_360
    # cards: "120B total, 12B active" (Super: 12.23B counted, the logits included); "550B total,
    # 55B active" (Ultra)
    assert active_params_per_token(m) == pytest.approx(12e9, rel=0.02)
    u = _no_mtp(load_model(ULTRA))
    assert total_params(u) == pytest.approx(550e9, rel=0.01)
    assert active_params_per_token(u) == pytest.approx(55e9, rel=0.01)


def test_mtp_module_holds_the_pattern_blocks(tmp_path):
    # HF mtp_hybrid_override_pattern "*E" (Super) and mtp_layers_block_type ["attention", "moe"]
    # (Ultra): each MTP module is an attention and an E block, costed like main layers 7 and 1
    m, u = load_model(SUPER), load_model(ULTRA)
    assert (m.mtp_hybrid_pattern, m.mtp_block_indices(), u.mtp_hybrid_pattern) == ("*E", [7, 1], "*E")
    # + attention block 35,655,680 + E block 2,873,102,336 + the module's 2h x h projection and
    # two norms (2 x 4096^2 + 2 x 4096)
    assert total_params(m) - total_params(_no_mtp(m)) == 35_655_680 + 2_873_102_336 + 2 * 4096 ** 2 + 2 * 4096
    # a hybrid file whose MTP letter has no main layer to cost it like is refused, field named
    bad = json.loads((Path(__file__).parents[2] / "profiles/models" / f"{SUPER}.json").read_text())
    bad["mtp_hybrid_override_pattern"] = "*-"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="mtp_hybrid_pattern='\\*-'.*missing \\['-'\\]"):
        load_any(str(path))


def test_moe_flops_match_megatron():
    m = load_model(SUPER)
    gemms = layer_gemms(m, MOE_LAYER, tokens=1, tp=1, ep=1, etp=1)
    names = [g.name for g in gemms]
    assert names == ["moe/router", "moe/latent_down", "moe/latent_up", "moe/experts_fc1", "moe/experts_fc2",
                     "moe/shared_fc1", "moe/shared_fc2"]
    # Megatron-LM training.py moe_layer_flops with moe_latent_size (no router term), forward per
    # token: 4 l F k + 4 h l (routed at the latent width, the two projections) + 4 h F_shared
    megatron = 4 * 1024 * 2688 * 22 + 4 * 4096 * 1024 + 4 * 4096 * 5376
    assert megatron == 347_078_656
    assert sum(g.flops for g in gemms if g.name != "moe/router") == pytest.approx(megatron, rel=1e-12)
    # the experts' GEMMs take and return the latent width
    fc1, fc2 = gemms[3], gemms[4]
    assert (fc1.k, fc1.n, fc2.k, fc2.n) == (1024, 2688, 2688, 1024)


def _batch(model: ModelSpec, ep: int = 8) -> Batch:
    cluster = load_cluster("dgx-h100").with_gpus(64)
    training = TrainingSpec(seq_len=8192, global_batch_size=256, moe_routing="balanced")
    plan = Plan(tp=1, pp=1, dp=64, ep=ep, mbs=1)
    return Batch(model, cluster, training, load_cost_params(), PlanTable.from_plans([plan], 64))


def test_dispatch_and_permute_move_latent_tokens():
    m = load_model(SUPER)
    wide = m.model_copy(update={"moe_latent_size": None})
    lat, full = _batch(m), _batch(wide)
    T = 8192.0
    # EP 8 inside one DGX node: NVLink bytes of k copies per token at 2 B x width, plus one latency
    latency = lat.cluster.intra_node.latency_us * 1e-6
    s_lat, s_full = float(dispatch_seconds(lat, T, 1.0)[0]), float(dispatch_seconds(full, T, 1.0)[0])
    assert (s_lat - latency) / (s_full - latency) == pytest.approx(1024 / 4096, rel=1e-9)
    # permute and unpermute read and write each copy once: 2 x 2 x 2 B x T x 22 x 1024, plus
    # the router's 16 B per score
    assert moe_elementwise_bytes(m, T, 1.0, 2) == pytest.approx(16 * T * 512 + 8 * T * 22 * 1024, rel=1e-12)


def test_saved_activations_by_hand():
    b = _batch(load_model(SUPER))
    T, routed = 8192, 8192 * 22  # tp 1: every token routed, balanced: 22 copies each
    expected = (2 + 2) * T * 4096 + 4 * T * 512  # norm input and MLP input; fp32 router probabilities
    expected += 2 * routed * 1024 + 2 * routed * 2688 + 2 * routed * 2688  # copies at l, fc1 out, relu2 out
    expected += 4 * T * 5376  # shared expert: fc1 out and activation out
    expected += 2 * T * 1024  # the up-projection's input: the combined output at l
    assert float(layer_activation_bytes(b, MOE_LAYER)[0]) == pytest.approx(expected, rel=1e-12)


def test_model_file_rules(tmp_path):
    base = {"name": "toy", "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "ffn_hidden_size": 4096,
            "vocab_size": 32000}
    path = tmp_path / "dense.json"
    path.write_text(json.dumps({**base, "moe_latent_size": 256}))
    with pytest.raises(InputError, match="moe_latent_size needs routed experts"):
        load_any(str(path))


def test_validation_rows_take_the_latent_preset():
    row = {"id": "x", "model_name": "Nemotron 3 Super 120B-A12B", "num_layers": 88, "hidden_size": 4096,
           "num_attention_heads": 32, "num_kv_heads": 2, "moe_num_experts": 512, "seq_len": 8192}
    m = row_model(row)
    assert m.moe_latent_size == 1024 and m.hybrid_layer_pattern == load_model(SUPER).hybrid_layer_pattern


def test_emitters_without_megatron_core_refuse_latent_moe():
    from types import SimpleNamespace

    toy = ModelSpec(name="toy-latent", num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096,
                    vocab_size=32000, num_experts=8, moe_top_k=2, moe_ffn_hidden_size=1024, moe_latent_size=256)
    job = SimpleNamespace(model=toy, training=TrainingSpec(seq_len=4096, global_batch_size=64),
                          plan=Plan(tp=1, pp=1, dp=8, ep=8, mbs=1), num_gpus=8)
    for framework in ("torchtitan", "deepspeed"):
        rules = Rules(framework)
        check_common(job, rules)
        assert [v.rule for v in rules.found] == ["routed experts at the model width"]
        assert "model.moe_latent_size" in rules.found[0].detail  # names the two emitters that have it
    for framework in ("megatron", "megatron-bridge"):  # Megatron-Core's MoELayer: --moe-latent-size, model.moe_latent_size
        rules = Rules(framework)
        check_common(job, rules)
        assert not rules.found
