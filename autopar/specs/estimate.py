"""Estimate: the cost model's answer for one plan. Breakdowns sum to their totals."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from autopar.specs.trust import FamilyError


class Bottleneck(str, Enum):
    """What the step spends most of its time on."""

    compute = "compute"
    """Tensor-core GEMMs and attention (including recompute)."""
    memory = "memory"
    """HBM-bound element-wise work and the optimizer step."""
    communication = "communication"
    """Exposed TP/CP/EP/PP/DP collectives and host-link copies of offloaded activations."""
    bubble = "bubble"
    """Pipeline fill and drain, and stage imbalance."""
    coordination = "coordination"
    """Fixed per-step overhead (data loading, launch gaps, logging) and host-bound MoE layers (the
    GPU waits while the host issues their kernels)."""


class StageEstimate(BaseModel):
    """One pipeline stage (a pipeline rank, all its virtual stages) of a plan."""

    model_config = ConfigDict(extra="forbid")

    layers: int = Field(description="Decoder layers on the stage (all its virtual stages; MTP modules not counted)")
    recompute_layers: int = Field(description="Of those, layers fully recomputed in the backward pass")
    memory_bytes: float = Field(description="Peak memory per GPU of the stage, bytes")
    seconds: float = Field(description="Seconds per micro-batch: forward, backward, recompute and exposed TP/CP/EP/PP/FSDP communication")


class Estimate(BaseModel):
    """Predicted step of one plan (units in every name; bytes, seconds, flops)."""

    model_config = ConfigDict(extra="forbid")

    plan: str = Field(description="Plan in text form")
    feasible: bool = Field(description="Fits in memory and respects the placement rules")
    reasons: list[str] = Field(default_factory=list, description="Why the plan is infeasible (empty when feasible)")
    num_gpus: int = Field(description="GPUs in the job")
    dp: int = Field(description="Data-parallel degree")
    num_microbatches: int = Field(description="Micro-batches per step per pipeline")
    stage_layers: list[int] = Field(description="Decoder layers on each pipeline stage")
    stages: list[StageEstimate] = Field(default_factory=list, description="Layers, recompute, memory and time of each pipeline stage")
    step_seconds: float = Field(description="Wall time of one optimizer step")
    tokens_per_second: float = Field(description="Training tokens per second, whole job")
    tokens_per_second_per_gpu: float = Field(description="Training tokens per second per GPU")
    model_flops_per_step: float = Field(description="Model FLOPs per step (no recompute; attention counted non-causal)")
    hardware_flops_per_step: float = Field(description="Model FLOPs plus the recomputed forward's, counted as model FLOPs count them "
                                           "(attention non-causal): the HFU numerator of Korthikanti et al. 2022")
    model_tflops_per_gpu: float = Field(description="Model TFLOP/s per GPU")
    mfu: float = Field(description="Model FLOPs utilisation against the GEMM precision's dense peak")
    hfu: float = Field(description="Hardware FLOPs utilisation (recompute counted)")
    mfu_causal: float | None = Field(None, description="MFU with attention counted causally: the score FLOPs a fused kernel runs "
                                     "under the causal mask (mfu counts them non-causally, as Megatron-LM and published MFUs do); "
                                     "equal to mfu for a model without causal attention")
    bubble_fraction: float = Field(description="Pipeline bubble / pipeline time")
    memory_bytes_per_gpu: float = Field(description="Peak memory over stages, bytes")
    memory_capacity_bytes: float = Field(description="HBM per GPU a plan may fill, bytes: the GPU's HBM less memory_headroom_bytes "
                                         "(the usable part; feasible compares memory_bytes_per_gpu with it)")
    memory_headroom_bytes: float = Field(0.0, description="HBM per GPU kept free (cluster memory_headroom_gb or --memory-headroom), bytes; "
                                         "memory_capacity_bytes + memory_headroom_bytes is the GPU's physical HBM")
    host_memory_bytes_per_gpu: float = Field(0.0, description="Activations offloaded to host memory at their peak (plan offload_modules), "
                                             "bytes per GPU; not part of memory_bytes_per_gpu")
    host_memory_capacity_bytes: float | None = Field(None, description="The GPU's share of its node's host memory (cluster host_memory_gb_per_gpu), bytes; null = unknown")
    worst_stage: int = Field(description="Stage with the peak memory")
    memory_breakdown: dict[str, float] = Field(description="Bytes per component on the worst stage; sums to memory_bytes_per_gpu")
    time_breakdown: dict[str, float] = Field(description="Seconds per component of one step; sums to step_seconds")
    bottleneck: Bottleneck = Field(description="Largest time category")
    time_to_train_seconds: float | None = Field(None, description="target_tokens / tokens_per_second")
    cost_usd: float | None = Field(None, description="Price of time_to_train at the cluster's GPU-hour price")
    validated: FamilyError | None = Field(None, description="Validated error of the plan's family (profiles/validation/families.json)")
