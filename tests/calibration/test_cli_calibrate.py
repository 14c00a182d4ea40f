"""`autopar calibrate nccl|gemm` and `autopar comm` through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autopar.cli import main
from autopar.errors import InputError
from autopar.cost.comm import Collective, busbw_factor, collective_seconds, place_group
from autopar.specs import load_cluster
from autopar.specs.costparams import load_calibration_profile, load_cost_params, params_for_cluster, with_calibration

ROOT = Path(__file__).resolve().parents[2]
NCCL = ROOT / "calibration" / "data" / "nccl"
GEMM_CSV = ROOT / "calibration" / "data" / "gemm" / "h100sxm_samples.csv"
H100_IB = ROOT / "calibration" / "fitted" / "h100-ib.yaml"


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result) -> bool:
    return result.exit_code == 1 and result.output.startswith("Error: ") and len(result.output.strip().splitlines()) == 1


def test_calibrate_nccl_writes_a_profile(tmp_path):
    out = tmp_path / "p.yaml"
    r = run(["calibrate", "nccl", NCCL / "a100x8_allreduce_oci-japan.txt", NCCL / "a100x16_2node_allreduce_aws-p4de-efa_partial.txt", "--out", out])
    assert r.exit_code == 0, r.output
    assert "warning: a100x16_2node_allreduce_aws-p4de-efa_partial.txt: partial log" in r.output  # stderr
    assert f"wrote {out}" in r.output
    profile = load_calibration_profile(str(out))
    # 8x A100 64 B - 8 GiB measures the node's ring bandwidth. On 2 nodes the tree moves the
    # buffer once through each node's NICs (algbw <= NICs): the p4de log (4x 100 Gb/s EFA = 50 GB/s
    # per node, 78.3 GB/s busbw = 41.8 algbw) measures them against the dgx-a100 preset's 8x 200
    # Gb/s: 41.8 / 200 = 0.21 of its line rate at 2 GiB, the fit's efficiency within 2x of it
    # since the sizes below 2 GiB still fill the pipeline (an EFA cluster file would say 0.84)
    assert profile.collectives.intra_busbw_gb_per_s == pytest.approx(235, rel=0.08)
    assert 0.21 <= profile.collectives.network_efficiency <= 0.42
    assert "nvls_speedup" in profile.collectives.not_identified  # A100: no NVLS
    assert all(f.median_error <= 0.10 for f in profile.log_fits)  # issue 4 target, per log


def test_calibrate_forced_ring_log(tmp_path):
    # LOG@ring: the NCCL_ALGO=Ring 2-node log (NCCL_MIN_CTAS=24) is NIC-bound: it identifies the
    # network efficiency, 392.7 GB/s of 8 x 50 GB/s = 0.98 (within 3%)
    out = tmp_path / "p.yaml"
    r = run(["calibrate", "nccl", NCCL / "h100x8_allreduce_nvls_nccl-tests-issue290.txt",
             f"{NCCL / 'h100x16_2node_allreduce_ringforced_ib400_nccl-tests-issue309e.txt'}@ring", "--out", out])
    assert r.exit_code == 0, r.output
    assert load_calibration_profile(str(out)).collectives.network_efficiency == pytest.approx(0.98, rel=0.03)


def test_gemm_then_nccl_into_one_profile(tmp_path):
    out = tmp_path / "p.yaml"
    assert run(["calibrate", "gemm", GEMM_CSV, "--out", out]).exit_code == 0
    r = run(["calibrate", "nccl", NCCL / "h100x8_allreduce_nvls_nccl-tests-issue290.txt", "--out", out])
    assert r.exit_code == 0, r.output
    data = yaml.safe_load(out.read_text())
    assert data["gemm"]["gpu"] == "H100" and data["collectives"]["nvls_speedup"] > 1.2


def test_calibrate_gemm_run_on_cpu(tmp_path):
    out = tmp_path / "cpu.yaml"
    r = run(["calibrate", "gemm", "--run", "--quick", "--out", out, "--csv-out", tmp_path / "b.csv"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "b.csv").read_text().startswith("gpu,dtype,m,n,k,batch,seconds")
    assert "time error on fitted samples" in r.output


@pytest.mark.parametrize("args", [
    ["calibrate", "nccl", "NOPE.txt", "--out", "X.yaml"],
    ["calibrate", "nccl", NCCL / "nonstandard" / "h200x8_allreduce_bench_py_stas00.txt", "--out", "X.yaml"],
    ["calibrate", "gemm", "--out", "X.yaml"],
    ["calibrate", "gemm", NCCL / "a100x8_allreduce_oci-japan.txt", "--out", "X.yaml"],
])
def test_calibrate_garbage_is_one_line(tmp_path, args):
    r = run([a if a != "X.yaml" else tmp_path / "x.yaml" for a in args])
    assert one_line_error(r), r.output
    assert not (tmp_path / "x.yaml").exists()


def test_calibrate_truncated_log(tmp_path):
    log = tmp_path / "cut.txt"
    text = (NCCL / "a100x8_allreduce_oci-japan.txt").read_text()
    log.write_text(text[: text.index("   268435456") + 40])  # cut inside the 256 MiB row (line 38)
    r = run(["calibrate", "nccl", log, "--out", tmp_path / "x.yaml"])
    assert one_line_error(r) and "cut.txt:38: expected 13 columns" in r.output


def test_comm_json_is_the_cost_model(tmp_path):
    r = run(["comm", "--cluster", "dgx-h100", "--op", "all_gather", "--bytes", "58M", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out) == {"size_bytes", "seconds", "algbw_bytes_per_second", "busbw_bytes_per_second", "tier", "algorithm", "protocol"}
    cluster = load_cluster("dgx-h100")
    # the preset names calibration/fitted/h100-ib.yaml: the command must use the same coefficients
    seconds = collective_seconds(Collective.all_gather, 58 * 2**20, place_group(8, 1, 8), cluster, params_for_cluster(cluster))
    assert out["seconds"] == seconds and out["tier"] == "intra_node"  # same function, same number
    assert out["busbw_bytes_per_second"] == pytest.approx(58 * 2**20 / seconds * busbw_factor(Collective.all_gather, 8))


def test_comm_sizes_and_calibration():
    r = run(["comm", "--cluster", "dgx-h100-superpod", "--nodes", "2", "--op", "all_reduce", "--sizes", "1M:16G",
             "--calibration", H100_IB, "--json"])
    rows = json.loads(r.output)
    assert [x["size_bytes"] for x in rows] == [2**k for k in range(20, 35)] and rows[0]["tier"] == "network"
    # h100-ib on 2 nodes: NVLS-tree bound by NVLS (nccl-tests#309 2-node logs: 466.7-469.2 GB/s at 8 GiB, 3%)
    at_8g = next(x for x in rows if x["size_bytes"] == 8 * 2**30)
    assert at_8g["algorithm"] == "nvls_tree"
    assert at_8g["busbw_bytes_per_second"] / 1e9 == pytest.approx(467, rel=0.03)
    default = json.loads(run(["comm", "--cluster", "dgx-h100-superpod", "--nodes", "2", "--op", "all_reduce",
                              "--bytes", "8G", "--json"]).output)
    # the dgx-h100-superpod preset names h100-ib itself: without --calibration it is the same
    assert default["seconds"] == at_8g["seconds"]


def test_comm_size_spellings_and_table():
    outs = {json.loads(run(["comm", "--cluster", "dgx-a100", "--op", "alltoall", "--bytes", b, "--json"]).output)["seconds"]
            for b in ("1G", "1GiB", "1073741824")}
    assert len(outs) == 1
    r = run(["comm", "--cluster", "dgx-h100", "--gpus", "4", "--op", "reduce_scatter", "--sizes", "1M:4M"])
    assert r.exit_code == 0 and len(r.output.strip().splitlines()) == 3 + 3 and "(GB/s)" in r.output


def test_comm_uses_the_clusters_profile(tmp_path):
    data = yaml.safe_load((ROOT / "profiles" / "clusters" / "dgx-h100.yaml").read_text())
    data["calibration"] = str(H100_IB)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    via_file = json.loads(run(["comm", "--cluster", path, "--op", "all_gather", "--bytes", "58M", "--json"]).output)
    params = with_calibration(load_cost_params(), load_calibration_profile(str(H100_IB)))
    expected = collective_seconds(Collective.all_gather, 58 * 2**20, place_group(8, 1, 8), load_cluster(str(path)), params)
    assert via_file["seconds"] == expected


@pytest.mark.parametrize("args", [
    ["--op", "all_reduce", "--bytes", "1M", "--sizes", "1M:2M"],
    ["--op", "all_reduce", "--bytes", "1.5"],
    ["--op", "all_reduce", "--sizes", "4M:1M"],
    ["--op", "all_reduce", "--bytes", "1M", "--gpus", "12"],
    ["--op", "all_reduce", "--bytes", "1M", "--calibration", "nope.yaml"],
])
def test_comm_bad_input_is_one_line(args):
    assert one_line_error(run(["comm", "--cluster", "dgx-h100", *args]))


HEADER = "gpu,dtype,m,n,k,batch,seconds\n"


@pytest.mark.parametrize("rows, line", [
    # review: these named no field (the CSV's column, the devices, the files)
    (None, "Error: csvs=(missing): give GEMM timing CSV files (columns gpu,dtype,m,n,k,batch,seconds) or --run to time matmuls here"),
    ("H100,bf16,4096,4096,abc,1,0.0002\n", "Error: {path}:2:k='abc': expected k as a positive whole number"),
    ("H100,bf16,4096,4096,4096,1,-1\n", "Error: {path}:2:seconds='-1': expected seconds as a positive finite number"),
    ("H100,bf17,4096,4096,4096,1,0.0002\n", "Error: {path}:2:dtype='bf17': expected dtype one of fp32, tf32, fp16, bf16, fp8, fp4"),
    ("H100,bf16,4096,4096,4096,1,0.0002\nA100-80GB,bf16,4096,4096,4096,1,0.0002\n",
     "Error: csv.gpu='A100-80GB, H100': the rows come from several devices; fit one GPU at a time (or pass --gpu)"),
    ("H100,bf16,64,64,64,1,0.0002\n",
     "Error: csv='g.csv': none of its 1 rows has m, n and k >= 256 outside an unaligned-width sweep: nothing training-sized to fit"),
    ("H100,fp4,4096,4096,4096,1,0.0002\n",
     "Error: csv.dtype='fp4': H100 has no fp4 peak in its profile (profiles/gpus); drop those rows or pass --gpu with a GPU that has one"),
])
def test_calibrate_gemm_errors_name_the_field(tmp_path, rows, line):
    path = tmp_path / "g.csv"
    args = ["calibrate", "gemm", "--out", tmp_path / "x.yaml"]
    if rows is not None:
        path.write_text(HEADER + rows)
        args.insert(2, path)
    r = run(args)
    assert one_line_error(r), r.output
    assert r.output == line.format(path=path) + "\n"


# ---- a profile or log of another kind of GPU (autopar.specs.costparams.gpu_kind) ----------

MISMATCH = "one profile fits one architecture and NVLink rate"


@pytest.mark.parametrize("cluster, ok", [
    ("dgx-h100", True), ("dgx-h200", True),  # H200: hopper, NVLink4 450 GB/s as H100
    ("hgx-h800", False), ("dgx-b200", False),  # H800: NVLink 200 GB/s; B200: blackwell
])
def test_comm_refuses_a_profile_of_another_gpu(cluster, ok):
    r = run(["comm", "--cluster", cluster, "--op", "all_reduce", "--bytes", "1G", "--calibration", H100_IB])
    if ok:
        assert r.exit_code == 0, r.output
        return
    gpu = load_cluster(cluster).gpu
    assert r.output == (f"Error: calibration='{H100_IB}': profile h100-ib was measured on H100: hopper, NVLink 450 GB/s; cluster "
                        f"{cluster} runs {gpu.name}: {gpu.architecture}, NVLink {gpu.nvlink_gb_per_s:g} GB/s. A profile carries over "
                        "only within one architecture and NVLink rate\n")


def test_a_profile_of_another_node_size_is_refused(tmp_path):
    # quad-gh200: GH200 is hopper at NVLink 450 GB/s as H100, so h100-ib passed the GPU check; its node
    # curves came from eight GPUs behind an NVSwitch and its network from InfiniBand NDR, not four GPUs
    # joined without one on Slingshot
    message = (f"calibration='{H100_IB}': profile h100-ib was measured on 8-GPU nodes (H100 SXM5 nodes, 8 GPUs with 8x 400 Gb/s "
               "InfiniBand NDR (ConnectX-7) each); cluster quad-gh200 has 4 GPUs per node. A profile carries over only between "
               "nodes of one size")
    r = run(["comm", "--cluster", "quad-gh200", "--nodes", "2", "--op", "all_reduce", "--bytes", "1G", "--calibration", str(H100_IB)])
    assert r.exit_code == 1 and r.output == f"Error: {message}\n"
    # a cluster file naming it, refused where its coefficients are built
    data = yaml.safe_load((ROOT / "profiles" / "clusters" / "quad-gh200.yaml").read_text())
    (tmp_path / "quad-ib.yaml").write_text(yaml.safe_dump({**data, "calibration": str(H100_IB)}))
    with pytest.raises(InputError) as err:
        params_for_cluster(load_cluster(str(tmp_path / "quad-ib.yaml")))
    assert str(err.value) == message
    # part of a node is still the profile's node
    assert run(["comm", "--cluster", "dgx-h100", "--gpus", "4", "--op", "all_reduce", "--bytes", "1G",
                "--calibration", str(H100_IB)]).exit_code == 0
    assert params_for_cluster(load_cluster("dgx-h100").with_gpus(4)).sources["calibration"] == "h100-ib"


def test_a100_80gb_keeps_the_a100_40gb_profile():
    # dgx-a100 (A100-80GB) names a100-roce, fitted on A100-40GB nodes: same ampere, NVLink3 300 GB/s
    assert load_calibration_profile(str(ROOT / "calibration" / "fitted" / "a100-roce.yaml")).gpu == "A100-40GB"
    assert params_for_cluster(load_cluster("dgx-a100")).sources["calibration"] == "a100-roce"
    assert run(["comm", "--cluster", "dgx-a100", "--op", "all_reduce", "--bytes", "1G",
                "--calibration", ROOT / "calibration" / "fitted" / "a100-roce.yaml"]).exit_code == 0


def test_calibrate_nccl_refuses_logs_of_another_gpu(tmp_path):
    a100 = NCCL / "a100x8_allreduce_oci-japan.txt"  # device lines: NVIDIA A100-SXM4-40GB
    r = run(["calibrate", "nccl", a100, "--gpu", "H100", "--out", tmp_path / "p.yaml"])
    assert r.output == (f"Error: gpu='H100': --gpu names H100: hopper, NVLink 450 GB/s; {a100} ran on A100-40GB: ampere, "
                        f"NVLink 300 GB/s: {MISMATCH}\n")
    r = run(["calibrate", "nccl", a100, "--cluster", "dgx-b200", "--out", tmp_path / "p.yaml"])
    assert one_line_error(r) and r.output.startswith("Error: cluster='dgx-b200': cluster dgx-b200 runs B200: blackwell")
    h100 = NCCL / "h100x16_2node_allreduce_ib400_nccl-tests-issue309a.txt"
    r = run(["calibrate", "nccl", a100, h100, "--out", tmp_path / "p.yaml"])
    assert one_line_error(r) and r.output.startswith(f"Error: logs='{h100}': ran on H100: hopper")
    assert not (tmp_path / "p.yaml").exists()
    # the same kind under another name is fine (A100-80GB: ampere, 300 GB/s)
    assert run(["calibrate", "nccl", a100, "--gpu", "A100-80GB", "--out", tmp_path / "p.yaml"]).exit_code == 0


def test_calibrate_nccl_into_a_profile_of_another_gpu(tmp_path):
    out = tmp_path / "p.yaml"
    out.write_text(H100_IB.read_text())
    r = run(["calibrate", "nccl", NCCL / "a100x8_allreduce_oci-japan.txt", "--out", out])
    assert r.output == (f"Error: out='{out}': profile h100-ib was measured on H100: hopper, NVLink 450 GB/s; these measurements ran on "
                        "A100-40GB: ampere, NVLink 300 GB/s. A profile carries over only within one architecture and NVLink rate\n")


def test_comm_reports_nccls_pick_not_the_fastest_prediction():
    """`comm` shows the algorithm NCCL runs: the smallest of NCCL's own estimates. 1 KiB AllReduce
    on 8 H100 (h100-ib): NCCL runs ring/LL, though forced NVLS/Simple predicts less time; the help
    said 'picks the fastest'."""
    from autopar.cost.comm import collective_choice
    from autopar.cost.nccl import ALGORITHMS, PROTOCOLS

    cluster = load_cluster("dgx-h100")
    params, group = params_for_cluster(cluster), place_group(8, 1, 8)
    chosen = collective_choice(Collective.all_reduce, 1024, group, cluster, params)
    alternatives = []
    for algo in ALGORITHMS:
        for proto in PROTOCOLS:
            try:
                alternatives.append(collective_choice(Collective.all_reduce, 1024, group, cluster, params, algo, proto))
            except ValueError:  # cannot run here (collnet without SHARP, ...)
                continue
    assert chosen.nccl_estimate_seconds == min(a.nccl_estimate_seconds for a in alternatives)
    assert min(a.seconds for a in alternatives) < chosen.seconds
    shown = json.loads(run(["comm", "--cluster", "dgx-h100", "--op", "all_reduce", "--bytes", "1K", "--json"]).output)
    assert (shown["algorithm"], shown["protocol"], shown["seconds"]) == (chosen.algorithm, chosen.protocol, chosen.seconds)
    help_text = run(["comm", "--help"]).output
    assert "picks the fastest" not in help_text and "NCCL's own pick, the smallest of its tuning model's estimates" in " ".join(help_text.split())


@pytest.mark.parametrize("args, line", [
    # a typo of a unit (10T for 10G) was costed: the buffer must fit in one GPU's HBM (79.65 GiB on H100)
    (["--bytes", "10T"], "Error: bytes='10T': 10,995,116,277,760 bytes exceed one H100's 85,523,536,282 bytes of HBM (79.65 GiB), "
                         "where each rank's buffer lives"),
    (["--sizes", "1M:1T"], "Error: sizes='1T': 1,099,511,627,776 bytes exceed one H100's 85,523,536,282 bytes of HBM (79.65 GiB), "
                           "where each rank's buffer lives"),
])
def test_comm_message_size_is_bounded_by_hbm(args, line):
    assert run(["comm", "--cluster", "dgx-h100", "--op", "all_reduce", *args]).output == line + "\n"
    assert run(["comm", "--cluster", "dgx-h100", "--op", "all_reduce", "--bytes", "79G"]).exit_code == 0


@pytest.mark.parametrize("args, line", [
    ([], "Error: bytes=(missing): give --bytes SIZE or --sizes MIN:MAX"),  # was bytes=None
    (["--bytes", "1M", "--sizes", "1M:2M"], "Error: sizes='1M:2M': give one of --bytes (1M) or --sizes, not both"),
])
def test_comm_size_option_errors(args, line):
    assert run(["comm", "--cluster", "dgx-h100", "--op", "all_reduce", *args]).output == line + "\n"
