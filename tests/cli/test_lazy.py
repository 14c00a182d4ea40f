"""`autopar --version` and `--help` load no command module and no heavy library (numpy,
pydantic, OR-Tools, Optuna take seconds); the names spelled in the light modules agree with the
enums they stand for. The wall time is a benchmark (tests/bench/bench_cli_startup.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from autopar.cli import COMMANDS, main
from autopar.cli.common import COLLECTIVES, FRAMEWORKS, NCCL_ALGORITHMS, NCCL_PROTOCOLS, OBJECTIVES, PLAN_OBJECTIVES, PRECISIONS

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "pydantic", "ortools", "optuna", "scipy", "matplotlib", "rich")
PROBE = """
import sys
from autopar.cli import main
try:
    main({args!r})
except SystemExit:
    pass
print("heavy:" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"], *[[c, "--help"] for c in ("search", "estimate", "emit", "validate", "sweep", "tune", "plan", "comm")], ["calibrate", "nccl", "--help"]])
def test_help_imports_no_heavy_library(args):
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args, heavy=HEAVY)], cwd=ROOT, capture_output=True, text=True, check=True)
    assert proc.stdout.splitlines()[-1] == "heavy:", f"autopar {' '.join(args)} imported {proc.stdout.splitlines()[-1]}"


def test_registry_text_is_the_commands_short_help():
    ctx = click.Context(main)
    for name, (_, short) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None, name
        assert command.get_short_help_str(1000) == short, name


def test_spelled_choices_match_the_enums():
    from autopar.emit import FORMATS
    from autopar.specs import Precision
    from solvers.base import Objective

    assert PRECISIONS == tuple(p.value for p in Precision)
    from autopar.cli.common import MOE_ROUTINGS
    from autopar.specs.training import MoeRouting

    assert MOE_ROUTINGS == tuple(r.value for r in MoeRouting)
    from autopar.cli.common import ATTENTION_KERNELS
    from autopar.specs.training import AttentionKernel

    assert ATTENTION_KERNELS == tuple(k.value for k in AttentionKernel)
    assert OBJECTIVES == tuple(o.value for o in Objective)
    from solvers.plan_choice import OBJECTIVES as PLAN_CHOICE_OBJECTIVES

    assert PLAN_OBJECTIVES == PLAN_CHOICE_OBJECTIVES
    from autopar.cost.comm import Collective
    from autopar.cost.nccl import ALGORITHMS, PROTOCOLS

    assert COLLECTIVES == tuple(c.value for c in Collective)
    assert (NCCL_ALGORITHMS, NCCL_PROTOCOLS) == (ALGORITHMS, PROTOCOLS)
    assert FRAMEWORKS == tuple(FORMATS)
    from autopar.cli.search import PER_STAGE_CORES, PER_STAGE_SECONDS
    from solvers.stage_search import DEFAULT_CORES, DEFAULT_SECONDS

    assert (PER_STAGE_CORES, PER_STAGE_SECONDS) == (DEFAULT_CORES, DEFAULT_SECONDS)
