"""Fit the cost model's GEMM efficiency (autopar/cost/gemm.py) to timings:

    efficiency(M, N, K, dtype) = E[dtype] x tq(M, N) x F / (F + half) x (U if unaligned)

tq: 128 x 128 tile quantization; F = 2 batch M N K flops of the kernel; U: factor when a
width (N or K) is not a multiple of 8 elements. E and half are fitted with scipy least_squares on
log time over the training-shaped samples (every dimension >= MIN_TRAINING_DIM: decode-like
M = 1..128 GEMMs are memory-bound: autopar.cost.gemm.gemm_seconds bounds them by their HBM bytes,
not by this compute curve); U comes from
dimension sweeps (samples that differ only in alignment) as a ratio, so a sweep's absolute
level (the SwiGLU sweep does not say which H100 variant) does not enter E. Errors are reported
on the fitted samples and on all samples.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from autopar.cost.gemm import aligned, tile_quantization
from autopar.errors import InputError, ProfileNotFound
from autopar.specs.costparams import GemmCalibration
from autopar.specs.hardware import GpuSpec, load_gpu
from calibration.gemm_data import GemmSample

TILE = 128
ALIGNMENT = 8
MIN_TRAINING_DIM = 256


def _aligned(s: GemmSample) -> bool:
    return aligned(s.n, s.k, ALIGNMENT)


def resolve_gpu(samples: list[GemmSample], override: str | None) -> GpuSpec | None:
    names = [override] if override else sorted({s.gpu for s in samples})
    if len(names) > 1:
        raise InputError("csv.gpu", ", ".join(names), "the rows come from several devices; fit one GPU at a time (or pass --gpu)")
    try:
        return load_gpu(names[0])
    except ProfileNotFound:
        if override:
            raise
        return None


# measured rate allowed above the profile's dense peak before a row is refused: timer and clock
# jitter of a few percent, never a physical excess (the peak is at the boost clock)
PEAK_TOLERANCE = 1.05


def _peaks(samples: list[GemmSample], gpu: GpuSpec | None) -> dict[str, float]:
    """Dense peak per dtype; without a GPU profile (CPU runs) the best measured throughput."""
    out = {}
    for dtype in sorted({s.dtype for s in samples}):
        if gpu is not None and gpu.supports(dtype):
            out[dtype] = gpu.peak_flops_per_second(dtype)
        elif gpu is not None:
            raise InputError("csv.dtype", dtype, f"{gpu.name} has no {dtype} peak in its profile (profiles/gpus); drop those rows "
                             "or pass --gpu with a GPU that has one")
        else:
            out[dtype] = max(s.flops / s.seconds for s in samples if s.dtype == dtype)
    for s in samples:  # a GPU cannot beat its own peak: a unit slip in the seconds or the FLOPs
        rate = s.flops / s.seconds
        if rate > out[s.dtype] * PEAK_TOLERANCE:
            raise InputError(s.source, f"{rate / 1e12:,.1f} TFLOP/s",
                             f"exceeds {gpu.name}'s {s.dtype} peak of {out[s.dtype] / 1e12:,.1f} TFLOP/s (seconds or FLOPs in the wrong unit?)")
    return out


def _sweeps(samples: list[GemmSample]) -> list[list[GemmSample]]:
    groups: dict[tuple, list[GemmSample]] = defaultdict(list)
    for s in samples:
        groups[(s.source.rsplit(":", 1)[0], s.dtype, s.batch, s.m, s.k)].append(s)
    return [g for g in groups.values() if any(_aligned(s) for s in g) and not all(_aligned(s) for s in g)]


def unaligned_factor(sweeps: list[list[GemmSample]]) -> float:
    ratios = []
    for group in sweeps:
        rate = lambda s: s.flops / s.seconds / tile_quantization(s.m, s.n, TILE, TILE)  # noqa: E731
        good = statistics.median(rate(s) for s in group if _aligned(s))
        bad = statistics.median(rate(s) for s in group if not _aligned(s))
        ratios.append(min(1.0, bad / good))
    return statistics.median(ratios) if ratios else 1.0


def _predict(samples: list[GemmSample], peaks: dict[str, float], eff: dict[str, float], half: float, unaligned: float) -> np.ndarray:
    out = []
    for s in samples:
        f = s.flops
        e = eff[s.dtype] * tile_quantization(s.m, s.n, TILE, TILE) * f / (f + half) * (1.0 if _aligned(s) else unaligned)
        out.append(f / (peaks[s.dtype] * e))
    return np.array(out)


def _errors(samples, peaks, eff, half, unaligned) -> np.ndarray:
    measured = np.array([s.seconds for s in samples])
    return _predict(samples, peaks, eff, half, unaligned) / measured - 1.0


def fit_gemm(samples: list[GemmSample], gpu_name: str | None = None, sources: list[str] | None = None) -> tuple[GemmCalibration, dict]:
    gpu = resolve_gpu(samples, gpu_name)
    peaks = _peaks(samples, gpu)
    sweeps = _sweeps(samples)
    in_sweep = {id(s) for g in sweeps for s in g}
    fit_set = [s for s in samples if id(s) not in in_sweep and min(s.m, s.n, s.k) >= MIN_TRAINING_DIM]
    if not fit_set:
        files = ", ".join(sorted({Path(p).name for p in sources})) if sources else f"{len(samples)} samples"
        raise InputError("csv", files, f"none of its {len(samples)} rows has m, n and k >= {MIN_TRAINING_DIM} outside an "
                         "unaligned-width sweep: nothing training-sized to fit")
    unaligned = unaligned_factor(sweeps)
    dtypes = sorted({s.dtype for s in fit_set})
    measured = np.array([s.seconds for s in fit_set])

    def unpack(x):
        return dict(zip(dtypes, np.exp(x[:-1]))), float(np.exp(x[-1]))

    def residual(x):
        eff, half = unpack(x)
        return np.log(_predict(fit_set, peaks, eff, half, unaligned)) - np.log(measured)

    x0 = np.array([np.log(0.8)] * len(dtypes) + [np.log(1e10)])
    lo = [np.log(0.05)] * len(dtypes) + [np.log(1e6)]
    # at most the profile's peak; relative to the best measured (no profile) a little above it,
    # since the saturation term keeps even the best sample below E
    hi = [np.log(1.0 if gpu else 1.2)] * len(dtypes) + [np.log(1e14)]
    res = least_squares(residual, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    eff, half = unpack(res.x)
    err_fit = np.abs(_errors(fit_set, peaks, eff, half, unaligned))
    err_all = np.abs(_errors(samples, peaks, {**{d: eff.get(d, 1.0) for d in peaks}}, half, unaligned))
    fit = GemmCalibration(
        gpu=gpu.name if gpu else None, architecture=gpu.architecture if gpu else None,
        max_efficiency={d: float(v) for d, v in eff.items()}, half_saturation_flops=half, tile_m=TILE, tile_n=TILE,
        unaligned_efficiency=unaligned, alignment_elements=ALIGNMENT, num_samples=len(fit_set),
        median_error=float(np.median(err_fit)), mean_error=float(np.mean(err_fit)), max_error=float(np.max(err_fit)),
        sources=list(sources or sorted({s.source.rsplit(':', 1)[0] for s in samples})))
    report = {"num_samples": len(samples), "num_fitted": len(fit_set), "num_sweep_samples": len(in_sweep),
              "all_median_error": float(np.median(err_all)), "all_p90_error": float(np.percentile(err_all, 90)),
              "all_max_error": float(np.max(err_all)), "peaks_relative_to": gpu.name if gpu else "best measured",
              "by_dtype": {d: _dtype_errors(fit_set, d, peaks, eff, half, unaligned) for d in dtypes}}
    return fit, report


def _dtype_errors(samples, dtype, peaks, eff, half, unaligned) -> dict:
    subset = [s for s in samples if s.dtype == dtype]
    err = np.abs(_errors(subset, peaks, eff, half, unaligned))
    return {"num_samples": len(subset), "median_error": float(np.median(err)), "max_error": float(np.max(err))}


def percent(error: float) -> str:
    """A relative error as a percentage: one decimal (12.3%), two significant digits below 0.1%
    (0.042%), so a small error never prints as 0%."""
    value = 100 * error
    return f"{value:.2g}%" if 0 < abs(value) < 0.1 else f"{value:.1f}%"


def gemm_table(fit: GemmCalibration, report: dict) -> str:
    lines = [f"GEMM efficiency fit ({fit.gpu or 'no GPU profile: relative to the best measured'}; "
             f"{fit.num_samples} of {report['num_samples']} samples fitted: every dim >= {MIN_TRAINING_DIM}, sweeps excluded)",
             f"{'dtype':<6} {'E':>6} {'samples':>8} {'median err':>11} {'max err':>8}"]
    for dtype, e in fit.max_efficiency.items():
        d = report["by_dtype"][dtype]
        lines.append(f"{dtype:<6} {e:>6.3f} {d['num_samples']:>8} {percent(d['median_error']):>11} {percent(d['max_error']):>8}")
    lines.append(f"half-saturation {fit.half_saturation_flops:.3g} flops; unaligned (N or K % {fit.alignment_elements} != 0) factor {fit.unaligned_efficiency:.3f}")
    lines.append(f"time error on fitted samples: median {percent(fit.median_error)}, mean {percent(fit.mean_error)}, max {percent(fit.max_error)}")
    lines.append(f"time error on all {report['num_samples']} samples (decode-like and sweep shapes included): median "
                 f"{percent(report['all_median_error'])}, 90th percentile {percent(report['all_p90_error'])}, max {percent(report['all_max_error'])}")
    return "\n".join(lines)
