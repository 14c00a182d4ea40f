"""A sweep's --out folder: cases.jsonl, one finished case per line, appended whole and read back
without a torn last line; and sweep.json (SPEC_FILE), the folder's state: the sweep's grid and
settings, its cost overrides, and under INPUTS a fingerprint of each model, cluster and
calibration profile as resolved when the folder was started. --resume refuses a folder whose
sweep or inputs have changed since (check_same_sweep), so one summary never mixes two."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autopar.errors import InputError
from autopar.specs import load_cluster, load_model
from autopar.specs.costparams import load_calibration_profile

if TYPE_CHECKING:
    from solvers.sweep import SweepSpec

CASES_FILE = "cases.jsonl"
SPEC_FILE = "sweep.json"  # the sweep an --out folder holds (check_same_sweep)
INPUTS = "inputs"  # SPEC_FILE key: {"model NAME" | "cluster NAME" | "calibration PROFILE": fingerprint} (input_fingerprints)
UNCHECKED = "inputs_unchecked"  # SPEC_FILE key, true: cases finished before INPUTS was recorded (an older autopar's folder)
NOT_INPUTS = ("description", "sources")  # a profile's prose: editing it changes no case (as solvers.refine)


def read_records(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Finished cases by id. A torn last line (the process died mid-write) is dropped and the
    file rewritten without it, so the next append starts on a fresh line."""
    path = out_dir / CASES_FILE
    if not path.exists():
        return {}
    raw = path.read_bytes().decode("utf-8", errors="replace")  # a garbled line fails to parse and is dropped
    records: dict[str, dict[str, Any]] = {}
    good: list[str] = []
    for line in raw.splitlines(keepends=True):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not line.endswith("\n") or not isinstance(record, dict) or not isinstance(record.get("case"), str):
            continue
        records.setdefault(record["case"], record)
        good.append(line)
    text = "".join(good)
    if text != raw:
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return records


def append_record(out_dir: Path, record: dict[str, Any]) -> None:
    """One O_APPEND write of one whole line, flushed to disk: readers see whole lines only."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(out_dir / CASES_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


# what a case's result does not depend on (the baseline check alone reads the threshold)
RESULT_NEUTRAL = frozenset({"threshold"})


def _sweep_identity(spec: SweepSpec, overrides: dict[str, Any]) -> dict[str, Any]:
    """What an --out folder's results depend on: the sweep's grid and settings and the cost
    overrides (one cost model per summary)."""
    mine = {k: v for k, v in spec.model_dump(mode="json").items() if k not in RESULT_NEUTRAL}
    return {**mine, "cost_overrides": json.loads(json.dumps(overrides, sort_keys=True, default=str))}


def _fingerprint(spec) -> str:
    """sha256 of a resolved spec's JSON, prose left out: a changed number changes it, whether it
    came from a user's file, an HF config or a preset that ships with the package."""
    data = {k: v for k, v in spec.model_dump(mode="json").items() if k not in NOT_INPUTS}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def input_fingerprints(spec: SweepSpec) -> dict[str, str]:
    """What the cases read besides the sweep file: each model and cluster as resolved, and the
    calibration profile a cluster names (its coefficients cost the cluster's cases). Keys name
    the input as the sweep file does ("model m.json", "cluster dgx-h100")."""
    prints = {f"model {name}": _fingerprint(load_model(name)) for name in spec.models}
    for name in spec.clusters:
        cluster = load_cluster(name)
        prints[f"cluster {name}"] = _fingerprint(cluster)
        if cluster.calibration:
            prints[f"calibration {cluster.calibration}"] = _fingerprint(load_calibration_profile(cluster.calibration))
    return prints


def _write_state(path: Path, state: dict[str, Any]) -> None:
    """SPEC_FILE written whole or not at all (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def check_same_sweep(out: Path, spec: SweepSpec, overrides: dict[str, Any], fresh: bool,
                     note: Callable[[str], None] | None = None) -> None:
    """SPEC_FILE records the sweep an --out folder belongs to, with its --cost-override and the
    fingerprints of its inputs; --resume with another sweep, other overrides, or a model, cluster
    or calibration file changed since would mix two grids', two cost models' or two inputs' cases
    under one name in one summary, so it is refused. A folder without finished cases (`fresh`) is
    simply taken over. A folder from before the fingerprints resumes with a note (`note`)."""
    path = out / SPEC_FILE
    mine = _sweep_identity(spec, overrides)
    prints = input_fingerprints(spec)
    if fresh:
        _write_state(path, {**mine, INPUTS: prints})
        return
    try:
        theirs = json.loads(path.read_text()) if path.exists() else {**mine, INPUTS: None}  # no SPEC_FILE: the oldest folders
    except (OSError, ValueError):
        theirs = None
    recorded = theirs.get(INPUTS) if isinstance(theirs, dict) else None
    unchecked = not isinstance(recorded, dict) or bool(theirs.get(UNCHECKED))
    if isinstance(theirs, dict):  # folders written before the overrides, or per_stage, were recorded ran without them
        theirs = {"cost_overrides": {}, "per_stage": False, "memory_headroom": 0.0,
                  **{k: v for k, v in theirs.items() if k not in RESULT_NEUTRAL and k not in (INPUTS, UNCHECKED)}}
    if theirs != mine:
        keys = sorted(k for k in mine if not isinstance(theirs, dict) or theirs.get(k) != mine.get(k))
        hint = "; its cases ran without the per-stage step: per_stage: false resumes it" if keys == ["per_stage"] and not theirs["per_stage"] else ""
        keys = ["--cost-override" if k == "cost_overrides" else k for k in keys]
        raise InputError("resume", str(out), f"the folder holds a different sweep (differs in {', '.join(keys) or 'format'}; "
                         f"see {SPEC_FILE}){hint}; resume it with its own sweep file and --cost-override or choose another --out")
    if isinstance(recorded, dict):
        changed = [k for k in prints if recorded.get(k) != prints[k]]
        if changed:
            raise InputError("resume", str(out), f"{', '.join(changed)} changed since the folder was started (fingerprints in {SPEC_FILE}); "
                             f"its finished cases ran with the old {'one' if len(changed) == 1 else 'ones'}, so its summary would mix old "
                             f"and new under one name: choose another --out, or delete {out / CASES_FILE} to run every case again")
    if unchecked:
        if not isinstance(recorded, dict):  # written before the note: a write that fails stays the one Error: line
            _write_state(path, {**mine, INPUTS: prints, UNCHECKED: True})
        if note:
            note(f"resume: {out} was started by an older autopar that recorded no fingerprints of its models and clusters: the cases "
                 f"it finished before they were recorded could not be checked against the files as they are now ({UNCHECKED} in {SPEC_FILE})")
