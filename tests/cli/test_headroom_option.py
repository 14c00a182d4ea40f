"""--memory-headroom and the cluster file's memory_headroom_gb: estimate's verdict, the override,
one-line errors."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from autopar.cli import main
from autopar.specs import load_cluster

# search's best plan for this case at no headroom: 84.24 GB per GPU of the H100's 85.52 GB
PLAN = "tp=4,pp=2,dp=64,cp=2,vpp=10,mbs=1,zero=1,recompute=none,sp=on,schedule=interleaved"
ESTIMATE = ["estimate", "--model", "llama3-70b", "--gpus", "1024", "--seq-len", "8192", "--global-batch-tokens", "16M",
            "--plan", PLAN, "--json"]


def _estimate(cluster: str, *extra: str) -> dict:
    res = CliRunner().invoke(main, [*ESTIMATE, "--cluster", cluster, *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_a_plan_that_fits_whole_hbm_does_not_fit_less_8gb():
    # 84.24 GB fits 85.52 GB; 8 GB held back leaves 77.52 GB, 6.7 GB short
    whole, held = _estimate("dgx-h100-superpod"), _estimate("dgx-h100-superpod", "--memory-headroom", "8GB")
    assert whole["feasible"] and whole["reasons"] == []
    assert whole["memory_bytes_per_gpu"] == held["memory_bytes_per_gpu"]  # the plan's need is the same
    assert held["memory_bytes_per_gpu"] / 1e9 == pytest.approx(84.24, abs=0.01)
    assert not held["feasible"]
    assert held["reasons"] == ["memory: needs 84.2 GB per GPU on stage 0, the limit is 77.5 GB usable (85.5 GB HBM less 8.0 GB headroom)"]
    assert held["memory_capacity_bytes"] == pytest.approx(whole["memory_capacity_bytes"] - 8e9)
    assert held["memory_headroom_bytes"] == 8e9


@pytest.mark.parametrize("text, gb", [("8GB", 8.0), ("6GiB", 6 * 2**30 / 1e9), ("8e9", 8.0), ("10%", 8.552353628), ("0", 0.0)])
def test_sizes_and_percentages(text, gb):
    out = _estimate("dgx-h100-superpod", "--memory-headroom", text)
    assert out["memory_headroom_bytes"] / 1e9 == pytest.approx(gb)


def test_the_cluster_file_sets_a_headroom_and_the_option_overrides_it(tmp_path):
    path = tmp_path / "pod.yaml"
    data = load_cluster("dgx-h100-superpod").model_dump(mode="json")
    data["gpu"] = "H100"
    path.write_text(yaml.safe_dump({**data, "name": "pod-with-reserve", "memory_headroom_gb": 2.0}))
    assert load_cluster(str(path)).usable_hbm_bytes == pytest.approx(load_cluster("dgx-h100-superpod").gpu.hbm_bytes - 2e9)
    # 2 GB held back: 83.52 GB usable, the 84.24 GB plan does not fit; --memory-headroom 1GB
    # replaces the file's 2 GB (84.52 GB usable: it fits), and 0 restores the whole HBM
    from_file = _estimate(str(path))
    assert not from_file["feasible"] and from_file["memory_headroom_bytes"] == 2e9
    assert "83.5 GB usable (85.5 GB HBM less 2.0 GB headroom)" in from_file["reasons"][0]
    overridden = _estimate(str(path), "--memory-headroom", "1GB")
    assert overridden["feasible"] and overridden["memory_headroom_bytes"] == 1e9
    assert _estimate(str(path), "--memory-headroom", "0")["memory_headroom_bytes"] == 0


def test_a_cluster_file_headroom_at_or_above_hbm_is_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    data = load_cluster("dgx-h100").model_dump(mode="json")
    data["gpu"] = "H100"
    path.write_text(yaml.safe_dump({**data, "memory_headroom_gb": 90}))
    res = CliRunner().invoke(main, [*ESTIMATE[:3], "--cluster", str(path), "--gpus", "8", "--plan", "tp=8"])
    assert res.exit_code == 1
    assert "memory_headroom_gb=90: must be below the H100's HBM" in res.output


@pytest.mark.parametrize("command", ["estimate", "search", "plan", "tune", "emit"])
@pytest.mark.parametrize("value", ["-1GB", "100%", "90GB", "nan", "abc", "-5%", "inf"])
def test_bad_values_are_one_line_exit_1(command, value):
    args = {
        "estimate": ESTIMATE[1:] + ["--cluster", "dgx-h100-superpod"],
        "search": ["--model", "llama3-70b", "--cluster", "dgx-h100-superpod", "--gpus", "64"],
        "plan": ["--model", "llama3-70b", "--cluster", "dgx-h100-superpod", "--tokens", "1T", "--seq-len", "8192"],
        "tune": ["--model", "llama3-70b", "--cluster", "dgx-h100-superpod", "--gpus", "64", "--trial-cmd", "true", "--trials", "1"],
        "emit": ["--format", "megatron", *ESTIMATE[1:-1], "--cluster", "dgx-h100-superpod"],
    }[command]
    res = CliRunner().invoke(main, [command, *args, f"--memory-headroom={value}"])
    assert res.exit_code == 1, res.output
    assert res.output == (f"Error: memory-headroom={value!r}: must be a size from 0 to below the H100's HBM of 85.5 GB (79.7 GiB) "
                          "(8GB, 6GiB, 8e9 bytes) or a percentage of HBM from 0% to below 100% (10%)\n")


EMIT = ["emit", "--format", "megatron", *ESTIMATE[1:-1], "--cluster", "dgx-h100-superpod"]


def test_emit_header_holds_the_plan_to_hbm_less_the_headroom():
    # the same 84.24 GB plan: fits the whole 85.52 GB; at 10% (8.55 GB held back, 76.97 GB usable)
    # the launcher's header warns that the cost model marks it infeasible
    whole = CliRunner().invoke(main, EMIT)
    assert whole.exit_code == 0, whole.output
    assert "memory 84.24 GB per GPU of 85.52 GB\n" in whole.output and "infeasible" not in whole.output
    held = CliRunner().invoke(main, [*EMIT, "--memory-headroom", "10%"])
    assert held.exit_code == 0, held.output
    assert "memory 84.24 GB per GPU of 77.0 GB usable (85.5 GB HBM less 8.6 GB headroom)" in held.output
    assert ("WARNING: the cost model marks this plan infeasible: memory: needs 84.2 GB per GPU on stage 0, "
            "the limit is 77.0 GB usable (85.5 GB HBM less 8.6 GB headroom)") in held.output


def test_emit_of_a_results_file_keeps_its_search_headroom(tmp_path):
    res = CliRunner().invoke(main, ["emit", str(tmp_path / "r.json"), "--format", "megatron", "--memory-headroom", "8GB"])
    assert res.exit_code == 1
    assert res.output.startswith("Error: memory-headroom='8GB': applies to a hand-written plan; a results file keeps its search's headroom")
