"""Every golden artefact loaded by its framework's own code, its resolved values compared with the
plan (tests/emit/frameworks.py), or its refusal checked to name a rule. Marked integration: run by
.ci/integration in the cached environment with the real packages (Megatron-LM/Megatron Core
0.19.2, Megatron-Bridge 0.6.2, DeepSpeed 0.19.8, torchtitan 0.3.0 with torchao; CPU builds).

    bash .ci/integration            # builds or reuses the environment, runs these tests
    AUTOPAR_EMIT_REPORT=results/emit/frameworks.md bash .ci/integration   # also writes the table
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from autopar.emit import FORMATS
from emit_cases import GOLDEN_CASES, make_job
from frameworks import differences, missing_keys, planned
from fw_bridge import offline_hub

HUB: list[Path] = []  # the offline hub cache of this session


@pytest.fixture(scope="module", autouse=True)
def _offline_hub(tmp_path_factory):
    """huggingface_hub reads HF_HOME once, at its import: serve the presets' config.json before
    the first test imports a framework."""
    HUB.append(tmp_path_factory.mktemp("hf"))
    saved = {k: os.environ.get(k) for k in ("HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update(offline_hub(HUB[0]))
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v

pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "emit"
OUTCOMES: dict[tuple[str, str], str] = {}

# format -> (module the check needs, what is missing without it)
NEEDS = {
    "megatron": ("megatron.training.arguments", "Megatron-LM parse_args/validate_args and Megatron Core layer split"),
    "deepspeed": ("deepspeed", "DeepSpeedConfig, PipelineModule partition and Ulysses groups"),
    "torchtitan": ("torchtitan", "torchtitan ConfigManager, ParallelDims and pipeline split"),
    "megatron-bridge": ("megatron.bridge", "Megatron-Bridge recipe, runtime_config_update and validate"),
}


def resolver(fmt: str):
    module, check = NEEDS[fmt]
    try:
        __import__(module.split(".")[0] if fmt == "megatron-bridge" else module)
    except Exception as exc:  # the package is not installed, or fails to import on this machine
        pytest.skip(f"missing check: {check} ({fmt}): cannot import {module}: {type(exc).__name__}: {exc}")
    if fmt == "megatron":
        from fw_megatron import resolve_megatron
        return resolve_megatron
    if fmt == "deepspeed":
        from fw_deepspeed import resolve_deepspeed
        return resolve_deepspeed
    if fmt == "torchtitan":
        from fw_torchtitan import resolve_torchtitan
        return resolve_torchtitan
    from fw_bridge import resolve_bridge
    return resolve_bridge


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_framework_loads_artefact_as_planned(case, fmt):
    job = make_job(*GOLDEN_CASES[case])
    folder = GOLDEN / case / fmt
    refused = folder / "REFUSED.txt"
    if refused.exists():
        rules = re.findall(r"(?:refuses it: |; )\[([^\]]+)\]", refused.read_text())  # "[rule] detail" items
        OUTCOMES[(case, fmt)] = "refused: " + "; ".join(rules)
        assert rules, f"{case}/{fmt}: a refusal must name the framework rule"
        return
    resolve = resolver(fmt)
    args = (folder, job, HUB[0]) if fmt == "megatron-bridge" else (folder, job)
    try:
        resolved = resolve(*args)
    except Exception as exc:
        OUTCOMES[(case, fmt)] = f"REJECTED by the framework: {type(exc).__name__}: {str(exc)[:120]}"
        raise
    diff, missing = differences(planned(job), resolved), missing_keys(job, resolved)
    OUTCOMES[(case, fmt)] = "loads as planned" if not diff and not missing else f"DIFFERS: {'; '.join(diff + missing)}"
    assert not diff, f"{case}/{fmt}: the framework resolves the artefact differently from the plan: {diff}"
    assert not missing, f"{case}/{fmt}: values the framework never resolved: {missing}"


@pytest.fixture(scope="session", autouse=True)
def _write_report():
    yield
    target = os.environ.get("AUTOPAR_EMIT_REPORT")
    if target and OUTCOMES:
        from framework_report import write

        write(Path(target), OUTCOMES, GOLDEN_CASES)
