"""gpt-oss's clamped GLU in Megatron-Core before its fused grouped MLP (TrainingSpec.fused_clamped_glu):
Megatron-Core core_v0.16.0 megatron/core/fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl
chunks the experts' [N, 2F] fc1 output and runs clamp, clamp and torch.cat in eager kernels before
its compiled GLU; TE's ScaledClampedQGeGLU on the fused grouped MLP (2026-08) removes them. The
bytes are counted per routed F element (profiles/cost/defaults.yaml memory.eager_extra_bytes.clamped_glu):
forward 2 clamps x (2 + 2) + cat (4 + 4) = 16, backward 2 x (2 + 2 + 2) + 8 = 20."""

from __future__ import annotations

import pytest

from autopar.cost import make_batch
from autopar.cost.layer import layer_forward
from autopar.specs import TrainingSpec, parse_plan
from autopar.specs.model import load_model
from autopar.specs.training import MoeRouting


def _forward(model, node, params, fused: bool, layer: int = 1) -> tuple[dict, object]:
    training = TrainingSpec(seq_len=4096, global_batch_size=64, fused_clamped_glu=fused, moe_routing=MoeRouting.balanced)
    batch = make_batch(model, node, training, [parse_plan("ep=8,mbs=1")], params)
    return layer_forward(batch, layer), batch


def test_eager_clamp_bytes_per_routed_element(h100_node, params):
    """gpt-oss-120b (HF config: 128 experts, top-4, expert FFN 2880) at ep 8 on one H100 node,
    forced-balanced routing (no busiest-rank excess), mbs 1 x 4096 tokens: each rank runs 4096 x 4 routed rows of F = 2880, so the
    eager clamps add 16 B x 4096 x 4 x 2880 = 0.755 GB forward and 20 B x ... = 0.944 GB backward
    (hand count from the kernel list above), at the H100's 3.35 TB/s x hbm_efficiency 0.90."""
    model = load_model("gpt-oss-120b")
    assert model.swiglu_limit == pytest.approx(7.0)
    eager, batch = _forward(model, h100_node, params, fused=False)
    fused, _ = _forward(model, h100_node, params, fused=True)
    routed = 4096 * 4 * 2880  # tokens x top-k x F: all 128 experts' rows spread evenly over the 8 ranks
    rate = h100_node.gpu.hbm_bytes_per_second * params.memory.hbm_efficiency
    assert (eager["elem"] - fused["elem"])[0] == pytest.approx(16 * routed / rate, rel=0.02)
    assert (eager["elem_bwd"] - fused["elem_bwd"])[0] == pytest.approx(20 * routed / rate, rel=0.02)
    # recomputing moe_act reruns the clamps with the GLU: 3 B per element of the GLU + the 16
    assert (eager["moe_act_elem"] / fused["moe_act_elem"])[0] == pytest.approx((6 + 16) / 6, rel=0.02)


def test_no_clamp_no_bytes(h100_node, params):
    """A GLU without a clamp (Mixtral 8x7B) moves the same bytes either way."""
    model = load_model("mixtral-8x7b")
    assert model.swiglu_limit is None
    eager, _ = _forward(model, h100_node, params, fused=False, layer=0)
    fused, _ = _forward(model, h100_node, params, fused=True, layer=0)
    assert eager["elem"][0] == fused["elem"][0] and eager["elem_bwd"][0] == fused["elem_bwd"][0]
