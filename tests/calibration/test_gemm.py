"""GEMM samples, the efficiency fit on the H100 measurements, and the CPU benchmark run."""

from __future__ import annotations

from pathlib import Path

import pytest

from autopar.cost.gemm import gemm_efficiency
from autopar.errors import InputError
from autopar.specs import load_gpu
from autopar.specs.costparams import CalibrationProfile, load_cost_params, with_calibration
from calibration.gemm_bench import run_benchmark
from calibration.gemm_data import read_csv, read_samples
from calibration.gemm_fit import fit_gemm, gemm_table, percent
from calibration.gemm_samples import OUT, reference_samples

DATA = Path(__file__).resolve().parents[2] / "calibration" / "data" / "gemm"


@pytest.fixture(scope="module")
def h100_fit():
    return fit_gemm(read_samples([str(OUT)]), "H100")


def test_converted_samples_match_the_raw_files():
    # h100sxm_samples.csv is python -m calibration.gemm_samples over the raw files
    committed = read_csv(OUT)
    fresh = reference_samples()
    assert [(s.dtype, s.m, s.n, s.k, s.kernel) for s in committed] == [(s.dtype, s.m, s.n, s.k, s.kernel) for s in fresh]
    assert all(a.seconds == pytest.approx(b.seconds, rel=1e-5) for a, b in zip(committed, fresh))


def test_waynehacking_csv_keeps_library_kernels():
    # bench.csv H100 rows: cublas_tc 4096^3 = 732.58 TFLOP/s (printed)
    rows = [s for s in read_csv(DATA / "h100sxm_and_rtxpro6000_gemm_bench_waynehacking8.csv") if "H100" in s.gpu]
    assert {s.kernel for s in rows} == {"cublas_tc", "cublas_tf32"}
    cube = next(s for s in rows if s.kernel == "cublas_tc" and s.m == 4096)
    assert cube.tflops == pytest.approx(732.58, rel=1e-6)


def test_h100_fit(h100_fit):
    fit, report = h100_fit
    # issue 4: report the fit error on the H100 samples; median over training shapes <= 10%
    assert fit.median_error <= 0.10
    # MAMF table: H100 SXM bf16 794.5 / 989 = 80.3% at the best shape; fp8 1402.6 / 1979 = 70.9% (5% tolerance)
    assert fit.max_efficiency["bf16"] == pytest.approx(0.803, rel=0.05)
    assert fit.max_efficiency["fp8"] == pytest.approx(0.709, rel=0.05)
    # stas00 SwiGLU sweep: d_ff 10922 -> 272.73 vs 395-398 TFLOP/s at aligned widths: ~0.69 (2%)
    assert fit.unaligned_efficiency == pytest.approx(0.69, abs=0.02)
    # cuBLAS cubes (waynehacking8): 2048^3 555 and 4096^3 733 of ~790 imply half ~ 0.7-1.2e10 flops
    assert 3e9 <= fit.half_saturation_flops <= 1.5e10
    assert report["num_fitted"] < report["num_samples"]  # decode-like and sweep shapes left out


@pytest.mark.parametrize("error, text", [(0.0042, "0.4%"), (0.00042, "0.042%"), (0.0, "0.0%"), (175.208, "17520.8%")])
def test_percent_keeps_small_errors(error, text):
    # the all-samples max printed with :.0f, so an error under 0.5% read 0%
    assert percent(error) == text


def test_gemm_table_prints_every_error_with_its_digits(h100_fit):
    fit, report = h100_fit
    small = {**report, "all_max_error": 0.0042, "all_p90_error": 0.0031, "all_median_error": 0.0004}
    assert gemm_table(fit, small).splitlines()[-1].endswith("median 0.04%, 90th percentile 0.3%, max 0.4%")


def test_calibrated_gemm_efficiency(h100_fit, params):
    fit, _ = h100_fit
    gpu = load_gpu("H100")
    calibrated = with_calibration(params, CalibrationProfile(name="t", gemm=fit))
    aligned = gemm_efficiency(4096, 10944, 4096, "bf16", gpu, calibrated)
    ragged = gemm_efficiency(4096, 10922, 4096, "bf16", gpu, calibrated)
    assert ragged / aligned == pytest.approx(fit.unaligned_efficiency, rel=0.01)  # tile terms differ by 0.2%
    # a ragged token count M (a dropless expert's tokens) is no row width: only its padding to
    # 128-row tiles costs, 4100 / (33 x 128) = 0.971 of the aligned rate (not 0.69 x that)
    ragged_m = gemm_efficiency(4100, 10944, 4096, "bf16", gpu, calibrated)
    assert ragged_m / aligned == pytest.approx(4100 / (33 * 128), rel=0.005)
    # without a profile: no alignment penalty (default behaviour unchanged)
    assert gemm_efficiency(4096, 10922, 4096, "bf16", gpu, params) == pytest.approx(
        gemm_efficiency(4096, 10944, 4096, "bf16", gpu, params), rel=0.01)


@pytest.mark.parametrize("text, message", [
    ("a,b\n1,2\n", "expected a CSV header"),
    ("gpu,dtype,m,n,k,batch,seconds\nH100,bf16,4096,4096,4096,1,nan\n", "csv:2"),
    ("gpu,dtype,m,n,k,batch,seconds\nH100,bf17,4096,4096,4096,1,0.001\n", "dtype one of"),
    ("gpu,dtype,m,n,k,batch,seconds\nH100,bf16,4096,4096\n", "7 comma-separated columns"),
])
def test_bad_csv(tmp_path, text, message):
    path = tmp_path / "csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_csv(path)


def test_cpu_benchmark_run(tmp_path):
    # no CUDA torch here: numpy fp32 on the CPU, small grid, CSV readable by the fitter
    path = tmp_path / "bench.csv"
    device = run_benchmark(str(path), quick=True, echo=lambda _: None)
    samples = read_csv(path)
    assert device.startswith("cpu") and {s.dtype for s in samples} == {"fp32"} and len(samples) >= 5
    fit, _ = fit_gemm(samples)
    assert fit.gpu is None and fit.architecture is None  # no GPU profile: not applied to the cost model
    assert load_cost_params().gemm == with_calibration(load_cost_params(), CalibrationProfile(name="cpu", gemm=fit)).gemm


def test_a_sample_above_the_peak_is_refused(tmp_path):
    """An H100 bf16 GEMM of 4096^3 (2 x 4096^3 = 137.4 GFLOP) in 1 ns would run at 137,438,953.5
    TFLOP/s, 139,000x the 989.4 TFLOP/s dense peak: a unit slip (ns for s), refused by row instead
    of fitting the efficiency at its bound."""
    path = tmp_path / "fast.csv"
    path.write_text("gpu,dtype,m,n,k,batch,seconds\nH100,bf16,4096,4096,4096,1,1e-9\n")
    with pytest.raises(InputError, match=r"137,438,953.5 TFLOP/s.*exceeds H100's bf16 peak of 989.\d TFLOP/s"):
        fit_gemm(read_csv(path))
