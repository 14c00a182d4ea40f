"""The scale-out network a published run states in its interconnect column
(autopar/validation/network.py), read into the row's cluster in place of its GPU's preset NICs."""

from __future__ import annotations

import pytest

from autopar.validation.network import stated_network
from autopar.validation.rows import row_cluster


@pytest.mark.parametrize("text, gb_per_s, how", [
    # per node over 8 GPUs: 400 Gb/s / 8 bits / 8 GPUs = 6.25 GB/s (IBM fms-fsdp README's A100 cluster)
    ("400 Gbps per node", 6.25, "400 Gbps per node of 8 GPUs"),
    # a count of NICs is a node's: 8 x 200 Gb/s / 8 / 8 = 25 GB/s, though a note says one per GPU
    ("8x 200 Gb/s HDR InfiniBand per VM (one per GPU)", 25.0, "8x 200 Gb/s per node of 8 GPUs"),
    ("NVIDIA Selene DGX A100 nodes: NVLink/NVSwitch intra-node; 8x 200 Gbps HDR InfiniBand HCAs per node", 25.0,
     "8x 200 Gbps per node of 8 GPUs"),
    # bytes: 8 x 50 GB/s per node / 8 GPUs = 50 GB/s (the NVLink rate before the ';' is not the network's)
    ("NVLink 4th gen intra-node; InfiniBand 8x50 GB/s per node", 50.0, "8x50 GB/s per node of 8 GPUs"),
    ("Grand Teton: 8 GPUs/host fully NVLink-connected; backend RDMA 400 Gb/s per GPU", 50.0, "400 Gb/s per GPU"),
    ("1600 Gbps RoCE node-node", 25.0, "1600 Gbps per node of 8 GPUs"),
    ("InfiniBand 3.2 Tbps per node", 50.0, "3.2 Tbps per node of 8 GPUs"),  # 3,200 Gb/s / 8 / 8
    # in one clause with the network, the NVLink rate is still the link's, and does not borrow
    # the network rate's scope: 200 Gb/s / 8 = 25 GB/s per GPU (not NVLink's 600)
    ("NVLink 600 GB/s intra-node, HDR InfiniBand 200 Gb/s per GPU", 25.0, "200 Gb/s per GPU"),
    # a named cloud instance (profiles/validation/networks.yaml): p4d's 400 Gb/s EFA per 8 A100
    ("AWS p4d.24xlarge, EFA", 6.25, "AWS p4d: 400 Gb/s per node of 8 GPUs (profiles/validation/networks.yaml)"),
    ("Azure NDm A100 v4", 25.0, "Azure ND A100 v4 / NDm A100 v4: 1600 Gb/s per node of 8 GPUs (profiles/validation/networks.yaml)"),
])
def test_rates_in_words_and_named_instances(text, gb_per_s, how):
    stated = stated_network({"interconnect": text}, 8)
    assert stated is not None and stated.nic_gb_per_s_per_gpu == pytest.approx(gb_per_s) and stated.how == how


@pytest.mark.parametrize("text", [
    # per GPU or per node? eightfold apart: not read, the preset's NICs stand
    "Eos: NVLink4 450 GB/s uni-directional intra-node; InfiniBand 400 Gb/s inter-node",
    "128 A100 GPUs with 400Gbps network connection",
    "DGX-B200 (NVLink5 intra-node)", "not stated", "",
    # 8 x 1,000 GB/s per node = 1,000 GB/s per GPU: 10x the fastest NIC (autopar.limits), a typo
    "8x 1000 GB/s per node",
])
def test_unscoped_rates_and_no_rate_are_not_read(text):
    assert stated_network({"interconnect": text}, 8) is None


ROW = {"gpu_type": "A100 80GB", "gpu_normalized": "A100-80GB", "num_gpus": 128, "gpus_per_node": 8}


def test_the_row_cluster_takes_the_stated_network():
    # dgx-a100 has 8 x 200 Gb/s HDR = 25 GB/s per GPU; the run states a quarter of it
    assert row_cluster(ROW).nic_gb_per_s_per_gpu == 25.0
    assert row_cluster({**ROW, "interconnect": "400 Gbps per node"}).nic_gb_per_s_per_gpu == 6.25
    assert row_cluster({**ROW, "interconnect": "InfiniBand 400 Gb/s"}).nic_gb_per_s_per_gpu == 25.0
    # a 4-GPU node's 400 Gb/s is 12.5 GB/s per GPU
    assert row_cluster({**ROW, "gpus_per_node": 4, "interconnect": "400 Gbps per node"}).nic_gb_per_s_per_gpu == 12.5


def test_a_rack_reads_only_a_rate_per_gpu():
    # GB200 NVL72: gpus_per_node is the 72-GPU NVLink domain, while "4x 400 Gb/s per compute tray"
    # (or per VM) is one 4-GPU tray's: a per-node rate is not read there, a per-GPU one is
    rack = {"gpu_type": "GB200", "gpu_normalized": "GB200", "num_gpus": 144, "gpus_per_node": 4}
    assert row_cluster({**rack, "interconnect": "4x 400 Gb/s InfiniBand per VM"}).nic_gb_per_s_per_gpu == 50.0  # the preset's
    assert stated_network({"interconnect": "4x 400 Gb/s InfiniBand per VM"}, 72) is None
    assert row_cluster({**rack, "interconnect": "200 Gb/s per GPU"}).nic_gb_per_s_per_gpu == 25.0


def test_the_report_names_the_network_it_read():
    """A row's result says which network it was costed on (not under 'resolved', which lists the
    choices the row leaves open): dev_runs' Selene rows state 8 x 200 Gb/s HDR per node."""
    from autopar.validation import load_rows, predict_row

    row = next(r for r in load_rows("tests/data/dev_runs.json") if "Selene" in str(r.get("interconnect")))
    result = predict_row(row)
    assert result.network == "8x 200 Gbps per node of 8 GPUs: 25 GB/s per GPU"
    assert "interconnect" not in result.resolved
