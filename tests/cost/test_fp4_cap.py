"""A low-precision GEMM gains at most fp8_max_speedup over the next wider format: fp8 over bf16,
fp4 over fp8 (autopar.cost.gemm.gemm_flops_per_second). fp4 used to be capped against bf16 like
fp8, so NVFP4 ran exactly as fast as FP8 on GB300, whose fp4 peak is 3x its fp8 peak, while
Megatron-Bridge's performance summary (docs/performance-summary-archive.md, NeMo 26.04.01, same
layouts) measures NVFP4 at 1.31-1.50x MXFP8/FP8 end to end on dense LLaMA-3 70B and 405B."""

from __future__ import annotations

import pytest

from autopar.cost.gemm import gemm_flops_per_second, max_efficiency
from autopar.specs.costparams import load_cost_params
from autopar.specs.hardware import load_gpu


def _achieved_tflops(dtype: str, gpu, params) -> float:
    return gemm_flops_per_second(dtype, gpu, params) * max_efficiency(gpu, dtype, params) / 1e12


def test_fp4_on_gb300_gains_1_5x_over_fp8_which_gains_1_5x_over_bf16():
    # profiles/gpus/gb300.yaml: 2,500 bf16 / 5,000 fp8 / 15,000 fp4 dense TFLOP/s; no MAMF row, so
    # the Blackwell efficiencies of profiles/cost/defaults.yaml: bf16 0.776, fp8 0.763, fp4 0.70.
    # bf16 2,500 x 0.776 = 1,940; fp8 min(5,000 x 0.763 = 3,815, 1.5 x 1,940 = 2,910) = 2,910;
    # fp4 min(15,000 x 0.70 = 10,500, 1.5 x 2,910 = 4,365) = 4,365 (was 2,910, the fp8 rate)
    gpu, params = load_gpu("gb300"), load_cost_params()
    assert params.gemm.fp8_max_speedup == 1.5
    assert _achieved_tflops("bf16", gpu, params) == pytest.approx(1940.0, rel=1e-9)
    assert _achieved_tflops("fp8", gpu, params) == pytest.approx(2910.0, rel=1e-9)
    assert _achieved_tflops("fp4", gpu, params) == pytest.approx(4365.0, rel=1e-9)


def test_h100_fp8_stays_capped_at_1_5x_its_bf16_rate():
    # H100 has no fp4; its fp8 is capped at 1.5 x its MAMF bf16 794.5 TFLOP/s = 1,191.75, below the
    # 1,402.6 its MAMF fp8 row achieves (profiles/gpus/h100.yaml): unchanged by the fp4 step
    gpu, params = load_gpu("h100"), load_cost_params()
    assert _achieved_tflops("fp8", gpu, params) == pytest.approx(1.5 * _achieved_tflops("bf16", gpu, params), rel=1e-9)
    assert _achieved_tflops("bf16", gpu, params) == pytest.approx(794.5, rel=1e-3)
