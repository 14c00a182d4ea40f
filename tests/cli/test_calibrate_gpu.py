"""`autopar calibrate nccl|gemm --out EXISTING`: the existing profile's other section must come from
the same kind of GPU. One check for this and for a cluster's or comm's calibration:
autopar.specs.costparams.check_profile_gpu (calibrate had its own copy of the load/skip logic)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.errors import InputError
from autopar.specs.costparams import check_profile_gpu, load_calibration_profile
from autopar.specs.hardware import load_gpu

ROOT = Path(__file__).resolve().parents[2]
A100_ROCE = ROOT / "calibration" / "fitted" / "a100-roce.yaml"  # gpu: A100-40GB
GEMM_CSV = ROOT / "calibration" / "data" / "gemm" / "h100sxm_samples.csv"  # H100 rows
# profiles/gpus: A100-40GB is ampere with NVLink 300 GB/s, H100 hopper with 450 GB/s
MISMATCH = ("profile a100-roce was measured on A100-40GB: ampere, NVLink 300 GB/s; these measurements ran on H100: hopper, "
            "NVLink 450 GB/s. A profile carries over only within one architecture and NVLink rate")


@pytest.mark.parametrize("gpu", ["H100", load_gpu("H100")])
def test_another_kind_of_gpu_is_refused_by_name_or_spec(gpu):
    with pytest.raises(InputError) as err:
        check_profile_gpu(load_calibration_profile(str(A100_ROCE)), gpu, "out", "p.yaml", "these measurements ran on")
    assert str(err.value) == f"out='p.yaml': {MISMATCH}"


@pytest.mark.parametrize("profile, gpu", [
    (None, "H100"),                            # no existing profile: nothing to keep
    ("a100-roce", None),                       # measurements that name no GPU
    ("a100-roce", "TPU-v5"),                   # a GPU no preset knows: not compared
    ("a100-roce", "A100-80GB"),                # same kind under another name: ampere, 300 GB/s
])
def test_what_cannot_be_compared_or_matches_passes(profile, gpu):
    loaded = load_calibration_profile(str(A100_ROCE)) if profile else None
    assert check_profile_gpu(loaded, gpu, "out", "p.yaml", "these measurements ran on") is None


def test_calibrate_gemm_into_a_profile_of_another_gpu(tmp_path):
    out = tmp_path / "p.yaml"
    out.write_text(A100_ROCE.read_text())
    r = CliRunner().invoke(main, ["calibrate", "gemm", str(GEMM_CSV), "--out", str(out)])
    assert r.exit_code == 1 and r.stderr == f"Error: out='{out}': {MISMATCH}\n"
    assert out.read_text() == A100_ROCE.read_text()  # left as it was


def test_calibrate_gemm_into_a_profile_of_an_unknown_gpu_writes(tmp_path):
    out = tmp_path / "p.yaml"
    out.write_text(A100_ROCE.read_text().replace("gpu: A100-40GB", "gpu: TPU-v5"))
    r = CliRunner().invoke(main, ["calibrate", "gemm", str(GEMM_CSV), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1] == f"wrote {out}"
