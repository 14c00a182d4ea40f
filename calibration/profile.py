"""Assemble and write calibration profiles (the YAML a cluster file names with `calibration:`).

`autopar calibrate nccl` fills `collectives` and `log_fits`; `autopar calibrate gemm` fills
`gemm`; writing into an existing profile keeps the other section, so one file can hold both.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from autopar.errors import InputError, ProfileNotFound
from autopar.specs.costparams import CalibrationProfile, GemmCalibration, describe_gpu_kind, gpu_kind
from autopar.specs.hardware import ClusterSpec
from autopar.specs.hardware import load_gpu
from calibration.nccl_log import NcclLog
from calibration.nccl_profile import build_collectives

SIGNIFICANT_DIGITS = 5


def _gpu_name(logs: list[NcclLog], override: str | None) -> str | None:
    names = [override] if override else [log.gpu_name for log in logs if log.gpu_name]
    for name in names:
        try:
            return load_gpu(name).name
        except ProfileNotFound:
            continue
    return names[0] if names else None


def existing_profile(path: str | Path) -> CalibrationProfile | None:
    """The profile already at path (to keep its other section), None when there is none."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text())
        return CalibrationProfile.model_validate(data)
    except Exception as exc:  # noqa: BLE001 -- any unreadable file is refused the same way
        raise InputError("out", str(path), f"exists and is not a calibration profile ({type(exc).__name__}); choose another path") from None


def check_log_gpus(logs: list[NcclLog], gpu: str | None, cluster: ClusterSpec | None) -> None:
    """One profile is one kind of GPU (costparams.gpu_kind: architecture and NVLink rate): the
    logs' device lines, --gpu and --cluster's GPU must agree; the first log's device is taken as
    the truth, so a disagreeing flag is the one named. A device no preset knows is not compared
    (find_gpu then falls back to --gpu, as before)."""
    named = []  # (field, value, how a message says it, GPU)
    for field, value, says, name in [*(("logs", log.path, f"{log.path} ran on", log.gpu_name) for log in logs),
                                     ("gpu", gpu, "--gpu names", gpu)]:
        try:
            if name:
                named.append((field, value, says, load_gpu(name)))
        except ProfileNotFound:
            continue
    if cluster is not None:
        named.append(("cluster", cluster.name, f"cluster {cluster.name} runs", cluster.gpu))
    for field, value, says, other in named[1:]:
        first = named[0]
        if gpu_kind(other) != gpu_kind(first[3]):
            says = "ran on" if field == "logs" else says  # the value already names the log
            raise InputError(field, value, f"{says} {describe_gpu_kind(other)}; {first[2]} {describe_gpu_kind(first[3])}: "
                             "one profile fits one architecture and NVLink rate")


def nccl_profile(name: str, logs: list[NcclLog], gpu: str | None = None, command: str = "",
                 base: CalibrationProfile | None = None, forced: dict | None = None,
                 cluster: ClusterSpec | None = None, nccl_version: str | None = None) -> CalibrationProfile:
    check_log_gpus(logs, gpu, cluster)
    collectives, fits = build_collectives(logs, forced, gpu, cluster, nccl_version=nccl_version)
    per_node = Counter(log.ranks_per_node for log in logs if not log.path.endswith("]")).most_common(1)
    update: dict[str, Any] = {
        "collectives": collectives, "log_fits": fits, "created_by": command,
        "gpu": _gpu_name(logs, gpu), "gpus_per_node": per_node[0][0] if per_node else None,
    }
    if base is None:
        return CalibrationProfile(name=name, **update)
    return base.model_copy(update=update)


def gemm_profile(name: str, fit: GemmCalibration, command: str = "", base: CalibrationProfile | None = None) -> CalibrationProfile:
    if base is None:
        return CalibrationProfile(name=name, gpu=fit.gpu, gemm=fit, created_by=command)
    return base.model_copy(update={"gemm": fit, "created_by": f"{base.created_by}; {command}".strip("; ")})


def _rounded(value: Any) -> Any:
    if isinstance(value, float) and value != 0 and math.isfinite(value):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def dump_profile(profile: CalibrationProfile) -> str:
    head = ("# autopar calibration profile (schema: autopar/specs/costparams.py CalibrationProfile).\n"
            "# Name it from a cluster file with `calibration: <path>`; t(S) = alpha x steps + S f / B (1 + (half/S)^exponent).\n")
    body = yaml.safe_dump(_rounded(profile.model_dump(mode="json")), sort_keys=False, width=120, allow_unicode=False)
    return head + body
