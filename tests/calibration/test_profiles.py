"""Shipped profiles (calibration/fitted): reproducible from calibration/data, the seed's rules of
thumb, larger node counts from 1- and 2-node fits, and a cluster file's `calibration:` path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autopar.cost import estimate
from autopar.cost.comm import Collective, busbw_factor, collective_choice, place_group
from autopar.errors import InputError
from autopar.specs import Plan, TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import load_calibration_profile, load_cost_params, params_for_cluster, with_calibration
from calibration.profile import dump_profile
from calibration.shipped import FITTED, PROFILES, build

AR, AG = Collective.all_reduce, Collective.all_gather
GiB = 2**30


def profile(name):
    return load_calibration_profile(str(FITTED / f"{name}.yaml"))


def busbw(name, cluster, op, size, ranks, algorithm=None, sharp=False):
    c = load_cluster(cluster).model_copy(update={"sharp": True}) if sharp else load_cluster(cluster)
    if ranks > c.gpus_per_node:
        c = c.with_gpus(ranks)
    params = with_calibration(load_cost_params(), profile(name))
    t = collective_choice(op, size, place_group(ranks, 1, c.gpus_per_node), c, params, algorithm).seconds
    return size / t * busbw_factor(op, ranks) / 1e9, size / t / 1e9


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-3, abs=1e-12)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_shipped_profile_is_what_the_data_give(name):
    # calibration/fitted/NAME.yaml == python -m calibration.shipped output (no hand edits);
    # floats within 0.1% (the file keeps 5 significant digits; optimizer last-digit noise)
    shipped = yaml.safe_load((FITTED / f"{name}.yaml").read_text())
    assert _close(shipped, yaml.safe_load(dump_profile(build(name))))


def test_effective_nvlink_busbw_370():
    # maintainers (nccl-tests#212): ~370 GB/s effective NVLink busbw on 8x H100 for non-allreduce
    # ops / NCCL_ALGO=RING; seed 001 'Замеры на практике': 'почти 370'. Tolerance 5%.
    assert busbw("h100-nvlink", "dgx-h100", AG, 8 * GiB, 8)[0] == pytest.approx(370, rel=0.05)
    assert busbw("h100-nvlink", "dgx-h100", AR, 8 * GiB, 8, algorithm="ring")[0] == pytest.approx(370, rel=0.05)


def test_sharp_gain_is_30_percent_not_2x():
    # seed 001 'Редукции в сети': ~+30%, ~480 GB/s; NVLS logs 476-483 GB/s. Tolerances 3% / 0.05.
    nvls = busbw("h100-nvlink", "dgx-h100", AR, 8 * GiB, 8, algorithm="nvls")[0]
    ring = busbw("h100-nvlink", "dgx-h100", AR, 8 * GiB, 8, algorithm="ring")[0]
    assert nvls == pytest.approx(480, rel=0.03)
    assert nvls / ring == pytest.approx(1.3, abs=0.05)
    assert profile("h100-nvlink").collectives.nvls_speedup == pytest.approx(1.3, abs=0.1)


def test_58mb_allreduce():
    # seed 001 'Замеры на практике': a 58 MB AllReduce on 8x H100 reaches ~150 GB/s (bus bandwidth,
    # read off the plot that reaches 'почти 370' near 10 GB). Without logs (the default profile)
    # the ring keeps that shape: busbw ~150 (10%).
    dgx = load_cluster("dgx-h100")
    t = collective_choice(AR, 58e6, place_group(8, 1, 8), dgx, load_cost_params(), "ring").seconds
    assert 58e6 / t * busbw_factor(AR, 8) / 1e9 == pytest.approx(150, rel=0.10)
    # The shipped profile fits nccl-tests logs, which measure twice that: Together's NCCL_ALGO=RING
    # 8x H100 all_reduce, 275.9 GB/s at 32 MiB and 320.2 at 64 MiB: 311 at 58e6 B = 55.3 MiB (linear
    # in log2 size), within the fit's 10%. With NVLS it runs faster still: busbw 320-360 (aws-batch
    # p5 log: 296 at 32 MiB, 360 at 64 MiB; xxrjun cnode3: 321 and 374).
    assert busbw("h100-nvlink", "dgx-h100", AR, 58e6, 8, algorithm="ring")[0] == pytest.approx(311, rel=0.10)
    assert 320 <= busbw("h100-nvlink", "dgx-h100", AR, 58e6, 8, algorithm="nvls")[0] <= 360


@pytest.mark.parametrize("op, size, measured", [
    # xxrjun/nccl-tests-cluster cnode3-002, default settings, one process per GPU, NCCL 2.29
    # (calibration/data/nccl/h100x8_*_default_from32MiB_xxrjun-cnode3-002.txt): the faster column
    (AG, 32 * 2**20, 243.43), (AG, 64 * 2**20, 289.56), (AG, 256 * 2**20, 328.51),
    (Collective.reduce_scatter, 32 * 2**20, 263.01), (Collective.reduce_scatter, 128 * 2**20, 310.28),
])
def test_node_ring_from_one_cluster_predicts_another(op, size, measured):
    # the NVLink ring's mid sizes, fitted on Together's one-process NCCL 2.26 runs, predict another
    # cluster's node (not in any fit) within 10%; the default shape (seed 001's 58 MB point) gives
    # 95 GB/s at 32 MiB, -61%
    assert busbw("h100-nvlink", "dgx-h100", op, size, 8)[0] == pytest.approx(measured, rel=0.10)


def test_node_all_to_all_saturates_from_its_log():
    # xxrjun cnode3 8x H100 all_to_all (default settings; calibration/data/nccl/h100x8_alltoall_*):
    # busbw 333-344 GB/s at 1-4 GiB, where pairs are bandwidth-bound: the fitted point-to-point
    # rate sits there, below the ring's NVLink x nvlink_efficiency (369) the model used before.
    # Saturation: 237 GB/s at 32 MiB (4.19 MB per pair) and 277 at 64 MiB give
    # half = 4.19e6 x (341/237 - 1) = 1.84e6 and 8.39e6 x (341/277 - 1) = 1.94e6 per pair.
    # The default's unverified 8 MB gave 125 GB/s at 32 MiB (-47%)
    cal = profile("h100-nvlink").collectives
    assert cal.intra_p2p_busbw_gb_per_s == pytest.approx(340, rel=0.03)
    assert cal.intra_p2p_half_bandwidth_bytes == pytest.approx(1.9e6, rel=0.10)
    assert busbw("h100-nvlink", "dgx-h100", Collective.all_to_all, 32 * 2**20, 8)[0] == pytest.approx(237, rel=0.05)
    assert busbw("h100-nvlink", "dgx-h100", Collective.all_to_all, 64 * 2**20, 8)[0] == pytest.approx(277, rel=0.05)
    assert busbw("h100-nvlink", "dgx-h100", Collective.all_to_all, 4 * 2**30, 8)[0] == pytest.approx(344, rel=0.03)


def test_node_parameters_come_from_the_node_logs():
    # calibration/nccl_physfit.py fits the one-node logs first and then the network with their
    # parameters held: h100-ib (node logs + five InfiniBand logs) keeps h100-nvlink's NVLink ring.
    # Fitted jointly, the 2-node runs (which tell the sum of NVLink and network costs, not the split)
    # traded the node's ring for a network rate and the ring logs fell out as outliers (3.3x)
    node, ib = profile("h100-nvlink").collectives, profile("h100-ib").collectives
    for name in ("intra_busbw_gb_per_s", "nvls_speedup", "ring_half_bandwidth_bytes", "ring_saturation_exponent"):
        assert getattr(ib, name) == pytest.approx(getattr(node, name), rel=1e-3), name


@pytest.mark.parametrize("ranks, size, measured, tol", [
    # CoreWeave 12 nodes H100 IB (nonstandard/h100_96rank_...); it also ran IB SHARP, which the
    # check leaves out (CollNet would predict more): cluster spread (12%, below) + its SHARP: 17%
    (96, 8 * GiB, 386.56, 0.17),
    (128, 16 * GiB, 369.86, 0.12),  # AWS p5en 16 nodes H200 EFA (nonstandard/h200_p5en_...): other fabric, 12%
])
def test_larger_node_counts_from_other_clusters(ranks, size, measured, tol):
    # seed 001 'Коллективные операции между узлами': beyond 2 nodes the ring runs at the node's NIC
    # share whatever the node count. The h100-ib profile pools the NICs of the two nccl-tests#309
    # clusters (4 nodes at 8 GiB: 325.9 vs 363.8 GB/s, 12% apart), so another cluster's large
    # messages land within that spread of it; and the 12- and 16-node rates equal the 8-node one
    got = busbw("h100-ib", "dgx-h100-superpod", AR, size, ranks)[0]
    assert got == pytest.approx(measured, rel=tol)
    assert got == pytest.approx(busbw("h100-ib", "dgx-h100-superpod", AR, size, 64)[0], rel=0.02)


def test_latency_grows_with_steps():
    # 8 B all_reduce: alpha x 2(n-1); 16 nodes cost more than 2 (seed 001: latency per step)
    t2 = busbw("h100-ib", "dgx-h100-superpod", AR, 8, 16)[1]
    t16 = busbw("h100-ib", "dgx-h100-superpod", AR, 8, 128)[1]
    assert t16 < t2  # algbw falls as latency grows


def test_cluster_file_names_the_profile(tmp_path):
    preset = Path(__file__).resolve().parents[2] / "profiles" / "clusters" / "dgx-h100-superpod.yaml"
    data = yaml.safe_load(preset.read_text())
    data["calibration"] = "calibration/fitted/h100-ib.yaml"  # relative to the project root
    path = tmp_path / "my_cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    cluster = load_cluster(str(path))
    base = load_cost_params()
    params = params_for_cluster(cluster)
    assert params.collectives is not None and params.collectives.network_efficiency < 1.0
    assert params.gemm.unaligned_efficiency < 1.0
    assert params_for_cluster(load_cluster("dgx-h200")) is base  # no profile: defaults untouched
    model, training = load_model("llama3-70b"), TrainingSpec(seq_len=8192, global_batch_size=256)
    plan = Plan(tp=8, pp=4, vpp=5)
    calibrated = estimate(model, cluster.with_gpus(256), training, plan, params)
    default = estimate(model, cluster.with_gpus(256), training, plan, base)
    assert calibrated.step_seconds != default.step_seconds


def test_missing_and_malformed_profiles(tmp_path):
    with pytest.raises(InputError, match="profile file not found"):
        load_calibration_profile(str(tmp_path / "none.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: autopar-calibration\nname: x\ncollectives: {intra_node: {all_reduce: {busbw_gb_per_s: -1}}}\n")
    with pytest.raises(InputError, match="calibration bad.yaml"):
        load_calibration_profile(str(bad))


@pytest.mark.parametrize("name", ["h100x32_4node_allreduce_ib400_nccl-tests-issue309b.txt",
                                  "h100x32_4node_allreduce_ib400_nccl-tests-issue309g.txt",
                                  "h100x64_8node_allreduce_ib400_nccl-tests-issue309f.txt"])
def test_two_node_fit_predicts_larger_logs_at_large_sizes(heldout, name):
    # issue 10: fit on the <= 2-node logs of a cluster (+ 8x H100 node logs), predict its 4- and
    # 8-node default-settings logs: busbw within 15% at >= 64 MiB (calibration/heldout.py;
    # every size in results/calibration/heldout.txt)
    log = next(h for case in heldout for h in case["held_out"] if h["log"].endswith(name))
    assert log["max_error_ge_64mib"] <= 0.15


@pytest.mark.parametrize("name", ["h100x32_4node_allreduce_ib400_nccl-tests-issue309b.txt",
                                  "h100x32_4node_allreduce_ib400_nccl-tests-issue309g.txt",
                                  "h100x64_8node_allreduce_ib400_nccl-tests-issue309f.txt"])
def test_two_node_fit_predicts_larger_logs_at_mid_sizes(heldout, name):
    # issue 10: the same predictions within 30% at 1-64 MiB, where NCCL switches from the LL128
    # tree to NVLS-tree and the pipelines fill (autopar/cost/nccl_pipeline.py)
    log = next(h for case in heldout for h in case["held_out"] if h["log"].endswith(name))
    assert log["max_error_1_64mib"] <= 0.30


SEND_RECV_RINGS = tuple(f"h100x{n}_10node_sendrecv_xxrjun-cluster01.txt" for n in (10, 20, 40, 80))


@pytest.mark.parametrize("name", SEND_RECV_RINGS)
def test_send_recv_rings_run_on_the_channels_nccl_gives_a_network_peer(heldout, name):
    # issue 10: xxrjun cluster01 (NCCL 2.29.2, one 400 Gb/s NIC per H100) sends at 39.7-46.1 GB/s between
    # 2 nodes but 24.9 / 25.2 / 26.2 GB/s in 10-node rings with 1 / 2 / 4 ranks per node, and 15.2 with 8.
    # NCCL 2.29.2 (src/graph/paths.cc) gives a network peer ceil(50 GB/s / NCCL_P2P_PER_CHANNEL_NET_BW 14)
    # = 4 channels, halved while 4 x ceil(ranks / 8) exceeds the communicator's p2p channels (its rings x 2,
    # a power of two: 4, 8, 16, 16 with 1, 2, 4, 8 ranks per node): 2 nodes x 1 -> 4 x 1 <= 4: 4 channels
    # (56 GB/s, so the NIC's 45 binds); 10 x 1 -> 4 x 2 > 4: 2 (28 GB/s, +12% on 24.9); 10 x 8 -> 4 x 10
    # and 2 x 10 > 16: 1 (14 GB/s, -8% on 15.2). Before: every pair at the NIC rate, +71% to +195%
    log = next(h for case in heldout for h in case["held_out"] if h["log"].endswith(name))
    assert log["passes"] and log["max_error_ge_64mib"] <= 0.15 and log["max_error_1_64mib"] <= 0.30


def test_every_held_out_log_is_judged_or_named_not_modelled(heldout):
    # a held-out log either meets the issue-10 bands (above) or its case says what input of its
    # run the model does not take (NCCL_MIN_CTAS, multi-node NVLink domains)
    for case in heldout:
        for log in case["held_out"]:
            assert log["passes"] or case["not_modelled"], log["log"]
    assert sum(1 for case in heldout if case["not_modelled"]) == 2
    assert sum(len(case["held_out"]) for case in heldout) == 15


def test_two_node_nvls_tree_log_does_not_set_the_network(heldout):
    # a 2-node NVLS-tree run is bound by NVLS, not by the NICs: the fit must say so and keep the
    # default network efficiency rather than carry 2-node busbw to 8 nodes (issue 10's failure)
    default_case = heldout[0]["calibration"]
    assert "network_efficiency" in default_case["not_identified"]
    assert default_case["nccl_version"] == "2.26"


@pytest.fixture(scope="module")
def heldout():
    from calibration.heldout import CASES, evaluate
    return [evaluate(case) for case in CASES]


def test_cross_node_all_to_all_pairs_saturate_near_half_a_megabyte():
    # profiles/cost/defaults.yaml net_p2p_half_bandwidth_bytes = 4.5e5 from xxrjun cluster01's 10 x 1
    # H100 all_to_all (every pair on the network): measured busbw 42.0 GB/s at 64 MiB (6.71 MB per
    # pair) and 44.8 at 16 GiB. Default model: 400 Gb/s x network_efficiency 0.90 = 45.0 GB/s peak,
    # x 6.71 / (6.71 + 0.45) = 42.2 at 64 MiB. Before, the unverified 8 MB gave 45.0 x 6.71 / 14.71 =
    # 20.5 GB/s (-51%). The 8-ranks-per-node run of the same nodes (80 ranks: 70 of 79 peers off the
    # node, busbw = NIC x 79/70) measures 48.3 GB/s at 128 MiB (1.68 MB per pair): 45.0 x 79/70 x 1.68 /
    # 2.13 = 40.1, less the latency of log2(80) steps: the model's 38.5 (-20%; the default efficiency;
    # calibration/heldout.py fits it from a 2-node run and predicts these logs within 14% at >= 64 MiB)
    from calibration.nccl_samples import read_sample

    params, cluster = load_cost_params(), load_cluster("dgx-h100")
    assert params.comm.net_p2p_half_bandwidth_bytes == pytest.approx(4.5e5)
    for name, size, measured, tolerance in (("h100x10_10node_alltoall_xxrjun-cluster01.txt", 67108800, 41.98, 0.03),
                                            ("h100x80_10node_alltoall_xxrjun-cluster01.txt", 134216960, 48.29, 0.22)):
        log = read_sample(name)
        c = cluster.model_copy(update={"gpus_per_node": log.ranks_per_node, "num_nodes": 1}).with_gpus(log.num_ranks)
        t = collective_choice(Collective.all_to_all, size, place_group(log.num_ranks, 1, log.ranks_per_node), c, params).seconds
        assert size / t * busbw_factor(Collective.all_to_all, log.num_ranks) / 1e9 == pytest.approx(measured, rel=tolerance)
