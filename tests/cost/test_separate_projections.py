"""Separate input projections (StackSpec.separate_projections): torchtitan's Llama runs wq, wk,
wv and w1, w3 as separate nn.Linear layers on one input (torchtitan models/llama3/model.py,
2024-12 to 2025-06), where Megatron runs one fused linear_qkv and one linear_fc1. Each narrower
GEMM runs at its own efficiency, and the backward sums the layers' input gradients."""

from __future__ import annotations

import pytest

from autopar.cost import make_batch
from autopar.cost.flops import projection_shares
from autopar.cost.gemm import gemm_seconds
from autopar.cost.layer import layer_forward
from autopar.specs import ModelSpec, TrainingSpec, parse_plan
from autopar.specs.stack import load_stack
from autopar.specs.training import Stack

S, H = 8192, 4096
# Llama 3 8B's layer (Llama 3 paper Table 3): 32 query heads, 8 KV heads of 128, SwiGLU 14336
LLAMA8B = ModelSpec(name="llama3-8b", num_layers=2, hidden_size=H, num_attention_heads=32, num_kv_heads=8,
                    ffn_hidden_size=14336, vocab_size=128256)


def _forward(stack: Stack, plan: str, node, params, separate: bool) -> dict:
    training = TrainingSpec(seq_len=S, global_batch_size=64, flash_attention=True, stack=stack)
    batch = make_batch(LLAMA8B, node, training, [parse_plan(plan)], params)
    batch.__dict__["stack"] = load_stack(stack).model_copy(update={"separate_projections": separate})
    return layer_forward(batch, 0)


def test_shares():
    # q 32 x 128 = 4096 wide, k and v 8 x 128 = 1024 each: 4096 / 6144 and 1024 / 6144
    assert projection_shares("attention/qkv", LLAMA8B) == pytest.approx((2 / 3, 1 / 6, 1 / 6), rel=1e-12)
    assert projection_shares("mlp/fc1", LLAMA8B) == (0.5, 0.5)
    assert projection_shares("mlp/fc2", LLAMA8B) == (1.0,)
    mpt = LLAMA8B.model_copy(update={"gated_mlp": False})  # a non-gated MLP has one input projection
    assert projection_shares("mlp/fc1", mpt) == (1.0,)


def test_narrower_gemms_cost_more(h100_node, params):
    sep = _forward(Stack.torchtitan_compile, "tp=8", h100_node, params, True)
    fused = _forward(Stack.torchtitan_compile, "tp=8", h100_node, params, False)
    # tp 8, 8,192 tokens: fused qkv 8192 x 768 x 4096 = 5.15e10 FLOP at 0.803 x 5.15e10 / (5.15e10 +
    # 1e10) of 989.4 TFLOP/s: 77.4 us. Separate: q (512 wide) 3.44e10 FLOP at 0.622: 55.8 us; k and v
    # (128 wide) 8.6e9 FLOP at 0.371: 23.4 us each (their 70 MB of HBM traffic take 23.3 us):
    # 102.6 us, 1.33x. The gated fc1 (3584 wide) splits into two 1792-wide GEMMs
    g = lambda m, n, k: gemm_seconds(m, n, k, "bf16", h100_node.gpu, params)  # noqa: E731
    assert g(S, 128, H) == pytest.approx(23.4e-6, rel=0.01)
    qkv_sep = g(S, 512, H) + 2 * g(S, 128, H)
    assert qkv_sep / g(S, 768, H) == pytest.approx(1.33, rel=0.01)
    expected = qkv_sep - g(S, 768, H) + 2 * g(S, 1792, H) - g(S, 3584, H)
    assert sep["gemm"][0] - fused["gemm"][0] == pytest.approx(expected, rel=1e-9)
    assert sep["gemm_flops"] == fused["gemm_flops"]  # the same work, split


@pytest.mark.parametrize("stack,plan,transfers", [
    # compiled, tp 8: one sum kernel before the ReduceScatter reads p and writes 1: 4 (q, k, v)
    # + 3 (w1, w3) element transfers per input element
    (Stack.torchtitan_compile, "tp=8", 7),
    # compiled, tp 1: the sum folds into the norm's backward, p - 1 more reads: 2 + 1
    (Stack.torchtitan_compile, "tp=1", 3),
    # eager autograd accumulates pairwise, 3 per add: 3 x 2 + 3 x 1
    (Stack.torchtitan, "tp=8", 9),
])
def test_input_gradient_sums(h100_node, params, stack, plan, transfers):
    sep = _forward(stack, plan, h100_node, params, True)
    fused = _forward(stack, plan, h100_node, params, False)
    # 8,192 tokens x 4,096 inputs x 2 B = 67.1 MB per transfer: 7 -> 470 MB, 3 -> 201 MB, 9 -> 604 MB
    extra = transfers * 2 * S * H
    hbm = h100_node.gpu.hbm_bytes_per_second * params.memory.hbm_efficiency
    assert sep["elem_bwd"][0] - fused["elem_bwd"][0] == pytest.approx(extra / hbm, rel=1e-9)
    assert sep["elem"][0] == pytest.approx(fused["elem"][0], rel=1e-12)  # the forward reads one input once per layer
