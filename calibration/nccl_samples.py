"""The sample logs of calibration/data/nccl whose printed lines cannot tell their shape: what
their sources say instead (calibration/data/nccl/SOURCES.md), and one reader for all samples."""

from __future__ import annotations

from pathlib import Path

from calibration.nccl_log import NcclLog, read_log

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "calibration" / "data" / "nccl"

# file -> (ranks, nodes, why the log cannot tell them)
OVERRIDES: dict[str, tuple[int | None, int | None, str]] = {
    "nonstandard/gb200x72_1rack_allreduce_coreweave_elided.txt": (
        None, 1, "device list elided to its last line; one GB200 NVL72 rack = one 72-GPU NVLink domain"),
    "nonstandard/gb200x128_2rack_allreduce_coreweave_elided.txt": (
        128, 2, "the kept device line (rank 143) is from another run: every busbw / algbw = 1.98437 = 2 x 127 / 128"),
    "nonstandard/gb200x1440_20rack_allreduce_coreweave_elided.txt": (
        None, 20, "device list elided to its last line (rank 1439 of 20 racks)"),
    "nonstandard/h100x1024_128node_allreduce_ringll128forced_roce_nccl-tests-issue322_elided.txt": (
        1024, 128, "the issue shows ranks 0-99 of `mpirun -np 1024` with 8 GPUs per host"),
}


def read_sample(name: str) -> NcclLog:
    """A sample log by its path under calibration/data/nccl, with the shape its source gives."""
    ranks, nodes, _ = OVERRIDES.get(name, (None, None, ""))
    log = read_log(DATA / name, ranks, nodes)
    log.path = str((DATA / name).relative_to(ROOT))  # reports name it inside the project, not this checkout's location
    return log
