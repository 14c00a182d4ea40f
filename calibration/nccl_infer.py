"""Work out what a scanned nccl-tests log measured: the collective, the number of ranks and of
nodes, from what the log prints (program name, device lines, busbw / algbw, element counts)
or from the user's overrides; and which parts of a complete log are missing (warnings).

busbw / algbw = 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, alltoall,
1 for sendrecv (docs/reference/nccl_tests_format.md section 2), so n = 2 / (2 - r) or
1 / (1 - r) when the program name is missing.
"""

from __future__ import annotations

import math
import statistics

from autopar.cost.comm import Collective
from calibration.nccl_log import (ASSUMED_GPUS_PER_NODE, PROGRAMS, TYPE_BYTES, NcclLog, NcclLogError, NcclRow, _Scan,
                                  busbw_ratio, check_busbw)

_REDUCING = {"sum", "prod", "max", "min", "avg"}
_PER_RANK_COUNT = (Collective.all_gather, Collective.reduce_scatter, Collective.all_to_all)


def _ranks_from_ratio(collective: Collective | None, ratio: float | None) -> int | None:
    if ratio is None:
        return None
    if collective == Collective.all_reduce or (collective is None and ratio > 1.02):
        return round(2 / (2 - ratio)) if ratio < 1.995 else None
    if collective in (Collective.all_gather, Collective.reduce_scatter, Collective.all_to_all) or (collective is None and ratio < 0.98):
        return round(1 / (1 - ratio)) if ratio < 0.995 else None
    return None


def _ranks_from_counts(rows: list[NcclRow]) -> int | None:
    """AG / RS / A2A print the per-rank count: n = size / (type bytes x count)."""
    for r in reversed(rows):
        if r.count and r.dtype in TYPE_BYTES and r.size_bytes >= 1 << 20:
            return round(r.size_bytes / (TYPE_BYTES[r.dtype] * r.count))
    return None


def _guess_collective(scan: _Scan, rows: list[NcclRow], ratio: float | None, ranks_hint: int | None,
                      notes: list[str]) -> Collective:
    if scan.program:
        if scan.program not in PROGRAMS:
            raise NcclLogError("", None, f"one of {', '.join(PROGRAMS)}", scan.program)
        return PROGRAMS[scan.program]
    redop = rows[-1].redop
    wrong = rows[-1].wrong
    in_place_unchecked = len(wrong) == 2 and wrong[1] == "N/A" and wrong[0] != "N/A"
    if ratio is None:
        raise NcclLogError("", rows[-1].line, "a program name ('Collective test starting: ...') or rows with algbw >= 1 GB/s to tell the collective", None)
    if ratio > 1.02:
        guess = Collective.all_reduce
    elif ratio < 0.98:
        if redop in _REDUCING:
            guess = Collective.reduce_scatter
        else:
            guess = Collective.all_to_all if in_place_unchecked else Collective.all_gather
            if not in_place_unchecked:
                notes.append("collective inferred as all_gather (alltoall prints the same columns); pass --op to override")
    else:
        guess = Collective.all_reduce if ranks_hint == 2 and not in_place_unchecked else Collective.send_recv
    notes.append(f"no program name in the log: collective inferred as {guess.value} from busbw/algbw = {ratio:.3f}")
    return guess


def _resolve_ranks(scan: _Scan, rows: list[NcclRow], collective: Collective, ratio: float | None,
                   user: int | None, path: str, warnings: list[str]) -> int:
    from_ratio = _ranks_from_ratio(collective, ratio)
    from_devices = max(scan.devices) + 1 if scan.devices else None
    if user is not None:
        if from_ratio and from_ratio != user:
            raise NcclLogError(path, None, f"--ranks {user} to agree with busbw/algbw = {ratio:.4f} ({from_ratio} ranks for {collective.value})")
        return user
    if from_devices and from_ratio and from_devices != from_ratio:
        raise NcclLogError(path, None, f"the device list ({from_devices} ranks) to agree with busbw/algbw = {ratio:.4f} ({from_ratio} ranks)")
    for n in (from_devices, from_ratio, _ranks_from_counts(rows) if collective in _PER_RANK_COUNT else None):
        if n:
            return n
    per_process = scan.header.get("nthread", 1) * scan.header.get("ngpus", 0) or scan.command_gpus
    if per_process:
        warnings.append(f"rank count taken as {per_process} GPUs of one process (no device list); pass --ranks if several processes ran")
        return per_process
    raise NcclLogError(path, None, "a device list, a '# nThread ... nGpus' line or --ranks to tell the number of ranks")


def _resolve_nodes(scan: _Scan, ranks: int, user: int | None, path: str, warnings: list[str]) -> tuple[int, list[str]]:
    hosts = sorted({host for host, _ in scan.devices.values()})
    if user is not None:
        if hosts and len(hosts) != user:
            warnings.append(f"--nodes {user} overrides the {len(hosts)} hosts of the device list")
        return user, hosts
    if hosts:
        return len(hosts), hosts
    nodes = max(1, math.ceil(ranks / ASSUMED_GPUS_PER_NODE))
    warnings.append(f"no device list: assuming {nodes} node(s) of up to {ASSUMED_GPUS_PER_NODE} GPUs; pass --nodes to override")
    return nodes, hosts


def _partial_warnings(scan: _Scan, log: NcclLog) -> None:
    if not scan.header:
        log.warnings.append("partial log: no '# nThread ...' header line")
    if not scan.devices:
        log.warnings.append("partial log: no device list")
    elif len(scan.devices) < log.num_ranks:
        log.warnings.append(f"partial log: the device list shows {len(scan.devices)} of {log.num_ranks} ranks")
    if "count" not in scan.columns or scan.columns.count("time") < 2:
        log.warnings.append(f"edited log: columns '{' '.join(scan.columns)}' (nccl-tests prints size count type redop root and two time/algbw/busbw halves)")
    if scan.elided:
        log.warnings.append("partial log: rows elided ('...')")
    if scan.avg is None:
        log.warnings.append("partial log: no '# Avg bus bandwidth' trailer (the log may be cut after the last row)")
    else:
        mean = statistics.fmean(b for r in log.rows for b in r.busbw_gb_per_s)
        # the trailer is the mean of every printed busbw (nccl_tests_format.md, 'Trailer')
        if abs(mean - scan.avg) > 0.01 + 0.002 * scan.avg:
            log.warnings.append(f"partial log: trailer average {scan.avg:g} GB/s != mean of the printed busbw {mean:.3f}: rows are missing")
    if scan.oob_failed or any(w not in (None, "0", "N/A") and not w.startswith("0e") for r in log.rows for w in r.wrong):
        log.warnings.append("the log reports wrong values (#wrong > 0 or 'FAILED'): timings kept, results were not correct")


def interpret(scan: _Scan, rows: list[NcclRow], path: str, ranks: int | None, nodes: int | None,
              collective: Collective | None) -> NcclLog:
    warnings: list[str] = []
    notes: list[str] = []
    ratio = busbw_ratio(rows)
    hint = ranks or (max(scan.devices) + 1 if scan.devices else None)
    try:
        coll = collective or _guess_collective(scan, rows, ratio, hint, notes)
    except NcclLogError as exc:
        raise NcclLogError(path, None, str(exc).split("expected ", 1)[1]) from None
    num_ranks = _resolve_ranks(scan, rows, coll, ratio, ranks, path, warnings)
    if num_ranks < 2:
        raise NcclLogError(path, None, "at least 2 ranks for a collective", str(num_ranks))
    num_nodes, hosts = _resolve_nodes(scan, num_ranks, nodes, path, warnings)
    gpu = next(iter(scan.devices.values()))[1] if scan.devices else None
    log = NcclLog(path, coll, num_ranks, num_nodes, rows, hosts, gpu, scan.nccl_version, scan.avg, warnings, notes)
    check_busbw(log)
    _partial_warnings(scan, log)
    return log
