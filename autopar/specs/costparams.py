"""Cost-model coefficients that are not hardware datasheet numbers: achieved efficiencies,
framework reserves. Defaults live in profiles/cost/defaults.yaml with their sources; a fitted
calibration profile (calibration issue) overrides them."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict, Field, ValidationError

from autopar.errors import InputError
from autopar.specs._base import StrictModel
from autopar.specs._files import PROFILES_DIR, read_mapping

if TYPE_CHECKING:
    from autopar.specs.hardware import ClusterSpec


class _Strict(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GemmParams(_Strict):
    """efficiency(M, N, K) = max_efficiency[arch][dtype] x tile_quantization x F / (F + half_flops)."""

    max_efficiency: dict[str, dict[str, float]] = Field(description="architecture -> dtype -> best achieved fraction of dense peak")
    half_saturation_flops: float = Field(gt=0, description="GEMM size (2MNK flops) at which efficiency is half its maximum")
    tile_m: int = Field(gt=0, description="Tile rows used for the quantization term")
    tile_n: int = Field(gt=0, description="Tile columns used for the quantization term")
    fp8_max_speedup: float = Field(gt=0, description="Cap on the fp8 over bf16 GEMM speedup (scaling/casting overheads)")
    unaligned_efficiency: float = Field(1.0, gt=0, le=1, description="Factor when M, N or K is not a multiple of alignment_elements (1: no penalty; set by a calibration profile)")
    alignment_elements: int = Field(8, gt=0, description="Element alignment cuBLAS needs for its fastest kernels")


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
    collectives: "CommCalibration | None" = Field(None, description="Fitted collective curves (calibration profile); null: the default model")

    def max_gemm_efficiency(self, architecture: str, dtype: str) -> float:
        table = self.gemm.max_efficiency.get(architecture) or self.gemm.max_efficiency["default"]
        return table.get(dtype, table.get("bf16", 0.7))


@lru_cache(maxsize=4)
def load_cost_params(path: str | None = None) -> CostParams:
    file = PROFILES_DIR / "cost" / "defaults.yaml" if path is None else path
    return CostParams.model_validate(read_mapping(Path(file), "cost params"))


# ---- calibration profiles (calibration/fitted/*.yaml; written by `autopar calibrate`) ------------


class CollectiveCurve(_Strict):
    """Fitted time of one collective on one tier (calibration/nccl_fit.py):
    t(S) = latency_us_per_step x steps(n) + S x f(n) / B x (1 + (half / S)^exponent),
    S message bytes (nccl-tests 'size'), f the bus-bandwidth factor, B = busbw_gb_per_s."""

    busbw_gb_per_s: float = Field(gt=0, description="Large-message bus bandwidth B, GB/s; network tier: with gpus_per_node group members per node")
    half_bandwidth_bytes: float = Field(gt=0, description="Message size at which the achieved bus bandwidth is B / 2, bytes")
    exponent: float = Field(gt=0, description="Sharpness of the saturation (1 = the default alpha-beta curve; NCCL logs fit ~0.5-0.7)")
    latency_us_per_step: float | None = Field(None, ge=0, description="Latency per ring step, microseconds; null when the logs did not measure small messages (the cluster's tier latency is used)")
    gpus_per_node: int = Field(1, gt=0, description="Group members per node in the measurement; a network group with k per node gets B x k / gpus_per_node")
    sharp: bool = Field(False, description="Measured with in-switch reduction (NVLink SHARP / IB SHARP): busbw above the link rate")
    num_ranks: int | None = Field(None, gt=0, description="Ranks of the measured group")
    sources: list[str] = Field(default_factory=list, description="Logs the curve was fitted to")
    derived_from: str | None = Field(None, description="When no log measured this collective: the curve it was derived from and how")
    median_error: float | None = Field(None, ge=0, description="Median |predicted / measured - 1| over the sources' sizes >= 1 MiB")
    max_error: float | None = Field(None, ge=0, description="Largest |predicted / measured - 1| over every size of the sources")


class CommCalibration(_Strict):
    """Fitted collective curves by tier and collective (keys: all_reduce, all_gather,
    reduce_scatter, alltoall, sendrecv for ring / pairwise algorithms, all_reduce_sharp for
    in-switch reduction); a missing entry falls back to the default model."""

    intra_node: dict[str, CollectiveCurve] = Field(default_factory=dict, description="Curves of groups inside one node (NVLink / PCIe)")
    network: dict[str, CollectiveCurve] = Field(default_factory=dict, description="Curves of groups spanning nodes (NICs)")
    sharp_speedup: float | None = Field(None, ge=1, description="AllReduce busbw with in-switch reduction over ring; null: the default coefficient")
    nvls_min_ranks: int = Field(5, gt=0, description="Smallest group NCCL runs NVLS AllReduce on (8x H200 sweep: ring at 4 GPUs, NVLS from 5)")


class GemmCalibration(_Strict):
    """Fitted efficiency(M, N, K, dtype) = max_efficiency[dtype] x tile_quantization x F / (F + half)
    x (unaligned_efficiency when a dimension is not a multiple of alignment_elements)."""

    gpu: str | None = Field(None, description="GPU profile the efficiencies are relative to (null: CPU or unknown device)")
    architecture: str | None = Field(None, description="Architecture key of max_efficiency the fit replaces")
    max_efficiency: dict[str, float] = Field(description="dtype -> best achieved fraction of the dense peak")
    half_saturation_flops: float = Field(gt=0, description="GEMM size (2MNK flops) at which efficiency is half its maximum")
    tile_m: int = Field(128, gt=0, description="Tile rows of the quantization term")
    tile_n: int = Field(128, gt=0, description="Tile columns of the quantization term")
    unaligned_efficiency: float = Field(1.0, gt=0, le=1, description="Factor when M, N or K is not a multiple of alignment_elements")
    alignment_elements: int = Field(8, gt=0, description="Alignment below which cuBLAS falls back to slower kernels (16 bytes of 16-bit elements)")
    num_samples: int = Field(0, ge=0, description="Measurements fitted")
    median_error: float | None = Field(None, ge=0, description="Median |predicted / measured - 1| of the time over the samples")
    mean_error: float | None = Field(None, ge=0, description="Mean |predicted / measured - 1| of the time over the samples")
    max_error: float | None = Field(None, ge=0, description="Largest |predicted / measured - 1| of the time over the samples")
    sources: list[str] = Field(default_factory=list, description="CSV files the samples came from")


class LogFit(_Strict):
    """One log's own fit (reported; the tier curves pool logs)."""

    log: str = Field(description="Log file")
    collective: str = Field(description="nccl-tests collective")
    tier: str = Field(description="intra_node | network")
    num_ranks: int = Field(gt=0, description="Ranks of the run")
    num_nodes: int = Field(gt=0, description="Nodes of the run")
    algorithm: str = Field(description="ring, or nvls when busbw exceeds the NVLink rate")
    peak_busbw_gb_per_s: float = Field(gt=0, description="Largest busbw printed in the log, GB/s")
    fitted: list[str] = Field(description="Coefficients the sizes constrained (others from the prior shape)")
    busbw_gb_per_s: float = Field(gt=0, description="Fitted B, GB/s")
    half_bandwidth_bytes: float = Field(gt=0, description="Fitted (or prior) half-bandwidth size, bytes")
    exponent: float = Field(gt=0, description="Fitted (or prior) saturation exponent")
    latency_us: float | None = Field(None, ge=0, description="Fitted fixed latency L, microseconds (null: not measured)")
    num_sizes: int = Field(gt=0, description="Sizes in the log")
    median_error: float | None = Field(None, ge=0, description="Median |predicted / measured - 1| over sizes >= 1 MiB")
    max_error: float = Field(ge=0, description="Largest |predicted / measured - 1| over every size")
    warnings: list[str] = Field(default_factory=list, description="What the log lacked")


class CalibrationProfile(_Strict):
    """A fitted profile that a cluster file names (`calibration: path`)."""

    kind: Literal["autopar-calibration"] = Field("autopar-calibration", description="File type marker")
    version: int = Field(1, description="Schema version")
    name: str = Field(description="Profile name")
    description: str = Field("", description="Hardware and fabric the measurements came from")
    gpu: str | None = Field(None, description="GPU of the measurements")
    gpus_per_node: int | None = Field(None, gt=0, description="GPUs per node of the measurements")
    created_by: str = Field("", description="Command that wrote the profile")
    collectives: CommCalibration | None = Field(None, description="Collective curves (autopar calibrate nccl)")
    gemm: GemmCalibration | None = Field(None, description="GEMM efficiency fit (autopar calibrate gemm)")
    log_fits: list[LogFit] = Field(default_factory=list, description="Each log's own fit and error")
    sources: dict[str, str] = Field(default_factory=dict, description="Where the inputs come from")


def _with_gemm(base: GemmParams, fit: GemmCalibration) -> GemmParams:
    table = {arch: dict(v) for arch, v in base.max_efficiency.items()}
    table[fit.architecture] = {**table.get(fit.architecture, table["default"]), **fit.max_efficiency}
    return base.model_copy(update={"max_efficiency": table, "half_saturation_flops": fit.half_saturation_flops,
                                   "tile_m": fit.tile_m, "tile_n": fit.tile_n, "unaligned_efficiency": fit.unaligned_efficiency,
                                   "alignment_elements": fit.alignment_elements})


def with_calibration(params: CostParams, profile: CalibrationProfile) -> CostParams:
    """params with a profile's fitted curves and GEMM efficiencies in place of the defaults."""
    update: dict = {"sources": {**params.sources, "calibration": profile.name}}
    if profile.collectives is not None:
        update["collectives"] = profile.collectives
    if profile.gemm is not None and profile.gemm.architecture:
        update["gemm"] = _with_gemm(params.gemm, profile.gemm)
    return params.model_copy(update=update)


def resolve_profile_path(path: str) -> Path:
    """A profile path as written in a cluster file: absolute, relative to the working directory,
    or relative to the project root (where calibration/fitted/ lives)."""
    candidates = [Path(path)] if Path(path).is_absolute() else [Path.cwd() / path, PROFILES_DIR.parent / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise InputError("calibration", path, f"profile file not found (looked in {', '.join(str(c.parent) for c in candidates)})")


@lru_cache(maxsize=16)
def load_calibration_profile(path: str) -> CalibrationProfile:
    file = resolve_profile_path(path)
    try:
        return CalibrationProfile.model_validate(read_mapping(file, "calibration"))
    except ValidationError as exc:
        raise InputError.from_validation(exc, f"calibration {file.name}") from None


def params_for_cluster(cluster: "ClusterSpec", base: CostParams | None = None) -> CostParams:
    """The coefficients to cost a cluster with: base (default: profiles/cost/defaults.yaml),
    with the cluster's calibration profile applied when it names one."""
    base = base if base is not None else load_cost_params()
    if not cluster.calibration:
        return base
    return with_calibration(base, load_calibration_profile(cluster.calibration))


CostParams.model_rebuild()
