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


def optimal_checkpoint_interval_seconds(checkpoint_write_seconds: float, mtbf_seconds: float) -> float:
    """Young's first-order optimum tau = sqrt(2 T_write MTBF_system) (Young 1974; seed 000
    'Ловушка: использовать фиксированные интервалы контрольных точек ...')."""
    return math.sqrt(2 * checkpoint_write_seconds * mtbf_seconds)


def checkpoint_tax(interval_seconds: float, checkpoint_write_seconds: float, mtbf_seconds: float) -> float:
    """Share of wall time spent writing checkpoints plus redoing the half interval lost, on
    average, at each failure: T_write / tau + tau / (2 MTBF_system) (first order in tau / MTBF)."""
    return checkpoint_write_seconds / interval_seconds + interval_seconds / (2 * mtbf_seconds)


def young_daly_interval_seconds(checkpoint_write_seconds: float, mtbf_seconds_per_gpu: float, num_gpus: int) -> float:
    """Optimal checkpoint interval sqrt(2 T_write MTBF_cluster) (seed 000 'Ловушка:
    использовать фиксированные интервалы ...': 1024 GPUs, 50,000 h, 5 min -> 171.2 min)."""
    return optimal_checkpoint_interval_seconds(checkpoint_write_seconds, cluster_mtbf_seconds(mtbf_seconds_per_gpu, num_gpus))


def checkpoint_overhead_fraction(interval_seconds: float, checkpoint_write_seconds: float, mtbf_seconds_per_gpu: float, num_gpus: int) -> float:
    """Time lost to writing checkpoints plus expected rework after a failure:
    T_write / tau + tau / (2 MTBF) (reproduces the seed's 5.8% and 33.6%)."""
    return checkpoint_tax(interval_seconds, checkpoint_write_seconds, cluster_mtbf_seconds(mtbf_seconds_per_gpu, num_gpus))


def model_state_bytes(num_params: float, bytes_per_param: float) -> float:
    """Weights (+ gradients + optimizer) of one model: 70B x 16 B = 1,120 GB (seed 000
    'Сценарий: бюджет инфраструктуры RLHF')."""
    return num_params * bytes_per_param


def dp_compute_bound_batch_tokens(peak_flops_per_second: float, bandwidth_bytes_per_second: float, num_gpus: int) -> float:
    """Smallest global batch (tokens) at which data parallelism over num_gpus stays compute-bound:
    N x C / W (seed 001 'Параллелизм данных': LLaMA-3 on 16K H100 'would have needed at least
    40M tokens', 16,384 x 990e12 / 400e9 = 40.6M). Dense models; a MoE's expert weights raise it
    by E / k (same section)."""
    return num_gpus * dp_critical_tokens_per_gpu(peak_flops_per_second, bandwidth_bytes_per_second)


# DeepSeek LLM (Bi et al. 2024, arXiv 2401.02954) sec. 3.1, the fitted hyperparameter scaling law
# B_opt = 0.2920 C^0.3271 tokens, C = M D with M the non-embedding FLOPs per token; fitted on
# small-scale runs, so frontier budgets (1e24-1e25 FLOPs) are an extrapolation.
DEEPSEEK_BATCH_COEFFICIENT_TOKENS = 0.2920
DEEPSEEK_BATCH_EXPONENT = 0.3271


def deepseek_optimal_batch_tokens(compute_flops: float) -> float:
    """Near-optimal global batch in tokens for a compute budget C = M D (DeepSeek LLM sec. 3.1)."""
    if not compute_flops > 0:
        raise ValueError(f"compute_flops={compute_flops!r} must be positive")
    return DEEPSEEK_BATCH_COEFFICIENT_TOKENS * compute_flops ** DEEPSEEK_BATCH_EXPONENT


def scaled_learning_rate(base_learning_rate: float, base_batch_tokens: float, batch_tokens: float, rule: str) -> float:
    """eta = eta_0 k (linear rule, Goyal et al. 2017) or eta_0 sqrt(k) (square-root rule), with
    k = B / B_0 (seed 000 'Правила масштабирования скорости обучения')."""
    k = batch_tokens / base_batch_tokens
    if rule == "linear":
        return base_learning_rate * k
    if rule == "sqrt":
        return base_learning_rate * math.sqrt(k)
    raise ValueError(f"rule={rule!r} must be linear or sqrt")
