"""Cost-model coefficients that are not hardware datasheet numbers: achieved efficiencies,
framework reserves. Defaults live in profiles/cost/defaults.yaml with their sources; a fitted
calibration profile (calibration issue) overrides them."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import ConfigDict, Field, ValidationError, model_validator

from autopar.errors import InputError
from autopar.specs._base import StrictModel
from autopar.specs._files import PROFILES_DIR, read_mapping

if TYPE_CHECKING:
    from autopar.specs.hardware import ClusterSpec, GpuSpec


class _Strict(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GemmParams(_Strict):
    """efficiency(M, N, K) = max_efficiency[arch][dtype] x tile_quantization x F / (F + half_flops)."""

    max_efficiency: dict[str, dict[str, float]] = Field(description="architecture -> dtype -> best achieved fraction of dense peak")
    half_saturation_flops: float = Field(gt=0, description="GEMM size (2MNK flops) at which efficiency is half its maximum")
    tile_m: int = Field(gt=0, description="Tile rows used for the quantization term")
    tile_n: int = Field(gt=0, description="Tile columns used for the quantization term")
    fp8_max_speedup: float = Field(gt=0, description="Cap on a low-precision GEMM's speedup over the next wider format: fp8 over bf16, fp4 over fp8 (scaling/casting overheads)")
    unaligned_efficiency: float = Field(1.0, gt=0, le=1, description="Factor when N or K (a row width; autopar.cost.gemm.aligned) is not a multiple of alignment_elements (1: no penalty; set by a calibration profile)")
    alignment_elements: int = Field(8, gt=0, description="Element alignment cuBLAS needs for its fastest kernels")
    fitted_architecture: str | None = Field(None, description="Architecture whose max_efficiency a calibration profile fitted (it outranks a part's MAMF)")


class TorchCpBytes(_Strict):
    """HBM bytes PyTorch's ring attention (torch/distributed/tensor/experimental/_attention.py)
    moves outside the attention kernel, as [per ring step after the first, once per call], per
    element of the local attention output (forward), query (backward) or K plus V (both)."""

    forward_output: tuple[float, float] = Field(description="_SDPAMerger: fp32 upcast and merge of each block's output; casts in and out")
    forward_kv: tuple[float, float] = Field(description="torch.cat of K and V into the exchange buffer at each step")
    backward_query: tuple[float, float] = Field(description="fp32 accumulation of dQ (partial steps: chunk + cat); zero init and cast back")
    backward_kv: tuple[float, float] = Field(description="fp32 accumulation of dK, dV, their cat into the exchange buffer, K, V cat; init and cast back")


class _RecurrentMixerBytes(_Strict):
    """What the recurrent mixers' kernels share: bf16 element size, the causal depthwise
    convolution before the recurrence and the gated RMSNorm after it."""

    element_bytes: float = Field(gt=0, description="Bytes per element of the kernels' bf16 tensors")
    conv_bytes: tuple[float, float] = Field(description="Causal depthwise convolution with its SiLU, per convolved channel")
    gated_norm_bytes: tuple[float, float] = Field(description="Gated RMSNorm of the output (reads it and the gate), per output element")


class LinearAttentionBytes(_RecurrentMixerBytes):
    """HBM traffic of a Gated DeltaNet layer's token mixer (flash-linear-attention's chunked
    kernels, fla/ops/gated_delta_rule/chunk.py, as Megatron-Core and HF Qwen3-Next call them):
    [forward, backward] elements read plus written per value head and token, in units of the key
    head width, the value head width and one chunk state's share (d_k d_v / chunk_tokens), plus
    the fp32 chunk matrix A (chunk_tokens per value head and token); and the element-wise
    kernels around them, bytes per element."""

    chunk_tokens: int = Field(gt=0, description="Tokens per chunk of the chunked delta rule (FLA chunk_size)")
    key_elements: tuple[float, float] = Field(description="Q, K, W and dK traffic per value head and token, in key-head widths")
    value_elements: tuple[float, float] = Field(description="V, U, the new V, the output and their gradients, in value-head widths")
    state_elements: tuple[float, float] = Field(description="Chunk states h (and dh) written and read, in d_k d_v / chunk_tokens")
    chunk_matrix_fp32: tuple[float, float] = Field(description="Writes and reads of the fp32 chunk matrix A, chunk_tokens elements each")
    l2norm_bytes: tuple[float, float] = Field(description="L2 normalisation of the queries and keys, per Q and K element")


class MambaBytes(_RecurrentMixerBytes):
    """HBM traffic of a Mamba-2 layer's mixer kernels (mamba_ssm ops/triton/ssd_combined.py and
    the causal convolution and gated norm around the scan, as Megatron-Core's MambaMixer runs
    them): [forward, backward] bf16 elements read plus written per head and token in units of
    the head width and of the state width, the chunk states (head_dim x state_dim per chunk)
    moved as fp32, in units of one state's share per token, and the fp32 C^T B chunk matrix
    (chunk_tokens elements per head and token); bytes per element of the kernels around them."""

    head_elements: tuple[float, float] = Field(description="x, z, the output and their gradients, in head widths")
    state_elements: tuple[float, float] = Field(description="B and C reads and their gradients, in state widths (per head)")
    chunk_state_fp32: tuple[float, float] = Field(description="Chunk states (and their gradients) written and read, fp32-equivalent passes")
    chunk_matrix_fp32: tuple[float, float] = Field(description="Passes over the fp32 C^T B chunk matrix, chunk_tokens elements each")


class AttentionLengthCurve(_Strict):
    """One fused attention kernel's measured TFLOP/s against the keys each call streams per query
    (a fixed total of tokens per call, so only the per-query loop length varies), without and with
    the causal mask. The causal backward is taken at the forward's causal / non-causal ratio."""

    keys: list[int] = Field(min_length=2, description="Keys per query of each measurement, ascending")
    forward: list[float] = Field(description="Forward TFLOP/s without a mask, one per keys value")
    forward_causal: list[float] = Field(description="Forward TFLOP/s with the causal mask (causal FLOPs counted)")
    backward: list[float] = Field(description="Backward TFLOP/s without a mask")

    @model_validator(mode="after")
    def _one_value_per_length(self) -> AttentionLengthCurve:
        for name in ("forward", "forward_causal", "backward"):
            values = getattr(self, name)
            if len(values) != len(self.keys) or min(values) <= 0:
                raise ValueError(f"{name}={values}: must hold one positive TFLOP/s per keys value ({len(self.keys)})")
        if sorted(set(self.keys)) != self.keys:
            raise ValueError(f"keys={self.keys}: must be strictly ascending")
        return self

    def relative(self, keys, causal: bool, reference: AttentionLengthCurve | None = None) -> tuple[np.ndarray, np.ndarray]:
        """[forward, backward] efficiency at `keys` relative to the longest non-causal
        measurement of `reference` (default this curve; AttentionParams.kernels holds that
        figure), interpolated in log keys and held flat beyond the measured range."""
        ref = reference or self
        x, at = np.log2(self.keys), np.log2(np.maximum(np.asarray(keys, dtype=float), 1.0))
        fwd = np.interp(at, x, self.forward) / ref.forward[-1]
        bwd = np.interp(at, x, self.backward) / ref.backward[-1]
        if causal:
            mask = np.interp(at, x, self.forward_causal) / np.interp(at, x, self.forward)
            fwd, bwd = fwd * mask, bwd * mask
        return fwd, bwd


def sm_key(compute_capability: float) -> str:
    """The key of one part family in a per-architecture table: compute capability 10.3 -> sm_103."""
    return f"sm_{round(compute_capability * 10)}"


class AttentionParams(_Strict):
    kernels: dict[str, dict[str, tuple[float, float]]] = Field(
        description="Fused attention kernel -> GPU architecture, or sm_<compute capability x 10> for one part family "
        "inside it (sm_103: Blackwell Ultra) -> [forward, backward] fraction of the bf16 dense peak")
    length_curves: dict[str, AttentionLengthCurve] = Field(
        description="Fused attention kernel -> its TFLOP/s against keys per query and the causal mask at head dim 128 (fa2's for a kernel without one)")
    head_dim_64_curves: dict[str, AttentionLengthCurve] = Field(
        description="The same measurements at head dim 64 (fa2's for a kernel without one)")
    head_dim_64_architectures: tuple[str, ...] = Field(
        description="GPU architectures whose matmul-to-exponential throughput makes a narrow head slower per FLOP")
    unfused_extra_bytes_per_score: float = Field(ge=0, description="HBM bytes moved per attention score element without flash kernels (fwd)")
    torch_cp_bytes: TorchCpBytes = Field(description="HBM bytes of PyTorch context_parallel's eager merge and accumulation kernels")
    linear_attention: LinearAttentionBytes = Field(description="HBM bytes of the Gated DeltaNet mixer's chunked kernels and the element-wise work around them")
    mamba: MambaBytes = Field(description="HBM bytes of the Mamba-2 mixer's SSD kernels and the element-wise work around them")

    def efficiency(self, kernel: str, architecture: str, compute_capability: float | None = None) -> tuple[float, float]:
        """[forward, backward] efficiency: the kernel's figure for the part's compute capability
        (sm_103), else for its architecture; a kernel without numbers for the architecture runs as FA2."""
        table = self.kernels.get(kernel) or self.kernels["fa2"]
        family = table.get(sm_key(compute_capability)) if compute_capability is not None else None
        if family:
            return tuple(family)
        return tuple(table.get(architecture) or self.kernels["fa2"].get(architecture) or self.kernels["fa2"]["hopper"])

    def relative(self, kernel: str, architecture: str, keys, causal: bool, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
        """[forward, backward] efficiency of `kernel` at `keys` and `head_dim` relative to its
        long-call head-dim-128 figure (AttentionParams.kernels): the head-dim-128 and 64 curves,
        interpolated in log2(head dim) between them and held flat outside [64, 128]; the
        head-dim-128 curves alone off head_dim_64_architectures."""
        wide = self.length_curves.get(kernel) or self.length_curves["fa2"]
        narrow = self.head_dim_64_curves.get(kernel) or self.head_dim_64_curves["fa2"]
        w = float(np.clip(np.log2(head_dim / 64.0), 0.0, 1.0)) if architecture in self.head_dim_64_architectures else 1.0
        (wf, wb), (nf, nb) = wide.relative(keys, causal), narrow.relative(keys, causal, reference=wide)
        return nf + w * (wf - nf), nb + w * (wb - nb)


class EagerExtraBytes(_Strict):
    """HBM bytes per element [forward, backward] that eager kernels move beyond fused ones."""

    norm: tuple[float, float] = Field(description="Per normalised element (h per token, two norms per layer)")
    rope: tuple[float, float] = Field(description="Per rotated element (query and key heads)")
    activation: tuple[float, float] = Field(description="Per activated MLP element (F per token, gated product)")
    attention_layout: tuple[float, float] = Field(description="Per attention-output element (transpose to contiguous)")
    clamped_glu: tuple[float, float] = Field(description="Per routed expert F element of a clamped GLU (gpt-oss) that "
                                             "Megatron-Core clamps and concatenates in eager kernels around its fused GLU")


class NcclParams(_Strict):
    """NCCL's own tuning model (src/graph/tuning.cc, NVIDIA/nccl @5067397): per algorithm and
    protocol base and hardware latencies, protocol bandwidth factors and caps, the tree
    correction by size. Lists are [LL, LL128, Simple]; latencies in microseconds."""

    base_latency_us: dict[str, list[float]] = Field(description="Algorithm -> fixed latency per protocol, us")
    hw_latency_us: dict[str, dict[str, list[float]]] = Field(description="Link (nvlink | pcie | net) -> algorithm -> latency per step per protocol, us")
    ll_max_busbw_gb_per_s_one_node: dict[str, float] = Field(description="Architecture -> LL protocol bus-bandwidth cap inside one node, GB/s")
    ll_max_busbw_gb_per_s_multi_node: list[float] = Field(min_length=2, max_length=2, description="LL cap on 2 nodes and on more (Intel hosts), GB/s")
    ring_ll_factor: float = Field(gt=0, le=1, description="Ring LL bus bandwidth / Simple (half the line carries flags)")
    ring_ll128_factor: float = Field(gt=0, le=1, description="Ring LL128 bus bandwidth / Simple (120 of 128 bytes carry data)")
    tree_ll_factor: float = Field(gt=0, le=1, description="Tree LL bus bandwidth / Simple")
    tree_ll128_factor_one_node: float = Field(gt=0, le=1, description="Tree LL128 / Simple inside one node")
    tree_ll128_factor_multi_node: float = Field(gt=0, le=1, description="Tree LL128 / Simple across nodes")
    pat_factor: float = Field(gt=0, le=1, description="PAT bus bandwidth / ring")
    collnet_hopper_factor: float = Field(gt=0, le=1, description="CollNet Direct bandwidth factor on Hopper and later")
    tree_correction: dict[str, list[float]] = Field(description="Protocol -> tree AllReduce bandwidth factor per power of two of size / 64 B (64 B .. 512 MB)")
    ring_plateau_factor: float = Field(ge=1, description="Multi-node ring Simple AllReduce latency factor once size / (channels x ranks) >= 64 B (Ampere+)")
    net_overhead_us: float = Field(ge=0, description="Network post overhead per ring step across nodes (x3 for Simple), us")
    pat_linear_us_per_rank: float = Field(ge=0, description="PAT latency per rank, us")
    pat_log_latency_divisor: float = Field(gt=0, description="PAT: network latency per log2(nodes) step divided by this")
    collnet_arity_us: float = Field(ge=0, description="CollNet Direct serialization latency per extra rank in a node, us")
    version: str = Field(pattern=r"^\d+\.\d+", description="NCCL release (major.minor) whose tuning model this is; a calibration profile may name an older one")
    v2_27_nvls_tree_net_latency_us: float = Field(ge=0, description="NCCL <= 2.27: network latency of an NVLS-tree step, us")
    v2_27_nvls_tree_algbw_ratio: float = Field(gt=0, le=1, description="NCCL <= 2.27: NVLS-tree algorithm / bus bandwidth (5/6)")
    channels: int = Field(gt=0, description="Ring/tree channels of a communicator (ring plateau threshold, tree pipeline)")
    graph_nic_fraction: float = Field(gt=0, le=1, description="Bandwidth NCCL's topology search assigns a NIC / its line rate (its speed array's step below it)")
    graph_channels: int = Field(gt=0, description="Channels of NCCL's tuning graph (its search finds one ring/tree per NIC; the communicator runs twice as many)")
    p2p_per_channel_net_gb_per_s: float = Field(gt=0, description="NCCL_P2P_PER_CHANNEL_NET_BW: what one channel of a send to another node moves, GB/s (NCCL >= 2.29 sizes a peer's channels by it)")
    p2p_per_batch: int = Field(gt=0, description="NCCL_MAX_DEV_WORK_P2P_PER_BATCH: peers one round of a channel serves (NCCL >= 2.29 halves a peer's channels until every rank fits one round)")
    p2p_net_channels_before_2_29: int = Field(gt=0, description="NCCL <= 2.28: channels of a send to another node before halving with scale ('start from 2 channels per NIC')")
    per_channel_max_busbw_gb_per_s: dict[str, dict[str, list[float]]] = Field(description="perChMax*Bws: kind (ring_ll128, tree, tree_ll128, nvls_tree) -> architecture -> [1 node, 2 nodes, more] bus bandwidth ceiling per graph channel, GB/s")
    tree_allreduce_factor: float = Field(gt=0, le=1, description="Tree AllReduce bus bandwidth / the links' in NCCL's estimate (busBw x .92)")
    # NCCL's chunking (src/enqueue.cc topoGetAlgoInfo, calcCollChunking; src/transport/nvls.cc)
    steps: int = Field(gt=0, description="NCCL_STEPS: buffer slots per connection; a step moves buffer_bytes / steps")
    buffer_bytes: list[int] = Field(min_length=3, max_length=3, description="Per-connection buffer per protocol [LL, LL128, Simple], bytes")
    max_threads: list[int] = Field(min_length=3, max_length=3, description="Threads per channel per protocol [LL, LL128, Simple]")
    thread_threshold_bytes: list[int] = Field(min_length=3, max_length=3, description="Bytes per thread below which NCCL drops a channel [LL, LL128, Simple]")
    ll128_chunk_rule: list[tuple[float, int]] = Field(description="Tree LL128: halve the chunk while size / (channels x chunk) < k x steps / ppn and chunk > floor, for each (k, floor_bytes)")
    nvls_channels: dict[str, int] = Field(description="Architecture -> NVLS channels (NVLS_NCHANNELS default)")
    nvls_chunk_bytes: int = Field(gt=0, description="NVLS chunk per channel and head, bytes (NCCL_NVLS_CHUNKSIZE)")
    nvls_tree_chunk_bytes_from_4_nodes: int = Field(gt=0, description="NVLS-tree chunk cap on 4 nodes or more, bytes (NVLSTREE_MAX_CHUNKSIZE default)")
    nvls_tree_chunk_rule: list[tuple[float, int]] = Field(description="NVLS-tree: chunk = floor when size < k x channels x heads x chunk and chunk > floor, for each (k, floor_bytes)")


class CommParams(_Strict):
    nvlink_efficiency: float = Field(gt=0, le=1, description="Achieved / peak NVLink bus bandwidth at large messages")
    pcie_efficiency: float = Field(gt=0, le=1, description="Achieved / peak PCIe bandwidth")
    network_efficiency: float = Field(gt=0, le=1, description="Achieved / peak NIC bandwidth at large messages")
    half_bandwidth_bytes: float = Field(gt=0, description="Collective message size at which achieved bus bandwidth is half its large-message value")
    p2p_half_bandwidth_bytes: float = Field(gt=0, description="Point-to-point message size at which achieved bandwidth is half its large-message value (inside a node without a calibration; one SendRecv pair across nodes)")
    net_p2p_half_bandwidth_bytes: float = Field(gt=0, description="AllToAll pairs across nodes: message size per pair at which achieved bandwidth is half its large-message value, bytes (SendRecv across nodes keeps p2p_half_bandwidth_bytes)")
    sharp_speedup: float = Field(ge=1, description="AllReduce bus-bandwidth gain with (NVLink or IB) SHARP")
    saturation_exponent: float = Field(1.0, gt=0, description="Ring-like algorithms (ring, tree, PAT): Simple transfer time x (1 + (half_bandwidth_bytes / size)^exponent)")
    switch_half_bandwidth_bytes: float = Field(gt=0, description="In-switch algorithms (NVLS, NVLS-tree, CollNet): size where the Simple transfer time doubles, bytes")
    switch_saturation_exponent: float = Field(gt=0, description="In-switch algorithms: saturation exponent")
    nvls_min_ranks: int = Field(gt=0, description="Smallest group in a node NCCL runs NVLS on")
    nccl: NcclParams = Field(description="NCCL's tuning-model constants (algorithm and protocol choice)")
    dp_overlap: float = Field(ge=0, le=1, description="Fraction of the last micro-batch's backward that can hide DP gradient reduction")
    tp_overlap: float = Field(ge=0, le=1, description="Fraction of TP/SP collective time hidden behind GEMMs when the plan overlaps them (tp_overlap)")
    userbuffers_sms: int = Field(ge=0, description="SMs Transformer Engine's pipelined and bulk TP-overlap kernels keep from the GEMMs they overlap")


class RowwiseCastBytes(_Strict):
    input: float = Field(ge=0, description="Activation (GEMM input), bytes per element")
    weight: float = Field(ge=0, description="Weight, bytes per element")
    grad_output: float = Field(ge=0, description="Output gradient, bytes per element")


class MemoryParams(_Strict):
    hbm_efficiency: float = Field(gt=0, le=1, description="Achieved / peak HBM bandwidth for element-wise kernels")
    elementwise_bytes_per_token_per_hidden: float = Field(ge=0, description="Forward HBM bytes per token per hidden unit of one layer's norms, residuals, activations (bf16)")
    eager_extra_bytes: EagerExtraBytes = Field(description="Eager-stack element-wise bytes beyond fused kernels")
    fsdp2_copy_out_bytes_per_element: float = Field(ge=0, description="FSDP2 all-gather copy-out, HBM bytes per unsharded element")
    rowwise_cast_bytes_per_element: RowwiseCastBytes = Field(description="FP8 rowwise recipe: HBM bytes of the casts per element of each GEMM operand")
    rowwise_forward_cast_bytes_per_element: RowwiseCastBytes = Field(description="FP8 rowwise recipe: the part of those bytes the forward moves (the rest runs in backward)")
    rowwise_rescale_bytes_per_element: float = Field(ge=0, description="FP8 rowwise recipe: HBM bytes per element of a backward GEMM output rescaled in its own pass")
    fsdp2_reduce_copy_in_bytes_per_element: float = Field(ge=0, description="FSDP2 reduce-scatter copy-in (cast to the reduce dtype), HBM bytes per unsharded element")
    low_precision_cast_bytes_per_element: float = Field(ge=0, description="HBM bytes per GEMM input element to cast bf16 to fp8/fp4 (read 2, write 1)")
    reserve_bytes: float = Field(ge=0, description="CUDA context, NCCL and allocator reserve per GPU, bytes")
    fragmentation: float = Field(ge=0, lt=1, description="Allocator fragmentation, fraction of allocated bytes")
    optimizer_bytes_moved_per_param: float = Field(ge=0, description="HBM bytes read+written per parameter by the Adam step")


class MoeParams(_Strict):
    expert_load_cv_aux_loss: float = Field(ge=0, description="Learned routing balanced by an auxiliary loss: coefficient of variation of the tokens per expert")
    expert_load_cv_expert_bias: float = Field(ge=0, description="Learned routing balanced by a per-expert score bias (auxiliary-loss-free): coefficient of variation of the tokens per expert")
    expert_load_cv_sequence: float = Field(default=0.0, ge=0, description="Router balanced over the global batch: coefficient of variation of the tokens per expert within one sequence (domain specialisation)")
    dispatch_sms: int = Field(gt=0, description="SMs the token dispatch and combine kernels hold while they run beside compute")
    host_layer_forward_seconds: float = Field(default=0.0, ge=0, description="Host time to issue one MoE layer's forward outside its experts (attention block, router, permutes, dispatch and combine)")
    host_expert_forward_seconds: float = Field(default=0.0, ge=0, description="Host time to issue one local expert's forward GEMMs (one cuBLAS call each, TE GroupedLinear)")


class CostParams(_Strict):
    gemm: GemmParams
    attention: AttentionParams
    comm: CommParams
    memory: MemoryParams
    moe: MoeParams
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


class CommCalibration(_Strict):
    """Physical parameters of the collective model (autopar/cost/nccl.py) fitted from nccl-tests
    logs (calibration/nccl_physfit.py); a null field keeps the default (cluster file and
    profiles/cost/defaults.yaml)."""

    intra_busbw_gb_per_s: float | None = Field(None, gt=0, description="Ring (Simple) bus bandwidth inside one node at large sizes, GB/s")
    nvls_speedup: float | None = Field(None, ge=1, description="NVLS AllReduce bus bandwidth over ring inside a node")
    network_efficiency: float | None = Field(None, gt=0, le=1.25, description="Achieved / peak NIC bandwidth of multi-node ring-like algorithms")
    collnet_speedup: float | None = Field(None, ge=1, description="IB SHARP (CollNet) AllReduce network gain over ring")
    nccl_version: str | None = Field(None, pattern=r"^\d+\.\d+", description="NCCL release the logs ran (major.minor[.patch]); its tuning model picks the algorithms")
    intra_latency_scale: float | None = Field(None, gt=0, description="Factor on NCCL's NVLink/PCIe step latencies of LL and LL128")
    net_latency_scale: float | None = Field(None, gt=0, description="Factor on NCCL's network step latencies of LL and LL128")
    intra_simple_latency_scale: float | None = Field(None, gt=0, description="Factor on NCCL's NVLink/PCIe step latencies of Simple")
    net_simple_latency_scale: float | None = Field(None, gt=0, description="Factor on NCCL's network step latencies of Simple")
    ring_half_bandwidth_bytes: float | None = Field(None, gt=0, description="Ring, tree, PAT: size where the Simple transfer time doubles, bytes")
    ring_saturation_exponent: float | None = Field(None, gt=0, description="Ring, tree, PAT: saturation exponent")
    switch_half_bandwidth_bytes: float | None = Field(None, gt=0, description="NVLS, NVLS-tree, CollNet: size where the Simple transfer time doubles, bytes")
    switch_saturation_exponent: float | None = Field(None, gt=0, description="NVLS, NVLS-tree, CollNet: saturation exponent")
    intra_p2p_busbw_gb_per_s: float | None = Field(None, gt=0, description="Point-to-point sends inside a node (AllToAll) at large sizes: bus bandwidth per GPU, GB/s (nccl-tests all_to_all busbw)")
    intra_p2p_half_bandwidth_bytes: float | None = Field(None, gt=0, description="Point-to-point sends inside a node (AllToAll pairs, SendRecv): message size per pair where achieved bandwidth is half its large-message value, bytes")
    net_p2p_half_bandwidth_bytes: float | None = Field(None, gt=0, description="AllToAll pairs across nodes: message size per pair where achieved bandwidth is half its large-message value, bytes")
    not_identified: dict[str, str] = Field(default_factory=dict, description="Parameter -> why the logs could not tell it (default kept)")
    num_observations: int = Field(0, ge=0, description="Printed times fitted")
    median_error: float | None = Field(None, ge=0, description="Median |predicted / measured - 1| over the fitted times of sizes >= 1 MiB")
    max_error: float | None = Field(None, ge=0, description="Largest |predicted / measured - 1| over the fitted times of sizes >= 1 MiB")
    sources: list[str] = Field(default_factory=list, description="Logs fitted (with forced algorithm/protocol when given)")


class GemmCalibration(_Strict):
    """Fitted efficiency(M, N, K, dtype) = max_efficiency[dtype] x tile_quantization x F / (F + half)
    x (unaligned_efficiency when N or K is not a multiple of alignment_elements)."""

    gpu: str | None = Field(None, description="GPU profile the efficiencies are relative to (null: CPU or unknown device)")
    architecture: str | None = Field(None, description="Architecture key of max_efficiency the fit replaces")
    max_efficiency: dict[str, float] = Field(description="dtype -> best achieved fraction of the dense peak")
    half_saturation_flops: float = Field(gt=0, description="GEMM size (2MNK flops) at which efficiency is half its maximum")
    tile_m: int = Field(128, gt=0, description="Tile rows of the quantization term")
    tile_n: int = Field(128, gt=0, description="Tile columns of the quantization term")
    unaligned_efficiency: float = Field(1.0, gt=0, le=1, description="Factor when N or K (a row width; autopar.cost.gemm.aligned) is not a multiple of alignment_elements")
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
    algorithm: str = Field(description="ring, nvls when busbw exceeds the NVLink rate, p2p for all_to_all / send_recv, or the one the run forced")
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
                                   "alignment_elements": fit.alignment_elements, "fitted_architecture": fit.architecture})


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
    with the cluster's calibration profile applied when it names one (measured on its kind of GPU)."""
    base = base if base is not None else load_cost_params()
    if not cluster.calibration:
        return base
    profile = load_calibration_profile(cluster.calibration)
    check_profile_gpu(profile, cluster.gpu, "calibration", cluster.calibration, f"cluster {cluster.name} runs")
    check_profile_node(profile, cluster, "calibration", cluster.calibration)
    return with_calibration(base, profile)


def gpu_kind(gpu: "GpuSpec") -> tuple[str, float | None]:
    """What a calibration carries over between GPUs: the architecture (GEMM efficiencies are per
    architecture, NCCL's tuning tables per generation) and the NVLink rate (the fitted link
    bandwidths). Not the name: dgx-a100 (A100-80GB) is costed with a100-roce, fitted on A100-40GB
    nodes of the same NVLink3 300 GB/s (autopar.validation.rows drops a preset's calibration on
    the same rule when a row's part has narrower NVLink, A800 in a DGX A100)."""
    return gpu.architecture, gpu.nvlink_gb_per_s


def describe_gpu_kind(gpu: "GpuSpec") -> str:
    nvlink = f"NVLink {gpu.nvlink_gb_per_s:g} GB/s" if gpu.nvlink_gb_per_s else "no NVLink"
    return f"{gpu.name}: {gpu.architecture}, {nvlink}"


def check_profile_gpu(profile: CalibrationProfile | None, gpu: "GpuSpec | str | None", field: str, value: object, against: str) -> None:
    """Refuse a profile measured on another kind of GPU (gpu_kind); a profile without a GPU, or
    with a GPU no preset knows, cannot be compared and passes. `gpu` may be a preset name (the GPU
    of calibrate's measurements): none, or one no preset knows, passes too; so does no profile."""
    if profile is None:
        return
    if gpu is None or isinstance(gpu, str):
        gpu = _preset_gpu(gpu)
    measured = _preset_gpu(profile.gpu)
    if gpu is None or measured is None:
        return
    if gpu_kind(measured) != gpu_kind(gpu):
        raise InputError(field, value, f"profile {profile.name} was measured on {describe_gpu_kind(measured)}; {against} "
                         f"{describe_gpu_kind(gpu)}. A profile carries over only within one architecture and NVLink rate")


def check_profile_node(profile: CalibrationProfile, cluster: "ClusterSpec", field: str, value: object) -> None:
    """Refuse a profile measured on nodes of another size: its node curves (ring, NVLS and AllToAll
    bandwidths) come from that node's links and switch, its network curves from that node's NICs
    -- h100-ib's eight H100 behind an NVSwitch on InfiniBand are not quad-gh200's four GH200 joined
    without one on Slingshot, though both are Hopper at NVLink 450 GB/s (check_profile_gpu). A
    profile that names no node size passes."""
    per_node = cluster.physical_gpus_per_node
    if profile.gpus_per_node is None or profile.gpus_per_node == per_node:
        return
    raise InputError(field, value, f"profile {profile.name} was measured on {profile.gpus_per_node}-GPU nodes ({profile.description}); "
                     f"cluster {cluster.name} has {per_node} GPUs per node. A profile carries over only between nodes of one size")


def _preset_gpu(name: str | None) -> "GpuSpec | None":
    """The GPU preset of a name; None for no name or one no preset knows (nothing to compare)."""
    from autopar.errors import ProfileNotFound
    from autopar.specs.hardware import load_gpu

    if name is None:
        return None
    try:
        return load_gpu(name)
    except ProfileNotFound:
        return None


CostParams.model_rebuild()
