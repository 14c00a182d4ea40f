"""Read nccl-tests output as people paste it (docs/reference/nccl_tests_format.md).

Accepted: `#` header lines (nThread, device list with hosts), out-of-place and in-place
columns, the `# Avg bus bandwidth` trailer, `[1,0]<stdout>:` / `0: ` prefixes, lines whose
leading `#` a Markdown renderer dropped, interleaved `NCCL INFO` / MPI lines, missing trailers,
single-size runs, `...` elisions. Each row is checked (algbw = size / time, busbw = algbw x
factor(n)); a malformed log raises NcclLogError naming the line and what was expected; a
partial log (no header, no device list, no trailer, elided rows) parses with warnings.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from autopar.specs._files import read_text
from autopar.cost.comm import Collective, busbw_factor
from autopar.errors import AutoparError

PROGRAMS = {"all_reduce_perf": Collective.all_reduce, "all_gather_perf": Collective.all_gather,
            "reduce_scatter_perf": Collective.reduce_scatter, "alltoall_perf": Collective.all_to_all,
            "sendrecv_perf": Collective.send_recv}
TYPE_BYTES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1, "uint8": 1, "int32": 4,
              "uint32": 4, "int64": 8, "uint64": 8, "f8e4m3": 1, "f8e5m2": 1}
OTHER_PROGRAMS = ("broadcast_perf", "reduce_perf", "gather_perf", "scatter_perf", "hypercube_perf")
# assumed when a log has no device lines and the user gives no --nodes (HGX/DGX node)
ASSUMED_GPUS_PER_NODE = 8
COLUMNS_HINT = "'# size count type redop root time algbw busbw #wrong time algbw busbw #wrong'"

_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s|$))")
_HEADER = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)(.*)$")
_DEVICE = re.compile(r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
_STARTING = re.compile(r"Collective test (?:starting|concluded):\s*(\S+)")
_COMMAND = re.compile(r"(?:^|[/\s])(\w+_perf)\b(.*)$")
_NCCL_VERSION = re.compile(r"^NCCL version\s+(\S+)")
# nccl-tests >= 2.13 banner: 'nccl-library=22902' is NCCL_VERSION_CODE = major x 10000 + minor x 100 + patch (nccl.h)
_LIBRARY_CODE = re.compile(r"nccl-library=(\d)(\d\d)(\d\d)\b")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*(\S+)")
_OOB = re.compile(r"^Out of bounds values\s*:\s*(\d+)\s+(\w+)")
_INT = re.compile(r"^\d[\d_]*$")


class NcclLogError(AutoparError, ValueError):
    """A log that is not (or no longer) nccl-tests output: names the line and what was expected."""

    def __init__(self, path: str, line: int | None, expected: str, found: str | None = None):
        where = f"{path}:{line}" if line else path
        text = f"{where}: expected {expected}"
        if found is not None:
            text += f", found {found!r}" if len(found) < 80 else f", found {found[:77]!r}..."
        super().__init__(text)


@dataclass(frozen=True)
class NcclRow:
    """One printed size: out-of-place first, then in-place (when printed)."""

    line: int
    size_bytes: int
    count: int | None
    dtype: str | None
    redop: str | None
    times_us: tuple[float, ...]
    algbw_gb_per_s: tuple[float, ...]
    busbw_gb_per_s: tuple[float, ...]
    wrong: tuple[str | None, ...]


@dataclass
class NcclLog:
    path: str
    collective: Collective
    num_ranks: int
    num_nodes: int
    rows: list[NcclRow]
    hosts: list[str] = field(default_factory=list)
    gpu_name: str | None = None
    nccl_version: str | None = None
    avg_busbw_gb_per_s: float | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    algorithm: str | None = None  # set by points files; logs: detected from busbw (calibration/nccl_profile.py)

    @property
    def sizes_bytes(self) -> list[int]:
        return [r.size_bytes for r in self.rows]

    @property
    def peak_busbw_gb_per_s(self) -> float:
        return max(b for r in self.rows for b in r.busbw_gb_per_s)

    @property
    def ranks_per_node(self) -> int:
        return max(1, self.num_ranks // self.num_nodes)

    @property
    def tier(self) -> str:
        return "intra_node" if self.num_nodes <= 1 else "network"

    def observations(self) -> list[tuple[int, float]]:
        """(size bytes, time seconds) for every printed time, both columns."""
        return [(r.size_bytes, t * 1e-6) for r in self.rows for t in r.times_us]


@dataclass
class _Scan:
    """What one pass over the lines found, before the rows are interpreted."""

    columns: list[str] | None = None
    columns_line: int = 0
    raw_rows: list[tuple[int, list[str]]] = field(default_factory=list)
    header: dict[str, int] = field(default_factory=dict)
    program: str | None = None
    command_gpus: int | None = None
    devices: dict[int, tuple[str, str]] = field(default_factory=dict)
    nccl_version: str | None = None
    avg: float | None = None
    oob_failed: bool = False
    elided: bool = False
    num_lines: int = 0


def _clean(raw: str) -> tuple[str, bool]:
    """Line without launcher prefix and leading '#'; and whether it was a '#' line."""
    text = _PREFIX.sub("", raw, count=1).strip()
    commented = text.startswith("#")
    return text.lstrip("#").strip(), commented


def _is_columns(tokens: list[str]) -> bool:
    return {"size", "time", "algbw", "busbw"} <= set(tokens)


def _scan_line(scan: _Scan, number: int, body: str, commented: bool, path: str) -> None:
    tokens = body.split()
    if not tokens:
        return
    if scan.columns is None and _is_columns(tokens):
        scan.columns, scan.columns_line = tokens, number
        return
    if _is_columns(tokens):
        raise NcclLogError(path, number, "one result table per file (a second column header starts here)", body)
    if (m := _HEADER.search(body)) and not scan.header:
        scan.header = {"nthread": int(m[1]), "ngpus": int(m[2]), "min": int(m[3]), "max": int(m[4])}
        if v := re.search(r"validation:\s*(\d)", m[5]):
            scan.header["validation"] = int(v[1])
        return
    if m := _STARTING.search(body):
        scan.program = scan.program or m[1]
        return
    if m := _DEVICE.search(body):
        scan.devices[int(m[1])] = (m[2], m[3])
        return
    if m := _NCCL_VERSION.match(body):
        scan.nccl_version = m[1]
        return
    if m := _LIBRARY_CODE.search(body):  # NCCL's own 'NCCL version' line (debug INFO) wins when both print
        scan.nccl_version = scan.nccl_version or f"{int(m[1])}.{int(m[2])}.{int(m[3])}"
        return
    if m := _AVG.match(body):
        scan.avg = _number(m[1], path, number, "the average bus bandwidth")
        return
    if m := _OOB.match(body):
        scan.oob_failed = m[2].upper() != "OK"
        return
    if body.strip(". ") == "" and "..." in body:
        scan.elided = scan.elided or bool(scan.raw_rows)
        return
    if scan.columns is not None and not commented and _INT.match(tokens[0]):
        scan.raw_rows.append((number, tokens))
        return
    if scan.columns is None and not commented and _INT.match(tokens[0]) and len(tokens) >= 8:
        raise NcclLogError(path, number, f"the column header {COLUMNS_HINT} before the first result row", body)
    if not commented and (m := _COMMAND.search(body)) and m[1] in {*PROGRAMS, *OTHER_PROGRAMS}:
        scan.program = scan.program or m[1]
        if g := re.search(r"(?:^|\s)-g\s+(\d+)", m[2]):
            scan.command_gpus = int(g[1])


def _number(text: str, path: str, line: int, what: str, integer: bool = False) -> float:
    try:
        value = int(text.replace("_", "")) if integer else float(text)
    except ValueError:
        raise NcclLogError(path, line, f"{what} as a number", text) from None
    if not math.isfinite(value):
        raise NcclLogError(path, line, f"{what} as a finite number", text)
    return value


def _parse_row(number: int, tokens: list[str], columns: list[str], path: str) -> NcclRow:
    if len(tokens) != len(columns):
        raise NcclLogError(path, number, f"{len(columns)} columns like the header ({' '.join(columns)}); the row is cut or malformed",
                           f"{len(tokens)} columns: {' '.join(tokens)}")
    get = dict(zip(columns, tokens))
    spots = {name: [i for i, c in enumerate(columns) if c == name] for name in ("time", "algbw", "busbw")}
    wrong_at = [i for i, c in enumerate(columns) if c.lstrip("#") in ("wrong", "error")]
    size = int(_number(tokens[columns.index("size")], path, number, "size in bytes", integer=True))
    count = int(_number(get["count"], path, number, "element count", integer=True)) if "count" in get else None
    times = tuple(_number(tokens[i], path, number, "time in microseconds") for i in spots["time"])
    algbw = tuple(_number(tokens[i], path, number, "algbw in GB/s") for i in spots["algbw"])
    busbw = tuple(_number(tokens[i], path, number, "busbw in GB/s") for i in spots["busbw"])
    if size <= 0 or min(times) <= 0 or min(algbw + busbw) < 0:
        raise NcclLogError(path, number, "a positive size and time and non-negative bandwidths", " ".join(tokens))
    for t, a in zip(times, algbw):
        # algbw = size / time (GB/s, us); printed with 2 decimals (fewer when wide)
        expected = size / t / 1e3
        if abs(a - expected) > 0.011 + 0.02 * expected:
            raise NcclLogError(path, number, f"algbw = size / time = {expected:.2f} GB/s", f"algbw {a}")
    return NcclRow(number, size, count, get.get("type"), get.get("redop"), times, algbw, busbw,
                   tuple(tokens[i] for i in wrong_at))


def scan_text(text: str, path: str) -> _Scan:
    scan = _Scan()
    lines = text.splitlines()
    scan.num_lines = len(lines)
    for number, raw in enumerate(lines, start=1):
        body, commented = _clean(raw)
        _scan_line(scan, number, body, commented, path)
    if scan.columns is None:
        raise NcclLogError(path, None, f"an nccl-tests result table with the column header {COLUMNS_HINT} (none in {scan.num_lines} lines: not nccl-tests output?)")
    if not scan.raw_rows:
        raise NcclLogError(path, scan.columns_line, "result rows after the column header", "no rows")
    if len({c for c in ("time", "algbw", "busbw") if scan.columns.count(c) not in (1, 2)}):
        raise NcclLogError(path, scan.columns_line, "time, algbw and busbw once or twice (out-of-place, in-place)", " ".join(scan.columns))
    return scan


def read_log(path: str | Path, ranks: int | None = None, nodes: int | None = None,
             collective: Collective | None = None) -> NcclLog:
    """Parse one nccl-tests log; ranks / nodes / collective override what the log says."""
    path = Path(path)
    text = read_text(path, "logs")  # regular UTF-8 files only: a pipe or /dev/zero is refused, not read forever
    return parse_log(text, str(path), ranks, nodes, collective)


def parse_log(text: str, path: str = "<log>", ranks: int | None = None, nodes: int | None = None,
              collective: Collective | None = None) -> NcclLog:
    from calibration.nccl_infer import interpret

    scan = scan_text(text, path)
    rows = [_parse_row(n, t, scan.columns, path) for n, t in scan.raw_rows]
    for prev, row in zip(rows, rows[1:]):
        if row.size_bytes <= prev.size_bytes:
            raise NcclLogError(path, row.line, f"sizes that increase (previous row, line {prev.line}, has {prev.size_bytes} B)",
                               f"{row.size_bytes} B")
    return interpret(scan, rows, path, ranks, nodes, collective)


def busbw_ratio(rows: list[NcclRow]) -> float | None:
    """Median busbw / algbw over rows precise enough to tell (algbw >= 1 GB/s)."""
    ratios = [b / a for r in rows for a, b in zip(r.algbw_gb_per_s, r.busbw_gb_per_s) if a >= 1.0]
    return statistics.median(ratios) if ratios else None


def check_busbw(log: NcclLog) -> None:
    """busbw = algbw x factor(collective, n) on every row (print rounding allowed)."""
    factor = busbw_factor(log.collective, log.num_ranks)
    for r in log.rows:
        for a, b in zip(r.algbw_gb_per_s, r.busbw_gb_per_s):
            if abs(b - a * factor) > 0.02 + 0.01 * a * factor:
                raise NcclLogError(log.path, r.line, f"busbw = algbw x {factor:.4g} ({log.collective.value}, {log.num_ranks} ranks) = {a * factor:.2f}",
                                   f"busbw {b}")
