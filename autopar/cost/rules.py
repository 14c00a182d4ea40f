"""Structural rules a plan must satisfy before it can be costed (docs/design.md 'The plan space';
docs/reference/launchers.md 1.4 for Megatron-LM's own checks). Each rule is written once,
over PlanTable columns: the search filters whole spaces with it, and a single plan gets the
rule's message naming the field, its value and the rule."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

import numpy as np

from autopar.cost.table import ALLGATHER, ALLTOALL, CP_ALGO, PlanTable, SCHEDULE, has_module, layout_groups
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import CpAlgo, Plan, RecomputeModule, Schedule
from autopar.specs.training import TrainingSpec
from autopar.errors import InputError

# the overlapped EP exchange exists for these dispatchers only (no framework overlaps the allgather one)
OVERLAP_DISPATCHERS_RULE = ("overlaps the expert-parallel AllToAll: needs the alltoall or deepep dispatcher (Megatron-Core "
                            "TransformerConfig: 'overlap_moe_expert_parallel_comm is supported with alltoall/flex token dispatcher'; "
                            "DeepSpeed and torchtitan do not overlap it)")

ULYSSES = CP_ALGO.index(CpAlgo.ulysses)
HYBRID = CP_ALGO.index(CpAlgo.hybrid)


def hybrid_a2a_size(cp: int, tp: int, gpus_per_node: int) -> int:
    """Hybrid CP's Ulysses (a2a) part inside the node, ring (p2p) across nodes: the largest divisor
    of cp whose tp x a2a ranks fit in one node (Megatron hierarchical_context_parallel_sizes)."""
    return max(d for d in range(1, cp + 1) if cp % d == 0 and tp * d <= max(gpus_per_node, tp))


def ulysses_degree(c: ClusterSpec, t: PlanTable) -> np.ndarray:
    """Ranks each plan's CP AllToAll spans: cp for Ulysses, hybrid_a2a_size for hybrid, 1 for ring."""
    out = np.where(t.cp_algo == ULYSSES, t.cp, 1).astype(np.int64)
    hybrid = (t.cp_algo == HYBRID) & (t.cp > 1)
    if np.any(hybrid):  # per distinct (cp, tp): the search space holds few
        pairs, inverse = np.unique(np.stack([t.cp[hybrid], t.tp[hybrid]]), axis=1, return_inverse=True)
        a2a = [hybrid_a2a_size(cp, tp, c.gpus_per_node) for cp, tp in pairs.T.tolist()]
        out[hybrid] = np.asarray(a2a, dtype=np.int64)[inverse.reshape(-1)]
    return out


def _ulysses_heads_broken(m: ModelSpec, c: ClusterSpec, t: PlanTable) -> np.ndarray:
    """The AllToAll trades sequence shards for head shards of the heads this TP rank holds: its
    query heads (heads / tp) and its KV heads (kv / tp, one replicated head when tp > kv) must
    split evenly over the a2a ranks (Transformer Engine's a2a CP asserts it on the K heads:
    'number of attention heads needs to be divisible by CP size')."""
    a2a = ulysses_degree(c, t)
    q = m.num_attention_heads // t.tp
    kv = np.maximum(m.kv_heads // t.tp, 1)
    return (a2a > 1) & ((q % a2a != 0) | (kv % a2a != 0))
INTERLEAVED = SCHEDULE.index(Schedule.interleaved)
ZERO_BUBBLE = SCHEDULE.index(Schedule.zero_bubble)
DUALPIPEV = SCHEDULE.index(Schedule.dualpipev)


@dataclass(frozen=True)
class Rule:
    field: str
    column: str
    broken: Callable[[ModelSpec, ClusterSpec, TrainingSpec, PlanTable], np.ndarray]
    message: Callable[[ModelSpec, TrainingSpec, dict], str]


def _layout_broken(model: ModelSpec, tab: PlanTable) -> np.ndarray:
    """The plan's pipeline layout holds the model's layers (any vpp; autopar.specs.layout)."""
    out = np.zeros(len(tab), dtype=bool)
    for rows, layout in layout_groups(tab, model):
        out[rows] = isinstance(layout, str)
    return out


def _layout_message(model: ModelSpec, row: dict) -> str:
    one = PlanTable(**{k: np.asarray([v]) for k, v in row.items()})
    found = layout_groups(one, model)[0][1]
    return found if isinstance(found, str) else "layout is legal"


def recurrent_split_counts(model: ModelSpec) -> dict[str, int]:
    """What Megatron-Core splits across TP and then, for the recurrence, across CP in the
    model's recurrent mixers: Gated DeltaNet's key heads (the value heads go with them;
    megatron/core/ssm/gated_delta_net, a2a_cp_to_hp), Mamba-2's heads and B/C groups (MambaMixer
    asserts nheads % tp and ngroups % tp; mamba_context_parallel.py the local ones % cp)."""
    out = {}
    if model.linear_attention is not None:
        out["linear_attention.num_key_heads"] = model.linear_attention.num_key_heads
    if model.mamba is not None:
        out.update({"mamba.num_heads": model.mamba.num_heads, "mamba.num_groups": model.mamba.num_groups})
    return out


def _recurrent_split_broken(model: ModelSpec, tab: PlanTable) -> np.ndarray:
    broken = np.zeros(len(tab), dtype=bool)
    for count in recurrent_split_counts(model).values():
        broken |= count % (tab.tp * tab.cp) != 0
    return broken


def _microbatches(training: TrainingSpec, tab: PlanTable) -> np.ndarray:
    return training.global_batch_size // (tab.dp * tab.mbs)


RULES: list[Rule] = [
    Rule("plan.tp", "tp", lambda m, c, tr, t: m.num_attention_heads % t.tp != 0,
         lambda m, tr, r: f"must divide num_attention_heads={m.num_attention_heads}"),
    Rule("plan.tp", "tp", lambda m, c, tr, t: (m.mla is None) & (m.kv_heads % t.tp != 0) & (t.tp % m.kv_heads != 0),
         lambda m, tr, r: f"num_kv_heads={m.kv_heads} and tp must divide one another"),
    Rule("plan.tp", "tp", lambda m, c, tr, t: _recurrent_split_broken(m, t),
         lambda m, tr, r: f"tp*cp={r['tp'] * r['cp']} must divide "
                          + " and ".join(f"{k}={v}" for k, v in recurrent_split_counts(m).items())
                          + " (a recurrent mixer's heads are split across TP and, for the recurrence, CP)"),
    Rule("plan.tp", "tp", lambda m, c, tr, t: m.ffn_hidden_size % t.tp != 0,
         lambda m, tr, r: f"must divide ffn_hidden_size={m.ffn_hidden_size}"),
    Rule("plan.cp", "cp", lambda m, c, tr, t: (t.cp > 1) & (tr.seq_len % (2 * t.cp) != 0),
         lambda m, tr, r: f"seq_len={tr.seq_len} must divide by 2*cp (causal load balance)"),
    Rule("plan.cp", "cp", lambda m, c, tr, t: _ulysses_heads_broken(m, c, t),
         lambda m, tr, r: f"{CP_ALGO[r['cp_algo']].value} CP splits each TP rank's heads (num_attention_heads={m.num_attention_heads}, "
                          f"num_kv_heads={m.kv_heads} over tp={r['tp']}) across its all-to-all ranks, which must divide both"),
    Rule("plan.sp", "sp", lambda m, c, tr, t: (t.sp == 1) & ((tr.seq_len // t.cp) % t.tp != 0),
         lambda m, tr, r: f"seq_len/cp={tr.seq_len // r['cp']} must divide by tp={r['tp']}"),
    Rule("plan.ep", "ep", lambda m, c, tr, t: (not m.is_moe) & ((t.ep > 1) | (t.etp != t.tp)),
         lambda m, tr, r: "expert parallelism needs a MoE model (num_experts > 0)"),
    Rule("plan.ep", "ep", lambda m, c, tr, t: m.is_moe & (max(m.num_experts, 1) % t.ep != 0),
         lambda m, tr, r: f"must divide num_experts={m.num_experts}"),
    Rule("plan.ep", "ep", lambda m, c, tr, t: m.is_moe & ((t.dp * t.cp * t.tp) % (t.ep * t.etp) != 0),
         lambda m, tr, r: f"ep*etp={r['ep'] * r['etp']} must divide dp*cp*tp={r['dp'] * r['cp'] * r['tp']} (experts borrow data-parallel ranks)"),
    # what search's check_fixed refuses for a --fix, refused for a given plan too (estimate, --reference)
    Rule("plan.dispatcher", "dispatcher", lambda m, c, tr, t: (t.dispatcher != ALLTOALL) & ((not m.is_moe) | (t.ep == 1)),
         lambda m, tr, r: "dispatches tokens across expert-parallel ranks: needs a MoE model and ep > 1"),
    Rule("plan.ep_overlap", "ep_overlap", lambda m, c, tr, t: (t.ep_overlap == 1) & ((not m.is_moe) | (t.ep == 1)),
         lambda m, tr, r: "overlaps expert-parallel communication: needs a MoE model and ep > 1"),
    Rule("plan.ep_overlap", "ep_overlap", lambda m, c, tr, t: (t.ep_overlap == 1) & (t.dispatcher == ALLGATHER),
         lambda m, tr, r: OVERLAP_DISPATCHERS_RULE + ", not allgather"),
    Rule("plan.etp", "etp", lambda m, c, tr, t: m.is_moe & ((m.moe_ffn_hidden_size or 1) % t.etp != 0),
         lambda m, tr, r: f"must divide moe_ffn_hidden_size={m.moe_ffn_hidden_size}"),
    Rule("plan.pp", "pp", lambda m, c, tr, t: t.pp * t.vpp > m.num_layers + 2 + m.mtp_num_layers,
         lambda m, tr, r: f"pp*vpp={r['pp'] * r['vpp']} virtual stages exceed num_layers={m.num_layers} + embedding + loss"),
    Rule("plan.layout", "pp", lambda m, c, tr, t: _layout_broken(m, t),
         lambda m, tr, r: _layout_message(m, r)),
    Rule("plan.mbs", "mbs", lambda m, c, tr, t: tr.global_batch_size % (t.dp * t.mbs) != 0,
         lambda m, tr, r: f"global_batch_size={tr.global_batch_size} must divide by dp({r['dp']}) * mbs({r['mbs']})"),
    Rule("plan.vpp", "vpp", lambda m, c, tr, t: (t.schedule == INTERLEAVED) & ((_microbatches(tr, t) % t.pp != 0) | (_microbatches(tr, t) < t.pp)),
         lambda m, tr, r: f"interleaved schedule needs micro-batches({tr.global_batch_size // (r['dp'] * r['mbs'])}) % pp({r['pp']}) == 0 and >= pp"),
    Rule("plan.schedule", "schedule", lambda m, c, tr, t: (t.schedule == ZERO_BUBBLE) & (_microbatches(tr, t) < 2 * t.pp),
         lambda m, tr, r: f"zero-bubble (ZB-H2) fills the bubble only with micro-batches({tr.global_batch_size // (r['dp'] * r['mbs'])}) >= 2 * pp({r['pp']})"),
    Rule("plan.schedule", "schedule", lambda m, c, tr, t: (t.schedule == DUALPIPEV) & (_microbatches(tr, t) < 2 * t.pp),
         lambda m, tr, r: f"dualpipev needs micro-batches({tr.global_batch_size // (r['dp'] * r['mbs'])}) >= 2 * pp({r['pp']}) "
                          "(DualPipe's dualpipev.py: num_chunks >= num_ranks * 2)"),
    Rule("plan.zero_shard_size", "shard", lambda m, c, tr, t: (t.shard > 0) & ((t.dp * t.cp) % np.maximum(t.shard, 1) != 0),
         lambda m, tr, r: f"must divide dp*cp={r['dp'] * r['cp']}"),
    Rule("plan.recompute_modules", "rc_modules", lambda m, c, tr, t: (m.mla is None) & has_module(t.rc_modules, RecomputeModule.mla_up_proj),
         lambda m, tr, r: "mla_up_proj needs multi-latent attention (the model has no mla; Megatron-Core: 'mla_up_proj' requires multi_latent_attention)"),
    Rule("plan.recompute_num_layers", "recompute_layers", lambda m, c, tr, t: (t.recompute_layers > 0) & (t.recompute != 2),
         lambda m, tr, r: "needs recompute=full"),
    Rule("plan.offload_num_layers", "offload_layers", lambda m, c, tr, t: t.offload_layers >= m.num_layers,
         lambda m, tr, r: f"must be less than the model's {m.num_layers} layers (Megatron-Core: 'CPU offloading can be done only "
                          f"for layers less than num_layers')"),
    Rule("precision", "tp", lambda m, c, tr, t: np.full(len(t), tr.precision.value not in ("bf16", "fp16") and not c.gpu.supports(tr.precision.value)),
         lambda m, tr, r: f"the GPU has no {tr.precision.value} tensor cores"),
]


def legal_mask(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, tab: PlanTable) -> np.ndarray:
    """True for the rows that break no rule (the product tp*cp*pp*dp = N is the caller's)."""
    ok = np.ones(len(tab), dtype=bool)
    for rule in RULES:
        ok &= ~np.asarray(rule.broken(model, cluster, training, tab), dtype=bool)
    return ok


def plan_violations(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, plan: Plan) -> list[tuple[str, object, str]]:
    """(field, value, rule) for every broken rule; empty when the plan can be built."""
    n = cluster.num_gpus
    try:  # the product rule lives with the Plan (it derives dp)
        plan.data_parallel(n)
    except InputError as exc:
        return [(exc.field, exc.value, exc.rule)]
    tab = PlanTable.from_plans([plan], n)
    row = {k: int(v[0]) for k, v in tab.columns().items()}
    out = []
    for rule in RULES:
        if bool(np.asarray(rule.broken(model, cluster, training, tab)).reshape(-1)[0]):
            value = getattr(plan, rule.field.split(".")[-1], None) if rule.field.startswith("plan.") else training.precision.value
            if isinstance(value, tuple):  # recompute_modules / offload_modules in their text form
                value = "+".join(getattr(v, "value", str(v)) for v in value)
            elif isinstance(value, Enum):  # schedule, cp_algo, ...: the plan text's word
                value = value.value
            elif isinstance(value, bool):  # ep_overlap, ...: as the plan text spells it
                value = "on" if value else "off"
            out.append((rule.field, row.get(rule.column) if value is None else value, rule.message(model, training, row)))
    return out
