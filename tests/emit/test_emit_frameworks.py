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


# ---- the DeepSpeed helper's network, built by transformers (after the offline hub: transformers
# imports huggingface_hub, which reads HF_HOME once) ---------------------------------------------

def _longrope_llama3_8b():
    import dataclasses
    from autopar.specs.model import RopeScaling
    job = make_job("llama3-8b", "dgx-h100", 16, 8192, 128, "tp=1,zero=3,recompute=full")
    scaling = RopeScaling(type="longrope", original_max_position_embeddings=4096, short_factor=[1.0] * 64, long_factor=[2.0] * 64)
    return dataclasses.replace(job, model=job.model.model_copy(update={"rope_scaling": scaling, "activation": "gelu_pytorch_tanh"}))


@pytest.mark.parametrize("job", [
    make_job("llama3-405b", "dgx-h100-superpod", 1024, 4096, 1024, "tp=1,pp=16,zero=0,recompute=full"),  # llama3 RoPE scaling
    make_job("mixtral-8x7b", "dgx-h100", 16, 4096, 64, "tp=1,ep=8,zero=1"),
    make_job("qwen2-57b-a14b", "dgx-h100", 64, 4096, 256, "tp=1,ep=8,zero=1"),  # shared expert with a gate, QKV bias
    make_job("gpt3-175b", "dgx-h100", 256, 2048, 256, "tp=1,pp=8,zero=1,recompute=full"),  # learned positions, exact GeLU
    _longrope_llama3_8b(),  # longrope without a factor, GeGLU
], ids=["llama3-405b", "mixtral-8x7b", "qwen2-57b-a14b", "gpt3-175b", "longrope-geglu"])
def test_transformers_builds_the_helpers_network(job, tmp_path):
    """transformers 5.12 (the integration environment) builds model_config() on the meta device: the MLP
    applies the model's activation, the rotary embedding the model's RoPE, and the weights number
    autopar's count of the network (autopar.cost.flops: exact for Llama and Mixtral; it leaves out
    GPT-2's position table and a few bias and gate vectors, under 1e-4 of the total)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.activations import ACT2CLS

    from autopar.cost.flops import total_params
    from autopar.emit import write_artefacts
    from autopar.emit.deepspeed import emit_deepspeed
    from fw_deepspeed import load_helper

    write_artefacts(emit_deepspeed(job), tmp_path)
    config = load_helper(tmp_path).model_config()
    with torch.device("meta"):
        network = AutoModelForCausalLM.from_config(config)
    m = job.model
    act = ACT2CLS[m.activation]
    act = act[0] if isinstance(act, tuple) else act
    assert {type(mod) for name, mod in network.named_modules() if name.endswith(("act_fn", "mlp.act"))} == {act}
    params = sum(p.numel() for p in network.parameters())
    if m.position_embedding == "rope":
        rope = config.rope_parameters
        assert rope["rope_theta"] == m.rope_theta
        want = m.rope_scaling.model_dump(exclude_none=True) if m.rope_scaling else {"type": "default"}
        assert rope["rope_type"] == want.pop("type")
        assert {k: rope[k] for k in want} == {k: list(v) if isinstance(v, tuple) else v for k, v in want.items()}
    else:  # wpe: one row per position
        params -= m.max_position_embeddings * m.hidden_size
    assert params == pytest.approx(total_params(m), rel=1e-4)
