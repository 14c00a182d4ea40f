"""GPU profiles: a measured matmul rate (MAMF) cannot pass the part's dense peak."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from autopar.specs import load_cluster
from autopar.specs.hardware import GpuSpec


def test_mamf_above_peak_is_refused_with_the_field():
    gpu = load_cluster("dgx-h100").gpu.model_dump()
    assert gpu["mamf_tflops"]["bf16"] == 794.5  # stas00 MAMF table, H100 SXM (profiles/gpus/h100.yaml)
    gpu["mamf_tflops"]["bf16"] = 1600.0  # e.g. a sparse rate typed in
    with pytest.raises(ValidationError, match=r"mamf_tflops.bf16=1600.0 exceeds peak_tflops.bf16=989.4"):
        GpuSpec.model_validate(gpu)


@pytest.mark.parametrize("preset, mib", [("dgx-h100", 81_559), ("dgx-a100", 81_920), ("dgx-h200", 143_771), ("dgx-b200", 183_359), ("gb200-nvl72", 189_471)])
def test_capacity_is_what_the_driver_reports(preset, mib):
    # nvidia-smi memory.total of each part (profiles/gpus sources): NVIDIA's "80 GB" is binary, an
    # H100 holds 81,559 MiB = 85.52e9 bytes, not 80e9; the profile's GiB to 0.01
    assert load_cluster(preset).gpu.hbm_bytes == pytest.approx(mib * 2**20, abs=0.006 * 2**30)


def test_legacy_hbm_gb_keeps_its_bytes_and_one_capacity_only():
    gpu = load_cluster("dgx-h100").gpu.model_dump()
    del gpu["hbm_gib"]
    # a file written before hbm_gib said hbm_gb in 1e9 bytes: read with the same bytes
    assert GpuSpec.model_validate({**gpu, "hbm_gb": 80}).hbm_bytes == pytest.approx(80e9, rel=1e-12)
    with pytest.raises(ValidationError, match=r"hbm_gb=80 and hbm_gib=79.65: give one capacity"):
        GpuSpec.model_validate({**gpu, "hbm_gb": 80, "hbm_gib": 79.65})


def test_a_pcie_card_cannot_sit_in_an_nvlink_node():
    """H100 PCIe (profiles/gpus/h100-pcie.yaml: no node-wide NVLink, PCIe Gen5 64 GB/s per direction):
    a cluster file that puts it on NVLink is refused with the field and the card's PCIe rate."""
    from autopar.errors import InputError
    from autopar.specs.hardware import cluster_from_mapping
    node = {"name": "x", "gpu": "H100 PCIe", "gpus_per_node": 8, "num_nodes": 1, "nic_gb_per_s_per_gpu": 0,
            "intra_node": {"kind": "nvlink", "bandwidth_gb_per_s": 450, "latency_us": 1.0}}
    with pytest.raises(InputError, match=r"intra_node.kind=nvlink: gpu H100-PCIe has no node-wide NVLink .* \(64.0 GB/s"):
        cluster_from_mapping(node)
    pcie = cluster_from_mapping({**node, "intra_node": {"kind": "pcie", "bandwidth_gb_per_s": 64, "latency_us": 1.0}})
    assert (pcie.gpu.peak_tflops.bf16, pcie.gpu.num_sms) == (756, 114)  # datasheet: 1,513 sparse / 2; 114 SMs


def _superpod(**changes):
    """dgx-h100-superpod's fields (profiles/clusters/dgx-h100-superpod.yaml) with some replaced."""
    from autopar.specs.hardware import cluster_from_mapping
    base = load_cluster("dgx-h100-superpod").model_dump(mode="json")
    base["gpu"] = "H100"
    base.pop("calibration", None)
    return cluster_from_mapping({**base, **changes})


def test_fabric_tiers_go_innermost_first_with_growing_latency():
    """An outer tier reaches more nodes and crosses more switches; a file that lists them the
    other way gave negative collective times (NCCL's network latency + outer - leaf latency)."""
    from autopar.errors import InputError
    leaf = {"name": "leaf", "num_nodes": 32, "latency_us": 20.0}
    with pytest.raises(InputError, match=r"^cluster.tiers.spine.latency_us=2.0: an outer tier crosses more switches"):
        _superpod(tiers=[leaf, {"name": "spine", "num_nodes": 128, "latency_us": 2.0}])
    with pytest.raises(InputError, match=r"^cluster.tiers.spine.num_nodes=16: tiers go innermost first, so it must exceed tier leaf's 32"):
        _superpod(tiers=[leaf, {"name": "spine", "num_nodes": 16, "latency_us": 30.0}])
    ok = _superpod(tiers=[leaf, {"name": "spine", "num_nodes": 128, "latency_us": 20.0}])
    assert [t.num_nodes for t in ok.tiers] == [32, 128]


def test_unit_slips_in_a_cluster_file_are_refused():
    """Gb/s typed where GB/s go (NVLink4: 450 GB/s per direction = 3,600 Gb/s), FLOP/s where
    TFLOP/s go (H100 BF16 989 TFLOP/s), and an architecture no cost table knows."""
    from autopar.errors import InputError
    node = load_cluster("dgx-h100-superpod").model_dump(mode="json")
    with pytest.raises(InputError, match=r"intra_node.bandwidth_gb_per_s=3600.0: exceeds gpu H100's nvlink rate of 450.0 GB/s"):
        _superpod(intra_node={**node["intra_node"], "bandwidth_gb_per_s": 3600})
    gpu = {**node["gpu"], "name": "mine", "aliases": []}
    with pytest.raises(InputError, match=r"^cluster.gpu.peak_tflops.bf16=989000000000000.0: Input should be less than or equal to 100000"):
        _superpod(gpu={**gpu, "peak_tflops": {**gpu["peak_tflops"], "bf16": 989e12}})
    with pytest.raises(InputError, match=r"^cluster.gpu.architecture='quantum': Input should be 'volta', 'ampere', 'ada', 'hopper' or 'blackwell'"):
        _superpod(gpu={**gpu, "architecture": "quantum"})


@pytest.mark.parametrize("nic, ok", [(400, False), (800, False), (100.5, False), (100, True), (50, True)])
def test_nic_rate_in_gb_per_s_not_gbit(nic, ok):
    """A NIC's Gb/s typed into nic_gb_per_s_per_gpu (ConnectX-7: 400 Gb/s = 50 GB/s) is above the
    fastest NIC shipping, ConnectX-8's 800 Gb/s = 100 GB/s per GPU (autopar.limits)."""
    from autopar.errors import InputError
    if ok:
        assert _superpod(nic_gb_per_s_per_gpu=nic).nic_gb_per_s_per_gpu == nic
        return
    with pytest.raises(InputError) as err:
        _superpod(nic_gb_per_s_per_gpu=nic)
    assert str(err.value) == (f"cluster.nic_gb_per_s_per_gpu={nic:g}: exceeds 100 GB/s, an 800 Gb/s ConnectX-8 per GPU (the fastest NIC "
                              f"shipping); the field is GB/s (bytes): a {nic:g} Gb/s NIC is {nic / 8:g} GB/s (divide by 8)")
