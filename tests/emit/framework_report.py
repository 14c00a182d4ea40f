"""The closing table of the framework integration tests: plan x format x result, as Markdown.
Written by `AUTOPAR_EMIT_REPORT=results/emit/frameworks.md bash .ci/integration`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from autopar.emit import FORMATS

VERSIONS = "Megatron-LM/Megatron Core 0.19.2, Megatron-Bridge 0.6.2, DeepSpeed 0.19.8, torchtitan 0.3.0 + torchao 0.18.0, torch 2.13.0 (CPU)"


def render(outcomes: dict, cases: dict) -> str:
    lines = ["# Emitted launchers loaded by the real frameworks", "",
             f"Packages: {VERSIONS} (pyproject.toml extra 'integration', .ci/integration-wheels.txt).",
             "Each artefact is loaded with the framework's own config code and its resolved parallel sizes, per-rank layers,",
             "micro/global batch, precision and reduce dtype, recompute, dispatcher, schedule, vpp and MTP are compared",
             "with the plan (tests/emit/test_emit_frameworks.py); a refusal names the framework rule.", "",
             "| plan | " + " | ".join(FORMATS) + " |", "|---|" + "---|" * len(FORMATS)]
    for case in sorted(cases):
        model, _, gpus, seq, gbs, plan = cases[case][:6]
        cells = [outcomes.get((case, fmt), "not run").replace("|", "/") for fmt in FORMATS]
        plan_text = plan.replace("|", "\\|")  # layout strings hold '|'
        lines.append(f"| {case}: {model}, {gpus} GPUs, seq {seq}, gbs {gbs}, `{plan_text}` | " + " | ".join(cells) + " |")
    ran = [v for v in outcomes.values()]
    lines += ["", f"{sum(v == 'loads as planned' for v in ran)} load as planned, {sum(v.startswith('refused') for v in ran)} refused "
              f"with the rule named, {sum(v.startswith(('DIFFERS', 'REJECTED')) for v in ran)} differ or are rejected."]
    return "\n".join(lines) + "\n"


def write(path: Path, outcomes: dict, cases: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as fh:
        fh.write(render(outcomes, cases))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
