"""Regenerate the committed generated reports, or check that they are current (.ci/run):

    .venv/bin/python -m autopar.cli.reports            # rewrite them
    .venv/bin/python -m autopar.cli.reports --check    # exit 1 naming every stale file

docs/cli.md (the commands' --help), results/validation/ and profiles/validation/families.json
(`autopar validate` of the three runs files), results/ci/summary.md (the CI sweep baseline as
a table) and results/calibration/ (`autopar calibrate report`). Only this command writes
them; tests and benchmarks never do."""

from __future__ import annotations

import argparse
import filecmp
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "data" / "dev_runs.json"  # calibrate report validates with and without the shipped profiles


def _docs(root: Path) -> None:
    from autopar.cli.docs import reference

    _write(root / "docs" / "cli.md", reference())


def _validation(root: Path) -> None:
    from autopar.cli.common import dump_json
    from autopar.cli.validate import FAMILIES_FILE, REPORT_DIR, REPORT_HOLDOUT, REPORT_RUNS, validate_files, write_report_dir
    from autopar.validation import families_table

    reports = validate_files([str(ROOT / r) for r in REPORT_RUNS + REPORT_HOLDOUT])
    held = tuple(Path(r).stem for r in REPORT_HOLDOUT)
    write_report_dir(reports, root / REPORT_DIR, held)
    _write(root / FAMILIES_FILE, dump_json(families_table(reports, held)))


def _ci_summary(root: Path) -> None:
    from solvers.sweep import load_sweep, summary_markdown

    baseline = json.loads((ROOT / "results" / "ci" / "baseline.json").read_text())
    spec = load_sweep(ROOT / "profiles" / "sweeps" / "ci.yaml")
    _write(root / "results" / "ci" / "summary.md", summary_markdown(spec, baseline["cases"]))


def _calibration(root: Path) -> None:
    from autopar.cli.calibrate import validation_before_after
    from calibration.report import write_reports

    write_reports(validation_before_after(str(RUNS)), out=root / "results" / "calibration")


REPORTS: dict[str, Callable[[Path], None]] = {"docs": _docs, "validation": _validation, "ci": _ci_summary, "calibration": _calibration}


def _write(path: Path, text: str) -> None:
    from autopar.cli.common import write_atomic

    write_atomic(path, text, field="report")


# An absolute path into a checkout (calibration/heldout.py records its logs' absolute paths):
# compared without the checkout's own location, which differs between machines.
_CHECKOUT_PREFIX = re.compile(r'/[^\s"\']*/(?=(?:calibration|tests|profiles|results)/)')


def _same(generated: Path, committed: Path) -> bool:
    if filecmp.cmp(generated, committed, shallow=False):
        return True
    a, b = generated.read_text(errors="replace"), committed.read_text(errors="replace")
    return _CHECKOUT_PREFIX.sub("", a) == _CHECKOUT_PREFIX.sub("", b)


def stale_files(names: list[str], update: bool = False) -> list[str]:
    """Generate into a scratch folder and compare with the committed files; with update,
    copy the ones that differ over them."""
    stale = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for name in names:
            REPORTS[name](scratch)
        for path in sorted(p for p in scratch.rglob("*") if p.is_file()):
            rel = path.relative_to(scratch)
            committed = ROOT / rel
            if not committed.exists() or not _same(path, committed):
                stale.append(str(rel))
                if update:
                    _write(committed, path.read_text())
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autopar.cli.reports", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 when a report is stale")
    parser.add_argument("--only", choices=sorted(REPORTS), action="append", help="only these reports (repeatable)")
    args = parser.parse_args(argv)
    names = args.only or list(REPORTS)
    stale = stale_files(names, update=not args.check)
    for rel in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {rel}" + (" (regenerate: .venv/bin/python -m autopar.cli.reports)" if args.check else ""),
              file=sys.stderr)
    print(f"reports {', '.join(names)}: " + (f"{len(stale)} stale" if stale and args.check else "current"))
    return 1 if stale and args.check else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
