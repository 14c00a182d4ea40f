"""StackSpec: the named mechanisms a training software stack switches (profiles/stacks/*.yaml).
A stack never carries an efficiency multiplier: it picks the attention kernel, the element-wise
fusion, what recompute=selective means, how TP communication overlaps and which FSDP runs."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError

from autopar.errors import InputError
from autopar.specs._base import StrictModel
from autopar.specs._files import preset_files, read_mapping
from autopar.specs.training import Fp8Recipe, Stack, TrainingSpec


class StackSpec(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Stack name (autopar.specs.training.Stack)")
    description: str = Field("", description="What software this is")
    attention_kernel: dict[str, str] = Field(description="GPU architecture -> fused attention kernel (fa2 | fa3 | cudnn), profiles/cost/defaults.yaml attention.kernels")
    elementwise: Literal["fused", "eager"] = Field(description="fused | eager: which element-wise kernels run (memory.eager_extra_bytes for eager)")
    selective_recompute: Literal["core_attention", "per_op"] = Field(description="core_attention (Megatron) | per_op (torchtitan per-op SAC): what recompute=selective recomputes")
    tp_overlap: Literal["userbuffers", "async_tp", "none"] = Field(description="userbuffers | async_tp | none: the TP communication overlap the stack has")
    fsdp: Literal["fsdp2", "fsdp1", "megatron-fsdp", "deepspeed-zero3"] = Field(
        description="fsdp2 | fsdp1 | megatron-fsdp | deepspeed-zero3: the ZeRO-3 implementation (fsdp2: the copy-out and "
                    "copy-in kernels around each collective, memory.fsdp2_*_bytes_per_element)")
    fp8_recipe: Fp8Recipe = Field(Fp8Recipe.tensorwise, description="FP8 scaling the stack runs unless the training spec names one")
    fp8_saves_gemm_inputs: bool = Field(False, description="With FP8 or FP4 GEMMs, a linear layer keeps its input for the weight "
                                        "gradient as the quantized copy it cast (Transformer Engine: 1 byte FP8, 0.5625 NVFP4), not in "
                                        "bf16 (torchao)")
    sequence_dim_copies: bool = Field(False, description="Sequence-parallel collectives on a [batch, seq, hidden] activation "
                                      "gather and scatter along dim 1: PyTorch's functional collectives copy the whole tensor after "
                                      "each AllGather and before each ReduceScatter (Megatron's [seq, batch, hidden] needs none)")
    fp8_tp_gathers_fp8: bool = Field(False, description="With tensorwise FP8, the forward TP AllGather carries the 1-byte FP8 "
                                     "cast of the column-parallel input, not its bf16 (torchao Float8ColwiseParallel)")
    context_parallel: Literal["ring", "torch_allgather"] = Field("ring", description="ring | torch_allgather: how CP moves K and V. ring: each chunk passes to "
                                  "the next rank behind the attention of the one in hand (Megatron/TE). torch_allgather: PyTorch's "
                                  "experimental context_parallel (torch/distributed/tensor/experimental/_attention.py, default "
                                  "rotate_method ALL_GATHER, convert_to_f32): one AllGather of every rank's K, V waited after the "
                                  "first block, partial outputs merged and gradients accumulated in fp32, dK and dV passed around "
                                  "the ring in fp32 one block at a time")
    expandable_segments: bool = Field(False, description="The stack's launcher sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the "
                                      "caching allocator maps physical memory into growable segments in 2 MiB pages (PyTorch PR #96995, "
                                      "2.1), so freed blocks are unmapped and remapped where needed and memory.fragmentation strands "
                                      "nothing; a run may say otherwise (TrainingSpec.expandable_segments)")
    kv_heads_repeated: bool = Field(False, description="K and V reach the attention kernel repeated to the query heads "
                                    "(torchtitan repeat_kv before SDPA), so CP exchanges carry every query head, not the KV heads")
    rope_complex_fallback: bool = Field(False, description="RoPE runs as a complex multiply in fp32 (torch.view_as_complex) that "
                                        "the compiler cannot generate code for: Inductor falls back to the eager kernels for it "
                                        "(torch/_inductor/lowering.py make_fallback(aten.view_as_complex), "
                                        "_warn_complex_not_supported), so RoPE moves memory.eager_extra_bytes.rope even where the "
                                        "other element-wise kernels are fused")
    separate_projections: bool = Field(False, description="The query, key and value projections, and a gated MLP's gate and "
                                       "up projections, are separate linear layers on one input (torchtitan's Llama wq, wk, wv and "
                                       "w1, w3; Hugging Face q/k/v_proj, gate/up_proj), not one fused GEMM each (Megatron linear_qkv, "
                                       "linear_fc1): each runs its own, narrower GEMM, and the backward sums their input gradients "
                                       "(autopar.cost.layer.input_gradient_sum_bytes)")
    zero3_gather: Literal["layer", "module"] = Field("layer", description="layer | module: what one ZeRO-3 AllGather fetches. "
                                                     "layer: a wrapped transformer block's flat parameters (FSDP1 FlatParameter, "
                                                     "FSDP2 fully_shard per block, Megatron-FSDP's per-layer buckets). module: the "
                                                     "parameters of one sub-module as its forward or backward hook fetches them "
                                                     "(DeepSpeed ZeRO-3: one collective per linear module, so a layer's gather is "
                                                     "several smaller collectives, each paying the ring's latency)")
    zero3_reduce_bucket_elements: int | None = Field(None, gt=0, description="Gradient elements one ZeRO-3 ReduceScatter carries "
                                                     "(DeepSpeed reduce_bucket_size); null = one per layer")
    zero3_live_elements: int | None = Field(None, gt=0, description="Gathered ZeRO-3 parameter elements the prefetcher keeps "
                                            "live (DeepSpeed stage3_max_live_parameters); null = the layer in hand and the "
                                            "prefetched next one")
    logits_bytes_per_element: float = Field(6.0, gt=0, description="Bytes per logit element live at the loss on the last "
                                            "stage. 6: the bf16 logits and the fp32 copy the cross-entropy computes on. 4: the "
                                            "bf16 logits and their bf16 gradient, from a fused cross-entropy kernel that reads "
                                            "bf16 and keeps no fp32 copy (flash-attn's xentropy, MPT's default loss_fn)")
    expert_gemm_launches: Literal["per_expert", "grouped"] = Field("per_expert", description="per_expert | grouped: how a "
                                                                    "MoE layer's expert GEMMs are submitted. per_expert: one "
                                                                    "cuBLAS GEMM per local expert (Transformer Engine GroupedLinear, "
                                                                    "multi_stream_cublas_gemm), each costing host time "
                                                                    "(moe.host_expert_forward_seconds); grouped: one kernel for all "
                                                                    "of them (torch._grouped_mm)")
    grads_in_reduce_dtype: bool = Field(False, description="The gradient buffer holds each gradient in the data-parallel "
                                        "reduction's dtype, so an fp32 reduction keeps 4-byte gradients (Megatron-Core DDP: one "
                                        "buffer, grad_dtype fp32 if grad_reduce_in_fp32 else the parameter's; Megatron-LM's --bf16 "
                                        "reduces in fp32 unless --grad-reduce-in-bf16). False: the bf16 gradient of the 16-byte "
                                        "convention (seed 000), whose fp32 copy the optimizer's 12 bytes hold")
    sources: dict[str, str] = Field(default_factory=dict, description="Where each choice comes from")

    @property
    def torch_context_parallel(self) -> bool:
        return self.context_parallel == "torch_allgather"

    def kernel(self, architecture: str) -> str:
        return self.attention_kernel.get(architecture, "fa2")


@lru_cache(maxsize=8)
def load_stack(stack: Stack) -> StackSpec:
    files = preset_files("stacks")
    if stack.value not in files:
        raise InputError("stack", stack.value, f"no profiles/stacks/{stack.value}.yaml")
    try:
        return StackSpec.model_validate(read_mapping(files[stack.value], "stack"))
    except ValidationError as exc:
        raise InputError.from_validation(exc, f"stack {stack.value}") from None


def runs_expandable_segments(training: TrainingSpec) -> bool:
    """Whether the run's allocator uses expandable segments: what the training states
    (TrainingSpec.expandable_segments), else its stack's launcher default. The cost model counts no
    fragmentation slack then (autopar.cost.context.Batch.fragmentation), and every emitted launcher
    exports the setting (autopar.emit.common.allocator_export)."""
    stated = training.expandable_segments
    return load_stack(training.stack).expandable_segments if stated is None else stated
