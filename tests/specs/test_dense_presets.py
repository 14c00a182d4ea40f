"""Dense model presets (profiles/models, provenance in SOURCES.md): each one's parameter count
against its model card, counted by hand from the config's dims, and the names benchmark tables
give it resolving to it (autopar.validation.rows.preset_key_for_name)."""

from __future__ import annotations

import pytest

from autopar.cost.flops import total_params
from autopar.specs import load_model
from autopar.validation.rows import preset_key_for_name

# Hand counts: L x (attention + MLP + norms) + embeddings (x2 untied) + final norm, with
# attention = h a d + 2 h g d (K, V) + a d h (output) and a gated MLP 3 h f. autopar's count has
# no linear biases and no per-head QK-norm weights: Qwen2.5's QKV biases (a d + 2 g d a layer)
# and Qwen3's q/k norms (2 d a layer) are in the hub count but not in total_params, so the
# comments give both.
COUNTS = [
    # Llama-2-13B card / paper (Touvron et al. 2023): 13B. 40 x (4 x 5120^2 + 3 x 5120 x 13824
    # + 2 x 5120) + 2 x 32000 x 5120 + 5120 = 40 x 317,204,480 + 327,680,000 + 5120
    ("llama2-13b", 13_015_864_320, 13.0, 0.05),
    # Qwen2.5-7B card: 7.61B. 28 x (29,360,128 + 3 x 3584 x 18944 + 7168) + 2 x 152064 x 3584 + 3584
    # = 7,615,487,488; + 28 x 4608 QKV biases = 7,615,616,512 (hub)
    ("qwen2.5-7b", 7_615_487_488, 7.61, 0.01),
    # Qwen2.5-14B card: 14.7B. 48 x (62,914,560 + 3 x 5120 x 13824 + 10240) + 2 x 152064 x 5120 + 5120
    # = 14,769,689,600; + 48 x 7168 QKV biases = 14,770,033,664
    ("qwen2.5-14b", 14_769_689_600, 14.7, 0.1),
    # Qwen2.5-32B card: 32.5B (rounded; hub safetensors 32.8B). 64 x (62,914,560 + 3 x 5120 x 27648
    # + 10240) + 1,557,135,360 + 5120 = 32,763,417,600; + 64 x 7168 QKV biases = 32,763,876,352
    ("qwen2.5-32b", 32_763_417_600, 32.76, 0.05),
    # Qwen2.5-72B card: 72.7B. 80 x (2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 29568 + 16384)
    # + 2 x 152064 x 8192 + 8192 = 72,705,384,448; + 80 x 10240 QKV biases = 72,706,203,648
    ("qwen2.5-72b", 72_705_384_448, 72.7, 0.05),
    # Mistral-7B-v0.1 (Jiang et al. 2023, "Mistral 7B"; announcement: 7.3B; hub 7.24B).
    # 32 x (41,943,040 + 3 x 4096 x 14336 + 8192) + 2 x 32000 x 4096 + 4096
    ("mistral-7b", 7_241_732_096, 7.24, 0.01),
    # Mistral-7B-v0.2: v0.1's weights shapes (the card changes context, rope_theta and the window
    # only); v0.3 adds 768 tokens to the 32,000 vocabulary: + 2 x 768 x 4096 = 7,248,023,552 (card 7.25B)
    ("mistral-7b-v0.2", 7_241_732_096, 7.24, 0.01),
    ("mistral-7b-v0.3", 7_248_023_552, 7.25, 0.01),
    # Mistral-NeMo-Base-2407 card: 12B. head_dim 128: attention 2 x 5120 x 4096 + 2 x 5120 x 1024.
    # 40 x (52,428,800 + 3 x 5120 x 14336 + 10240) + 2 x 131072 x 5120 + 5120
    ("mistral-nemo-12b", 12_247_782_400, 12.25, 0.05),
    # Mistral-Small-24B-Base-2501 card: 24B. 40 x (52,428,800 + 3 x 5120 x 32768 + 10240)
    # + 1,342,177,280 + 5120
    ("mistral-small-24b", 23_572_403_200, 23.57, 0.05),
    # Qwen3-8B card: 8.2B. 36 x (41,943,040 + 3 x 4096 x 12288 + 8192) + 2 x 151936 x 4096 + 4096
    # = 8,190,726,144; + 36 x 256 q/k-norm weights = 8,190,735,360 (hub)
    ("qwen3-8b", 8_190_726_144, 8.2, 0.02),
    # Qwen3-14B card: 14.8B. 40 x (62,914,560 + 3 x 5120 x 17408 + 10240) + 2 x 151936 x 5120 + 5120
    # = 14,768,296,960; + 40 x 256 = 14,768,307,200
    ("qwen3-14b", 14_768_296_960, 14.8, 0.05),
    # Qwen3-32B card: 32.8B. 64 x (2 x 5120 x 8192 + 2 x 5120 x 1024 + 3 x 5120 x 25600 + 10240)
    # + 1,555,824,640 + 5120 = 32,762,106,880; + 64 x 256 = 32,762,123,264
    ("qwen3-32b", 32_762_106_880, 32.8, 0.05),
    # Llama-3.2-1B card: 1.23B. Tied: 16 x (2 x 2048 x 2048 + 2 x 2048 x 512 + 3 x 2048 x 8192 + 4096)
    # + 128256 x 2048 + 2048
    ("llama3-1b", 1_235_814_400, 1.23, 0.01),
    # Llama-3.2-3B card: 3.21B. Tied: 28 x (2 x 3072^2 + 2 x 3072 x 1024 + 3 x 3072 x 8192 + 6144)
    # + 128256 x 3072 + 3072
    ("llama3-3b", 3_212_749_824, 3.21, 0.01),
]


@pytest.mark.parametrize("preset, exact, billions, tol", COUNTS)
def test_dense_preset_parameter_count(preset, exact, billions, tol):
    n = total_params(load_model(preset))
    assert n == exact
    assert n / 1e9 == pytest.approx(billions, abs=tol)


@pytest.mark.parametrize(
    "preset, checks",
    [
        ("qwen2.5-7b", dict(qkv_bias=True, qk_layernorm=False, tied_embeddings=False, num_kv_heads=4)),
        ("qwen2.5-72b", dict(qkv_bias=True, qk_layernorm=False, tied_embeddings=False, norm_eps=1e-5)),
        ("qwen3-14b", dict(qkv_bias=False, qk_layernorm=True, head_dim=128)),
        ("mistral-7b", dict(attention_window=4096, global_attention_layers=())),  # v0.1: every layer slides
        # v0.2 card: "Rope-theta = 1e6, No Sliding-Window Attention"; v0.3 card: "Extended vocabulary to 32768"
        ("mistral-7b-v0.2", dict(attention_window=None, rope_theta=1e6, vocab_size=32000, max_position_embeddings=32768)),
        ("mistral-7b-v0.3", dict(attention_window=None, rope_theta=1e6, vocab_size=32768)),
        ("mistral-nemo-12b", dict(head_dim=128, attention_window=None)),
        ("mistral-small-24b", dict(head_dim=128, rope_theta=1e8)),
        ("llama3-1b", dict(tied_embeddings=True, head_dim=64)),
        ("llama3-3b", dict(tied_embeddings=True)),
        ("llama2-13b", dict(num_kv_heads=40, tied_embeddings=False, max_position_embeddings=4096)),
    ],
)
def test_dense_preset_architecture(preset, checks):
    m = load_model(preset)
    assert {k: getattr(m, k) for k in checks} == checks


@pytest.mark.parametrize(
    "names, preset",
    [
        (["Llama-2-13b-hf", "meta-llama/Llama-2-13b-hf", "Llama 2 13B", "LLAMA2-13B"], "llama2-13b"),
        (["Qwen2.5-7B", "Qwen/Qwen2.5-7B-Instruct", "Qwen 2.5 7B"], "qwen2.5-7b"),
        (["Qwen2.5-14B", "Qwen/Qwen2.5-14B", "qwen2.5-14b-instruct"], "qwen2.5-14b"),
        (["Qwen2.5-32B", "Qwen/Qwen2.5-32B-Instruct", "Qwen 2.5 32B"], "qwen2.5-32b"),
        (["Qwen2.5-72B", "Qwen/Qwen2.5-72B-Instruct", "Qwen 2.5 72B"], "qwen2.5-72b"),
        (["Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1", "Mistral 7B"], "mistral-7b"),
        (["Mistral-7B-v0.2", "mistralai/Mistral-7B-Instruct-v0.2", "Mistral 7B Instruct v0.2", "mistral-7b-v0.2"], "mistral-7b-v0.2"),
        (["Mistral-7B-v0.3", "mistralai/Mistral-7B-Instruct-v0.3", "Mistral 7B v0.3", "mistral_7b_base_v0.3"], "mistral-7b-v0.3"),
        (["Mistral-NeMo-12B", "Mistral Nemo 12B", "mistral-nemo-12b", "mistralai/Mistral-Nemo-Base-2407", "Mistral NeMo"], "mistral-nemo-12b"),
        (["Mistral-Small-24B-Base-2501", "mistralai/Mistral-Small-24B-Base-2501", "Mistral Small 24B", "Mistral Small 3.1"], "mistral-small-24b"),
        (["Qwen3-8B", "Qwen/Qwen3-8B-Base", "Qwen3 8B"], "qwen3-8b"),
        (["Qwen3-14B", "Qwen/Qwen3-14B", "Qwen3 14B"], "qwen3-14b"),
        (["Qwen3-32B", "Qwen/Qwen3-32B", "Qwen3 32B"], "qwen3-32b"),
        (["Llama 3.2 1B", "meta-llama/Llama-3.2-1B", "Llama-3.2-1B-Instruct"], "llama3-1b"),
        (["Llama 3.2 3B", "meta-llama/Llama-3.2-3B", "Llama3.2-3B"], "llama3-3b"),
    ],
)
def test_dense_preset_names_resolve(names, preset):
    assert {n: preset_key_for_name(n) for n in names} == dict.fromkeys(names, preset)


def test_new_presets_leave_other_names_alone():
    # the names that resolved before these presets still do, to the same files; sizes without a
    # preset stay unresolved (Llama 3.1 8B is the Llama 3 8B preset, Qwen3-30B the MoE)
    assert preset_key_for_name("Llama 3.1 8B") == "llama3-8b"
    assert preset_key_for_name("Qwen3-30B") == "qwen3-30b-a3b"
    assert preset_key_for_name("Mixtral-8x7B") == "mixtral-8x7b"
    assert preset_key_for_name("Qwen2-72B") is None
    assert preset_key_for_name("Mistral Small 2409") is None  # 22B, another model than Small 3's 24B
    assert preset_key_for_name("Llama 2 34B (CodeLlama-34B dims)") is None
