"""Cost-model coefficients that are not hardware datasheet numbers: achieved efficiencies,
framework reserves. Defaults live in profiles/cost/defaults.yaml with their sources; a fitted
calibration profile (calibration issue) overrides them."""

from __future__ import annotations

from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from autopar.specs._files import PROFILES_DIR, read_mapping


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GemmParams(_Strict):
    """efficiency(M, N, K) = max_efficiency[arch][dtype] x tile_quantization x F / (F + half_flops)."""

    max_efficiency: dict[str, dict[str, float]] = Field(description="architecture -> dtype -> best achieved fraction of dense peak")
    half_saturation_flops: float = Field(gt=0, description="GEMM size (2MNK flops) at which efficiency is half its maximum")
    tile_m: int = Field(gt=0, description="Tile rows used for the quantization term")
    tile_n: int = Field(gt=0, description="Tile columns used for the quantization term")
    fp8_max_speedup: float = Field(gt=0, description="Cap on the fp8 over bf16 GEMM speedup (scaling/casting overheads)")


class AttentionParams(_Strict):
    flash_efficiency: float = Field(gt=0, le=1, description="Flash-attention fwd+bwd fraction of the bf16 dense peak")
    unfused_extra_bytes_per_score: float = Field(ge=0, description="HBM bytes moved per attention score element without flash kernels (fwd)")


class CommParams(_Strict):
    nvlink_efficiency: float = Field(gt=0, le=1, description="Achieved / peak NVLink bus bandwidth at large messages")
    pcie_efficiency: float = Field(gt=0, le=1, description="Achieved / peak PCIe bandwidth")
    network_efficiency: float = Field(gt=0, le=1, description="Achieved / peak NIC bandwidth at large messages")
    half_bandwidth_bytes: float = Field(gt=0, description="Collective message size at which achieved bus bandwidth is half its large-message value")
    p2p_half_bandwidth_bytes: float = Field(gt=0, description="Point-to-point message size at which achieved bandwidth is half its large-message value")
    sharp_speedup: float = Field(ge=1, description="AllReduce bus-bandwidth gain with (NVLink or IB) SHARP")
    dp_overlap: float = Field(ge=0, le=1, description="Fraction of the last micro-batch's backward that can hide DP gradient reduction")
    zero3_overlap: float = Field(ge=0, le=1, description="Fraction of compute that can hide ZeRO-3 per-layer gathers")
    tp_overlap: float = Field(ge=0, le=1, description="Fraction of TP/SP collective time hidden behind GEMMs when the plan overlaps them (tp_overlap)")
    ep_overlap: float = Field(ge=0, le=1, description="Fraction of EP AllToAll time hidden")


class MemoryParams(_Strict):
    hbm_efficiency: float = Field(gt=0, le=1, description="Achieved / peak HBM bandwidth for element-wise kernels")
    elementwise_bytes_per_token_per_hidden: float = Field(ge=0, description="Forward HBM bytes per token per hidden unit of one layer's norms, residuals, activations (bf16)")
    low_precision_cast_bytes_per_element: float = Field(ge=0, description="HBM bytes per GEMM input element to cast bf16 to fp8/fp4 (read 2, write 1)")
    reserve_bytes: float = Field(ge=0, description="CUDA context, NCCL and allocator reserve per GPU, bytes")
    fragmentation: float = Field(ge=0, lt=1, description="Allocator fragmentation, fraction of allocated bytes")
    optimizer_bytes_moved_per_param: float = Field(ge=0, description="HBM bytes read+written per parameter by the Adam step")


class CostParams(_Strict):
    gemm: GemmParams
    attention: AttentionParams
    comm: CommParams
    memory: MemoryParams
    step_overhead_seconds: float = Field(ge=0, description="Per-step fixed cost: data loading, logging, launch gaps")
    sources: dict[str, str] = Field(default_factory=dict, description="Where each coefficient comes from")

    def max_gemm_efficiency(self, architecture: str, dtype: str) -> float:
        table = self.gemm.max_efficiency.get(architecture) or self.gemm.max_efficiency["default"]
        return table.get(dtype, table.get("bf16", 0.7))


@lru_cache(maxsize=4)
def load_cost_params(path: str | None = None) -> CostParams:
    file = PROFILES_DIR / "cost" / "defaults.yaml" if path is None else path
    from pathlib import Path

    return CostParams.model_validate(read_mapping(Path(file), "cost params"))
