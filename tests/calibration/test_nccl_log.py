"""nccl-tests parser on every sample log (calibration/data/nccl, copied verbatim from
calibration/data/nccl) and on garbage. Expected values are SOURCES.md's tables
(n, range, peak busbw) -- the peak is checked exactly (it is printed in the log)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autopar.errors import InputError

from autopar.cost.comm import Collective
from calibration.nccl_log import NcclLogError, parse_log, read_log
from calibration.nccl_samples import read_sample

DATA = Path(__file__).resolve().parents[2] / "calibration" / "data" / "nccl"
AR, AG, SR, RS = Collective.all_reduce, Collective.all_gather, Collective.send_recv, Collective.reduce_scatter
K, M, G = 1 << 10, 1 << 20, 1 << 30

# file: (collective, ranks, nodes, min size, max size, number of sizes, peak busbw GB/s, partial)
# source: calibration/data/nccl/SOURCES.md (= calibration/data/nccl/SOURCES.md)
SAMPLES = {
    # nccl-tests#309 4- and 8-node runs (held out in calibration/heldout.py)
    "h100x32_4node_allreduce_ib400_nccl-tests-issue309b.txt": (AR, 32, 4, 8, 16 * G, 32, 365.84, False),
    "h100x32_4node_allreduce_ib400_nccl-tests-issue309g.txt": (AR, 32, 4, M, 8 * G, 14, 325.86, False),
    "h100x64_8node_allreduce_ib400_nccl-tests-issue309f.txt": (AR, 64, 8, M, 8 * G, 14, 321.03, False),
    "h100x64_8node_allreduce_mincta24_ib400_nccl-tests-issue309h.txt": (AR, 64, 8, M, 8 * G, 14, 391.37, False),
    "a100pcie_x4_allgather_azure-nc-a100v4.txt": (AG, 4, 1, 32 * M, 32 * M, 1, 25.95, False),
    "a100x16_2node_allreduce_10GiB_roce_oci-japan-v2.txt": (AR, 16, 2, 10 * G, 10 * G, 1, 174.31, False),
    "a100x16_2node_allreduce_aws-p4de-efa_partial.txt": (AR, 16, 2, 8, 2 * G, 29, 78.33, True),
    "a100x16_2node_allreduce_roce_oci-japan.txt": (AR, 16, 2, 64, 8 * G, 28, 71.56, False),
    "a100x16_2node_allreduce_roce_oci-oke-slurm_nccl2.29_ranks-trimmed.txt": (AR, 16, 2, 1 * G, 4 * G, 3, 188.50, True),
    "a100x16_2node_allreduce_roce_oci-oke-slurmop_nccl2.29_ranks-trimmed_no-avg.txt": (AR, 16, 2, 1 * G, 8 * G, 4, 189.60, True),
    "a100x16_2node_allreduce_roce_oci-oke_nccl2.14.txt": (AR, 16, 2, 1 * G, 10 * G, 2, 180.08, False),
    "a100x8_allreduce_10GiB_oci-japan-v2.txt": (AR, 8, 1, 10 * G, 10 * G, 1, 235.61, False),
    "a100x8_allreduce_oci-japan.txt": (AR, 8, 1, 64, 8 * G, 28, 235.21, False),
    "a100x8_sendrecv_li-plus-playground_partial.txt": (SR, 8, 1, 128 * M, 1 * G, 4, 195.56, True),
    "b200x16_2node_allreduce_gcp-a4-roce_dstack_partial.txt": (AR, 16, 2, 8 * M, 8 * G, 11, 683.52, True),
    "b200x16_2node_allreduce_lambda_dstack.txt": (AR, 16, 2, 8, 2 * G, 29, 702.91, True),
    "h100x16_2node_allgather_gcp-a3high-tcpx_dstack.txt": (AG, 16, 2, 8 * M, 8 * G, 11, 51.05, True),
    "h100x16_2node_allgather_gcp-a3mega-tcpxo-ll128_dstack.txt": (AG, 16, 2, 8 * M, 8 * G, 11, 188.59, True),
    "h100x16_2node_allgather_gcp-a3mega-tcpxo_dstack.txt": (AG, 16, 2, 8 * M, 8 * G, 11, 188.37, True),
    "h100x16_2node_allreduce_aws-p5-efa_partial.txt": (AR, 16, 2, 8, 16 * G, 32, 487.26, True),
    "h100x16_2node_allreduce_gcp-a3mega-tcpxo.txt": (AR, 16, 2, 8, 8 * G, 31, 338.82, False),
    "h100x16_2node_allreduce_ib400_degraded_nccl-tests-issue290.txt": (AR, 16, 2, 8 * M, 8 * G, 11, 167.87, False),
    "h100x16_2node_allreduce_ib400_nccl-tests-issue309a.txt": (AR, 16, 2, 8, 16 * G, 32, 469.21, False),
    "h100x16_2node_allreduce_ib400_nccl-tests-issue309d.txt": (AR, 16, 2, 1 * M, 8 * G, 14, 466.73, False),
    "h100x16_2node_allreduce_ib_nebius_dstack_partial.txt": (AR, 16, 2, 8, 8 * G, 31, 468.46, True),
    "h100x16_2node_allreduce_ringforced_ib400_nccl-tests-issue309e.txt": (AR, 16, 2, 1 * M, 8 * G, 14, 392.69, False),
    "h100x16_2node_allreduce_roce_oci-hpc_partial-no-nthread.txt": (AR, 16, 2, 1 * G, 16 * G, 5, 471.22, True),
    "h100x8_allreduce_aws-batch-p5_partial.txt": (AR, 8, 1, 8, 16 * G, 32, 483.35, True),
    # the NCCL_ALGO=RING 8x H100 runs from 16 MiB (SOURCES.md: smaller sizes measure the host's launches)
    "h100x8_allreduce_ringforced_from16MiB_together.txt": (AR, 8, 1, 16 * M, 8 * G, 10, 368.06, True),
    "h100x8_allgather_ringforced_from16MiB_together.txt": (AG, 8, 1, 16 * M, 8 * G, 10, 363.42, True),
    "h100x8_reducescatter_ringforced_from16MiB_together.txt": (RS, 8, 1, 16 * M, 8 * G, 10, 362.16, True),
    "h100x8_allreduce_nvls_nccl-tests-issue290.txt": (AR, 8, 1, 128 * M, 4 * G, 6, 476.53, False),
    # one 8x H100 node, one process per GPU, default settings, from 32 MiB (the run's -b 32M)
    "h100x8_allreduce_default_from32MiB_xxrjun-cnode3-002.txt": (AR, 8, 1, 32 * M, 16 * G, 10, 482.27, False),
    "h100x8_allgather_default_from32MiB_xxrjun-cnode3-002.txt": (AG, 8, 1, 32 * M, 16 * G, 10, 366.03, False),
    "h100x8_reducescatter_default_from32MiB_xxrjun-cnode3-002.txt": (RS, 8, 1, 32 * M, 16 * G, 10, 365.09, False),
    "h100x8_alltoall_default_from32MiB_xxrjun-cnode3-002.txt": (Collective.all_to_all, 8, 1, 32 * M, 16 * G, 10, 348.03, False),
    "h100x8_sendrecv_default_from32MiB_xxrjun-cnode3-002.txt": (SR, 8, 1, 32 * M, 16 * G, 10, 367.25, False),
    # the same cluster's 10-node all_to_all runs (1, 2, 4, 8 ranks per node; sizes rounded down to
    # whole elements per rank) and a 2-node run of the pairwise sweep (from 4 GiB)
    "h100x10_10node_alltoall_xxrjun-cluster01.txt": (Collective.all_to_all, 10, 10, 33554400, 17179869120, 10, 44.82, False),
    "h100x20_10node_alltoall_xxrjun-cluster01.txt": (Collective.all_to_all, 20, 10, 33554240, 17179869120, 10, 47.83, False),
    "h100x40_10node_alltoall_xxrjun-cluster01.txt": (Collective.all_to_all, 40, 10, 33553920, 17179868800, 10, 49.67, False),
    "h100x80_10node_alltoall_xxrjun-cluster01.txt": (Collective.all_to_all, 80, 10, 33553920, 17179868160, 10, 50.66, False),
    "h100x16_2node_alltoall_xxrjun-cluster01-pair004-010.txt": (Collective.all_to_all, 16, 2, 4 * G, 16 * G, 3, 91.96, False),
    "h100x10_10node_sendrecv_xxrjun-cluster01.txt": (SR, 10, 10, 32 * M, 16 * G, 10, 24.9, False),
    "h100x20_10node_sendrecv_xxrjun-cluster01.txt": (SR, 20, 10, 32 * M, 16 * G, 10, 25.21, False),
    "h100x40_10node_sendrecv_xxrjun-cluster01.txt": (SR, 40, 10, 32 * M, 16 * G, 10, 26.25, False),
    "h100x80_10node_sendrecv_xxrjun-cluster01.txt": (SR, 80, 10, 32 * M, 16 * G, 10, 15.26, False),
    "h100x2_2node_sendrecv_xxrjun-cluster01-pair004-010.txt": (SR, 2, 2, 4 * G, 16 * G, 3, 40.68, False),
    "h100x16_2node_sendrecv_xxrjun-cluster01-pair004-010.txt": (SR, 16, 2, 4 * G, 16 * G, 3, 46.09, False),
    "h200x16_2node_allreduce_datacrunch.txt": (AR, 16, 2, 1 * M, 1 * G, 11, 267.77, False),
    "h200x16_2node_allreduce_oci-argonne.txt": (AR, 16, 2, 1 * G, 16 * G, 5, 486.49, False),
    "h200x8_allreduce_8GiB_azure-ndv5-debian.txt": (AR, 8, 1, 8 * G, 8 * G, 1, 476.98, False),
    "l40s_x2_2node_allreduce_tcp-socket_openshift.txt": (AR, 2, 2, 8, 8 * G, 31, 8.14, False),
    "l40s_x4_2node_allreduce_rdma_openshift.txt": (AR, 4, 2, 8, 8 * G, 31, 9.63, False),
    # nonstandard/: nccl-tests output with '...' elisions or columns removed by the publisher
    "nonstandard/h100_96rank_allreduce_sharp_coreweave_elided.txt": (AR, 96, 12, 512 * M, 8 * G, 5, 386.56, True),
    "nonstandard/h200_p5en_128rank_allreduce_aws_elided.txt": (AR, 128, 16, 8, 16 * G, 3, 369.86, True),
    "nonstandard/a100x8_allreduce_stas00_massaged.txt": (AR, 8, 1, 32 * K, 16 * G, 20, 234.89, True),
    # device lists elided: ranks / nodes from the sources (calibration/nccl_samples.py OVERRIDES)
    "nonstandard/gb200x72_1rack_allreduce_coreweave_elided.txt": (AR, 72, 1, 512 * M, 8 * G, 5, 846.82, True),
    "nonstandard/gb200x128_2rack_allreduce_coreweave_elided.txt": (AR, 128, 2, 512 * M, 16 * G, 6, 820.36, True),
    "nonstandard/gb200x1440_20rack_allreduce_coreweave_elided.txt": (AR, 1440, 20, 512 * M, 16 * G, 6, 405.74, True),
    "nonstandard/h100x1024_128node_allreduce_ringll128forced_roce_nccl-tests-issue322_elided.txt": (AR, 1024, 128, G, 16 * G, 5, 367.44, True),
}


def test_every_sample_is_listed():
    on_disk = {str(p.relative_to(DATA)) for p in DATA.rglob("*.txt")}
    assert on_disk - {"nonstandard/h200x8_allreduce_bench_py_stas00.txt"} == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_log(name):
    coll, ranks, nodes, lo, hi, num, peak, partial = SAMPLES[name]
    log = read_sample(name)
    assert log.collective == coll
    assert (log.num_ranks, log.num_nodes) == (ranks, nodes)
    assert (log.sizes_bytes[0], log.sizes_bytes[-1], len(log.rows)) == (lo, hi, num)
    assert log.peak_busbw_gb_per_s == pytest.approx(peak, abs=0.005)  # printed value, exact
    if partial:
        assert log.warnings, "a partial log parses with a warning"
    else:
        assert not [w for w in log.warnings if w.startswith("partial")]


def test_trimmed_device_list_counts_ranks_from_the_highest_rank():
    # OCI OKE log keeps ranks 0, 7, 8, 15 of 16 (SOURCES.md)
    log = read_log(DATA / "a100x16_2node_allreduce_roce_oci-oke-slurm_nccl2.29_ranks-trimmed.txt")
    assert log.hosts == ["inst-qfvws-oke-rdma", "inst-wm4sq-oke-rdma"]
    assert any("shows 4 of 16 ranks" in w for w in log.warnings)
    assert log.nccl_version == "2.29.3+cuda13.1"


def test_prefixes_and_interleaved_lines():
    text = """[1,0]<stdout>:# nThread 1 nGpus 8 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
node1:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
[1,0]<stdout>:     1048576        262144     float     sum      -1    28.56   36.71   64.24      0    28.37   36.96   64.68      0
Warning: Permanently added 'node2' (ECDSA) to the list of known hosts.
[1,0]<stdout>:     2097152        524288     float     sum      -1    43.45   48.27   84.47      0    43.39   48.34   84.59      0
[1,0]<stdout>:# Avg bus bandwidth    : 74.495
"""
    log = parse_log(text)
    assert (log.collective, log.num_ranks, len(log.rows)) == (AR, 8, 2)
    assert log.rows[1].times_us == (43.45, 43.39)


def test_user_overrides_ranks_and_nodes():
    log = read_log(DATA / "h100x16_2node_allreduce_aws-p5-efa_partial.txt", ranks=16, nodes=2)
    assert (log.num_ranks, log.num_nodes) == (16, 2)
    with pytest.raises(NcclLogError, match="--ranks 8 to agree with busbw/algbw"):
        read_log(DATA / "h100x16_2node_allreduce_aws-p5-efa_partial.txt", ranks=8)


HEADER = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
ROW_1M = "     1048576        262144     float     sum      -1    28.56   36.71   64.24      0    28.37   36.96   64.68      0\n"


@pytest.mark.parametrize("text, message", [
    ("# OSU MPI Allreduce Latency Test v7.3\n# Size       Avg Latency(us)\n4                       1.73\n8                       1.71\n",
     "expected an nccl-tests result table"),
    (HEADER + ROW_1M + "     2097152        524288     float     sum      -1    43.45   48.27",
     ":3: expected 13 columns like the header"),
    (HEADER + "     1048576        262144     float     sum      -1      nan   36.71   64.24      0    28.37   36.96   64.68      0\n",
     ":2: expected time in microseconds as a finite number, found 'nan'"),
    (HEADER + ROW_1M + "      524288        131072     float     sum      -1    21.17   24.77   43.35      0    20.96   25.01   43.77      0\n",
     ":3: expected sizes that increase"),
    (HEADER + "     1048576        262144     float     sum      -1    28.56   99.99   64.24      0    28.37   36.96   64.68      0\n",
     ":2: expected algbw = size / time = 36.71 GB/s"),
    (ROW_1M, ":1: expected the column header"),
    (HEADER, ":1: expected result rows after the column header"),
])
def test_garbage_is_refused_with_line_and_expectation(text, message):
    with pytest.raises(NcclLogError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        parse_log(text, "log.txt")


def test_busbw_must_match_the_rank_count(tmp_path):
    # 8 ranks: busbw = 1.75 x algbw; a log that says 64.24 with 4 devices listed is inconsistent
    devices = "".join(f"#  Rank {r} Group  0 Pid 1 on host device {r} [0x1] NVIDIA H100 80GB HBM3\n" for r in range(4))
    with pytest.raises(NcclLogError, match="device list"):
        parse_log(devices + HEADER + ROW_1M, "log.txt")


def test_binary_file(tmp_path):
    path = tmp_path / "log.bin"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    with pytest.raises(InputError, match="not UTF-8 text"):
        read_log(path)


def test_device_is_refused_not_read_forever():
    with pytest.raises(InputError, match="not a regular file"):
        read_log("/dev/zero")


def test_other_tool_table_is_refused():
    # torch all_reduce_bench.py output: a Markdown table, not nccl-tests
    with pytest.raises(NcclLogError, match="not nccl-tests output"):
        read_log(DATA / "nonstandard" / "h200x8_allreduce_bench_py_stas00.txt")
