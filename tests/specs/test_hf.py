"""HuggingFace config import: checkpoint directories, nested (Llama-4) and GPT-2 style configs,
MoE layer patterns and routing options. Values are those of the released config.json files
named in each test."""

from __future__ import annotations

import json

import pytest

from autopar.errors import InputError
from autopar.specs import load_model
from autopar.specs._files import PROFILES_DIR
from autopar.cost.flops import total_params

def total_params_billion(model) -> float:
    return total_params(model) / 1e9


# openai-community/gpt2 config.json
GPT2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024, "n_inner": None,
        "vocab_size": 50257, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
# meta-llama/Llama-4-Scout-17B-16E config.json (text_config abridged to the fields the importer reads)
SCOUT = {"model_type": "llama4", "text_config": {
    "model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "vocab_size": 202048,
    "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 10485760, "tie_word_embeddings": False},
    "vision_config": {"hidden_size": 1408}}
# Qwen/Qwen3-30B-A3B config.json
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
             "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
             "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
             "norm_topk_prob": True, "vocab_size": 151936, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
             "tie_word_embeddings": False, "max_position_embeddings": 40960}


def _write(tmp_path, cfg, folder="ckpt"):
    d = tmp_path / folder
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_checkpoint_directory_and_gpt2_style(tmp_path):
    m = load_model(str(_write(tmp_path, GPT2, "gpt2")))
    assert (m.name, m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size) == ("gpt2", 12, 768, 12, 3072)
    assert (m.gated_mlp, m.tied_embeddings, m.normalization.value, m.position_embedding) == (False, True, "layernorm", "learned_absolute")
    # 12 x 12 h^2 + wte 50257 x 768 = 123.5M; GPT-2's 124.4M adds wpe and biases (not counted)
    assert total_params_billion(m) == pytest.approx(0.1244, rel=0.01)


def test_llama4_nested_text_config(tmp_path):
    m = load_model(str(_write(tmp_path, SCOUT, "Llama-4-Scout-17B-16E")))
    assert (m.num_layers, m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.ffn_hidden_size) == (48, 16, 1, 8192, 16384)
    assert m.moe_shared_expert_ffn_size == 8192 and m.num_moe_layers == 48  # interleave step 1: every layer MoE
    # Scout: 109B total (Meta's model card)
    assert total_params_billion(m) == pytest.approx(109, rel=0.02)


def test_qwen3_moe_routing_and_layers(tmp_path):
    cfg = dict(QWEN3_MOE, mlp_only_layers=[0, 47])
    m = load_model(str(_write(tmp_path, cfg, "qwen")))
    assert m.num_moe_layers == 46 and not m.is_moe_layer(0) and m.is_moe_layer(1)
    assert m.moe_router_topk_norm and m.qk_layernorm
    # Qwen3 Technical Report section 2: global-batch load balancing; Mixtral keeps the per-micro-batch loss
    assert m.moe_router_balance.value == "global_batch" and load_model("qwen3-next-80b-a3b").moe_router_balance.value == "global_batch"
    assert load_model("mixtral-8x7b").moe_router_balance.value == "micro_batch"
    # Qwen3-30B-A3B: 30.5B parameters (model card)
    base = load_model(str(_write(tmp_path, QWEN3_MOE, "qwen-base")))
    assert total_params_billion(base) == pytest.approx(30.5, rel=0.02)


def test_deepseek_v3_preset_routing():
    m = load_model("deepseek-v3")
    assert (m.moe_router_score_function.value, m.moe_router_expert_bias, m.moe_router_num_groups, m.moe_router_group_topk) == ("sigmoid", True, 8, 4)
    assert m.mtp_num_layers == 1 and m.moe_router_topk_scaling_factor == 2.5 and m.rope_scaling.type == "yarn"
    assert m.num_moe_layers == 58  # first_k_dense_replace = 3
    # 671B main model + 14B MTP module = 685B (DeepSeek-V3 README, "Model Summary")
    assert total_params_billion(m) == pytest.approx(685, rel=0.01)


def test_directory_without_config_names_the_rule(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        load_model(str(tmp_path / "empty"))


def test_missing_required_key_names_it(tmp_path):
    cfg = {k: v for k, v in QWEN3_MOE.items() if k != "vocab_size"}
    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, cfg)))
    assert err.value.field == "model.vocab_size"


def test_missing_key_of_a_nested_config_is_named_in_its_text_config(tmp_path):
    """Llama-4 Scout's file nests the text model under text_config: a key missing from it is named
    there (the file's place for it), a null one where the file holds it."""
    text = {k: v for k, v in SCOUT["text_config"].items() if k != "vocab_size"}
    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, {**SCOUT, "text_config": text}, "no-vocab")))
    assert str(err.value).startswith("model.text_config.vocab_size=(missing): HuggingFace config of no-vocab lacks this required key")
    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, {**SCOUT, "vocab_size": None, "text_config": text}, "null-vocab")))
    assert (err.value.field, err.value.value) == ("model.vocab_size", None)


# openai/gpt-oss-120b config.json (abridged to the fields the importer reads): 36 layers
# alternating sliding (window 128) and full attention, layer 0 sliding
GPT_OSS_120B = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
                "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
                "num_experts_per_tok": 4, "vocab_size": 201088, "hidden_act": "silu", "attention_bias": True,
                "sliding_window": 128, "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 150000,
                "layer_types": ["sliding_attention", "full_attention"] * 18}


def test_gpt_oss_sliding_layers(tmp_path):
    m = load_model(str(_write(tmp_path, GPT_OSS_120B, "gpt-oss-120b")))
    assert (m.attention_window, m.attention_chunked, m.global_attention_layers) == (128, False, tuple(range(1, 36, 2)))
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.gated_mlp, m.qkv_bias) == (128, 4, 2880, True, True)
    # OpenAI's model card: 116.83B parameters (ours leaves out biases and attention sinks)
    assert total_params_billion(m) == pytest.approx(116.83, rel=0.01)


def test_window_patterns_of_configs_without_layer_types(tmp_path):
    base = {"hidden_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 16, "intermediate_size": 8192, "vocab_size": 32000}
    # Mistral-7B v0.1: every layer slides (sliding_window 4096)
    m = load_model(str(_write(tmp_path, {**base, "model_type": "mistral", "sliding_window": 4096}, "mistral")))
    assert (m.attention_window, m.global_attention_layers) == (4096, ())
    # Gemma-2: even layers slide (transformers Gemma2: sliding iff (i + 1) % 2); GeGLU is gated
    m = load_model(str(_write(tmp_path, {**base, "model_type": "gemma2", "sliding_window": 4096, "hidden_act": "gelu_pytorch_tanh"}, "gemma2")))
    assert (m.global_attention_layers, m.gated_mlp) == (tuple(range(1, 12, 2)), True)
    # Gemma-3: every 6th layer global (sliding_window_pattern 6)
    m = load_model(str(_write(tmp_path, {**base, "model_type": "gemma3_text", "sliding_window": 1024, "sliding_window_pattern": 6}, "gemma3")))
    assert (m.attention_window, m.global_attention_layers) == (1024, (5, 11))
    # Qwen2 ships sliding_window but only use_sliding_window turns it on
    m = load_model(str(_write(tmp_path, {**base, "model_type": "qwen2", "sliding_window": 32768, "use_sliding_window": False}, "qwen2")))
    assert m.attention_window is None
    # Llama-4: RoPE layers attend within 8192-token chunks, every 4th (NoPE) layer globally
    m = load_model(str(_write(tmp_path, {**base, "model_type": "llama4_text", "attention_chunk_size": 8192, "no_rope_layers": []}, "llama4")))
    assert (m.attention_window, m.attention_chunked, m.global_attention_layers) == (8192, True, (3, 7, 11))


def test_hybrid_layers_parsed_or_refused_by_name(tmp_path):
    # Qwen/Qwen3-Next-80B-A3B: three GatedDeltaNet layers per full-attention layer; without the
    # linear_* shape keys the linear_attention layers cannot be costed and are refused by name
    cfg = {"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16,
           "intermediate_size": 5120, "vocab_size": 151936, "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    with pytest.raises(InputError, match=r"layer_types.*linear_attention.*GatedDeltaNet"):
        load_model(str(_write(tmp_path, cfg, "qwen3-next")))
    # with them (transformers Qwen3NextConfig), layer_types names which layers are linear
    shape = {"linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
             "linear_conv_kernel_dim": 4}
    m = load_model(str(_write(tmp_path, {**cfg, **shape, "layer_types": ["linear_attention", "full_attention"] * 2}, "qwen3-next-2")))
    assert (m.linear_attention_layers, m.attention_output_gate, m.linear_attention.num_value_heads) == ((0, 2), True, 32)
    # Nemotron-H names its Mamba layers in hybrid_override_pattern
    nemotron_h = {"model_type": "nemotron_h", "hidden_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 32,
                  "intermediate_size": 21504, "vocab_size": 131072, "hybrid_override_pattern": "M-M*"}
    with pytest.raises(InputError, match=r"hybrid_override_pattern.*state-space"):
        load_model(str(_write(tmp_path, nemotron_h, "nemotron-h")))


def test_gpt_oss_without_layer_types_alternates_like_transformers(tmp_path):
    """transformers GptOssConfig fills a missing layer_types with sliding, full, sliding, ...
    (sliding iff (i + 1) % 2), as Gemma-2 does; it is not a Mistral-style all-sliding model."""
    cfg = {k: v for k, v in GPT_OSS_120B.items() if k != "layer_types"}
    m = load_model(str(_write(tmp_path, cfg, "gpt-oss-no-types")))
    assert (m.attention_window, m.global_attention_layers) == (128, tuple(range(1, 36, 2)))


def test_gemma_ties_its_embeddings_unless_the_config_says_otherwise(tmp_path):
    """google/gemma-2-9b config.json omits tie_word_embeddings; transformers' Gemma2Config
    defaults it to True. Untied, the importer counted the 256,000 x 3,584 = 0.92B output matrix
    twice: 10.16B instead of the model card's 9.24B."""
    gemma2_9b = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16,
                 "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
                 "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4096, "rms_norm_eps": 1e-6}
    m = load_model(str(_write(tmp_path, gemma2_9b, "gemma2-9b")))
    assert m.tied_embeddings and total_params_billion(m) == pytest.approx(9.24, rel=0.005)
    untied = load_model(str(_write(tmp_path, {**gemma2_9b, "tie_word_embeddings": False}, "gemma2-untied")))
    assert total_params_billion(untied) - total_params_billion(m) == pytest.approx(256000 * 3584 / 1e9, rel=1e-6)


def test_deepseek_config_edge_values(tmp_path):
    """A null qk_rope_head_dim is no rope part (it was a TypeError); group-limited routing must
    split the experts evenly and pick at most n_group groups (DeepSeek-V3: 256 experts, 8 groups,
    topk_group 4)."""
    cfg = json.loads(open("profiles/models/deepseek-v3.json").read())
    m = load_model(str(_write(tmp_path, {**cfg, "qk_rope_head_dim": None}, "ds-null-rope")))
    assert m.mla.qk_rope_head_dim == 0 and m.head_size == 128  # qk_nope_head_dim alone
    with pytest.raises(InputError, match=r"^model.n_group=7: must divide n_routed_experts=256"):
        load_model(str(_write(tmp_path, {**cfg, "n_group": 7}, "ds-groups")))
    with pytest.raises(InputError, match=r"^model.topk_group=9: must be at most n_group=8"):
        load_model(str(_write(tmp_path, {**cfg, "topk_group": 9}, "ds-topk-group")))
    with pytest.raises(InputError, match=r"^model.num_key_value_heads=0: Input should be greater than 0"):
        load_model(str(_write(tmp_path, {**GPT_OSS_120B, "num_key_value_heads": 0}, "kv0")))


def test_a_config_without_hidden_size_names_hidden_size(tmp_path):
    cfg = {k: v for k, v in QWEN3_MOE.items() if k != "hidden_size"}
    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, cfg, "no-hidden")))
    assert str(err.value).startswith("model.hidden_size=(missing): HuggingFace config of ")


def test_partial_rotary_and_zero_centered_norms(tmp_path):
    """Qwen3-Next rotates a quarter of each 256-dim head (partial_rotary_factor 0.25 in its
    config.json: 64 dims) and its RMSNorm scales by 1 + weight (transformers Qwen3NextRMSNorm);
    Gemma's norms do the same (GemmaRMSNorm). RoPE turns dims in pairs, so a factor that leaves an
    odd or fractional rotated width is refused by name."""
    m = load_model("profiles/models/qwen3-next-80b-a3b.json")
    assert (m.rotary_percent, m.norm_zero_centered_gamma, m.head_size * m.rotary_percent) == (0.25, True, 64)
    llama = load_model("llama3-8b")
    assert (llama.rotary_percent, llama.norm_zero_centered_gamma) == (1.0, False)
    cfg = json.loads(open("profiles/models/qwen3-next-80b-a3b.json").read())
    with pytest.raises(InputError, match=r"^model.partial_rotary_factor=0.3: must rotate an even whole number"):
        load_model(str(_write(tmp_path, {**cfg, "partial_rotary_factor": 0.3}, "q3n-odd")))


# ai21labs/AI21-Jamba-1.5-Mini config.json (abridged): attention every 8th layer, Mamba-1 mixers elsewhere
JAMBA = {"model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
         "intermediate_size": 14336, "vocab_size": 65536, "attn_layer_period": 8, "attn_layer_offset": 4, "num_experts": 16,
         "num_experts_per_tok": 2, "expert_layer_period": 2, "expert_layer_offset": 1, "mamba_d_state": 16, "mamba_d_conv": 4,
         "mamba_expand": 2}


def test_unsupported_model_types_are_refused_naming_the_type_and_the_supported_ones(tmp_path):
    # review: Jamba's error showed the model's name as the value of model.mamba_d_state; a BERT
    # config (an encoder) was costed as a decoder without a word
    for cfg, value, kind in ((JAMBA, "jamba", "a hybrid of attention and Mamba-1 layers"),
                             ({**QWEN3_MOE, "model_type": "bert"}, "bert", "an encoder"),
                             ({**QWEN3_MOE, "model_type": "made_up"}, "made_up", "not a HuggingFace model type autopar reads")):
        with pytest.raises(InputError) as err:
            load_model(str(_write(tmp_path, cfg, value)))
        assert (err.value.field, err.value.value) == ("model.model_type", value)
        assert str(err.value).startswith(f"model.model_type='{value}': {kind}")
        assert "supported model types: deepseek_v2, deepseek_v3, " in str(err.value) and "qwen3_next" in str(err.value)
    # a nested text config names its own model_type
    scout = {**SCOUT, "text_config": {**SCOUT["text_config"], "model_type": "t5"}}
    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, scout, "nested")))
    assert (err.value.field, err.value.value) == ("model.text_config.model_type", "t5")


def test_a_hybrid_key_names_its_value_not_the_model():
    from autopar.specs.model import model_from_mapping

    cfg = {k: v for k, v in JAMBA.items() if k != "model_type"}  # no model_type: read as Llama-style until the Mamba keys
    with pytest.raises(InputError) as err:
        model_from_mapping(cfg, "jamba-mini")
    assert (err.value.field, err.value.value) == ("model.mamba_d_state", 16)
    assert str(err.value).startswith("model.mamba_d_state=16: names layers of a hybrid model (jamba-mini)")
    cfg = {**QWEN3_MOE, "layer_types": ["full_attention", "mamba"] * 24}
    with pytest.raises(InputError) as err:
        model_from_mapping(cfg, "m")
    assert (err.value.field, err.value.value) == ("model.layer_types", ["mamba"])


def test_a_number_written_as_text_is_refused_naming_the_key(tmp_path):
    # review: "hidden_size": "4096" was read as 4096 without a word (pydantic's lax mode)
    from autopar.specs.model import model_from_mapping

    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, {**QWEN3_MOE, "hidden_size": "2048"})))
    assert str(err.value) == "model.hidden_size='2048': must be a JSON number, not a string (write 4096, not \"4096\")"
    # GPT-2 names are checked before they are mapped (n_embd x 4 would repeat the text)
    with pytest.raises(InputError, match=r"^model.n_embd='768': must be a JSON number"):
        model_from_mapping({**GPT2, "n_embd": "768"}, "gpt2")
    with pytest.raises(InputError, match=r"^model.text_config.num_local_experts='16': must be a JSON number"):
        model_from_mapping({**SCOUT, "text_config": {**SCOUT["text_config"], "num_local_experts": "16"}}, "scout")
    with pytest.raises(InputError, match=r"^model.rope_scaling.factor='8.0': must be a JSON number"):
        model_from_mapping({**QWEN3_MOE, "rope_scaling": {"rope_type": "yarn", "factor": "8.0"}}, "m")


def test_every_preset_model_type_is_supported():
    from pathlib import Path

    from autopar.specs.hf import MODEL_TYPES

    root = Path(__file__).resolve().parents[2] / "profiles" / "models"
    types = {json.loads(p.read_text()).get("model_type") for p in root.glob("*.json")}
    assert types - {None} <= set(MODEL_TYPES) and "llama" in types and "nemotron_h" in types


@pytest.mark.parametrize("preset, coeff, per_sequence", [
    ("mixtral-8x7b", 0.02, False),  # mistralai/Mixtral-8x7B-v0.1 config.json router_aux_loss_coef 0.02
    ("mixtral-8x22b", 0.001, False),  # mistralai/Mixtral-8x22B-v0.1 router_aux_loss_coef 0.001
    ("qwen3-30b-a3b", 0.001, False),  # Qwen/Qwen3-30B-A3B router_aux_loss_coef 0.001
    ("qwen3-235b-a22b", 0.001, False),  # Qwen/Qwen3-235B-A22B router_aux_loss_coef 0.001
    ("deepseek-v2-lite", 0.001, True),  # deepseek-ai/DeepSeek-V2-Lite aux_loss_alpha 0.001, seq_aux true
    ("kimi-k2", 0.001, True),  # moonshotai/Kimi-K2-Instruct aux_loss_alpha 0.001, seq_aux true, noaux_tc
    # deepseek-ai/DeepSeek-V3 names no aux_loss_alpha: the V3 report's alpha 0.0001 (section 4.2),
    # as Megatron-Bridge 067f987 deepseek_v3_bridge.py (getattr default 0.0001) and Megatron-LM
    # d98e8a6 examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh (seq_aux_loss, 1e-4)
    ("deepseek-v3", 0.0001, True),
])
def test_router_balance_loss_weight_from_the_config(preset, coeff, per_sequence):
    m = load_model(preset)
    assert (m.moe_aux_loss_coeff, m.moe_aux_loss_per_sequence) == (coeff, per_sequence)


def test_dense_models_have_no_balance_loss_weight():
    assert load_model("llama3-8b").moe_aux_loss_coeff is None
    # Nemotron-H 8B: Mamba-2, attention and MLP layers, no MoE
    assert load_model("nemotron-h-8b").moe_aux_loss_coeff is None


@pytest.mark.parametrize("preset", ["nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b", "nemotron-3-ultra-550b-a55b"])
def test_nemotron_h_moe_trains_a_sequence_wise_balance_loss(preset):
    # their config.json files (and transformers 5.12 NemotronHConfig) name no router_aux_loss_coef or
    # aux_loss_alpha; the routers trained beside their expert bias with a sequence-wise loss of 1e-4:
    # Megatron-Bridge 067f987 nemotron_h_bridge.py provider_bridge (moe_aux_loss_coeff 0.0001,
    # seq_aux_loss) and Megatron-LM d98e8a6 examples/post_training/modelopt/conf/nvidia/
    # NVIDIA-Nemotron-3-{Nano,Super,Ultra}-*.sh (--moe-aux-loss-coeff 1e-4, seq_aux_loss)
    m = load_model(preset)
    assert (m.moe_aux_loss_coeff, m.moe_aux_loss_per_sequence, m.moe_router_expert_bias) == (1e-4, True, True)


def test_nemotron_h_moe_reads_a_balance_loss_weight_its_file_names(tmp_path):
    cfg = json.loads((PROFILES_DIR / "models" / "nemotron-3-nano-30b-a3b.json").read_text())
    m = load_model(str(_write(tmp_path, {**cfg, "router_aux_loss_coef": 0.003}, "nano-finetune")))
    assert (m.moe_aux_loss_coeff, m.moe_aux_loss_per_sequence) == (0.003, True)


def test_a_preset_matches_its_config_whatever_the_balance_loss_weight(tmp_path):
    # the weight is a training setting, not the network: a fine-tune's config.json that drops the
    # key still gets the preset's registry entry / recipe (autopar.emit.presets.LOSS_FIELDS)
    from autopar.emit.presets import preset_of

    cfg = json.loads((PROFILES_DIR / "models" / "qwen3-30b-a3b.json").read_text())
    del cfg["router_aux_loss_coef"]
    m = load_model(str(_write(tmp_path, cfg, "qwen3-finetune")))
    assert m.moe_aux_loss_coeff is None
    assert preset_of(m, ("qwen3-30b-a3b", "llama3-8b")) == "qwen3-30b-a3b"


def test_gemma_mlp_activation_is_hidden_activation(tmp_path):
    base = {"hidden_size": 2304, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 256, "intermediate_size": 9216, "vocab_size": 256000}
    # google/gemma-2-2b config.json: "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh";
    # transformers 5.12 Gemma2MLP applies ACT2FN[config.hidden_activation], so a file whose hidden_act
    # says gelu still trains the tanh GeLU
    m = load_model(str(_write(tmp_path, {**base, "model_type": "gemma2", "hidden_act": "gelu",
                                         "hidden_activation": "gelu_pytorch_tanh"}, "gemma2")))
    assert (m.activation, m.gated_mlp) == ("gelu_pytorch_tanh", True)
    # Gemma3TextConfig's default hidden_activation is gelu_pytorch_tanh when the file omits it
    m = load_model(str(_write(tmp_path, {**base, "model_type": "gemma3_text"}, "gemma3")))
    assert m.activation == "gelu_pytorch_tanh"
    # Gemma (1) reads hidden_act (transformers GemmaMLP: ACT2FN[config.hidden_act])
    m = load_model(str(_write(tmp_path, {**base, "model_type": "gemma", "hidden_act": "gelu_pytorch_tanh"}, "gemma")))
    assert m.activation == "gelu_pytorch_tanh"
    # Llama keeps hidden_act
    m = load_model(str(_write(tmp_path, {**base, "model_type": "llama", "hidden_act": "silu"}, "llama")))
    assert m.activation == "silu"


# a Llama-style decoder the RoPE tests below vary (the values are this test's own)
ROPE_BASE = {"model_type": "llama", "hidden_size": 3072, "num_hidden_layers": 4, "num_attention_heads": 32, "num_key_value_heads": 32,
             "intermediate_size": 8192, "vocab_size": 32064, "rope_theta": 10000.0, "max_position_embeddings": 131072}


@pytest.mark.parametrize("block, field, value", [
    # Qwen/Qwen2-VL-7B-Instruct config.json rope_scaling: {"type": "mrope", "mrope_section": [16, 24, 24]} -- no factor;
    # it was dropped, and the launchers trained plain 1-D RoPE
    ({"type": "mrope", "mrope_section": [16, 24, 24]}, "model.rope_scaling.type", "mrope"),
    # a type transformers has no RoPE for (Phi-3's pre-release name of longrope)
    ({"type": "su", "short_factor": [1.0], "long_factor": [1.0]}, "model.rope_scaling.type", "su"),
    # transformers 5.12 _validate_dynamic_rope_parameters / _validate_llama3_rope_parameters require the factor
    ({"rope_type": "dynamic"}, "model.rope_scaling.factor", "(missing)"),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, "model.rope_scaling.low_freq_factor",
     "(missing)"),
])
def test_a_rope_scaling_autopar_cannot_carry_is_refused_naming_it(block, field, value):
    from autopar.specs.model import model_from_mapping

    with pytest.raises(InputError, match=rf"^{field}='?{value.replace('(', '.').replace(')', '.')}'?: "):
        model_from_mapping({**ROPE_BASE, "rope_scaling": block}, "m")
    # the transformers 5 spelling is refused alike, naming its own key
    with pytest.raises(InputError, match=rf"^{field.replace('rope_scaling', 'rope_parameters')}"):
        model_from_mapping({**ROPE_BASE, "rope_parameters": {"rope_theta": 1e4, **block}}, "m")


def test_default_rope_type_is_plain_rope():
    from autopar.specs.model import model_from_mapping

    # rope_type 'default' is transformers' unscaled RoPE whatever other keys the block holds
    m = model_from_mapping({**ROPE_BASE, "rope_scaling": {"rope_type": "default", "factor": 4.0}}, "m")
    assert (m.rope_scaling, m.rope_theta) == (None, 10000.0)


def test_longrope_without_factor_is_carried_whole(tmp_path):
    # microsoft/Phi-3-mini-128k-instruct's form: rope_scaling {"type": "longrope", "short_factor": [...],
    # "long_factor": [...]} with no factor, original_max_position_embeddings 4096 at the top level
    # (transformers standardize_rope_params moves it into the block); one factor per rotated pair (96 / 2)
    short, long = [1.0 + i / 100 for i in range(48)], [1.0 + i for i in range(48)]
    cfg = {**ROPE_BASE, "model_type": "phi3", "original_max_position_embeddings": 4096,
           "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long}}
    m = load_model(str(_write(tmp_path, cfg, "phi3-128k")))
    s = m.rope_scaling
    assert (s.type, s.factor, s.original_max_position_embeddings) == ("longrope", None, 4096)
    assert (list(s.short_factor), list(s.long_factor)) == (short, long)


def test_yarn_extends_from_max_position_embeddings_when_the_block_names_no_original(tmp_path):
    # transformers 5.12 standardize_rope_params: yarn / llama3 / longrope default
    # original_max_position_embeddings to max_position_embeddings (131072 here)
    m = load_model(str(_write(tmp_path, {**ROPE_BASE, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.9}})))
    assert (m.rope_scaling.original_max_position_embeddings, m.rope_scaling.attention_factor) == (131072, 0.9)
    # openai/gpt-oss-20b: yarn truncate false is kept
    assert load_model("gpt-oss-20b").rope_scaling.truncate is False


def test_transformers5_rope_parameters_per_layer_type():
    from autopar.specs.model import model_from_mapping

    # transformers 5 writes one block per layer type when they differ (google/gemma-3 as re-saved: full
    # attention theta 1e6 with linear factor 8, sliding attention theta 1e4); the full-attention block is
    # the one a transformers 4 file's rope_theta / rope_scaling state. It was read as no theta at all.
    params = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    cfg = {k: v for k, v in ROPE_BASE.items() if k != "rope_theta"}
    m = model_from_mapping({**cfg, "rope_parameters": params}, "m")
    assert (m.rope_theta, m.rope_scaling.type, m.rope_scaling.factor) == (1000000.0, "linear", 8.0)


# google/gemma-3-1b-pt config.json (transformers 4.50): sliding layers rotate by rope_local_base_freq
GEMMA3_1B = {"model_type": "gemma3_text", "hidden_size": 1152, "num_hidden_layers": 26, "num_attention_heads": 4,
             "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912, "vocab_size": 262144,
             "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
             "rope_theta": 1000000, "rope_local_base_freq": 10000, "rope_scaling": None, "sliding_window": 512,
             "sliding_window_pattern": 6}


def test_gemma3_local_rope_base_is_carried():
    from autopar.specs.model import model_from_mapping

    # the sliding layers' base (10,000 beside the global 1,000,000) was dropped: every layer read as theta 1e6
    m = model_from_mapping(GEMMA3_1B, "gemma3")
    assert (m.rope_theta, m.rope_local_theta, m.global_attention_layers) == (1000000.0, 10000.0, (5, 11, 17, 23))
    # Gemma3TextConfig's default rope_local_base_freq when the file omits it
    assert model_from_mapping({k: v for k, v in GEMMA3_1B.items() if k != "rope_local_base_freq"}, "g").rope_local_theta == 10000.0
    # transformers 5: rope_parameters per layer type (the sliding block is the local base)
    params = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    cfg = {k: v for k, v in GEMMA3_1B.items() if k not in ("rope_theta", "rope_local_base_freq", "rope_scaling")}
    m = model_from_mapping({**cfg, "rope_parameters": params}, "g")
    assert (m.rope_theta, m.rope_scaling.factor, m.rope_local_theta) == (1000000.0, 8.0, 10000.0)
    # every layer rotating alike carries nothing: no local layers, or the same unscaled base (Gemma-2 has one RoPE)
    assert model_from_mapping({**GEMMA3_1B, "sliding_window": None}, "g").rope_local_theta is None
    assert model_from_mapping({**GEMMA3_1B, "rope_local_base_freq": 1000000}, "g").rope_local_theta is None
    assert model_from_mapping({**GEMMA3_1B, "model_type": "gemma2", "rope_local_base_freq": None}, "g").rope_local_theta is None
    # a scaled local RoPE is refused by name, not dropped
    local = {**params, "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}
    with pytest.raises(InputError) as err:
        model_from_mapping({**cfg, "rope_parameters": local}, "g")
    assert str(err.value) == ("model.rope_parameters.sliding_attention.rope_type='linear': RoPE scaling on the local layers: "
                              "autopar reads their base only (Gemma-3's are unscaled)")


def test_gemma3_and_olmo2_norm_queries_and_keys():
    from autopar.specs.model import model_from_mapping

    # transformers 5.12: Gemma3Attention always builds q_norm/k_norm over head_dim, Olmo2Attention over
    # num_heads x head_dim; neither config has a key for it, and both were read without the norms
    gemma = model_from_mapping(GEMMA3_1B, "gemma3")
    assert (gemma.qk_layernorm, gemma.qk_norm_across_heads) == (True, False)
    olmo2 = model_from_mapping({**ROPE_BASE, "model_type": "olmo2"}, "olmo2")
    assert (olmo2.qk_layernorm, olmo2.qk_norm_across_heads) == (True, True)
    llama = model_from_mapping({**ROPE_BASE, "model_type": "llama"}, "llama")
    assert (llama.qk_layernorm, llama.qk_norm_across_heads) == (False, False)


# google/gemma-3-27b-it config.json (transformers 4.50; vision_config abridged): the text_config
# omits every key at Gemma3TextConfig's default (vocab_size, max_position_embeddings, rope_theta ...)
GEMMA3_27B_IT = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
                      "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False},
}


def test_gemma3_multimodal_text_config_takes_the_class_defaults(tmp_path):
    """A Gemma3ForConditionalGeneration file was refused (model.vocab_size=(missing)): transformers
    writes text_config as its difference from Gemma3TextConfig's defaults, so the keys at their
    default are absent and the model reads the class's (configuration_gemma3.py: vocab_size 262208,
    max_position_embeddings 131072, rope_theta 1e6, rope_local_base_freq 1e4, rms_norm_eps 1e-6)."""
    m = load_model(str(_write(tmp_path, GEMMA3_27B_IT, "gemma-3-27b-it")))
    assert (m.vocab_size, m.max_position_embeddings, m.rope_theta, m.rope_local_theta, m.norm_eps) == (262208, 131072, 1e6, 1e4, 1e-6)
    assert (m.head_dim, m.num_kv_heads, m.tied_embeddings, m.activation) == (128, 16, True, "gelu_pytorch_tanh")
    assert (m.rope_scaling.type, m.rope_scaling.factor, m.attention_window, m.global_attention_layers[:2]) == ("linear", 8.0, 1024, (5, 11))
    # Gemma 3 Technical Report (arXiv 2503.19786) Table 1, 27B: 1,416M embedding + 25,600M non-embedding
    assert total_params_billion(m) == pytest.approx(27.016, rel=0.01)
    # google/gemma-3-4b-it's text_config also omits num_attention_heads, num_key_value_heads and head_dim
    # (8, 4 and 256, the class defaults: head_dim is not hidden_size / heads = 320 there)
    gemma3_4b = {**GEMMA3_27B_IT, "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                                                  "num_hidden_layers": 34, "sliding_window": 1024,
                                                  "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}}
    m = load_model(str(_write(tmp_path, gemma3_4b, "gemma-3-4b-it")))
    assert (m.num_attention_heads, m.num_kv_heads, m.head_dim) == (8, 4, 256)
    # the same report, 4B: 675M embedding + 3,209M non-embedding
    assert total_params_billion(m) == pytest.approx(3.884, rel=0.01)
    # a key the file names, null included, stays the file's; a transformers 5 rope_parameters block keeps its own bases
    assert load_model(str(_write(tmp_path, {**GEMMA3_27B_IT, "text_config": {**GEMMA3_27B_IT["text_config"], "sliding_window": None}},
                                 "no-window"))).attention_window is None
    params = {"full_attention": {"rope_type": "default", "rope_theta": 500000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}
    text = {k: v for k, v in GEMMA3_27B_IT["text_config"].items() if k != "rope_scaling"}
    m = load_model(str(_write(tmp_path, {**GEMMA3_27B_IT, "text_config": {**text, "rope_parameters": params}}, "v5")))
    assert (m.rope_theta, m.rope_local_theta) == (500000.0, 20000.0)
    # other model types take no Gemma default: a Llama file without vocab_size is still refused by name
    with pytest.raises(InputError, match=r"^model.vocab_size=\(missing\): HuggingFace config of "):
        load_model(str(_write(tmp_path, {k: v for k, v in QWEN3_MOE.items() if k != "vocab_size"}, "no-vocab")))


# Qwen/Qwen2.5-72B-Instruct config.json (the keys the importer reads)
QWEN25_72B = {"architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 29568,
              "max_position_embeddings": 32768, "max_window_layers": 70, "model_type": "qwen2", "num_attention_heads": 64,
              "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
              "sliding_window": 131072, "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 152064}


@pytest.mark.parametrize("cfg, message", [
    # these named autopar's fields (num_kv_heads, num_layers, ffn_hidden_size), not the keys of the file, and the
    # last gave pydantic's 'Unable to parse input string as an integer, exceeded maximum size'
    ({**QWEN25_72B, "num_key_value_heads": 7}, "model.num_key_value_heads=7: must divide num_attention_heads=64 "
                                                "(each KV head serves an equal group of query heads)"),
    ({**QWEN25_72B, "num_hidden_layers": 0}, "model.num_hidden_layers=0: Input should be greater than 0"),
    # autopar/limits.py MAX_WIDTH = 2**20 bounds every width
    ({**QWEN25_72B, "intermediate_size": 1e30}, "model.intermediate_size=1e+30: must be a positive whole number of at most 1,048,576"),
    # a rule naming a second field names its key too: Qwen3-30B-A3B routes 8 of num_experts=128
    ({**QWEN3_MOE, "num_experts_per_tok": 0}, "model.num_experts_per_tok=0: must be in 1..num_experts=128"),
    # a nested text_config's key is named where it sits; GPT-2 keys by their GPT-2 names
    ({**GEMMA3_27B_IT, "text_config": {**GEMMA3_27B_IT["text_config"], "num_key_value_heads": 5}},
     "model.text_config.num_key_value_heads=5: must divide num_attention_heads=32 (each KV head serves an equal group of query heads)"),
    ({**GPT2, "n_layer": 0}, "model.n_layer=0: Input should be greater than 0"),
    # a number too large for any integer, in a field without a limit of its own (DeepSeek-V3's MLA rank)
    ({**json.loads(open("profiles/models/deepseek-v3.json").read()), "kv_lora_rank": 1e30},
     "model.kv_lora_rank=1e+30: must be a positive whole number of at most 9,223,372,036,854,775,807"),
], ids=["kv-heads", "layers-0", "ffn-1e30", "top-k", "text_config", "gpt2", "no-limit"])
def test_errors_name_the_config_json_key(tmp_path, cfg, message):
    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, cfg, "cfg")))
    assert str(err.value) == message


def test_autopar_model_files_keep_their_own_field_names(tmp_path):
    """The HF key names are for HF files only: an autopar model file's error names its own field."""
    path = tmp_path / "m.yaml"
    path.write_text("num_layers: 2\nhidden_size: 1024\nnum_attention_heads: 8\nnum_kv_heads: 3\nffn_hidden_size: 4096\nvocab_size: 32000\n")
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert str(err.value) == "model.num_kv_heads=3: must divide num_attention_heads=8 (each KV head serves an equal group of query heads)"
    path.write_text("num_layers: 2\nhidden_size: 1024\nnum_attention_heads: 8\nffn_hidden_size: 1.0e+30\nvocab_size: 32000\n")
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert str(err.value) == "model.ffn_hidden_size=1e+30: must be a positive whole number of at most 1,048,576"
