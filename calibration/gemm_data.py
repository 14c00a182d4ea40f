"""GEMM timing samples: the CSV `autopar calibrate gemm --run` writes (and the converted
reference measurements), plus the waynehacking8 bench.csv layout as published.

Canonical CSV columns: gpu, dtype, m, n, k, batch, seconds, tflops, kernel, source
((batch x) an (M x K) @ (K x N) product; flops = 2 batch M N K; tflops = flops / seconds / 1e12).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from autopar.specs._files import read_text
from autopar.errors import InputError

COLUMNS = ["gpu", "dtype", "m", "n", "k", "batch", "seconds", "tflops", "kernel", "source"]
WAYNE_COLUMNS = ["device", "sm", "M", "N", "K", "kernel", "ms", "tflops"]
# waynehacking8 bench.csv kernels that are vendor-library GEMMs, by input dtype (README of
# blackwell-tensorcore-kernels: cublas_tc = FP16 in / FP32 acc, cublaslt_fp8, cublas_tf32);
# the hand-written kernels (naive, tiled, wmma, mma_*) are not what frameworks run
WAYNE_KERNELS = {"cublas_tc": "fp16", "cublaslt_fp8": "fp8", "cublas_tf32": "tf32"}
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")


@dataclass(frozen=True)
class GemmSample:
    gpu: str
    dtype: str
    m: int
    n: int
    k: int
    batch: int
    seconds: float
    kernel: str
    source: str

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12


def _bad(path: Path, line: int, expected: str, found: object, column: str | None = None) -> InputError:
    """FILE:LINE, and :COLUMN for a cell, as the field of the error."""
    return InputError(f"{path}:{line}" + (f":{column}" if column else ""), found, f"expected {expected}")


def _positive(value: str, path: Path, line: int, what: str, integer: bool = False) -> float:
    kind = "a positive whole number" if integer else "a positive finite number"
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise _bad(path, line, f"{what} as {kind}", value, what) from None
    if not math.isfinite(number) or number <= 0:
        raise _bad(path, line, f"{what} as {kind}", value, what)
    return number


def _canonical_row(row: dict[str, str], path: Path, line: int) -> GemmSample:
    dtype = (row.get("dtype") or "").lower()
    if dtype not in DTYPES:
        raise _bad(path, line, f"dtype one of {', '.join(DTYPES)}", row.get("dtype"), "dtype")
    dims = [int(_positive(row.get(c, ""), path, line, c, integer=True)) for c in ("m", "n", "k")]
    batch = int(_positive(row.get("batch") or "1", path, line, "batch", integer=True))
    seconds = _positive(row.get("seconds", ""), path, line, "seconds")
    return GemmSample(row.get("gpu") or "unknown", dtype, *dims, batch, seconds, row.get("kernel") or "", row.get("source") or f"{path.name}:{line}")


def _wayne_row(row: dict[str, str], path: Path, line: int) -> GemmSample | None:
    dtype = WAYNE_KERNELS.get(row.get("kernel", ""))
    if dtype is None:
        return None
    m, n, k = (int(_positive(row.get(c, ""), path, line, c, integer=True)) for c in ("M", "N", "K"))
    tflops = _positive(row.get("tflops", ""), path, line, "tflops")
    # tflops has 4+ significant digits; ms only 3 decimals (0.009 ms for 512^3)
    return GemmSample(row["device"], dtype, m, n, k, 1, 2.0 * m * n * k / (tflops * 1e12), row["kernel"], f"{path.name}:{line}")


def read_csv(path: str | Path) -> list[GemmSample]:
    path = Path(path)
    text = read_text(path, "csv")  # regular files only: a pipe or /dev/zero is refused, not read forever
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    if set(COLUMNS[:7]) <= set(header):
        parse = _canonical_row
    elif set(WAYNE_COLUMNS) <= set(header):
        parse = _wayne_row
    else:
        raise _bad(path, 1, f"a CSV header with {','.join(COLUMNS)}", ",".join(header)[:80] or "an empty file")
    samples = []
    for line, row in enumerate(reader, start=2):
        if None in row or any(v is None for v in row.values()):
            raise _bad(path, line, f"{len(header)} comma-separated columns", ",".join(str(v) for v in row.values() if v is not None))
        sample = parse(row, path, line)
        if sample is not None:
            samples.append(sample)
    if not samples:
        raise _bad(path, 2, "at least one GEMM timing row", "none")
    return samples


def read_samples(paths: list[str]) -> list[GemmSample]:
    return [s for p in paths for s in read_csv(p)]


def write_csv(path: str | Path, samples: list[GemmSample]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for s in samples:
            writer.writerow([s.gpu, s.dtype, s.m, s.n, s.k, s.batch, f"{s.seconds:.6g}", f"{s.tflops:.2f}", s.kernel, s.source])
