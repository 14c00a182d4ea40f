"""One fabric rule for every command (ClusterSpec.fabric_num_gpus / check_fabric): a file
describes as many GPUs as its top tier reaches, or its num_nodes when it has no tiers; beyond
that a command needs --extrapolate-fabric."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autopar.cli import main
from autopar.specs import load_cluster

ROOT = Path(__file__).resolve().parents[2]
# 16 nodes, but the only tier reaches 4: 32 GPUs of the fabric are described, 128 are not
BEYOND = ("cluster wide describes a fabric of 32 GPUs (top tier leaf: 4 nodes; its num_nodes=16 lies beyond the top tier); "
          "pass --extrapolate-fabric to assume its top tier repeats")


@pytest.fixture
def wide(tmp_path) -> str:
    """dgx-h100's node with num_nodes 16 above a single 4-node leaf tier."""
    data = yaml.safe_load((ROOT / "profiles/clusters/dgx-h100.yaml").read_text())
    data.pop("calibration")
    data.update(name="wide", num_nodes=16, tiers=[{"name": "leaf", "num_nodes": 4, "latency_us": 6.0}])
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def error_line(args: list[str]) -> str:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1, r.output
    return r.stderr.strip()


SEARCH = ["search", "--model", "llama3-8b", "--seq-len", "4096", "--top", "1", "--no-per-stage"]
COMM = ["comm", "--op", "all_reduce", "--bytes", "1G"]


def test_search_and_comm_refuse_the_same_group_beyond_the_top_tier(wide):
    # search used max(num_nodes, tiers) and ran 128 GPUs silently; comm used the tiers alone and
    # refused 16 nodes: the same 128 GPUs are now refused by both, with the same reason
    assert error_line([*SEARCH, "--cluster", wide, "--gpus", "128"]) == f"Error: gpus=128: {BEYOND}"
    assert error_line([*COMM, "--cluster", wide, "--gpus", "128"]) == f"Error: gpus=128: {BEYOND}"
    assert error_line([*COMM, "--cluster", wide, "--nodes", "16"]) == f"Error: nodes=16: {BEYOND}"
    # the file's own size is as far beyond its fabric as such a --gpus
    assert error_line([*SEARCH, "--cluster", wide]) == f"Error: cluster.num_nodes=16: {BEYOND}"
    assert error_line(["plan", "--model", "llama3-8b", "--cluster", wide, "--tokens", "1T", "--seq-len", "4096"]) == \
        f"Error: cluster.num_nodes=16: {BEYOND}"


def test_within_the_top_tier_or_with_the_flag_both_run(wide):
    assert CliRunner().invoke(main, [*SEARCH, "--cluster", wide, "--gpus", "32"]).exit_code == 0  # 4 nodes: the leaf
    assert CliRunner().invoke(main, [*COMM, "--cluster", wide, "--nodes", "4"]).exit_code == 0
    r = CliRunner().invoke(main, [*SEARCH, "--cluster", wide, "--gpus", "128", "--extrapolate-fabric"])
    assert r.exit_code == 0 and "note: --extrapolate-fabric: 128 GPUs on wide, whose fabric describes 32" in r.stderr, r.output
    assert CliRunner().invoke(main, [*COMM, "--cluster", wide, "--nodes", "16", "--extrapolate-fabric"]).exit_code == 0


def test_without_tiers_the_fabric_is_num_nodes():
    # pcie-workstation: one 4-GPU node, no tiers. comm took a tierless file as 1 node whatever
    # its num_nodes; now the rule is search's: num_nodes x gpus_per_node
    line = error_line([*COMM, "--cluster", "pcie-workstation", "--nodes", "2"])
    assert line == ("Error: nodes=2: cluster pcie-workstation describes a fabric of 4 GPUs (num_nodes=1, no tiers above the node); "
                    "pass --extrapolate-fabric to assume more such nodes on its network")


@pytest.mark.parametrize("preset", sorted(p.stem for p in (ROOT / "profiles/clusters").glob("*.yaml")))
def test_no_preset_lies_beyond_its_own_fabric(preset):
    # every preset's num_nodes is within its top tier, so the presets run at their size without the flag
    cluster = load_cluster(preset)
    cluster.check_fabric(cluster.num_gpus, beyond_fabric=False)
    assert cluster.fabric_num_gpus >= cluster.num_gpus


@pytest.mark.parametrize("preset, gpus, fabric", [
    ("pcie-workstation", 2, 4),     # one 4-GPU node, no tiers: the file's node, not the job's 2-GPU part of it
    ("pcie-workstation", 4, 4),
    ("dgx-h100", 4, 2048 * 8),      # the core tier's 2,048 nodes of 8 GPUs, not of the job's 4
    ("dgx-h100", 64, 2048 * 8),
    ("gb200-nvl72", 256, 128 * 72),  # 4 x 64-GPU domains of 72-GPU racks: the top tier's 128 racks of 72
])
def test_a_resized_cluster_keeps_its_files_fabric(preset, gpus, fabric):
    assert load_cluster(preset).with_gpus(gpus).fabric_num_gpus == fabric


def test_the_way_out_of_part_of_a_node_names_the_files_fabric():
    # LLaMA-3 8B on 2 of the workstation's 4 GPUs: the hint said "describes 2 GPUs", the job's
    # part of the node, when --gpus 4 runs without the flag; the file describes 4
    r = CliRunner().invoke(main, ["search", "--model", "llama3-8b", "--cluster", "pcie-workstation", "--gpus", "2", "--seq-len", "2048",
                                  "--global-batch", "16"])
    assert r.exit_code == 1
    assert r.output.strip().endswith("nearest change: --gpus 16 --extrapolate-fabric fits (cluster pcie-workstation describes 4 GPUs)")
