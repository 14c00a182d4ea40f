"""The collective model after NCCL's tuning model (autopar/cost/nccl.py): hand-computed
latencies and bandwidths from NCCL's constants (src/graph/tuning.cc, in
profiles/cost/defaults.yaml comm.nccl), and the algorithm NCCL picks by size and scale."""

from __future__ import annotations

import pytest

from autopar.cost.comm import Collective, Group, collective_choice, fabric
from autopar.cost.nccl import algorithm_bandwidth, latency_us
from autopar.specs import load_cluster

AR, AG = Collective.all_reduce, Collective.all_gather
GiB = 2**30


def _node_and_pod(nodes):
    return load_cluster("dgx-h100").with_gpus(8 * nodes) if nodes > 1 else load_cluster("dgx-h100")


def test_ring_ll_latency_8xh100(params):
    # tuning.cc: ring LL = base 6.6 + 2(n-1) = 14 steps x NVLink 0.6 us = 15.0 us (8 B all_reduce
    # measured 12.9 us on 8x H100, calibration/data/nccl/h100x8_allreduce_aws-batch-p5_partial.txt)
    f = fabric(load_cluster("dgx-h100"), Group(8, 8, 1), params)
    assert latency_us("all_reduce", "ring", 0, f, params.comm.nccl) == pytest.approx(15.0)
    choice = collective_choice(AR, 8, Group(8, 8, 1), load_cluster("dgx-h100"), params)
    assert (choice.algorithm, choice.protocol) == ("ring", "ll")
    assert choice.seconds * 1e6 == pytest.approx(15.0, abs=0.1)


def test_nvls_tree_latency_and_bandwidth_fall_with_depth(params):
    # NVLS-tree: intra 25 us + 2 log2(nodes) x net 20.9 us; bandwidth min(NVLS, NICs x 2) on
    # <= 2 nodes, min(NVLS, NICs) beyond (the 2-node "aberration", nccl-tests#309)
    prm = params.comm.nccl
    two = fabric(_node_and_pod(2), Group(16, 8, 2), params)
    eight = fabric(_node_and_pod(8), Group(64, 8, 8), params)
    assert latency_us("all_reduce", "nvls_tree", 2, two, prm) == pytest.approx(25 + 2 * 1 * 20.9)
    assert latency_us("all_reduce", "nvls_tree", 2, eight, prm) == pytest.approx(25 + 2 * 3 * 20.9)
    nic = 8 * 50e9 * params.comm.network_efficiency
    nvls = 450e9 * params.comm.nvlink_efficiency * params.comm.sharp_speedup
    assert algorithm_bandwidth("all_reduce", "nvls_tree", 2, two, prm) == pytest.approx(min(nvls, 2 * nic) * 16 / 30)
    assert algorithm_bandwidth("all_reduce", "nvls_tree", 2, eight, prm) == pytest.approx(min(nvls, nic) * 64 / 126)


def test_nvls_on_8xh100_large_messages(params):
    # kiskra-nvidia (nccl-tests#309): "You should see NVLS being used with single-node runs,
    # NVLSTree with multi-node"; qoofyk: 8 B-1 MB ring LL, 2 MB-16 GB NVLS Simple on one node
    node = load_cluster("dgx-h100")
    assert collective_choice(AR, 8 * GiB, Group(8, 8, 1), node, params).algorithm == "nvls"
    assert collective_choice(AR, 4 << 20, Group(8, 8, 1), node, params).algorithm == "nvls"
    assert collective_choice(AR, 256 << 20, Group(64, 8, 8), _node_and_pod(8), params).algorithm == "nvls_tree"
    # ... up to the size where the ring's NIC rate (8 graph channels x 48 GB/s = 384, bwInter)
    # beats NVLS-tree's 8 x 45.5 = 364 by more than its 126-step latency: the 8-node logs of
    # nccl-tests#309 switch to ring at 1 GiB (309f: 512 MiB 301.2 GB/s, 1 GiB 286.8, 2 GiB 319.0)
    assert collective_choice(AR, 8 * GiB, Group(64, 8, 8), _node_and_pod(8), params).algorithm == "ring"
    # AllGather in a node: NVLS gives half its AllReduce rate x 7/8, the ring wins
    assert collective_choice(AG, 8 * GiB, Group(8, 8, 1), node, params).algorithm == "ring"


def test_ring_vs_tree_switch_with_scale_without_nvls(params):
    # A100 (no NVLS) with 8x 100 Gb/s NICs (NVIDIA/nccl#812): tree on 2 nodes runs on the node
    # links (bwIntra, capped at 8 graph channels x 23.6 GB/s = 189), ring is NIC-bound (8 x 12 GB/s):
    # tree wins large messages; beyond 2 nodes both are NIC-bound and tree pays x tree efficiency.
    # (With 200 Gb/s NICs the ring's 192 GB/s ties the tree's cap: the OCI 2-node logs run ring.)
    a100 = load_cluster("dgx-a100").model_copy(update={"nic_gb_per_s_per_gpu": 12.5})
    two = collective_choice(AR, 8 * GiB, Group(16, 8, 2), a100.with_gpus(16), params)
    sixteen = collective_choice(AR, 8 * GiB, Group(128, 8, 16), a100.with_gpus(128), params)
    assert (two.algorithm, sixteen.algorithm) == ("tree", "ring")


def test_pat_for_one_rank_per_node_at_scale(params):
    # PAT runs AllGather with one rank per node; latency log2(nodes) x net / 3.5 + ranks x 2.8
    # beats the ring's (n-1) network steps at small sizes on 512 nodes
    pod = load_cluster("dgx-h100").with_gpus(8 * 512)
    choice = collective_choice(AG, 1 << 20, Group(512, 1, 512), pod, params)
    assert choice.algorithm == "pat"


def test_ring_scale_out_bandwidth_constant_in_nodes(params):
    # seed 001 'Коллективные операции между узлами' (DGX SuperPOD fat tree): a ring's scale-out
    # bus bandwidth is the node's NIC share whatever the node count (8 x 50 GB/s x efficiency);
    # only its latency, 2(n - 1) steps, grows: 16 GiB busbw within 15% of it up to 128 nodes
    pod = load_cluster("dgx-h100-superpod")
    nic = 8 * 50e9 * params.comm.network_efficiency
    for nodes in (4, 16, 64, 128):
        n = 8 * nodes
        f = fabric(pod.with_gpus(n), Group(n, 8, nodes), params)
        assert algorithm_bandwidth("all_reduce", "ring", 2, f, params.comm.nccl) * 2 * (n - 1) / n == pytest.approx(nic)
        t = collective_choice(AR, 16 * GiB, Group(n, 8, nodes), pod.with_gpus(n), params, "ring", "simple").seconds
        assert 16 * GiB / t * 2 * (n - 1) / n == pytest.approx(nic, rel=0.15)


def test_forced_algorithm_that_cannot_run(params):
    with pytest.raises(ValueError, match="nvls_tree cannot run"):
        collective_choice(AR, GiB, Group(8, 8, 1), load_cluster("dgx-h100"), params, "nvls_tree")
    # AllToAll runs as point-to-point sends, which NCCL_ALGO does not choose (it was silently ignored)
    with pytest.raises(ValueError, match="alltoall runs as NCCL point-to-point sends"):
        collective_choice(Collective.all_to_all, GiB, Group(8, 8, 1), load_cluster("dgx-h100"), params, "tree")


@pytest.mark.parametrize("ranks, per_node, nic, cc, version, channels", [
    # NCCL 2.29.2 src/graph/paths.cc, one 400 Gb/s (50 GB/s) NIC per Hopper GPU: a network peer starts at
    # ceil(50 / 14) = 4 channels; the p2p channels are the rings x 2 (connect.cc), the rings one per NIC
    # duplicated when <= 4 (search.cc ncclTopoDupChannels: 48 GB/s < 50): 4, 8, 16, 16 for 1, 2, 4, 8 per node
    (2, 1, 50, 9.0, (2, 29), 4),     # 4 x ceil(2/8) = 4 <= 4
    (10, 1, 50, 9.0, (2, 29), 2),    # 4 x 2 > 4 -> 2 x 2 <= 4
    (20, 2, 50, 9.0, (2, 29), 2),    # 4 x 3 > 8 -> 2 x 3 <= 8
    (40, 4, 50, 9.0, (2, 29), 2),    # 4 x 5 > 16 -> 2 x 5 <= 16
    (80, 8, 50, 9.0, (2, 29), 1),    # 4 x 10, 2 x 10 > 16 -> 1
    (16, 8, 50, 9.0, (2, 29), 4),    # 4 x 2 <= 16
    (2, 1, 12.5, 9.0, (2, 29), 1),   # a 100 Gb/s NIC: ceil(12 / 14) = 1
    # NCCL <= 2.28 (v2.28.7): 2 channels per peer, halved while 2 x ranks > 4 x the p2p channels
    (2, 1, 50, 9.0, (2, 28), 2),     # 2 x 2 <= 16
    (10, 1, 50, 9.0, (2, 28), 1),    # 2 x 10 > 16 -> 1
    (80, 8, 50, 9.0, (2, 27), 1),    # 2 x 80 > 4 x 16 -> 1
])
def test_channels_of_a_send_to_another_node(params, ranks, per_node, nic, cc, version, channels):
    from autopar.cost.nccl import net_p2p_channels_per_peer
    assert net_p2p_channels_per_peer(ranks, per_node, nic, cc, version, params.comm.nccl) == channels
