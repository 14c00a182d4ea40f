"""Invariants of the cost model over random legal plans (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autopar.cost import estimate
from autopar.cost.rules import plan_violations
from autopar.specs import Plan, TrainingSpec, load_cluster, load_model
from autopar.specs.plan import CpAlgo, Recompute

MODELS = {name: load_model(name) for name in ("llama3-8b", "mixtral-8x7b", "gpt2-xl")}
CLUSTER = load_cluster("dgx-h100-superpod")
TWO = [1, 2, 4, 8]


@st.composite
def cases(draw):
    model = MODELS[draw(st.sampled_from(sorted(MODELS)))]
    gpus = draw(st.sampled_from([8, 16, 32]))
    tp, pp, cp = draw(st.sampled_from(TWO)), draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2]))
    assume(gpus % (tp * pp * cp) == 0)
    dp = gpus // (tp * pp * cp)
    ep = draw(st.sampled_from([1, 2, 4, 8])) if model.is_moe else 1
    plan = Plan(
        tp=tp, pp=pp, cp=cp, ep=ep, mbs=draw(st.sampled_from([1, 2])),
        vpp=draw(st.sampled_from([1, 2])) if pp > 1 else 1,
        zero=draw(st.sampled_from([0, 1])) if pp > 1 else draw(st.sampled_from([0, 1, 2, 3])),
        recompute=draw(st.sampled_from(list(Recompute))), cp_algo=draw(st.sampled_from([CpAlgo.ring, CpAlgo.ulysses])),
    )
    training = TrainingSpec(seq_len=draw(st.sampled_from([2048, 4096])), global_batch_size=dp * 8,
                            flash_attention=draw(st.booleans()))
    cluster = CLUSTER.with_gpus(gpus)
    assume(not plan_violations(model, cluster, training, plan))
    return model, cluster, training, plan


def _scaled(cluster, factor_hbm=1.0, factor_bw=1.0):
    gpu = cluster.gpu.model_copy(update={"hbm_gib": cluster.gpu.hbm_gib * factor_hbm, "hbm_tb_per_s": cluster.gpu.hbm_tb_per_s * factor_bw})
    intra = cluster.intra_node.model_copy(update={"bandwidth_gb_per_s": cluster.intra_node.bandwidth_gb_per_s * factor_bw})
    return cluster.model_copy(update={"gpu": gpu, "intra_node": intra, "nic_gb_per_s_per_gpu": cluster.nic_gb_per_s_per_gpu * factor_bw})


SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.filter_too_much])


@SETTINGS
@given(cases())
def test_breakdowns_sum_to_totals(case):
    e = estimate(*case)
    assert abs(sum(e.time_breakdown.values()) - e.step_seconds) <= 1e-9 * e.step_seconds
    assert abs(sum(e.memory_breakdown.values()) - e.memory_bytes_per_gpu) <= 1e-9 * e.memory_bytes_per_gpu
    assert all(v >= 0 for v in e.time_breakdown.values())
    assert e.hfu >= e.mfu * 0.999 or not e.time_breakdown["recompute"]


@SETTINGS
@given(cases(), st.sampled_from([1.25, 2.0, 4.0]))
def test_more_hbm_never_breaks_a_feasible_plan(case, factor):
    model, cluster, training, plan = case
    before = estimate(model, cluster, training, plan)
    after = estimate(model, _scaled(cluster, factor_hbm=factor), training, plan)
    assert after.feasible or not before.feasible


@SETTINGS
@given(cases(), st.sampled_from([1.25, 2.0, 4.0]))
def test_more_bandwidth_never_slows_a_step(case, factor):
    model, cluster, training, plan = case
    before = estimate(model, cluster, training, plan)
    after = estimate(model, _scaled(cluster, factor_bw=factor), training, plan)
    assert after.step_seconds <= before.step_seconds * (1 + 1e-12)


def _preset_names():
    from autopar.specs._files import preset_files
    return sorted(preset_files("models"))


@pytest.mark.parametrize("name", _preset_names())
def test_without_recompute_the_hardware_runs_the_model_flops(name):
    # review: hardware FLOPs are the model FLOPs plus recompute, so without recompute the two are
    # one count (HFU = MFU). The hybrid presets' model count took a Mamba-2 / Gated DeltaNet
    # block's convolution weights, biases, per-head vectors and gated-norm weight as matmul
    # weights (2 FLOPs each per token) on top of the convolution's own core FLOPs: nemotron-h-8b
    # 1.993451e17 model vs 1.993090e17 hardware FLOPs per step (HFU 0.02% below MFU)
    model = load_model(name)
    cluster = load_cluster("dgx-h100").with_gpus(64)
    ep = 8 if model.is_moe and model.num_experts % 8 == 0 else 1
    plan, training = Plan(tp=1, pp=1, ep=ep, recompute=Recompute.none), TrainingSpec(seq_len=4096, global_batch_size=64)
    assert not plan_violations(model, cluster, training, plan)
    e = estimate(model, cluster, training, plan)
    assert e.hardware_flops_per_step == pytest.approx(e.model_flops_per_step, rel=1e-12)
