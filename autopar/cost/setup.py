"""Derived quantities every cost term shares (computed once per plan)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from autopar.errors import InputError
from autopar.specs.costparams import CostParams
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan, RankOrder, Schedule
from autopar.specs.training import TrainingSpec
from autopar.cost.comm import Group, place_group
from autopar.cost.rules import plan_violations


@dataclass(frozen=True)
class Setup:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    plan: Plan
    params: CostParams

    @classmethod
    def build(cls, model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, plan: Plan, params: CostParams) -> "Setup":
        broken = plan_violations(model, cluster, training, plan)
        if broken:
            field, value, rule = broken[0]
            raise InputError(field, value, rule)
        return cls(model, cluster, training, plan, params)

    # ---- degrees ---------------------------------------------------------------------
    @cached_property
    def dp(self) -> int:
        return self.plan.data_parallel(self.cluster.num_gpus)

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @cached_property
    def num_microbatches(self) -> int:
        return self.training.global_batch_size // (self.dp * self.plan.mbs)

    @property
    def schedule(self) -> Schedule:
        return self.plan.pipeline_schedule

    @cached_property
    def tokens_per_microbatch(self) -> float:
        """T: tokens of one micro-batch held by one GPU (sequence split over cp)."""
        return self.plan.mbs * self.training.seq_len / self.plan.cp

    @property
    def sp_divisor(self) -> int:
        """Divisor of the tensors TP replicates unless sequence parallel is on."""
        return self.plan.tp if self.plan.sequence_parallel else 1

    @cached_property
    def stage_layers(self) -> list[int]:
        return self.plan.layers_per_stage(self.model.num_layers)

    @cached_property
    def stage_layer_indices(self) -> list[range]:
        out, start = [], 0
        for count in self.stage_layers:
            out.append(range(start, start + count))
            start += count
        return out

    @property
    def zero_shard(self) -> int:
        """Ranks that shard dense optimizer state (Megatron shards over dp*cp)."""
        return self.plan.zero_shard_size or self.dp * self.plan.cp

    @property
    def expert_dp(self) -> int:
        return max(1, self.dp * self.plan.cp * self.plan.tp // (self.plan.ep * self.plan.expert_tp))

    # ---- group placement (rank order) ----------------------------------------------
    def _stride(self, dim: str) -> int:
        p = self.plan
        sizes = {"tp": p.tp, "cp": p.cp, "dp": self.dp, "pp": p.pp}
        order = ["tp", "cp", "dp", "pp"] if p.order == RankOrder.tp_cp_ep_dp_pp else ["tp", "cp", "pp", "dp"]
        stride = 1
        for d in order:
            if d == dim:
                return stride
            stride *= sizes[d]
        raise KeyError(dim)

    def group(self, dim: str) -> Group:
        """Placement of a tp | cp | dp | pp | dpcp | ep | edp group."""
        p, gpn = self.plan, self.cluster.gpus_per_node
        if dim == "dpcp":  # gradient reduction spans dp x cp (cp is adjacent to tp)
            if p.cp == 1:
                return self.group("dp")
            inner = place_group(p.cp, p.tp, gpn)
            outer = place_group(self.dp, self._stride("dp"), gpn)
            size = p.cp * self.dp
            per_node = inner.per_node * (outer.per_node if inner.nodes == 1 else 1)
            return Group(size, min(size, per_node), -(-size // min(size, per_node)))
        if dim == "ep":  # Megatron expert grid: etp - ep - edp - pp
            return place_group(p.ep, p.expert_tp, gpn)
        if dim == "edp":
            return place_group(self.expert_dp, p.expert_tp * p.ep, gpn)
        sizes = {"tp": p.tp, "cp": p.cp, "dp": self.dp, "pp": p.pp}
        return place_group(sizes[dim], self._stride(dim), gpn)
