"""The collective model's chunk pipelines and NCCL's own estimate (autopar/cost/nccl_pipeline.py,
autopar/cost/nccl.py): hand-computed from NCCL's constants (src/enqueue.cc, src/graph/tuning.cc
in profiles/cost/defaults.yaml comm.nccl) and the algorithm switches the nccl-tests#309 logs show."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autopar.cost.comm import Collective, collective_choice, fabric, place_group
from autopar.cost.nccl import algorithm_bandwidth
from autopar.cost.nccl_pipeline import nvls_tree_chunk_bytes, pipeline_seconds, tree_channels, tree_chunk_bytes
from autopar.specs import load_cluster
from autopar.specs.costparams import load_cost_params
from calibration.nccl_physfit import with_nccl_version

MiB = 1 << 20
AR = Collective.all_reduce


def _h100(nodes, params):
    cluster = load_cluster("dgx-h100").with_gpus(8 * nodes) if nodes > 1 else load_cluster("dgx-h100")
    group = place_group(8 * nodes, 1, 8)
    return cluster, group, fabric(cluster, group, params)


def test_store_and_forward_pipeline_by_hand():
    # two hops (1 us, 1 GB/s first / 0.5 GB/s steady) and (2 us, 2 GB/s): 4 units of 1 kB.
    # first unit: (1 + 1) + (2 + 0.5) = 4.5 us; cycle: max(max(1, 2), max(2, 0.5)) = 2 us;
    # t = 4.5 + 3 x 2 = 10.5 us
    hops = [(1e-6, 1e9, 0.5e9), (2e-6, 2e9, 2e9)]
    assert pipeline_seconds(0.0, hops, 1e3, 4e3) == pytest.approx(10.5e-6)


def test_cut_through_pipeline_by_hand():
    # LL/LL128: first unit pays the latencies and its slowest transfer: 1 + 2 + 1 = 4 us; each
    # later unit waits its flag handshake then streams: max(1 + 2, 2 + 0.5) = 3 us; t = 4 + 3 x 3
    hops = [(1e-6, 1e9, 0.5e9), (2e-6, 2e9, 2e9)]
    assert pipeline_seconds(0.0, hops, 1e3, 4e3, cut_through=True) == pytest.approx(13e-6)
    # a message smaller than a unit is one partial unit
    assert pipeline_seconds(5e-6, hops, 1e3, 5e2, cut_through=True) == pytest.approx(5e-6 + 3e-6 + 0.5e-6)


def test_nccl_chunk_rules_by_hand():
    # calcCollChunking, tree LL128 on 8 nodes x 8 GPUs, 16 channels: nsteps = 1 + 3 + 0.8 = 4.8;
    # 576000 B halves while size / (16 chunk) < 4.8 x 64 / 8 = 38.4 down to <= 128 KiB (72000),
    # then while < 4.8 x 16 / 8 = 9.6 down to <= 32 KiB: 1 MiB -> 18000, 32 MiB keeps 72000
    params = load_cost_params()
    prm = params.comm.nccl
    _, _, f8 = _h100(8, params)
    assert tree_channels(MiB, 1, f8, prm) == 16  # 1 MiB >= 16 x 640 threads x 8 B
    assert tree_chunk_bytes(MiB, 1, 16, f8, prm) == 18000
    assert tree_chunk_bytes(32 * MiB, 1, 16, f8, prm) == 72000
    # NVLS-tree: 16 channels x 8 heads; 64 KiB cap from 4 nodes, 32 KiB below 1 x 128 x 64 KiB = 8 MiB
    assert nvls_tree_chunk_bytes(MiB, f8, prm) == 32768
    assert nvls_tree_chunk_bytes(128 * MiB, f8, prm) == 65536
    # 2 nodes: 128 KiB from 4 x 128 x 128 KiB = 64 MiB, 64 KiB from 8 MiB (the 2-node logs' 32->64 MiB jump)
    _, _, f2 = _h100(2, params)
    assert [nvls_tree_chunk_bytes(s * MiB, f2, prm) for s in (4, 32, 64)] == [32768, 65536, 131072]


def test_nccl_rates_the_ll128_tree_below_the_nics():
    # tuning.cc: tree busBw = min(8 graph channels x 45 x .92, 8 x 36) = 288, LL128: min(288 x
    # 120/128, 8 x 29) = 232 GB/s -> algbw 116; the links' own rate is 0.92 x 0.9375 x 360 / 2 = 155
    params = load_cost_params()
    _, _, f8 = _h100(8, params)
    prm = params.comm.nccl
    assert algorithm_bandwidth("all_reduce", "tree", 1, f8, prm, caps=True) == pytest.approx(116e9)
    assert algorithm_bandwidth("all_reduce", "tree", 1, f8, prm) == pytest.approx(0.92 * 0.9375 * 360e9 / 2)


@pytest.mark.parametrize("version, nodes, last_tree_mib", [
    # NCCL 2.26 (the #309 logs): NVLS-tree from 1 MiB on 2 nodes (309a: 256 KiB 46.8 us -> 512 KiB
    # 70.3 us, then flat), from 2 MiB on 4 (309g/309b: 1 -> 2 MiB +63 / +50 us), from 8 MiB on 8
    # (309f: 4 -> 8 MiB +117 us): the LL128 tree up to the size before
    ("2.26", 2, 0.5), ("2.26", 4, 1), ("2.26", 8, 4),
    # NCCL >= 2.28 rates NVLS-tree min(NVLS, 2 NICs | NICs, 45.5 GB/s per channel): the tree longer
    ("2.28", 2, 2), ("2.28", 8, 8),
])
def test_tree_to_nvls_tree_switch_by_release(version, nodes, last_tree_mib):
    params = with_nccl_version(load_cost_params(), version)
    cluster, group, _ = _h100(nodes, params)
    picks = {s: collective_choice(AR, s * MiB, group, cluster, params).algorithm for s in (0.5, 1, 2, 4, 8, 16)}
    assert [s for s, a in picks.items() if a == "tree"] == [s for s in picks if s <= last_tree_mib]
    assert all(a == "nvls_tree" for s, a in picks.items() if s > last_tree_mib)


def test_two_node_tree_moves_the_buffer_once_through_the_nics():
    # on 2 nodes a tree sends S per node over the network (algbw <= NICs, busbw up to 2x the NICs:
    # the "aberration" of nccl-tests#309); with slow NICs (A100, 8 x 12.5 GB/s) it is NIC-bound
    params = load_cost_params()
    a100 = load_cluster("dgx-a100").model_copy(update={"nic_gb_per_s_per_gpu": 12.5})
    group = place_group(16, 1, 8)
    t = collective_choice(AR, 8 << 30, group, a100.with_gpus(16), params, "tree", "simple").seconds
    nics = 8 * 12.5e9 * params.comm.network_efficiency
    assert (8 << 30) / t == pytest.approx(nics, rel=0.03)


@pytest.mark.parametrize("nodes, last_nvls_tree_mib", [
    # NCCL 2.26 rates a multi-node ring at its graph's one speed, the NICs' 8 x 48 = 384 GB/s
    # (tuning.cc: bwInter beyond 2 nodes; search.cc keeps bwIntra = bwInter for rings), and the
    # v2.27 NVLS-tree at min(NVLink, NICs / 2) x 5/6: ring from 256 MiB on 4 nodes (309g: 128 MiB
    # 249.2 GB/s, 256 MiB 235.9 -- the dip of the switch -- 512 MiB 288.9), from 1 GiB on 8
    # (309f: 512 MiB 301.2, 1 GiB 286.8, 2 GiB 319.0)
    (4, 128), (8, 512),
])
def test_nvls_tree_to_ring_switch_at_scale(nodes, last_nvls_tree_mib):
    params = with_nccl_version(load_cost_params(), "2.26")
    cluster, group, _ = _h100(nodes, params)
    picks = {s: collective_choice(AR, s * MiB, group, cluster, params).algorithm for s in (64, 128, 256, 512, 1024, 2048)}
    assert all(a == "nvls_tree" for s, a in picks.items() if s <= last_nvls_tree_mib), picks
    assert all(a == "ring" for s, a in picks.items() if s > last_nvls_tree_mib), picks


def test_multi_node_ring_puts_seven_eighths_on_nvlink():
    # each GPU of a node enters one ring from its NIC: its NVLinks carry 7/8 of the bus traffic,
    # so across nodes the ring runs at min(intra x 8/7, NICs), not at the one-node ring's rate
    params = load_cost_params()
    cluster, group, f = _h100(4, params)
    slow_nvlink = replace(f, intra_busbw=300e9, net_busbw=400e9)
    assert algorithm_bandwidth("all_reduce", "ring", 2, slow_nvlink, params.comm.nccl) == pytest.approx(300e9 * 8 / 7 * 32 / 62)
    fast_nvlink = replace(f, intra_busbw=366e9, net_busbw=384e9)
    assert algorithm_bandwidth("all_reduce", "ring", 2, fast_nvlink, params.comm.nccl) == pytest.approx(384e9 * 32 / 62)
