"""Every launcher runs the allocator its plan was costed with: a plan costed with expandable
segments counts no fragmentation slack (autopar.cost.context.Batch.fragmentation, 5% of
allocated bytes otherwise: profiles/cost/defaults.yaml memory.fragmentation), so a launcher that
left the allocator on fixed segments could run out of the memory the plan was promised."""

from __future__ import annotations

import json
import subprocess

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.emit.bridge import emit_bridge
from autopar.emit.deepspeed import emit_deepspeed
from autopar.emit.megatron import emit_megatron
from emit_cases import make_job

LINE = 'export PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True${PYTORCH_CUDA_ALLOC_CONF:+,$PYTORCH_CUDA_ALLOC_CONF}"'


@pytest.mark.parametrize("emit, plan, stack", [(emit_megatron, "tp=2,pp=2,zero=1", "megatron"),
                                               (emit_bridge, "tp=2,pp=2,zero=1", "megatron"),
                                               (emit_deepspeed, "zero=3", "deepspeed")])
def test_launcher_exports_expandable_segments_when_the_plan_assumed_them(emit, plan, stack):
    def launcher(**extra):
        job = make_job("llama3-8b", "dgx-h100", 16, 4096, 64, plan, "bf16", stack=stack, **extra)
        return next(a.text for a in emit(job) if a.name.endswith(".sh"))

    # Megatron-LM and DeepSpeed launch on fixed segments (their stacks' default): nothing exported
    assert "PYTORCH_CUDA_ALLOC_CONF" not in launcher()
    assert "PYTORCH_CUDA_ALLOC_CONF" not in launcher(expandable_segments=False)
    script = launcher(expandable_segments=True)
    assert script.count(LINE) == 1
    subprocess.run(["bash", "-n", "/dev/stdin"], input=script, text=True, check=True)  # still valid bash


def _memory(*flags: str) -> tuple[float, dict[str, float]]:
    r = CliRunner().invoke(main, ["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--seq-len", "4096",
                                  "--global-batch", "64", "--plan", "tp=2,zero=1", "--json", *flags])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    return out["memory_bytes_per_gpu"], out["memory_breakdown"]


def test_cli_states_the_allocator():
    # --expandable-segments removes the slack, --fixed-segments keeps it; on the Megatron stack the
    # default is fixed segments (Megatron-LM's launcher sets no allocator option)
    default, parts = _memory()
    fixed, _ = _memory("--fixed-segments")
    expandable, parts_expandable = _memory("--expandable-segments")
    assert default == fixed
    # the slack is 5% of what the step allocates (memory.fragmentation 0.05): the breakdown's
    # fragmentation part, 0 with expandable segments; the other parts do not move
    allocated = sum(v for k, v in parts.items() if k not in ("fragmentation", "framework_reserve"))
    assert parts["fragmentation"] == pytest.approx(0.05 * allocated, rel=1e-9) and parts_expandable["fragmentation"] == 0
    assert {k: v for k, v in parts.items() if k != "fragmentation"} == {k: v for k, v in parts_expandable.items() if k != "fragmentation"}
    assert expandable < fixed
    # on torchtitan the launcher's own default is expandable segments
    titan, _ = _memory("--stack", "torchtitan")
    titan_expandable, _ = _memory("--stack", "torchtitan", "--expandable-segments")
    assert titan == titan_expandable
