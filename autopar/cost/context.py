"""Batch: the inputs of one cost evaluation (model, cluster, training, coefficients) and a
PlanTable of plans, with the derived columns every cost term shares. One plan is a batch of
one; the search passes whole plan spaces."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from autopar.cost.comm import Collective, Group, collective_seconds, place_group
from autopar.cost.table import ORDER, PlanTable, vmap
from autopar.errors import InputError
from autopar.specs.costparams import CostParams
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import RankOrder
from autopar.specs.stack import StackSpec, load_stack, runs_expandable_segments
from autopar.specs.training import TrainingSpec

PP_INNER = ORDER.index(RankOrder.tp_cp_ep_pp_dp)


@dataclass(frozen=True)
class Batch:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    params: CostParams
    tab: PlanTable

    # ---- derived columns -------------------------------------------------------------
    @cached_property
    def tokens(self) -> np.ndarray:
        """T: tokens of one micro-batch held by one GPU (sequence split over cp)."""
        return self.tab.mbs * self.training.seq_len / self.tab.cp

    @cached_property
    def sp_divisor(self) -> np.ndarray:
        """Divisor of the tensors TP replicates unless sequence parallel is on."""
        return np.where(self.tab.sp == 1, self.tab.tp, 1)

    @cached_property
    def microbatches(self) -> np.ndarray:
        return self.training.global_batch_size // (self.tab.dp * self.tab.mbs)

    @cached_property
    def ep_unpaired(self) -> np.ndarray:
        """Share of a stage's micro-batch passes whose EP AllToAll no other micro-batch's compute
        hides under ep_overlap (Megatron's combined 1F1B, megatron/core/pipeline_parallel/
        schedules.py get_pp_rank_microbatches and combined_1f1b.py): only the steady state pairs
        a forward with a backward. The warmup forwards, and as many cooldown backwards, run
        alone: (pp - rank - 1) x 2 + (vpp - 1) x pp + 1 of the m x vpp chunk passes (pp > 1
        needs vpp there), mean over ranks (pp - 1) + (vpp - 1) pp + 1; without pipelining the
        first forward and the last backward (1 of m). 0 without ep_overlap."""
        t = self.tab
        warmup = np.where(t.pp > 1, (t.pp - 1) + (t.vpp - 1) * t.pp + 1, 1)
        return np.where(t.ep_overlap == 1, np.minimum(1.0, warmup / (self.microbatches * t.vpp)), 0.0)

    @cached_property
    def zero_shard(self) -> np.ndarray:
        """Ranks that shard dense ZeRO state (Megatron shards over dp*cp)."""
        return np.where(self.tab.shard > 0, self.tab.shard, self.tab.dp * self.tab.cp)

    @cached_property
    def expert_dp(self) -> np.ndarray:
        t = self.tab
        return np.maximum(1, t.dp * t.cp * t.tp // (t.ep * t.etp))

    @cached_property
    def stack(self) -> StackSpec:
        """The mechanisms of the training's software stack (profiles/stacks)."""
        return load_stack(self.training.stack)

    @cached_property
    def fragmentation(self) -> float:
        """Allocator slack, a fraction of allocated bytes: memory.fragmentation for PyTorch's caching
        allocator with fixed segments; none with expandable segments (TrainingSpec.expandable_segments,
        else the stack's launcher default), whose free pages are remapped where they are needed."""
        return 0.0 if runs_expandable_segments(self.training) else self.params.memory.fragmentation

    @cached_property
    def sac_reruns_attention(self) -> bool:
        """Per-op SAC runs the attention forward again in backward: its save list lacks the
        kernel the stack runs on this GPU (TrainingSpec.sac_saves_cudnn_attention: torchtitan
        before PR #2095 saved the flash and efficient SDPA outputs, not cuDNN's, which it runs
        first on Blackwell)."""
        tr = self.training
        return (self.stack.selective_recompute == "per_op" and tr.flash_attention and not tr.sac_saves_cudnn_attention
                and self.attention_kernel == "cudnn")

    @cached_property
    def attention_kernel(self) -> str:
        """The fused attention kernel that runs: the training's stated one (TrainingSpec.attention_kernel),
        else the stack's for this GPU's architecture."""
        stated = self.training.attention_kernel
        return stated.value if stated is not None else self.stack.kernel(self.cluster.gpu.architecture)

    @property
    def wgrad(self) -> float:
        """Weight-gradient GEMMs per forward GEMM: 1, or 0 with frozen weights (LoRA)."""
        return 0.0 if self.training.frozen_weights else 1.0

    def hbm_seconds(self, num_bytes):
        return num_bytes / (self.cluster.gpu.hbm_bytes_per_second * self.params.memory.hbm_efficiency)

    def host_link_seconds(self, num_bytes):
        """Seconds to move bytes one way over the GPU's host link (PCIe, or NVLink-C2C on Grace parts)."""
        gbps = self.cluster.gpu.pcie_gb_per_s
        if gbps is None:
            raise InputError("gpu.pcie_gb_per_s", None, "activation offloading needs the GPU's host-link bandwidth")
        return num_bytes / (gbps * 1e9)

    # ---- group placement by rank order -----------------------------------------------
    @cached_property
    def _strides(self) -> dict[str, np.ndarray]:
        t = self.tab
        pp_inner = t.order == PP_INNER
        return {
            "tp": np.ones_like(t.tp), "cp": t.tp,
            "dp": np.where(pp_inner, t.tp * t.cp * t.pp, t.tp * t.cp),
            "pp": np.where(pp_inner, t.tp * t.cp, t.tp * t.cp * t.dp),
        }

    def group(self, dim: str) -> Group:
        """Placement of the tp | cp | dp | pp | dpcp | ep | etp | edp groups of every plan."""
        t, gpn = self.tab, self.cluster.gpus_per_node
        if dim == "dpcp":  # gradient reduction spans dp x cp (cp sits next to tp)
            inner, outer = place_group(t.cp, t.tp, gpn), place_group(t.dp, self._strides["dp"], gpn)
            size = t.cp * t.dp
            per_node = np.minimum(size, inner.per_node * np.where(inner.nodes == 1, outer.per_node, 1))
            return Group(size, per_node, -(-size // per_node))
        if dim == "zero":  # ZeRO-3 shard group: dp*cp, or an explicit HSDP shard of consecutive dp ranks
            full, hsdp = self.group("dpcp"), place_group(np.maximum(t.shard, 1), self._strides["dp"], gpn)
            explicit = t.shard > 0
            return Group(np.where(explicit, hsdp.size, full.size), np.where(explicit, hsdp.per_node, full.per_node),
                         np.where(explicit, hsdp.nodes, full.nodes))
        if dim == "ep":  # Megatron expert grid: etp - ep - edp - pp
            return place_group(t.ep, t.etp, gpn)
        if dim == "etp":
            return place_group(t.etp, np.ones_like(t.etp), gpn)
        if dim == "edp":
            return place_group(self.expert_dp, t.etp * t.ep, gpn)
        sizes = {"tp": t.tp, "cp": t.cp, "dp": t.dp, "pp": t.pp}
        return place_group(sizes[dim], self._strides[dim], gpn)

    def collective(self, op: Collective, message_bytes, group: Group) -> np.ndarray:
        """Seconds of one collective per plan (message may be per plan or per plan x stage)."""
        fn = lambda msg, size, per_node, nodes: collective_seconds(  # noqa: E731
            op, msg, Group(int(size), int(per_node), int(nodes)), self.cluster, self.params)
        message = np.asarray(message_bytes, dtype=np.float64)
        extra = (slice(None),) + (None,) * (message.ndim - 1) if message.ndim > 1 else slice(None)
        return vmap(fn, message, group.size[extra], group.per_node[extra], group.nodes[extra])

    def neighbour(self, group: Group) -> Group:
        """The pair of ranks one hop apart in a ring or pipeline group."""
        on_node = group.nodes == 1
        return Group(np.full_like(group.size, 2), np.where(on_node, 2, 1), np.where(on_node, 1, 2))


def sac_reruns_sdpa(batch: Batch, index: int) -> bool:
    """Batch.sac_reruns_attention for layer `index`: only a softmax-attention layer calls SDPA
    (linear attention and Mamba layers run their own kernels)."""
    return batch.sac_reruns_attention and batch.model.has_softmax_attention(index)
