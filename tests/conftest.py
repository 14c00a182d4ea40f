"""Shared fixtures: presets loaded once, and ideal-hardware cost params for formula checks."""

from __future__ import annotations

import pytest

from autopar.specs import TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import CostParams, load_cost_params


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
