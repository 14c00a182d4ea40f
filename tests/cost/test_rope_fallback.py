"""RoPE left to eager kernels under torch.compile (StackSpec.rope_complex_fallback): torchtitan's
apply_rotary_emb multiplies Q and K as complex fp32 numbers (view_as_complex; torchtitan@9dec370
torchtitan/models/llama/model.py L108-109), and Inductor generates no code for complex operators
(torch/_inductor/lowering.py make_fallback(aten.view_as_complex)). So a compiled torchtitan block
fuses its norms and SiLU x mul but still moves eager RoPE's bytes."""

from __future__ import annotations

import pytest

from autopar.cost import make_batch
from autopar.cost.layer import layer_forward
from autopar.specs import ModelSpec, TrainingSpec, parse_plan
from autopar.specs.stack import load_stack
from autopar.specs.training import Stack

S, H = 8192, 4096
# Llama 3 8B's layer (Llama 3 paper Table 3): 32 query heads, 8 KV heads of 128
LLAMA8B = ModelSpec(name="llama3-8b", num_layers=2, hidden_size=H, num_attention_heads=32, num_kv_heads=8,
                    ffn_hidden_size=14336, vocab_size=128256)


def _forward(model: ModelSpec, plan: str, node, params, fallback: bool) -> dict:
    training = TrainingSpec(seq_len=S, global_batch_size=64, flash_attention=True, stack=Stack.torchtitan_compile)
    batch = make_batch(model, node, training, [parse_plan(plan)], params)
    batch.__dict__["stack"] = load_stack(Stack.torchtitan_compile).model_copy(update={"rope_complex_fallback": fallback})
    return layer_forward(batch, 0)


def test_compiled_torchtitan_falls_back():
    assert load_stack(Stack.torchtitan_compile).rope_complex_fallback
    assert not load_stack(Stack.megatron).rope_complex_fallback  # TE's fused RoPE kernel


@pytest.mark.parametrize("plan,width", [
    # tp 1: q 32 x 128 = 4096 and k 8 x 128 = 1024 elements per token
    ("tp=1", 4096 + 1024),
    # tp 8: q 512 and k 128 per rank
    ("tp=8", 512 + 128),
])
def test_eager_rope_bytes(h100_node, params, plan, width):
    on = _forward(LLAMA8B, plan, h100_node, params, True)
    off = _forward(LLAMA8B, plan, h100_node, params, False)
    # memory.eager_extra_bytes.rope: cast to fp32, complex mul, cast back: 20 B against the fused
    # kernel's 4 per element forward (+16), 21 against 4 backward (+17); H100 3.35 TB/s at
    # memory.hbm_efficiency 0.90. tp 1: 8,192 x 5,120 x 16 B = 671 MB -> 222.6 us forward
    hbm = 3.35e12 * 0.90
    assert on["elem"][0] - off["elem"][0] == pytest.approx(16 * width * S / hbm, rel=1e-9)
    assert on["elem_bwd"][0] - off["elem_bwd"][0] == pytest.approx(17 * width * S / hbm, rel=1e-9)
    if plan == "tp=1":
        assert on["elem"][0] - off["elem"][0] == pytest.approx(222.6e-6, rel=1e-3)


def test_no_rope_no_bytes(h100_node, params):
    # a model with learned absolute positions has no RoPE to fall back
    gpt = LLAMA8B.model_copy(update={"position_embedding": "learned_absolute"})
    on = _forward(gpt, "tp=1", h100_node, params, True)
    off = _forward(gpt, "tp=1", h100_node, params, False)
    assert on["elem"][0] == off["elem"][0]
