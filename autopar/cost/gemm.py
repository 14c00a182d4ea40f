"""Compute time of one GEMM: flops / (peak x efficiency(M, N, K, dtype)).

The default efficiency is a saturating curve in the GEMM's size with a tile-quantization
term for ragged dimensions; its coefficients come from profiles/cost/defaults.yaml (maximum
achievable matmul FLOPS, stas00/ml-engineering MAMF table) until calibration replaces them.
"""

from __future__ import annotations

import math

from autopar.specs.costparams import CostParams
from autopar.specs.hardware import GpuSpec


def tile_quantization(m: float, n: float, tile_m: int, tile_n: int) -> float:
    """Useful fraction of the work when M and N are padded up to whole tiles (wave quantization ignored)."""
    if m <= 0 or n <= 0:
        return 1.0
    return (m / (math.ceil(m / tile_m) * tile_m)) * (n / (math.ceil(n / tile_n) * tile_n))


def max_efficiency(gpu: GpuSpec, dtype: str, params: CostParams) -> float:
    """Best achieved fraction of the dtype's dense peak: a calibration fit for the part's
    architecture, else the part's measured MAMF over its peak (profiles/gpus: e.g. GB200 1,822
    of 2,500 TFLOP/s bf16 against B200's 1,745 of 2,250), else the architecture's default."""
    measured = getattr(gpu.mamf_tflops, dtype, None) if gpu.mamf_tflops is not None else None
    if measured and params.gemm.fitted_architecture != gpu.architecture and gpu.supports(dtype):
        return measured * 1e12 / gpu.peak_flops_per_second(dtype)
    return params.max_gemm_efficiency(gpu.architecture, dtype)


def gemm_efficiency(m: float, n: float, k: float, dtype: str, gpu: GpuSpec, params: CostParams) -> float:
    """Achieved fraction of the dtype's dense peak for an (M x K) @ (K x N) GEMM."""
    flops = 2.0 * m * n * k
    g = params.gemm
    saturation = flops / (flops + g.half_saturation_flops)
    base = max_efficiency(gpu, dtype, params) * tile_quantization(m, n, g.tile_m, g.tile_n) * saturation
    return base * alignment_factor(n, k, g.alignment_elements, g.unaligned_efficiency)


def aligned(n: float, k: float, alignment: int) -> bool:
    """Whether a GEMM's rows are 16-byte aligned: its reduction width K and output width N (the
    leading dimensions of X [M x K], W [N x K] and Y [M x N], and of every backward operand) are
    multiples of `alignment` elements. The token count M is no leading dimension of any of them:
    it sets the grid, not the alignment, so a ragged M (a dropless expert's tokens) runs the
    aligned kernels, its padding counted by tile_quantization."""
    return float(n) % alignment == 0 and float(k) % alignment == 0


def alignment_factor(n: float, k: float, alignment: int, unaligned_efficiency: float) -> float:
    """cuBLAS needs 16-byte aligned rows for its fastest tensor-core kernels: an N or K that is
    not a multiple of 8 16-bit elements runs slower (stas00 SwiGLU sweep on H100: d_ff 10922 ->
    272.7 TFLOP/s, 10944 -> 398.4; `aligned`). 1.0 unless a calibration profile sets the penalty."""
    if unaligned_efficiency >= 1.0:
        return 1.0
    return 1.0 if aligned(n, k, alignment) else unaligned_efficiency


# the next wider format of a low-precision GEMM dtype
WIDER_DTYPE = {"fp8": "bf16", "fp4": "fp8"}


def gemm_flops_per_second(dtype: str, gpu: GpuSpec, params: CostParams) -> float:
    """Effective peak for a dtype: a low-precision GEMM achieves at most fp8_max_speedup x the
    achieved rate of the next wider format (casting, scaling): fp8 over bf16, fp4 over fp8
    (Megatron-Bridge's performance summary, NeMo 26.04.01, same layouts: NVFP4 1.31-1.50x
    MXFP8/FP8 end to end on dense LLaMA-3 70B and 405B, GB200 and GB300)."""
    peak = gpu.peak_flops_per_second(dtype)
    wider = WIDER_DTYPE.get(dtype)
    if wider is not None and gpu.supports(wider):
        peak = min(peak, params.gemm.fp8_max_speedup * gemm_flops_per_second(wider, gpu, params)
                   * max_efficiency(gpu, wider, params) / max_efficiency(gpu, dtype, params))
    return peak


# Width of a GEMM's input elements; the output is written in bf16 (fp32 GEMMs in fp32)
INPUT_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}


def gemm_hbm_bytes(m: float, n: float, k: float, dtype: str) -> float:
    """Bytes a GEMM moves at least: read A (M x K) and B (K x N) once, write C (M x N) once
    (seed 001 'Что такое GPU?': a bf16 matmul reads or writes 2BD + 2DF + 2BF bytes)."""
    width = INPUT_BYTES.get(dtype, 2.0)
    return width * (m * k + k * n) + max(width, 2.0) * m * n


def gemm_seconds(m: float, n: float, k: float, dtype: str, gpu: GpuSpec, params: CostParams) -> float:
    """Time of one GEMM on one GPU: the larger of its compute time and its HBM time (seed 001:
    T = max(T_math, T_comms); a skinny GEMM, e.g. a 128-wide K projection at TP 8 or a router
    over many tokens, is bound by the bytes it moves, not by its FLOPs)."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    flops = 2.0 * m * n * k
    compute = flops / (gemm_flops_per_second(dtype, gpu, params) * gemm_efficiency(m, n, k, dtype, gpu, params))
    memory = gemm_hbm_bytes(m, n, k, dtype) / (gpu.hbm_bytes_per_second * params.memory.hbm_efficiency)
    return max(compute, memory)
