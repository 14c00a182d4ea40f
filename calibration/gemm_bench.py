"""`autopar calibrate gemm --run`: time matmuls over a grid of (M, N, K) that covers transformer
layers (QKV, attention output, MLP up/down at TP 1 and 8, tokens 2K-16K), square cubes and an
unaligned SwiGLU width, and write the canonical CSV (calibration/gemm_data.py).

torch on CUDA when it is installed and sees a GPU (bf16, fp16, and fp8 through
torch._scaled_mm where the build supports it; CUDA events around back-to-back launches);
numpy on the CPU otherwise (fp32: numpy has no bf16; a smaller grid).
"""

from __future__ import annotations

import platform
import time
from typing import Callable

from calibration.gemm_data import GemmSample, write_csv

# (hidden, ffn): Llama-3 8B and 70B (profiles/models)
LAYERS = ((4096, 14336), (8192, 28672))
TOKENS = (2048, 8192, 16384)
CUBES = (512, 1024, 2048, 4096, 8192)
SWIGLU = ((4096, 10922, 4096), (4096, 10944, 4096))  # stas00 sweep: unaligned vs aligned d_ff


def gpu_grid(quick: bool) -> list[tuple[int, int, int]]:
    shapes = {(c, c, c) for c in (CUBES[1:4] if quick else CUBES)} | set(SWIGLU)
    for h, ffn in LAYERS[:1] if quick else LAYERS:
        for m in TOKENS[1:2] if quick else TOKENS:
            for tp in (1, 8):
                # (M, N, K): QKV (GQA 8 kv heads of 128: h + 2 x 1024), out proj, MLP up (gate+up), down
                shapes |= {(m, (h + 2048) // tp, h), (m, h, h // tp), (m, 2 * ffn // tp, h), (m, h, ffn // tp)}
    return sorted(shapes)


def cpu_grid(quick: bool) -> list[tuple[int, int, int]]:
    cubes = (256, 384, 512, 768) if quick else (256, 512, 1024, 2048)
    extra = [(640, 1365, 640), (640, 1368, 640)] + ([] if quick else [(1024, 2730, 768), (1024, 2736, 768), (2048, 512, 2048)])
    return sorted({(c, c, c) for c in cubes} | set(extra))


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _time_torch(torch, m: int, n: int, k: int, dtype: str, iters: int) -> float | None:
    dev = "cuda"
    if dtype == "fp8":
        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            return None
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major second operand
        one = torch.tensor(1.0, device=dev)
        run = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        t = torch.bfloat16 if dtype == "bf16" else torch.float16
        a, b = torch.randn(m, k, device=dev, dtype=t), torch.randn(k, n, device=dev, dtype=t)
        run = lambda: a @ b  # noqa: E731
    try:
        for _ in range(3):
            run()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            run()
        end.record()
        torch.cuda.synchronize()
    except RuntimeError:
        return None  # e.g. fp8 shapes this build's _scaled_mm rejects
    return start.elapsed_time(end) / 1e3 / iters


def _time_numpy(m: int, n: int, k: int, repeats: int) -> float:
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return best


def run_benchmark(path: str, quick: bool = False, echo: Callable[[str], None] = print) -> str:
    """Time the grid on this machine, write the CSV to path, return the device name."""
    torch = _torch_cuda()
    samples: list[GemmSample] = []
    if torch is not None:
        device = torch.cuda.get_device_name(0)
        for m, n, k in gpu_grid(quick):
            for dtype in ("bf16", "fp16", "fp8"):
                iters = max(5, min(100, int(2e13 / (2 * m * n * k))))
                seconds = _time_torch(torch, m, n, k, dtype, iters)
                if seconds is None:
                    continue
                samples.append(GemmSample(device, dtype, m, n, k, 1, seconds, "torch.matmul" if dtype != "fp8" else "torch._scaled_mm",
                                          f"autopar calibrate gemm --run (torch {torch.__version__})"))
    else:
        device = f"cpu {platform.machine()} (numpy)"
        echo("no CUDA torch: timing fp32 numpy matmuls on the CPU")
        for m, n, k in cpu_grid(quick):
            samples.append(GemmSample(device, "fp32", m, n, k, 1, _time_numpy(m, n, k, 3 if quick else 5), "numpy.matmul",
                                      "autopar calibrate gemm --run (numpy)"))
    write_csv(path, samples)
    return device
