"""ModelSpec loading: presets, HF config.json files, autopar model files, bad input."""

from __future__ import annotations

import json

import pytest

from autopar.errors import InputError, ProfileNotFound
from autopar.specs import load_model


def test_llama3_405b_hf_config():
    m = load_model("llama3-405b")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.kv_heads, m.ffn_hidden_size, m.vocab_size) == (
        126, 16384, 128, 8, 53248, 128256)
    assert m.gated_mlp and not m.tied_embeddings and not m.is_moe


def test_mixtral_expert_ffn_is_intermediate_size():
    # launchers.md section 5: Mixtral has no moe_intermediate_size; expert FFN = intermediate_size
    m = load_model("mixtral-8x7b")
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size) == (8, 2, 14336)
    assert m.num_moe_layers == 32


def test_deepseek_v3_moe_and_mla():
    m = load_model("deepseek-v3")
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size) == (256, 8, 2048)
    assert m.moe_shared_expert_ffn_size == 2048  # n_shared_experts (1) x moe_intermediate_size
    assert m.moe_first_k_dense_layers == 3 and m.num_moe_layers == 58
    assert m.mla is not None and m.mla.kv_lora_rank == 512 and m.head_size == 192


def test_qwen2_moe_fields(tmp_path):
    cfg = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
           "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936, "num_experts": 60,
           "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
           "decoder_sparse_step": 1, "hidden_act": "silu"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.moe_shared_expert_ffn_size) == (60, 4, 1408, 5632)


def test_autopar_model_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nffn_hidden_size: 256\nvocab_size: 100\n")
    m = load_model(str(path))
    assert m.name == "tiny" and m.head_size == 16 and m.kv_heads == 4


@pytest.mark.parametrize(
    "text, field",
    [
        ("num_layers: -2\nhidden_size: 64\nnum_attention_heads: 4\nffn_hidden_size: 256\nvocab_size: 100\n", "model.num_layers"),
        ("num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nffn_hidden_size: 256\nvocab_size: 100\nbogus: 1\n", "model.bogus"),
        ("num_layers: 2\nhidden_size: 65\nnum_attention_heads: 4\nffn_hidden_size: 256\nvocab_size: 100\n", "model.hidden_size"),
        ("[1, 2]\n", "model"),
    ],
)
def test_bad_model_file_names_the_field(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert err.value.field == field


def test_unreadable_and_unknown():
    with pytest.raises(InputError, match="cannot read"):
        load_model("/nonexistent/config.json")
    with pytest.raises(ProfileNotFound, match="known presets"):
        load_model("llama9-1t")
