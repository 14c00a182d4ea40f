"""Roofline rules of thumb and fleet-level formulas from the seeds, as pure functions.

Seed 001 'Roofline для масштабирования LLM на GPU' (DP, TP limits), seed 000 'Математика
эффективности масштабирования', 'Критический размер батча', 'Заблуждения и ловушки'
(Young-Daly checkpointing)."""

from __future__ import annotations

import math


def dp_critical_tokens_per_gpu(peak_flops_per_second: float, bandwidth_bytes_per_second: float) -> float:
    """Per-GPU batch (tokens) above which data parallelism is compute-bound: B/X > C/W
    (seed 001 'Параллелизм данных': 990e12 / 450e9 = 2200 in a node, / 400e9 = 2475 across)."""
    return peak_flops_per_second / bandwidth_bytes_per_second


def tp_max_degree(ffn_hidden_size: float, peak_flops_per_second: float, bandwidth_bytes_per_second: float) -> float:
    """Largest compute-bound TP degree Y < F W / C (seed 001 'Тензорный параллелизм': F / 2475)."""
    return ffn_hidden_size * bandwidth_bytes_per_second / peak_flops_per_second


def scaling_efficiency(compute_seconds: float, comm_seconds: float, overlap_seconds: float = 0.0, sync_seconds: float = 0.0) -> float:
    """eta = T_c / (T_c + T_comm + T_sync - T_overlap) (seed 000 'Математика эффективности
    масштабирования'; 175B example: 2.1 / (2.1 + 14 - 10.5) = 37.5%)."""
    return compute_seconds / (compute_seconds + comm_seconds + sync_seconds - overlap_seconds)


def critical_batch_size(trace_gradient_covariance: float, gradient_norm_squared: float) -> float:
    """B* = tr(Sigma) / |G|^2 (seed 000 'Критический размер батча и убывающая отдача')."""
    return trace_gradient_covariance / gradient_norm_squared


def cluster_mtbf_seconds(mtbf_seconds_per_gpu: float, num_gpus: int) -> float:
    """Failures are independent: the cluster fails N times as often as one GPU."""
    return mtbf_seconds_per_gpu / num_gpus


def young_daly_interval_seconds(checkpoint_write_seconds: float, mtbf_seconds_per_gpu: float, num_gpus: int) -> float:
    """Optimal checkpoint interval sqrt(2 T_write MTBF_cluster) (seed 000 'Ловушка:
    использовать фиксированные интервалы ...': 1024 GPUs, 50,000 h, 5 min -> 171.2 min)."""
    return math.sqrt(2 * checkpoint_write_seconds * cluster_mtbf_seconds(mtbf_seconds_per_gpu, num_gpus))


def checkpoint_overhead_fraction(interval_seconds: float, checkpoint_write_seconds: float, mtbf_seconds_per_gpu: float, num_gpus: int) -> float:
    """Time lost to writing checkpoints plus expected rework after a failure:
    T_write / tau + tau / (2 MTBF) (reproduces the seed's 5.8% and 33.6%)."""
    mtbf = cluster_mtbf_seconds(mtbf_seconds_per_gpu, num_gpus)
    return checkpoint_write_seconds / interval_seconds + interval_seconds / (2 * mtbf)


def model_state_bytes(num_params: float, bytes_per_param: float) -> float:
    """Weights (+ gradients + optimizer) of one model: 70B x 16 B = 1,120 GB (seed 000
    'Сценарий: бюджет инфраструктуры RLHF')."""
    return num_params * bytes_per_param
