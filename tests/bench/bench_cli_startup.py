"""Benchmark (not a unit test): wall time of `autopar --version` and `--help` of each command
in a fresh process (issue 12 target: under 0.5 s; was ~4 s when every command module and the
cost model loaded at start). Best of --repeat runs. Prints the JSON; --out writes it.

    .venv/bin/python tests/bench/bench_cli_startup.py [--repeat 5] [--out results/bench/cli_startup.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = [["--version"], ["--help"], *[[c, "--help"] for c in ("search", "estimate", "emit", "validate", "sweep", "tune", "comm", "calibrate", "plan")], ["calibrate", "nccl", "--help"]]


def best_seconds(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    exe = shutil.which("autopar", path=str(Path(sys.executable).parent)) or "autopar"
    seconds = {" ".join(case): best_seconds([exe, *case], args.repeat) for case in CASES}
    report = {
        "case": "autopar <args> in a fresh process, output discarded",
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
        "repeat": args.repeat, "timing": "best of repeats, seconds", "target_seconds": 0.5,
        "seconds": seconds, "over_target": sorted(k for k, v in seconds.items() if v >= 0.5),
    }
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
