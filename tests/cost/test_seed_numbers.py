"""The seeds' worked numbers, reproduced through the cost model's own functions.
Each case cites its seed section (S0 = seeds/000, S1 = seeds/001)."""

from __future__ import annotations

import pytest

from autopar.cost.comm import Collective, Group, collective_seconds, fabric
from autopar.cost.nccl import latency_us
from autopar.cost.flops import activation_message_bytes
from autopar.cost.memory import kv_cache_bytes, static_bytes_per_gpu
from autopar.cost.pipeline import bubble_fraction
from autopar.cost.roofline import (
    checkpoint_overhead_fraction,
    critical_batch_size,
    dp_critical_tokens_per_gpu,
    model_state_bytes,
    scaling_efficiency,
    tp_max_degree,
    young_daly_interval_seconds,
)
from autopar.specs import load_cluster, load_gpu
from autopar.specs.plan import Schedule

HOUR = 3600.0
MINUTE = 60.0


@pytest.mark.parametrize(
    "p, m, expected, where",
    [
        (8, 32, 0.179, "S0 'Сценарий: цена пузыря конвейера': 7/39"),
        (4, 32, 0.086, "S0 'Архетип A', configuration C: 3/35"),
        (16, 32, 0.319, "S0 'Разобранный пример гибридного параллелизма': 15/47"),
        (4, 8, 0.27, "S0 'Конвейерный параллелизм' 1F1B: 3/11"),
        (4, 4, 0.43, "S0 footnote 6 (GPipe): 3/7"),
    ],
)
def test_pipeline_bubble(p, m, expected, where):
    # (p-1)/(m+p-1); the seed rounds to the shown digits
    assert bubble_fraction(p, m) == pytest.approx(expected, abs=0.0051), where


def test_interleaving_divides_bubble_time():
    # Narayanan et al. 2021 section 2.2.2: bubble time / v; fraction 7/(32*2+7) for p=8, m=32, v=2
    assert bubble_fraction(8, 32, 2, Schedule.interleaved) == pytest.approx(3.5 / 35.5)


def test_zero3_7b_on_64_gpus():
    # S0 'ZeRO: экономия памяти': 7e9 params x 16 B / 64 = 1.75 GB
    assert static_bytes_per_gpu(7e9, 16, 64) == pytest.approx(1.75e9)


@pytest.mark.parametrize("bytes_per_param, expected_gb", [(2 + 8, 13.7), (2 + 12, 19.1)])
def test_175b_tp8_pp16_static(bytes_per_param, expected_gb):
    # S0 'Разобранный пример гибридного параллелизма': fp16 weights + 8 (or 12) B optimizer
    # per parameter, no gradients, over TP8 x PP16 = 128 GPUs
    assert static_bytes_per_gpu(175e9, bytes_per_param, 8 * 16) / 1e9 == pytest.approx(expected_gb, abs=0.05)


def test_175b_zero3_on_64_gpus():
    # S0 'Сценарий: стена памяти в масштабе': 2,800 GB / 64 = 43.8 GB
    assert static_bytes_per_gpu(175e9, 16, 64) / 1e9 == pytest.approx(43.8, abs=0.05)


def test_tp_allreduce_payload():
    # S0 'Тензорный параллелизм': B x S x h x 2 bytes = 4 x 2048 x 4096 x 2 = 67 MB
    assert activation_message_bytes(4 * 2048, 4096, 2) / 1e6 == pytest.approx(67.1, abs=0.05)


def test_allgather_8xh100(ideal_params):
    # S1 'На уровне узла', question [AllGather cost]: bf16[4096, 65536] on 8 H100 at
    # 450 GB/s per direction: 536.9e6 x 7/8 / 450e9 = 1.04 ms (no latency at this size)
    cluster = load_cluster("dgx-h100")
    size = 4096 * 65536 * 2
    t = collective_seconds(Collective.all_gather, size, Group(8, 8, 1), cluster, ideal_params)
    # the latency of the ring Simple AllGather NCCL runs at this size (NCCL tuning model)
    alpha = latency_us("all_gather", "ring", 2, fabric(cluster, Group(8, 8, 1), ideal_params), ideal_params.comm.nccl) * 1e-6
    assert t - alpha == pytest.approx(1.04e-3, rel=0.01)


def test_allgather_8xh100_default_params_near_measured(params):
    # S1 reports ~1.5 ms measured for the same AllGather; the default (achieved-bandwidth)
    # parameters should land between the ideal 1.04 ms and 1.6 ms.
    cluster = load_cluster("dgx-h100")
    t = collective_seconds(Collective.all_gather, 4096 * 65536 * 2, Group(8, 8, 1), cluster, params)
    assert 1.04e-3 < t < 1.6e-3


@pytest.mark.parametrize(
    "bandwidth_bytes_per_second, expected, where",
    [
        (450e9, 2200, "S1 'Параллелизм данных': in a node, GPU egress 450 GB/s"),
        (400e9, 2475, "S1 'Параллелизм данных': across nodes, node egress 400 GB/s"),
    ],
)
def test_dp_compute_bound_threshold(bandwidth_bytes_per_second, expected, where):
    # C = H100 bf16 dense peak from the GPU profile (989.4 TFLOP/s; the seed rounds to 990)
    peak = load_gpu("H100").peak_flops_per_second("bf16")
    assert dp_critical_tokens_per_gpu(peak, bandwidth_bytes_per_second) == pytest.approx(expected, rel=0.002), where


def test_tp_limit_f_over_2475():
    # S1 'Тензорный параллелизм': Y < F W / C = F / 2475; LLaMA-3 F = 28,000 -> ~11-way
    peak = load_gpu("H100").peak_flops_per_second("bf16")
    assert tp_max_degree(28000, peak, 400e9) == pytest.approx(28000 / 2475, rel=0.002)


def test_kv_cache_70b_gqa():
    # S0 'Асимметрия инфраструктуры': 2 x 80 layers x 8 KV heads x 128 x 1024 tokens x 256 x 2 B
    assert kv_cache_bytes(80, 8, 128, 1024, 256) / 1e9 == pytest.approx(85.9, abs=0.05)


def test_young_daly_1024_gpus():
    # S0 'Ловушка: использовать фиксированные интервалы контрольных точек': 1024 GPUs,
    # MTBF 50,000 h per GPU, 5 min write -> tau = 171.2 min, overhead 5.8%; 15 min -> 33.6%
    tau = young_daly_interval_seconds(5 * MINUTE, 50_000 * HOUR, 1024)
    assert tau / MINUTE == pytest.approx(171.2, abs=0.05)
    assert checkpoint_overhead_fraction(tau, 5 * MINUTE, 50_000 * HOUR, 1024) == pytest.approx(0.058, abs=0.0005)
    assert checkpoint_overhead_fraction(15 * MINUTE, 5 * MINUTE, 50_000 * HOUR, 1024) == pytest.approx(0.336, abs=0.0005)


def test_scaling_efficiency_175b():
    # S0 'Сценарий: эффективность масштабирования для модели на 175 млрд параметров':
    # T_c = 2.1 s, ring AllReduce 2 x 350 GB / 50 GB/s = 14 s, 75% overlapped -> 37.5%
    comm = 2 * 350e9 / 50e9
    assert scaling_efficiency(2.1, comm, overlap_seconds=0.75 * comm) == pytest.approx(0.375, abs=0.0005)
    # 'Архетип A' configuration B: TP-8 x DP-128, gradient shard 43.75 GB, no overlap -> 54.5%
    assert scaling_efficiency(2.1, 2 * 43.75e9 / 50e9) == pytest.approx(0.545, abs=0.0005)


def test_gpt2_single_node_sync():
    # S0 '8 GPU: один узел с NVLink': 5.2 GB of gradients at 450 GB/s, 1.8 s compute.
    # 5.2e9 / 450e9 = 11.56 ms (the seed prints 11.7 ms: its own rounding); efficiency 99.4%
    sync = 5.2e9 / (load_gpu("H100").nvlink_gb_per_s * 1e9)  # NVLink4 per direction from the profile
    assert sync == pytest.approx(11.7e-3, rel=0.015)
    assert scaling_efficiency(1.8, sync) == pytest.approx(0.994, abs=0.0005)


def test_rlhf_fleet_memory():
    # S0 'Сценарий: бюджет инфраструктуры RLHF': policy 70B x 16 B, reference 70B x 2 B,
    # reward 13B x 2 B, value 13B x 16 B = 1,494 GB; DPO keeps policy + reference = 1,260 GB
    ppo = model_state_bytes(70e9, 16) + model_state_bytes(70e9, 2) + model_state_bytes(13e9, 2) + model_state_bytes(13e9, 16)
    assert ppo / 1e9 == pytest.approx(1494)
    assert (model_state_bytes(70e9, 16) + model_state_bytes(70e9, 2)) / 1e9 == pytest.approx(1260)


def test_critical_batch():
    # S0 'Критический размер батча' quiz: tr(Sigma) = 1.6e6, |mu|^2 = 100 -> B* = 16,000
    assert critical_batch_size(1.6e6, 100) == pytest.approx(16000)


def test_gemm_roofline_small_batch_matmul(params):
    # seed 001 'Что такое GPU?': B=64, D=4096, F=8192 bf16 matmul reads/writes 2BD + 2DF + 2BF
    # = 69e6 bytes: at least 69e6 / (3.35e12 x 0.9 HBM efficiency) = 23 us on H100, though its 4.3e9
    # FLOPs need only 5.4 us at the dense peak. Our small-GEMM curve (64 rows fill half a 128-row
    # tile; 4.3e9 / (4.3e9 + 1e10) of the 0.803 MAMF efficiency) gives 36 us, above that floor
    from autopar.cost.gemm import gemm_hbm_bytes, gemm_seconds
    h100 = load_gpu("H100")
    assert gemm_hbm_bytes(64, 8192, 4096, "bf16") == pytest.approx(69e6, rel=0.01)
    t = gemm_seconds(64, 8192, 4096, "bf16", h100, params)
    assert t >= 69e6 / (3.35e12 * params.memory.hbm_efficiency)
    flops = 2 * 64 * 8192 * 4096
    assert t == pytest.approx(flops / (989.4e12 * 0.803 * 0.5 * flops / (flops + 1e10)), rel=0.02)


def test_gemm_roofline_tp8_key_projection(params):
    # Llama-3 8B key projection at TP 8 over 98,304 tokens: N = 1024 / 8 = 128. Bytes 2 x (98,304 x
    # 4,096 + 4,096 x 128 + 98,304 x 128) = 831 MB -> 0.276 ms on H100; compute 1.03e11 FLOPs at
    # 0.803 x 989.4 TFLOP/s x saturation 1.03e11 / (1.03e11 + 1e10) = 0.142 ms: memory-bound, while the
    # fused Q|K|V projection (N = 768) stays compute-bound (0.86 ms of FLOPs against 0.32 ms of bytes)
    from autopar.cost.gemm import gemm_seconds
    h100 = load_gpu("H100")
    hbm = 3.35e12 * params.memory.hbm_efficiency
    assert gemm_seconds(98304, 128, 4096, "bf16", h100, params) == pytest.approx(830.5e6 / hbm, rel=0.01)
    qkv = gemm_seconds(98304, 768, 4096, "bf16", h100, params)
    flops = 2 * 98304 * 768 * 4096
    assert qkv == pytest.approx(flops / (989.4e12 * 0.803 * flops / (flops + 1e10)), rel=0.02)


def test_gemm_ceiling_is_the_parts_measured_mamf(params):
    # stas00 MAMF table (calibration/data/gemm): GB200 1,822 of 2,500 bf16 TFLOP/s = 0.7288, below
    # B200's 1,745 of 2,250 = 0.7756 that the Blackwell default carries; H200 fp8 1,453.4 of 1,978.9
    from autopar.cost.gemm import max_efficiency
    from autopar.specs.costparams import params_for_cluster
    from autopar.specs import load_cluster
    assert max_efficiency(load_gpu("GB200"), "bf16", params) == pytest.approx(1822 / 2500)
    assert max_efficiency(load_gpu("B200"), "bf16", params) == pytest.approx(1745 / 2250)
    assert max_efficiency(load_gpu("H200"), "fp8", params) == pytest.approx(1453.4 / 1978.9)
    assert max_efficiency(load_gpu("GB300"), "bf16", params) == pytest.approx(0.776)  # no MAMF row: Blackwell default
    # a calibration profile's GEMM fit for the architecture outranks the table (dgx-h100: h100-ib.yaml 0.79819)
    fitted = params_for_cluster(load_cluster("dgx-h100"))
    assert max_efficiency(load_gpu("H100"), "bf16", fitted) == pytest.approx(0.79819)
