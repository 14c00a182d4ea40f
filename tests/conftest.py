"""Shared fixtures: presets loaded once, the runs files validated once, and ideal-hardware cost
params for formula checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from autopar.specs import TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import CostParams, load_cost_params
from autopar.validation import validate_runs

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def params() -> CostParams:
    return load_cost_params()


@pytest.fixture(scope="session")
def ideal_params(params: CostParams) -> CostParams:
    """Peak links, no saturation or latency: what the seeds' back-of-envelope formulas assume."""
    d = params.model_dump()
    d["comm"].update(nvlink_efficiency=1.0, network_efficiency=1.0, pcie_efficiency=1.0,
                     half_bandwidth_bytes=1e-9, p2p_half_bandwidth_bytes=1e-9)
    return CostParams.model_validate(d)


@pytest.fixture(scope="session")
def h100_node():
    return load_cluster("dgx-h100")


@pytest.fixture(scope="session")
def superpod():
    return load_cluster("dgx-h100-superpod")


@pytest.fixture(scope="session")
def llama3_70b():
    return load_model("llama3-70b")


@pytest.fixture()
def training_8k() -> TrainingSpec:
    return TrainingSpec(seq_len=8192, global_batch_size=256)


@pytest.fixture(scope="session")
def validated() -> Callable[[str], dict[str, Any]]:
    """validate_runs of tests/data/<name>.json with the shipped defaults, computed once per session:
    predicting every row of a runs file is the unit suite's slowest work (~30 s for dev_runs), and
    several modules read the same report. Callers must not modify it."""
    reports: dict[str, dict[str, Any]] = {}

    def get(name: str) -> dict[str, Any]:
        if name not in reports:
            reports[name] = validate_runs(DATA / f"{name}.json")
        return reports[name]
    return get
