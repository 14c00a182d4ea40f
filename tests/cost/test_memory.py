"""Memory model: activations tensor by tensor against Korthikanti et al. 2022 (section 4,
table 2), in-flight micro-batches by schedule, and ZeRO sharding."""

from __future__ import annotations

import pytest

from autopar.cost import estimate, make_batch
from autopar.cost.flops import total_params
from autopar.cost.memory import in_flight_microbatches, layer_activation_bytes, recomputed_input_bytes, stored_activation_bytes
from autopar.specs import ModelSpec, TrainingSpec, load_model, parse_plan
from autopar.specs.plan import Schedule
from autopar.specs.training import Stack

S, H, A, B = 2048, 4096, 32, 1  # sequence, hidden, heads, micro-batch (legend of the paper)
GPT = ModelSpec(name="gpt-korthikanti", num_layers=8, hidden_size=H, num_attention_heads=A,
                ffn_hidden_size=4 * H, gated_mlp=False, vocab_size=51200, dropout=True)


def _batch(plan_text, h100_node, params, model=GPT, flash=False):
    training = TrainingSpec(seq_len=S, global_batch_size=64, flash_attention=flash)
    return make_batch(model, h100_node, training, [parse_plan(plan_text)], params)


@pytest.mark.parametrize(
    "plan, expected_per_sbh",
    [
        # Korthikanti eq. 1: no parallelism, s b h (34 + 5 a s / h)
        ("tp=1,mbs=1", 34 + 5 * A * S / H),
        # eq. 2: tensor parallel, no SP: s b h (10 + 24/t + 5 a s / (h t))
        ("tp=8,sp=off", 10 + 24 / 8 + 5 * A * S / (H * 8)),
        # eq. 4: tensor + sequence parallel: s b h / t (34 + 5 a s / h)
        ("tp=8,sp=on", (34 + 5 * A * S / H) / 8),
    ],
)
def test_activations_match_korthikanti(plan, expected_per_sbh, h100_node, params):
    b = _batch(plan, h100_node, params)
    assert layer_activation_bytes(b, 0)[0] == pytest.approx(S * B * H * expected_per_sbh)


def test_selective_recompute_keeps_34_sbh_over_t(h100_node, params):
    # Korthikanti eq. 5 (selective + SP): 34 s b h / t
    b = _batch("tp=8,recompute=selective", h100_node, params)
    assert stored_activation_bytes(b, 0)[0] == pytest.approx(34 * S * B * H / 8)


def test_full_recompute_keeps_layer_input(h100_node, params):
    # Korthikanti section 4.3: full recompute stores 2 s b h per layer (/t with SP)
    b = _batch("tp=8,recompute=full", h100_node, params)
    assert recomputed_input_bytes(b)[0] == pytest.approx(2 * S * B * H / 8)


def test_flash_attention_drops_score_matrix(h100_node, params):
    # flash kernels keep O plus fp32 log-sum-exp (4 bytes per query per head) instead of 5 a s^2 b
    b = _batch("tp=1", h100_node, params, flash=True)
    assert layer_activation_bytes(b, 0)[0] == pytest.approx(S * B * H * 34 + 4 * S * A)


def test_gqa_and_swiglu_change_the_constant(h100_node, params):
    # LLaMA-3 8B layer: h 4096, a 32, g 8, F 14336, SwiGLU, no dropout, flash, tp=1:
    # norms+inputs 8h, Q 2h, K+V 2*2*h/4, O 2h, fc1 2*2F, act 2F, lse 4a per token
    m = load_model("llama3-8b")
    b = _batch("tp=1", h100_node, params, model=m, flash=True)
    h, f, a = 4096, 14336, 32
    per_token = 8 * h + 2 * h + 2 * 2 * h / 4 + 2 * h + 4 * f + 2 * f + 4 * a
    assert layer_activation_bytes(b, 0)[0] == pytest.approx(S * per_token)


@pytest.mark.parametrize(
    "p, v, schedule, stage, expected",
    [
        (8, 1, Schedule.one_f_one_b, 0, 8),  # 1F1B: stage 0 holds p micro-batches
        (8, 1, Schedule.one_f_one_b, 7, 1),  # last stage holds one
        (8, 4, Schedule.interleaved, 0, 8 + 7 / 4),  # p (1 + (p-1)/(p v)) (docs/design.md, Narayanan 2021)
        (8, 1, Schedule.gpipe, 0, 32),  # GPipe holds all m (seed 000 footnote 7)
        (8, 1, Schedule.zero_bubble, 0, 15),  # ZB-H2: 2p - 1
    ],
)
def test_in_flight_microbatches(p, v, schedule, stage, expected):
    assert float(in_flight_microbatches(stage, p, 32, v, schedule)) == pytest.approx(expected)


def test_zero3_shards_all_static_state(superpod, params):
    # seed 000 'ZeRO: экономия памяти': 16 bytes/param / N with ZeRO-3 (7B, 64 GPUs -> ~1.7 GB), the
    # ZeRO paper's 2 + 2 + 12 convention, as DeepSpeed keeps it
    model = load_model("llama2-7b")
    cluster = superpod.with_gpus(64)
    training = TrainingSpec(seq_len=4096, global_batch_size=64, stack=Stack.deepspeed)
    mem = estimate(model, cluster, training, parse_plan("zero=3"), params).memory_breakdown
    static = mem["weights"] + mem["gradients"] + mem["optimizer_states"]
    assert static == pytest.approx(total_params(model) * 16 / 64, rel=1e-6)
    assert static / 1e9 == pytest.approx(1.75, abs=0.07)  # 6.74B params, not a round 7B


def test_zero1_shards_only_optimizer(superpod, params):
    model = load_model("llama2-7b")
    cluster = superpod.with_gpus(64)
    training = TrainingSpec(seq_len=4096, global_batch_size=64, stack=Stack.deepspeed)
    mem = estimate(model, cluster, training, parse_plan("zero=1"), params).memory_breakdown
    n = total_params(model)
    assert mem["weights"] == pytest.approx(2 * n) and mem["gradients"] == pytest.approx(2 * n)
    assert mem["optimizer_states"] == pytest.approx(12 * n / 64)


@pytest.mark.parametrize(
    "reduce_bytes, zero, per_param, per_param_sharded",
    [
        (4.0, 1, 6, 12),  # bf16 parameters, fp32 gradients, distributed optimizer: 6 + 12/d
        (4.0, 0, 18, 0),  # no distributed optimizer: 18
        # 16-bit gradients (--grad-reduce-in-bf16): 4 + 12/d; the table's 4 + 16/d adds the fp32
        # copy of the gradient shard the optimizer step makes after the activations are freed
        (2.0, 1, 4, 12),
    ],
)
def test_megatron_keeps_main_gradients_in_the_reduction_dtype(superpod, params, reduce_bytes, zero, per_param, per_param_sharded):
    # Megatron-LM docs/user-guide/features/dist_optimizer.md, bytes per parameter (d = data parallel
    # size); Megatron-Core's grad buffer is fp32 exactly when the reduction is
    model = load_model("llama2-7b")
    cluster = superpod.with_gpus(64)
    training = TrainingSpec(seq_len=4096, global_batch_size=64, stack=Stack.megatron, grad_reduce_bytes_per_param=reduce_bytes)
    mem = estimate(model, cluster, training, parse_plan(f"zero={zero}"), params).memory_breakdown
    n = total_params(model)
    static = mem["weights"] + mem["gradients"] + mem["optimizer_states"]
    assert static == pytest.approx(n * (per_param + per_param_sharded / 64), rel=1e-6)


@pytest.mark.parametrize(
    "preset, billions, tol",
    [
        ("llama2-7b", 6.74, 0.01),  # Touvron et al. 2023: 6.7B
        ("llama3-70b", 70.55, 0.05),  # Meta model card: 70B (70.55B with embeddings)
        ("llama3-405b", 405.8, 0.2),  # Dubey et al. 2024: 405B
        ("mixtral-8x7b", 46.7, 0.1),  # Mistral AI: 46.7B total
        ("deepseek-v3", 685.0, 3.0),  # DeepSeek-V3 README: 685B = 671B main model + 14B MTP module
        ("gpt3-175b", 174.6, 0.5),  # Brown et al. 2020: 175B
    ],
)
def test_parameter_counts(preset, billions, tol):
    assert total_params(load_model(preset)) / 1e9 == pytest.approx(billions, abs=tol)


def test_moe_capacity_factor_scales_routed_activations(h100_node, params):
    # Mixtral layer, tp=1, learned routing 1.5x over the mean: token dropping caps the busiest
    # rank's routed rows at T k cap, each storing the expert input (h), the gated FC1 output (2F)
    # and the activation output (F) in bf16 (seed 000 'Параллелизм экспертов': C = 1.25-1.5)
    m = load_model("mixtral-8x7b")
    rows = {}
    for cap in (1.0, 1.25):
        training = TrainingSpec(seq_len=4096, global_batch_size=8, moe_capacity_factor=cap, moe_load_imbalance=1.5)
        rows[cap] = layer_activation_bytes(make_batch(m, h100_node, training, [parse_plan("tp=1")], params), 0)[0]
    h, f, k, T = 4096, 14336, 2, 4096
    assert rows[1.25] - rows[1.0] == pytest.approx(0.25 * T * k * 2 * (h + 2 * f + f))


@pytest.mark.parametrize("stack, saves_fp8", [("megatron", True), ("torchtitan", False)])
def test_fp8_stack_keeps_linear_inputs_in_one_byte(stack, saves_fp8, h100_node, params):
    # Transformer Engine keeps the FP8 copy it cast of each linear layer's input for the weight
    # gradient (linear.py: saved_inputmat = inputmat, the FP8 tensor); torchao keeps bf16. Per
    # s b h with flash attention, no dropout, tp 1 (Korthikanti terms): QKV input 2 -> 1, MLP input
    # 2 -> 1, fc2 input (4h) 8 -> 4, and the attention output gets a 1-byte copy beside its bf16
    # one (the fused kernel's backward reads it): -1 -1 -4 +1 = -5 s b h
    from autopar.specs.training import Precision, Stack
    model = GPT.model_copy(update={"dropout": False})
    def stored(precision):
        training = TrainingSpec(seq_len=S, global_batch_size=64, flash_attention=True, precision=precision, stack=Stack(stack))
        return layer_activation_bytes(make_batch(model, h100_node, training, [parse_plan("tp=1,mbs=1")], params), 0)[0]
    saved = stored(Precision.bf16) - stored(Precision.fp8)
    assert saved == pytest.approx(5 * S * B * H if saves_fp8 else 0.0)


def test_nvfp4_stack_keeps_linear_inputs_in_nvfp4(params):
    # Transformer Engine saves the quantized copy for any recipe (linear.py keeps the column-wise
    # data of inputmat); NVFP4 packs two E2M1 values per byte plus an E4M3 scale per 16 elements:
    # 0.5 + 1/16 = 0.5625 B. Per s b h as in the FP8 test: QKV input 2 -> 0.5625, MLP input
    # 2 -> 0.5625, fc2 input 8 -> 2.25, attention output +0.5625: 1.4375 + 1.4375 + 5.75 - 0.5625
    # = 8.0625 s b h
    from autopar.specs import load_cluster
    from autopar.specs.training import Precision, Stack
    model = GPT.model_copy(update={"dropout": False})
    node = load_cluster("dgx-b200")
    def stored(precision):
        training = TrainingSpec(seq_len=S, global_batch_size=64, flash_attention=True, precision=precision, stack=Stack("megatron"))
        return layer_activation_bytes(make_batch(model, node, training, [parse_plan("tp=1,mbs=1")], params), 0)[0]
    assert stored(Precision.bf16) - stored(Precision.fp4) == pytest.approx(8.0625 * S * B * H)


def test_zero3_gathers_nothing_for_experts_it_does_not_shard():
    # ZeRO-3 keeps two gathered layers in hand (the one computing and the prefetched next); routed
    # experts whose expert-data-parallel group is one rank (ep = dp = 64) are whole on their rank and
    # used in place. Hand count: 64 experts x 3 x 1024 x 512 = 100.7e6 routed parameters per layer;
    # at ep 32 (expert-data-parallel 2) each rank gathers 100.7e6 / 32 = 3.15e6 of them, twice, in
    # bf16: 2 x 3.15e6 x 2 B = 12.58 MB more working buffer than at ep 64, which gathers none
    from autopar.cost import estimate
    from autopar.specs import ModelSpec, TrainingSpec, load_cluster
    from autopar.specs.costparams import params_for_cluster
    from autopar.specs.plan import Plan
    moe = ModelSpec(name="m", num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, vocab_size=32000,
                    num_experts=64, moe_top_k=8, moe_ffn_hidden_size=512)
    cluster = load_cluster("dgx-h100").with_gpus(64)
    t = TrainingSpec(seq_len=4096, global_batch_size=64)
    buffers = {ep: estimate(moe, cluster, t, Plan(tp=1, pp=1, dp=64, ep=ep, zero=3), params_for_cluster(cluster))
               .memory_breakdown["working_buffers"] for ep in (32, 64)}
    assert buffers[32] - buffers[64] == pytest.approx(2 * 2 * 64 * 3 * 1024 * 512 / 32, rel=1e-6)
