"""Convert the published H100 GEMM measurements (calibration/data/gemm, see SOURCES.md) into
the canonical CSV: `python -m calibration.gemm_samples` writes
calibration/data/gemm/h100sxm_samples.csv. Every row names its file and line."""

from __future__ import annotations

import re
from pathlib import Path

from calibration.gemm_data import GemmSample, read_csv, write_csv

DATA = Path(__file__).resolve().parent / "data" / "gemm"
OUT = DATA / "h100sxm_samples.csv"
GPU = "H100"

_PERF = re.compile(r"Perf \(m=\s*(\d+), n=\s*(\d+), k=\s*(\d+),(?: (\w+),)? layout=\w+, (\w+), acc=(\d)\):\s*([\d.]+) us")
_SWIGLU = re.compile(r"^(\d+)\s+([\d.]+)\s+\d+$")
_MAMF = re.compile(r"^\| NVIDIA H100 SXM\s*\|\s*([\d.]+)\s*\|.*\|\s*(\d+)x(\d+)x(\d+)\s*\|")


def deepgemm(path: Path) -> list[GemmSample]:
    """Dense (not grouped) GEMMs of DeepGEMM's own tests: its BF16 and FP8 (block-scaled)
    kernels, and the cuBLASLt reference it times; acc=0 (no accumulation into C) only."""
    out, section, dtype = [], "", "bf16"
    for line, text in enumerate(path.read_text().splitlines(), start=1):
        if text.startswith("--- tests/"):
            dtype = "fp8" if "fp8" in text else "bf16"
        if text.startswith("Testing "):
            section = text
        m = _PERF.search(text)
        if not m or "grouped" in section or m[6] != "0":
            continue
        kernel = "cublaslt" if "cuBLASLt" in section else f"deepgemm_{dtype}{'_' + m[4] if m[4] else ''}"
        out.append(GemmSample(GPU, dtype, int(m[1]), int(m[2]), int(m[3]), 1, float(m[7]) * 1e-6, kernel, f"{path.name}:{line}"))
    return out


def swiglu(path: Path) -> list[GemmSample]:
    """stas00 swiglu-maf-bench.py: fp16 torch.bmm, b=4, [4096 x 4096] x [4096 x d_ff]."""
    out = []
    for line, text in enumerate(path.read_text().splitlines(), start=1):
        if m := _SWIGLU.match(text.strip()):
            d_ff, tflops = int(m[1]), float(m[2])
            flops = 2.0 * 4 * 4096 * d_ff * 4096
            out.append(GemmSample(GPU, "fp16", 4096, d_ff, 4096, 4, flops / (tflops * 1e12), "torch.bmm", f"{path.name}:{line}"))
    return out


def mamf(path: Path) -> list[GemmSample]:
    """MAMF table: best shape of a brute-force torch.mm search (first table bf16, second fp8)."""
    out, dtype = [], "bf16"
    for line, text in enumerate(path.read_text().splitlines(), start=1):
        if text.startswith("**FP8"):
            dtype = "fp8"
        if m := _MAMF.match(text):
            tflops, dims = float(m[1]), [int(m[i]) for i in (2, 3, 4)]
            flops = 2.0 * dims[0] * dims[1] * dims[2]
            out.append(GemmSample(GPU, dtype, *dims, 1, flops / (tflops * 1e12), "torch.mm mamf-best", f"{path.name}:{line}"))
    return out


def reference_samples() -> list[GemmSample]:
    wayne = [s for name in ("h100sxm_and_rtxpro6000_gemm_bench_waynehacking8.csv", "h100sxm_gemm_bench_sm90a_waynehacking8.csv")
             for s in read_csv(DATA / name) if "H100" in s.gpu]
    wayne = [GemmSample(GPU, s.dtype, s.m, s.n, s.k, s.batch, s.seconds, s.kernel, s.source) for s in wayne]
    return (wayne + swiglu(DATA / "h100_swiglu_mlp_dff_sweep_stas00.txt")
            + mamf(DATA / "mamf_table_bf16_fp8_stas00-ml-engineering.md")
            + deepgemm(DATA / "h100sxm_deepgemm_testlog_waynehacking8.txt"))


if __name__ == "__main__":  # pragma: no cover
    samples = reference_samples()
    write_csv(OUT, samples)
    print(f"wrote {OUT} ({len(samples)} samples)")
