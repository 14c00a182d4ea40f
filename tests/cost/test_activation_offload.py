"""Fine-grained activation offloading (Megatron-Core --fine-grained-activation-offloading
--offload-modules; Megatron-LM docs/user-guide/features/fine_grained_activation_offloading.md):
the plan language, the bytes each module sends to host memory, the copy time that shows when the
host link is slower than the layer's compute, and the published run that needs it
(Megatron-MoE-ModelZoo Qwen3-235B on GB200, MXFP8: 'activation offloading required (expert_fc1,
moe_act)')."""

from __future__ import annotations

import pytest

from autopar.cost import estimate, make_batch
from autopar.cost.layer import layer_parts
from autopar.cost.memory import offloaded_bytes, saved_activation_bytes, stored_activation_bytes
from autopar.cost.moe import expert_load_factor
from autopar.errors import InputError
from autopar.specs import ModelSpec, TrainingSpec, parse_plan
from autopar.specs.plan import OffloadModule
from autopar.validation import load_rows
from autopar.validation.predict import predict_row
from autopar.validation.rows import row_inputs

S, H, E, K, FE = 4096, 4096, 8, 2, 14336  # Mixtral-8x7B-like MoE layer (seq, hidden, experts, top-k, expert FFN)
MOE = ModelSpec(name="moe-test", num_layers=4, hidden_size=H, num_attention_heads=32, num_kv_heads=8,
                ffn_hidden_size=FE, vocab_size=32000, num_experts=E, moe_top_k=K, moe_ffn_hidden_size=FE)
TRAINING = TrainingSpec(seq_len=S, global_batch_size=64, flash_attention=True)


def _batch(plan_text, node, params):
    return make_batch(MOE, node, TRAINING, [parse_plan(plan_text)], params)


def _host_link(node, gb_per_s):
    return node.model_copy(update={"gpu": node.gpu.model_copy(update={"pcie_gb_per_s": gb_per_s})})


def test_plan_text_round_trip():
    plan = parse_plan("recompute=selective,recompute_modules=layernorm+moe_act,offload=moe_act+expert_fc1")
    assert plan.offload_modules == (OffloadModule.expert_fc1, OffloadModule.moe_act)  # enum order
    assert "offload_modules=expert_fc1+moe_act" in plan.text()
    assert parse_plan(plan.text()).text() == plan.text()
    assert parse_plan("tp=2").offload_modules is None


@pytest.mark.parametrize("text, rule", [
    ("offload_modules=layer_input", "needs recompute=full"),
    ("offload_modules=experts", "^plan.offload_modules='experts': unknown module; known: "),
])
def test_plan_refuses_bad_offload(text, rule):
    with pytest.raises(InputError, match=rule):
        parse_plan(text)


def test_offloaded_bytes_are_the_modules_inputs(h100_node, params):
    """One MoE layer, tp=1 without SP, bf16 (2 B), gated experts (fc1 is 2 FE wide): expert_fc1's
    input is the k routed copies, 2 T k h; moe_act's input is each copy's fc1 output, 2 T k 2 FE;
    core_attn's inputs are Q (32 heads) and K, V (8 KV heads) of 128: 2 T (32 + 16) 128."""
    b = _batch("tp=1,recompute=selective,recompute_modules=layernorm+moe_act,offload_modules=expert_fc1+moe_act+core_attn",
               h100_node, params)
    copies = S * K * expert_load_factor(b)[0]
    expected = 2 * copies * H + 2 * copies * 2 * FE + 2 * S * (32 + 16) * 128
    assert offloaded_bytes(b, 0)[0] == pytest.approx(expected, rel=1e-9)
    assert stored_activation_bytes(b, 0)[0] == pytest.approx(saved_activation_bytes(b, 0)[0] - expected, rel=1e-9)


def test_recomputed_tensors_are_not_offloaded(h100_node, params):
    """A tensor selective recompute drops is not stored, so there is nothing to offload: the
    experts' tensors under moe recompute. The QKV input stays stored under layernorm recompute on
    a model without MLA: its input norm is fused into linear_qkv (Megatron-Core's TE layer spec,
    ModelSpec.separate_norms), so it is offloaded whole, 2 B x 4096 tokens x 4096 hidden."""
    b = _batch("tp=1,recompute=selective,recompute_modules=layernorm+moe,offload_modules=qkv_linear+expert_fc1+moe_act",
               h100_node, params)
    assert offloaded_bytes(b, 0)[0] == pytest.approx(2 * S * H)
    experts = _batch("tp=1,recompute=selective,recompute_modules=layernorm+moe,offload_modules=expert_fc1+moe_act", h100_node, params)
    assert offloaded_bytes(experts, 0)[0] == 0.0
    kept = _batch("tp=1,recompute=none,offload_modules=qkv_linear", h100_node, params)
    assert offloaded_bytes(kept, 0)[0] == pytest.approx(2 * S * H)


def test_memory_moves_to_host(h100_node, params):
    """dp=8, mbs 8, one micro-batch, pp=1 (one in flight): HBM activations fall by 4 layers x the
    offloaded bytes, host memory holds them, and two layers' worth stay in transit (working buffers)."""
    base = "tp=1,mbs=8,recompute=selective,recompute_modules=layernorm+moe_act"
    off = estimate(MOE, h100_node, TRAINING, parse_plan(base + ",offload_modules=expert_fc1"), params)
    on = estimate(MOE, h100_node, TRAINING, parse_plan(base), params)
    per_layer = offloaded_bytes(_batch(base + ",offload_modules=expert_fc1", h100_node, params), 0)[0]
    assert per_layer > 0
    assert on.memory_breakdown["activations"] - off.memory_breakdown["activations"] == pytest.approx(4 * per_layer, rel=1e-9)
    assert off.host_memory_bytes_per_gpu == pytest.approx(4 * per_layer, rel=1e-9)
    assert off.memory_breakdown["working_buffers"] - on.memory_breakdown["working_buffers"] == pytest.approx(2 * per_layer, rel=1e-9)
    assert on.host_memory_bytes_per_gpu == 0.0


def test_host_memory_capacity(h100_node, params):
    """The offloaded bytes must fit the GPU's share of the node's host memory (dgx-h100: 2 TB
    over 8 GPUs = 256 GB, NVIDIA DGX H100 user guide); a smaller share refuses the plan and
    names the field, an unknown share is not checked."""
    plan = parse_plan("tp=1,mbs=8,recompute=selective,recompute_modules=layernorm+moe_act,offload_modules=expert_fc1")
    assert h100_node.host_memory_gb_per_gpu == 256
    fits = estimate(MOE, h100_node, TRAINING, plan, params)
    host = fits.host_memory_bytes_per_gpu
    assert 0 < host < 256e9 and fits.feasible and fits.host_memory_capacity_bytes == 256e9
    small = h100_node.model_copy(update={"host_memory_gb_per_gpu": host / 2 / 1e9})
    refused = estimate(MOE, small, TRAINING, plan, params)
    assert not refused.feasible
    assert any("host_memory_gb_per_gpu" in r and f"{host / 1e9:.1f} GB" in r for r in refused.reasons)
    unknown = estimate(MOE, h100_node.model_copy(update={"host_memory_gb_per_gpu": None}), TRAINING, plan, params)
    assert unknown.feasible and unknown.host_memory_capacity_bytes is None


def test_copy_shows_only_when_slower_than_the_layer(h100_node, params):
    """Per token of one Mixtral-like layer the copies are 2 k h + 2 k 2 FE bytes = 131 kB and the
    forward is about 2 k 3 h FE = 0.7 GFLOP (about 1 us at H100 GEMM rates): a 225 GB/s host link
    (GB200's NVLink-C2C share) hides the copies behind forward and backward, PCIe Gen5 at 64 GB/s
    does not: each of the 4 layers exposes copy - forward on the way out and copy - backward on
    the way back (one micro-batch)."""
    plan = parse_plan("tp=1,mbs=8,recompute=none,offload_modules=expert_fc1+moe_act")
    fast = estimate(MOE, _host_link(h100_node, 225.0), TRAINING, plan, params)
    assert fast.time_breakdown["activation_offload"] == 0.0
    assert h100_node.gpu.pcie_gb_per_s == 64
    pcie = estimate(MOE, h100_node, TRAINING, plan, params)
    b = make_batch(MOE, h100_node, TRAINING, [plan], params)
    parts = layer_parts(b, 0)
    copy = offloaded_bytes(b, 0)[0] / 64e9
    expected = 4 * (max(copy - parts["fwd"][0], 0.0) + max(copy - parts["bwd"][0], 0.0))
    assert expected > 0
    assert pcie.time_breakdown["activation_offload"] == pytest.approx(expected, rel=1e-6)
    assert pcie.step_seconds == pytest.approx(fast.step_seconds + expected, rel=1e-6)


def test_layer_input_offload_empties_full_recompute(h100_node, params):
    """Full recompute keeps only each layer's input, 2 T h bytes; offloading it (layer_input)
    leaves no stored activation on the GPU, only the layer rebuilt in backward and the copies in transit."""
    full = estimate(MOE, h100_node, TRAINING, parse_plan("tp=1,mbs=8,recompute=full"), params)
    off = estimate(MOE, h100_node, TRAINING, parse_plan("tp=1,mbs=8,recompute=full,offload_modules=layer_input"), params)
    per_layer = 2 * 8 * S * H
    assert full.memory_breakdown["activations"] == pytest.approx(4 * per_layer, rel=1e-9)
    assert off.memory_breakdown["activations"] == 0.0
    assert off.host_memory_bytes_per_gpu == pytest.approx(4 * per_layer, rel=1e-9)


def test_modelzoo_gb200_mxfp8_row_fits_with_its_offload():
    """ModelZoo Qwen3-235B on 256 GB200, TP1 PP4 VPP6 EP64 MBS3, MXFP8, 'activation offloading
    required (expert_fc1, moe_act)': the layout needed 217.3 GB of the 198.7 GB HBM without the
    offload; with it the model puts it at about 110 GB (96 GB of expert inputs go to Grace memory,
    480 GB per two GPUs) and the row is within 20% of the published throughput."""
    row = next(r for r in load_rows("tests/data/moe_runs.json") if r["id"] == "new-modelzoo-qwen3-235b-gb200-mxfp8")
    assert row_inputs(row).plan_fields["offload_modules"] == ("expert_fc1", "moe_act")
    result = predict_row(row)
    assert result.feasible
    assert 90 < result.predicted_memory_gb < 130
    assert "offload_modules=expert_fc1+moe_act" in result.plan
    assert abs(result.error) < 0.20
    inputs = row_inputs(row)
    without = estimate(inputs.model, inputs.cluster, inputs.training,
                       parse_plan(result.plan.replace(",offload_modules=expert_fc1+moe_act", "")), None)
    assert without.memory_bytes_per_gpu > inputs.cluster.gpu.hbm_bytes
    withit = estimate(inputs.model, inputs.cluster, inputs.training, parse_plan(result.plan), None)
    assert 80e9 < withit.host_memory_bytes_per_gpu < 240e9
