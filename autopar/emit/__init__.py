"""Plan -> launcher artefacts for Megatron-LM, DeepSpeed, torchtitan and Megatron-Bridge.

Each emitter checks the config it produced against that framework's own rules
(docs/reference/launchers.md) and raises RuleViolation, naming the rules, instead of writing
a config the framework would reject.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from autopar.emit.common import Artefact, EmitJob, RuleViolation, Violation, canonical_plan, job_from_results
from autopar.errors import InputError


def _emitters() -> dict[str, Callable[[EmitJob], list[Artefact]]]:
    from autopar.emit.bridge import emit_bridge
    from autopar.emit.deepspeed import emit_deepspeed
    from autopar.emit.megatron import emit_megatron
    from autopar.emit.torchtitan import emit_torchtitan

    return {"megatron": emit_megatron, "deepspeed": emit_deepspeed, "torchtitan": emit_torchtitan, "megatron-bridge": emit_bridge}


FORMATS = ("megatron", "deepspeed", "torchtitan", "megatron-bridge")


def emit(job: EmitJob, fmt: str) -> list[Artefact]:
    """The artefacts of one format; raises RuleViolation when the framework would refuse the plan."""
    emitters = _emitters()
    if fmt not in emitters:
        raise InputError("format", fmt, f"must be one of {', '.join(FORMATS)}")
    return emitters[fmt](job)


def refusals(job: EmitJob, fmt: str) -> list[str]:
    """Why the framework would not run this plan as planned: one '[rule] detail' per broken rule of
    its config code (the emitter's checks), [] when `emit` writes launchers that run it. For
    `search --emit F` / `--framework F`: keep the plans with no refusal."""
    from autopar.emit.bridge import check_bridge
    from autopar.emit.deepspeed import check_deepspeed
    from autopar.emit.megatron import check_megatron
    from autopar.emit.torchtitan import check_torchtitan

    checks = {"megatron": lambda j: check_megatron(j), "deepspeed": lambda j: check_deepspeed(j)[0],
              "torchtitan": lambda j: check_torchtitan(j)[0], "megatron-bridge": lambda j: check_bridge(j)[0]}
    if fmt not in checks:
        raise InputError("format", fmt, f"must be one of {', '.join(FORMATS)}")
    return [str(v) for v in checks[fmt](job).found]


def write_artefacts(artefacts: list[Artefact], out_dir: str | Path) -> list[Path]:
    """Write artefacts under out_dir (created); scripts get the executable bit."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for art in artefacts:
        path = out / art.name
        path.write_text(art.text)
        if art.executable:
            os.chmod(path, 0o755)
        paths.append(path)
    return paths


def emit_results(results, fmt: str, out_dir: str | Path, rank: int = 1) -> list[Path]:
    """Write the artefacts of the rank-th plan of a Results object (for `autopar search --emit`)."""
    return write_artefacts(emit(job_from_results(results, rank), fmt), out_dir)


__all__ = ["Artefact", "EmitJob", "FORMATS", "RuleViolation", "Violation", "canonical_plan", "emit", "emit_results", "job_from_results", "refusals", "write_artefacts"]
