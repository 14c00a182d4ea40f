"""Fleet formulas of `autopar plan` (autopar/cost/goodput.py, autopar/cost/roofline.py), each
against a hand calculation or a seed number (S0 = seeds/000, S1 = seeds/001)."""

from __future__ import annotations

import math

import pytest

from autopar.cost.goodput import (
    Goodput,
    PowerModel,
    busy_fraction,
    checkpoint_bytes,
    checkpoint_write_seconds,
    goodput,
    job_mtbf_seconds,
    run_energy_joules,
    step_power_watts,
    useful_peak_fraction,
)
from autopar.cost.roofline import (
    deepseek_optimal_batch_tokens,
    dp_compute_bound_batch_tokens,
    optimal_checkpoint_interval_seconds,
    scaled_learning_rate,
    young_daly_interval_seconds,
)

HOUR = 3600.0


def test_seed_young_daly_through_goodput():
    # S0 'Ловушка: использовать фиксированные интервалы контрольных точек': 1,024 GPUs, 50,000 h
    # per GPU -> MTBF 48.8 h; 5 min write -> tau 171.2 min, checkpoint + rework tax 5.8%
    mtbf = job_mtbf_seconds(1024, 50_000)
    assert mtbf / HOUR == pytest.approx(48.83, abs=0.01)
    g = goodput(300, mtbf, restart_seconds=0)
    assert g.interval_seconds / 60 == pytest.approx(171.2, abs=0.05)
    assert g.interval_seconds == pytest.approx(young_daly_interval_seconds(300, 50_000 * HOUR, 1024))
    assert g.checkpoint_tax == pytest.approx(0.058, abs=0.0005)
    assert g.goodput == pytest.approx(1 - g.checkpoint_tax)


def test_seed_fixed_15_minute_interval_tax():
    # same section: checkpointing every 15 minutes 'на всякий случай' costs 33.6%
    g = goodput(300, job_mtbf_seconds(1024, 50_000), restart_seconds=0, interval_seconds=15 * 60)
    assert g.checkpoint_tax == pytest.approx(0.336, abs=0.0005)


def test_restarts_cost_their_share_of_failures():
    # 10 min restart per failure, one failure every 48.83 h: 600 / 175,781 = 0.34% of wall time
    mtbf = job_mtbf_seconds(1024, 50_000)
    g = goodput(300, mtbf, restart_seconds=600)
    assert g.restart_share == pytest.approx(600 / (50_000 * HOUR / 1024))
    assert g.goodput == pytest.approx(1 - 0.058424 - 0.003413, abs=1e-5)


def test_a_run_shorter_than_one_interval_writes_no_periodic_checkpoint():
    # 1,024 GPUs at 50,000 h: M = 50,000 x 3,600 / 1,024 = 175,781.25 s; a 5 min write gives
    # tau = sqrt(2 x 300 x 175,781.25) = 10,269.8 s (171.2 min). A 1-hour run (3,600 s < tau)
    # writes no checkpoint: write share 0, and a failure loses on average half the run, rework
    # 3,600 / (2 x 175,781.25) = 0.010240 -- not the long run's 300 / 10,269.8 + 10,269.8 /
    # 351,562.5 = 0.029212 + 0.029212 = 5.84%. Restarts 600 / 175,781.25 = 0.003413, so
    # goodput = 1 - 0.010240 - 0.003413 = 0.986347
    mtbf = job_mtbf_seconds(1024, 50_000)
    g = goodput(300, mtbf, restart_seconds=600, train_seconds=3600)
    assert g.interval_seconds == pytest.approx(10_269.8, abs=0.1)
    assert not g.periodic and g.checkpoint_write_share == 0
    assert g.checkpoint_tax == pytest.approx(0.010240, abs=1e-6)
    assert g.goodput == pytest.approx(0.986347, abs=1e-6)
    # no periodic checkpoint is the cheaper policy up to T / (2 M) = T_w / tau + tau / (2 M), which
    # at the Young-Daly interval is T = 2 tau (20,539.6 s): the tax is continuous there
    below = goodput(300, mtbf, restart_seconds=600, train_seconds=2 * g.interval_seconds * (1 - 1e-6))
    above = goodput(300, mtbf, restart_seconds=600, train_seconds=2 * g.interval_seconds * (1 + 1e-6))
    assert not below.periodic and above.periodic
    assert below.checkpoint_tax == pytest.approx(above.checkpoint_tax, rel=1e-5)
    assert above.checkpoint_tax == pytest.approx(0.058424, abs=1e-6)
    # a run of ten intervals pays the long-run tax
    long = goodput(300, mtbf, restart_seconds=600, train_seconds=10 * g.interval_seconds)
    assert long.periodic and long.checkpoint_tax == pytest.approx(0.058424, abs=1e-6)


def test_node_and_switch_failures_add_rates():
    # 1/M = 1024/50,000 h + 128/100,000 h + 48/200,000 h = 0.02048 + 0.00128 + 0.00024 per hour
    m = job_mtbf_seconds(1024, 50_000, num_nodes=128, mtbf_hours_per_node=100_000, num_switches=48, mtbf_hours_per_switch=200_000)
    assert m / HOUR == pytest.approx(1 / 0.022, rel=1e-12)


def test_checkpoint_size_and_write_time():
    # LLaMA-3 405B: 405.85e9 params x (2 B bf16 weights + 12 B Adam states) = 5.68 TB; 2,048 nodes
    # x 0.65 GB/s = 1.33 TB/s -> 4.3 s; an aggregate cap of 1 TB/s makes it 5.7 s
    size = checkpoint_bytes(405.85e9, 2, 12)
    assert size / 1e12 == pytest.approx(5.682, abs=0.001)
    assert checkpoint_write_seconds(size, 2048, 0.65e9) == pytest.approx(size / 1.3312e12)
    assert checkpoint_write_seconds(size, 2048, 0.65e9, aggregate_write_bytes_per_second=1e12) == pytest.approx(size / 1e12)


def test_goodput_trap():
    # S0 'Ловушка: оптимизировать MFU, не учитывая эффективность масштабирования': 50% MFU on a
    # node, 50% scaling efficiency at 1,024 GPUs -> 0.25 of peak = 256 GPU-equivalents, not 512
    assert useful_peak_fraction(0.50, 0.50) == pytest.approx(0.25)
    assert 1024 * useful_peak_fraction(0.50, 0.50) == pytest.approx(256)
    assert 1024 * useful_peak_fraction(0.50, 1.0) == pytest.approx(512)


def test_power_and_energy_by_hand():
    # step: 6 s compute + 3 s bubble + 1 s exposed dp_comm -> busy 60%; 700 W busy, 70 W waiting
    breakdown = {"compute_gemm": 5.0, "compute_attention": 1.0, "pipeline_bubble": 3.0, "dp_comm": 1.0}
    busy = busy_fraction(breakdown)
    assert busy == pytest.approx(0.6)
    watts = step_power_watts(700, 70, busy)
    assert watts == pytest.approx(0.6 * 700 + 0.4 * 70)  # 448 W
    assert step_power_watts(700, None, busy) == 700  # unknown idle power: board power (upper bound)
    # 16 GPUs in 2 nodes (4.6 kW overhead each), PUE 1.5, one day; shares: goodput 0.9, rework 0.04,
    # writes 0.03, restarts 0.03 -> GPUs 16 x (448 x 0.94 + 70 x 0.06) x 86400, nodes 2 x 4600 x 86400
    g = Goodput(interval_seconds=1.0, checkpoint_write_share=0.03, rework_share=0.04, restart_share=0.03, mtbf_seconds=1.0)
    assert g.goodput == pytest.approx(0.90)
    power = PowerModel(num_gpus=16, num_nodes=2, gpu_step_watts=watts, gpu_stalled_watts=70, node_overhead_watts=4600, pue=1.5)
    expected = (16 * (448 * 0.94 + 70 * 0.06) + 2 * 4600) * 86400 * 1.5
    assert run_energy_joules(power, 86400, g) == pytest.approx(expected)


def test_deepseek_batch_law():
    # DeepSeek LLM (arXiv 2401.02954) sec. 3.1: B_opt = 0.2920 C^0.3271; C = 1e20 FLOPs ->
    # 0.292 x 10^(20 x 0.3271) = 0.292 x 10^6.542 = 1.017M tokens
    assert deepseek_optimal_batch_tokens(1e20) == pytest.approx(0.292 * 10 ** 6.542, rel=1e-9)
    assert deepseek_optimal_batch_tokens(1e20) / 1e6 == pytest.approx(1.017, abs=0.001)
    with pytest.raises(ValueError):
        deepseek_optimal_batch_tokens(0.0)


def test_llama3_compute_bound_batch():
    # S1 'Параллелизм данных': B/X > C/W = 990e12 / 400e9 = 2475 tokens per GPU; LLaMA-3 on
    # 16K H100 'would have needed at least 40M tokens' (16,384 x 2,473.5 = 40.5M at 989.4 TFLOP/s)
    assert dp_compute_bound_batch_tokens(990e12, 400e9, 16_000) / 1e6 == pytest.approx(39.6, abs=0.05)
    assert dp_compute_bound_batch_tokens(989.4e12, 400e9, 16_384) / 1e6 == pytest.approx(40.53, abs=0.01)


@pytest.mark.parametrize("rule, expected", [("linear", 4 * 3e-4), ("sqrt", 2 * 3e-4)])
def test_learning_rate_rules(rule, expected):
    # S0 'Правила масштабирования скорости обучения': batch x4 -> lr x4 (linear) or x2 (sqrt)
    assert scaled_learning_rate(3e-4, 4 * 2**20, 16 * 2**20, rule) == pytest.approx(expected)
    with pytest.raises(ValueError):
        scaled_learning_rate(3e-4, 1, 2, "cubic")


def test_interval_formula_is_youngs():
    assert optimal_checkpoint_interval_seconds(300, 175_781.25) == pytest.approx(math.sqrt(2 * 300 * 175_781.25))
