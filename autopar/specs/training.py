"""TrainingSpec: what one optimizer step processes and in which number formats."""

from __future__ import annotations

from enum import Enum

from pydantic import ConfigDict, Field, model_validator

from autopar.specs._base import StrictModel


class Precision(str, Enum):
    """Number format of the transformer GEMMs (weights stay bf16, master weights fp32)."""

    bf16 = "bf16"
    """bfloat16 GEMMs and activations."""
    fp16 = "fp16"
    """float16 GEMMs with loss scaling (same tensor-core peak as bf16)."""
    fp8 = "fp8"
    """FP8 GEMMs (Transformer Engine, Hopper+); activations and weights kept in bf16."""
    fp4 = "fp4"
    """FP4 GEMMs (NVFP4/MXFP4, Blackwell+)."""

    @property
    def gemm_dtype(self) -> str:
        return self.value


class Fp8Recipe(str, Enum):
    """How FP8 GEMM inputs are scaled (precision fp8)."""

    tensorwise = "tensorwise"
    """One scale per tensor (Transformer Engine delayed or current scaling, torchao tensorwise):
    one cast of each input, the transpose for the backward written alongside."""
    rowwise = "rowwise"
    """One scale per row (torchao Float8Linear recipe "rowwise"): each linear casts its input and
    output gradient along both axes and its weight along both, and the backward GEMMs rescale
    their outputs in a separate pass."""


class MoeRouting(str, Enum):
    """How tokens reach experts."""

    learned = "learned"
    """The router's own choices: the busiest expert-parallel rank takes more than the mean."""
    balanced = "balanced"
    """Forced balanced routing (benchmarks; Megatron --moe-router-force-load-balancing): every
    expert takes the mean load, each token's experts drawn at random."""
    contiguous = "contiguous"
    """Balanced in consecutive blocks: token i goes to experts i k ... i k + k - 1 (mod E), so
    every expert takes the mean load and a token's k experts sit on adjacent ranks and nodes
    (NeMo AutoModel FakeBalancedGate, the fake_balanced_gate of its benchmark recipes)."""


class AttentionKernel(str, Enum):
    """A fused attention kernel with measured efficiencies (profiles/cost/defaults.yaml attention.kernels)."""

    fa2 = "fa2"
    """FlashAttention-2 (also PyTorch SDPA's flash backend; Transformer Engine's flash-attn backend)."""
    fa3 = "fa3"
    """FlashAttention-3 (Hopper)."""
    cudnn = "cudnn"
    """cuDNN fused attention (Transformer Engine's FusedAttention; PyTorch SDPA's cuDNN backend)."""
    triton = "triton"
    """FlashAttention in Triton (llm-foundry's 2023 attn_impl triton)."""


class Stack(str, Enum):
    """Training software stack (profiles/stacks/<name>.yaml lists the mechanisms it switches)."""

    megatron = "megatron"
    """Megatron-Core with Transformer Engine (Megatron-LM, NeMo, Megatron-Bridge)."""
    torchtitan = "torchtitan"
    """torchtitan, eager PyTorch (FSDP2, DTensor TP, torch.distributed.pipelining)."""
    torchtitan_compile = "torchtitan-compile"
    """torchtitan with torch.compile on the transformer blocks."""
    pytorch_fsdp = "pytorch-fsdp"
    """Other PyTorch FSDP trainers, eager (HF Trainer, Accelerate)."""
    llm_foundry = "llm-foundry"
    """MosaicML Composer + PyTorch FSDP with llm-foundry's MPT (Triton flash attention)."""
    deepspeed = "deepspeed"
    """DeepSpeed ZeRO / pipeline engine."""


class TrainingSpec(StrictModel):
    """One training step: sequence length, batch, precision and optimizer state sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq_len: int = Field(gt=0, description="s, tokens per sequence")
    global_batch_size: int = Field(gt=0, description="Sequences per optimizer step")
    precision: Precision = Field(Precision.bf16, description="GEMM precision: bf16 | fp16 | fp8 | fp4")
    fp8_recipe: Fp8Recipe | None = Field(None, description="FP8 scaling: tensorwise | rowwise (torchao); null = the stack's "
                                         "(profiles/stacks: rowwise for torchtitan, tensorwise otherwise)")
    weight_bytes_per_param: float = Field(2.0, gt=0, description="Model weights as trained (bf16 = 2 bytes)")
    fp8_param_gather: bool = Field(
        False,
        description="ZeRO / FSDP all-gather the FP8 linear layers' weights cast to FP8, 1 byte each, and keep the gathered copy in FP8 "
        "(Megatron-LM --fp8-param-gather, on in every Megatron-Bridge FP8 recipe; torchao Float8Linear "
        "enable_fsdp_float8_all_gather, tensorwise scaling only)")
    grad_bytes_per_param: float = Field(
        2.0, gt=0,
        description="Gradient buffer per parameter: 2 (bf16, the seed's 16-byte convention); a stack that keeps gradients in "
        "the reduction dtype (Megatron: profiles/stacks grads_in_reduce_dtype) holds at least grad_reduce_bytes_per_param",
    )
    optimizer_bytes_per_param: float = Field(
        12.0, ge=0,
        description="Optimizer state per parameter: Adam = fp32 master + 2 fp32 moments = 12 bytes",
    )
    grad_reduce_bytes_per_param: float = Field(
        4.0, gt=0,
        description="Bytes per gradient on the wire in the DP / FSDP reduction: fp32 by default in Megatron-LM with bf16 "
        "(arguments.py: bf16 sets accumulate_allreduce_grads_in_fp32), torchtitan (mixed_precision_reduce float32) and "
        "Composer FSDP (mixed precision DEFAULT reduces in fp32); 2 for a bf16 reduction")
    activation_bytes: float = Field(2.0, gt=0, description="Bytes per activation element (bf16 = 2)")
    frozen_weights: bool = Field(
        False,
        description="LoRA/adapter fine-tuning: base weights frozen, so no weight-gradient GEMMs, "
        "no gradients or optimizer states for them and no DP gradient reduction",
    )
    moe_capacity_factor: float | None = Field(
        None, ge=1.0,
        description="Token dropping: an expert takes at most this many times its balanced share of tokens "
        "(seed 000 'Параллелизм экспертов': 1.25-1.5); null = dropless",
    )
    moe_routing: MoeRouting = Field(MoeRouting.learned, description="learned (the router's real, uneven load) | balanced (forced, benchmark) | "
                                        "contiguous (forced, consecutive experts per token: NeMo AutoModel benchmarks)")
    moe_load_imbalance: float | None = Field(
        None, ge=1.0,
        description="Learned routing: tokens at the busiest expert-parallel rank over the mean (measured max/mean); "
        "null = from the router's balancing and the EP layout (autopar.cost.moe.expert_load_factor)",
    )
    stack: Stack = Field(Stack.megatron, description="Training software: switches named mechanisms (kernels, fusion, overlap), "
                         "profiles/stacks/<stack>.yaml")
    flash_attention: bool = Field(True, description="Fused (flash) attention kernels: no stored score matrix, causal work halved")
    attention_kernel: AttentionKernel | None = Field(
        None,
        description="The fused attention kernel the run uses (profiles/cost/defaults.yaml attention.kernels); null = the "
        "stack's for the GPU (profiles/stacks/<stack>.yaml attention_kernel). Transformer Engine with NVTE_FUSED_ATTN=0 "
        "runs fa2 on Hopper, as NeMo Framework Launcher's config.yaml set it from 24.01 to 24.07")
    sac_saves_cudnn_attention: bool = Field(
        True,
        description="torchtitan per-op SAC keeps the cuDNN attention kernel's output, as its save list does since "
        "torchtitan PR #2095 (2025-12-01, 'add all SDPA backends to op_sac_save_list'); false for earlier torchtitan, "
        "whose list named only the flash and memory-efficient SDPA ops, so on a GPU where the stack runs cuDNN attention "
        "(Blackwell) backward reruns the attention forward and the attention output is not kept")
    fused_clamped_glu: bool = Field(
        True,
        description="Megatron-Core runs a clamped GLU (gpt-oss's swiglu_limit) as one fused op (TE ScaledClampedQGeGLU on "
        "its fused grouped MLP, Megatron-Core 2026-08); false for earlier Megatron-Core, which clamps and concatenates "
        "the expert activations in eager kernels around its compiled GLU (profiles/cost/defaults.yaml "
        "memory.eager_extra_bytes.clamped_glu)")
    expandable_segments: bool | None = Field(
        None,
        description="The run sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (growable segments mapped in 2 MiB pages, "
        "PyTorch PR #96995): no allocator fragmentation slack (profiles/cost/defaults.yaml memory.fragmentation) is "
        "counted; null = the stack's launcher default (profiles/stacks expandable_segments)")
    target_tokens: float | None = Field(None, gt=0, description="Tokens to train on, for time-to-train and cost")
    critical_batch_tokens: float | None = Field(None, gt=0, description="Critical batch size B* in tokens; larger batches waste compute (seed 000 'Критический размер батча')")

    @model_validator(mode="after")
    def _check(self) -> "TrainingSpec":
        if self.fp8_recipe not in (None, Fp8Recipe.tensorwise) and self.precision != Precision.fp8:
            raise ValueError(f"fp8_recipe={self.fp8_recipe.value} needs precision fp8 (precision is {self.precision.value})")
        if self.fp8_param_gather and self.precision != Precision.fp8:
            raise ValueError(f"fp8_param_gather=True gathers FP8 weights: needs precision fp8 (precision is {self.precision.value})")
        if self.critical_batch_tokens is not None and self.tokens_per_step > self.critical_batch_tokens:
            raise ValueError(
                f"global batch {self.tokens_per_step:.0f} tokens exceeds critical_batch_tokens={self.critical_batch_tokens:.0f}"
            )
        return self

    @property
    def fp8_scaling(self) -> Fp8Recipe:
        """The FP8 recipe that runs: the spec's, else the stack's (profiles/stacks)."""
        from autopar.specs.stack import load_stack
        return self.fp8_recipe or load_stack(self.stack).fp8_recipe

    @property
    def precision_label(self) -> str:
        """'bf16', or 'fp8 rowwise' / 'fp8 tensorwise' with the FP8 recipe that runs (and ', fp8 param
        gather' when the weights are gathered in FP8)."""
        if self.precision != Precision.fp8:
            return self.precision.value
        return f"fp8 {self.fp8_scaling.value}" + (", fp8 param gather" if self.fp8_param_gather else "")

    @property
    def gather_bytes_per_param(self) -> float:
        """Bytes per parameter a ZeRO / FSDP parameter all-gather moves and its gathered copy
        holds: 1 with FP8 parameter gathering (the linear weights dominate; norms are a rounding
        error), else the weights' own bytes."""
        return 1.0 if self.fp8_param_gather else self.weight_bytes_per_param

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch_size

    @property
    def static_bytes_per_param(self) -> float:
        return self.weight_bytes_per_param + self.grad_bytes_per_param + self.optimizer_bytes_per_param
