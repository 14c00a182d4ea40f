"""Task functions for the sweep tests whose worker process dies as one the kernel's OOM killer
ends would (SIGKILL to itself). Picklable by name: the spawned workers import this module."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

DIE_CASE = "AUTOPAR_TEST_DIE_CASE"  # the case id whose worker dies
DIE_AFTER = "AUTOPAR_TEST_DIE_AFTER"  # PATH:N -- die once the file PATH has N lines (N finished cases)


def _die_after(path: str, lines: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if Path(path).exists() and Path(path).read_text().count("\n") >= lines:
            break
        time.sleep(0.02)
    os.kill(os.getpid(), signal.SIGKILL)


def run_case(case: dict, spec_data: dict, overrides: dict) -> dict:
    """solvers.sweep.run_case, except that case DIE_CASE kills its worker once DIE_AFTER holds."""
    if case["case"] == os.environ.get(DIE_CASE):
        path, lines = os.environ[DIE_AFTER].rsplit(":", 1)
        _die_after(path, int(lines))
    from solvers.sweep import run_case as real

    return real(case, spec_data, overrides)


def square(x: int, marker: str) -> int:
    """x * x; x == 3 kills its worker once the file `marker` exists (a result came back)."""
    if x == 3:
        _die_after(marker, 0)
    return x * x
