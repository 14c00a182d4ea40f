"""The multi-token-prediction module's own work (DeepSeek-V3 report section 2.2): besides its
transformer layer and its pass through the shared output layer, each module projects the
concatenated [embedding; hidden] (2h) back to h (Megatron-Core MultiTokenPredictionLayer.eh_proj),
and holds that projection's 2h x h weights."""

from __future__ import annotations

import pytest

from autopar.cost import estimate
from autopar.cost.flops import attention_core_flops_per_token, layer_params
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import params_for_cluster
from autopar.specs.plan import Plan

H, V, SEQ, GBS = 2048, 32000, 4096, 64
BASE = dict(name="m", num_layers=4, hidden_size=H, num_attention_heads=16, ffn_hidden_size=8192, vocab_size=V)
CLUSTER = load_cluster("dgx-h100").with_gpus(8)
TRAINING = TrainingSpec(seq_len=SEQ, global_batch_size=GBS)
PLAN = Plan(tp=1, pp=1, dp=8, mbs=1)


def _run(mtp: int):
    model = ModelSpec(**BASE, mtp_num_layers=mtp)
    return model, estimate(model, CLUSTER, TRAINING, PLAN, params_for_cluster(CLUSTER))


def test_mtp_module_work_is_layer_logits_and_projection():
    model, with_mtp = _run(1)
    _, without = _run(0)
    # executed FLOPs per token (forward + backward = 3 x forward): the copied layer's matmuls
    # (its parameters less the two norms), its own logits GEMM (V x h) and the 2h x h projection,
    # 2 FLOPs per weight each, plus the layer's attention core, counted non-causal as HFU counts
    # it (autopar.cost.layer attn_flops_counted); hardware FLOPs are the step's, all GPUs
    matmul = layer_params(model, 3)[0] - 2 * H
    per_token = 3 * (2 * (matmul + V * H + 2 * H * H) + attention_core_flops_per_token(model, 3, SEQ, causal=False))
    extra = with_mtp.hardware_flops_per_step - without.hardware_flops_per_step
    assert extra == pytest.approx(per_token * SEQ * GBS, rel=1e-6)
    # the projection alone: 3 x 2 x 2h x h per token = 50.3e6 of the 946.9e6 (hand count above)
    assert 3 * 2 * 2 * H * H == 50_331_648


def test_mtp_projection_weights_are_held():
    # weights in bf16, ZeRO 1 over dp 8 leaves them whole: the copied layer plus 2h x h + 2 norms
    model, with_mtp = _run(1)
    _, without = _run(0)
    extra = with_mtp.memory_breakdown["weights"] - without.memory_breakdown["weights"]
    assert extra == pytest.approx(2 * (layer_params(model, 3)[0] + 2 * H * H + 2 * H), rel=1e-9)
