"""GPU profiles: a measured matmul rate (MAMF) cannot pass the part's dense peak."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from autopar.specs import load_cluster
from autopar.specs.hardware import GpuSpec


def test_mamf_above_peak_is_refused_with_the_field():
    gpu = load_cluster("dgx-h100").gpu.model_dump()
    assert gpu["mamf_tflops"]["bf16"] == 794.5  # stas00 MAMF table, H100 SXM (profiles/gpus/h100.yaml)
    gpu["mamf_tflops"]["bf16"] = 1600.0  # e.g. a sparse rate typed in
    with pytest.raises(ValidationError, match=r"mamf_tflops.bf16=1600.0 exceeds peak_tflops.bf16=989.4"):
        GpuSpec.model_validate(gpu)
