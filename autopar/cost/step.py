"""One training step for every plan of a Batch (docs/design.md 'Step'; Narayanan et al. 2021
section 3; seed 000 'Гибридный параллелизм').

Step = pipeline(m x critical stage per-micro-batch time + fill/drain) + exposed DP
       + optimizer step + fixed overhead. Per-micro-batch stage time = GEMMs + attention
       + element-wise + recompute + exposed TP/CP/EP/PP/FSDP communication.
Stages are evaluated as a (plans x stages) matrix per pipeline layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autopar.cost.comm import Collective, overlapped_seconds
from autopar.cost.context import Batch
from autopar.cost.flops import activation_message_bytes, embedding_params, layer_params, layer_weight_modules, logits_gemm, mtp_module_params
from autopar.cost.layer import gemm_time, layer_parts
from autopar.cost.memory import (in_flight_microbatches, layer_activation_bytes, offloaded_bytes, offloaded_input_bytes,
                                 recomputed_input_bytes, saved_activation_bytes, stored_activation_bytes, torch_cp_buffer_bytes)
from autopar.cost.pipeline import pipeline_fill
from autopar.cost.table import GRAD_SYNC, NONE, RECOMPUTE_MODULES, has_module, interned, layout_groups, row_groups, selective_modules
from autopar.specs.plan import GradSync
from autopar.errors import InputError
from autopar.specs.layout import PipelineLayout

MICROBATCH_PARTS = ("compute_gemm", "compute_attention", "compute_elementwise", "recompute",
                    "tp_comm", "cp_comm", "ep_comm", "pp_comm", "fsdp_comm", "activation_offload", "host_launch")
STEP_PARTS = MICROBATCH_PARTS + ("pipeline_bubble", "dp_comm", "optimizer_step", "step_overhead")
# exposed data movement over a link: collectives, pipeline sends, host-link copies of offloaded activations
COMM_PARTS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "fsdp_comm", "dp_comm", "activation_offload")
STAGE_STEP_TERMS = ("dp_comm", "fsdp_step", "optimizer_step")  # step += max over stages of each
MEMORY_PARTS = ("weights", "gradients", "optimizer_states", "activations", "working_buffers", "fragmentation", "framework_reserve")
FULL = 2  # index of Recompute.full


@dataclass
class StepResult:
    """Per-plan results of a batch (arrays of one entry per plan)."""

    step_seconds: np.ndarray
    time: dict[str, np.ndarray]
    memory: dict[str, np.ndarray]
    memory_bytes: np.ndarray
    worst_stage: np.ndarray
    critical_stage: np.ndarray
    pipeline_seconds: np.ndarray
    hardware_flops: np.ndarray
    stage_layers: list[list[int]] = field(default_factory=list)
    # for composing other schedules / vpp without re-costing (solvers.cpsat): per plan, the
    # critical stage's per-micro-batch seconds and the other stages' sum; per plan x stage
    # (padded with 0 to the batch's largest pp) the memory that does not scale with in-flight
    # micro-batches and the activation bytes of one micro-batch
    stage_max_seconds: np.ndarray | None = None
    stage_rest_seconds: np.ndarray | None = None
    memory_fixed_stage: np.ndarray | None = None
    memory_per_microbatch_stage: np.ndarray | None = None
    pp_hop_seconds: np.ndarray | None = None  # one activation send between pipeline stages, per plan
    memory_stage_index: np.ndarray | None = None  # stage of each memory column (-1: padding)
    # per plan x stage (padded with 0 like memory_fixed_stage): per-micro-batch seconds, peak
    # memory bytes, fully recomputed layers, and each once-per-step term the step adds the
    # maximum over stages of (STAGE_STEP_TERMS; solvers.stages, Estimate.stages)
    stage_seconds: np.ndarray | None = None
    stage_memory_bytes: np.ndarray | None = None
    stage_recomputed_layers: np.ndarray | None = None
    stage_step_terms: dict[str, np.ndarray] = field(default_factory=dict)
    host_bytes: np.ndarray | None = None  # per plan: activations offloaded to host memory at their peak, bytes per GPU


def _layer_kinds(batch: Batch) -> list[int]:
    """A representative layer index of each kind present (ModelSpec.layer_kind: dense or MoE,
    global or local attention), in order of first appearance."""
    m = batch.model
    first: dict[tuple[bool, bool], int] = {}
    for i in range(m.num_layers):
        first.setdefault(m.layer_kind(i), i)
    return list(first.values())


def _stage_kind_counts(batch: Batch, layout: PipelineLayout, kinds: list[int]) -> np.ndarray:
    """(kinds x ranks) layer counts of a pipeline layout; an MTP module counts its blocks
    (ModelSpec.mtp_block_indices: one layer of the last layer's kind, or a hybrid model's MTP
    pattern) as layers of their kinds (its output layer is added apart)."""
    m = batch.model
    slot = {m.layer_kind(i): j for j, i in enumerate(kinds)}
    counts = np.zeros((len(kinds), layout.pp))
    for r, indices in enumerate(layout.rank_layer_indices()):
        for i in indices:
            counts[slot[m.layer_kind(i)], r] += 1
    for i in m.mtp_block_indices():
        counts[slot[m.layer_kind(i)]] += np.asarray(layout.rank_mtp(), dtype=float)
    return counts


# layer_parts' forward seconds ("rc_") and FLOPs ("rcf_") of each recomputable module
MODULE_PARTS = tuple(f"{p}_{m.value}" for m in RECOMPUTE_MODULES for p in ("rc", "rcf"))
# The plan columns a layer's per-micro-batch costs depend on (autopar.cost.layer): its GEMM
# shapes, attention, element-wise work, TP/CP/EP collectives and their groups' placement.
LAYER_COLUMNS = ("tp", "cp", "ep", "etp", "mbs", "sp", "tp_overlap", "cp_algo", "dispatcher", "ep_overlap")


def _layer_parts_by_config(batch: Batch, kinds: list[int]) -> list[dict[str, np.ndarray]]:
    """layer_parts of every kind for every plan, costed once per distinct layer configuration
    (a space of a million plans has a few hundred) and spread back to the plans."""
    first, config_of = row_groups(*(getattr(batch.tab, c) for c in LAYER_COLUMNS))
    reps = Batch(batch.model, batch.cluster, batch.training, batch.params, batch.tab.take(first))
    alone = batch.ep_unpaired  # per plan (pipeline depth and micro-batches), so blended after the spread

    def spread(parts):
        return {k: np.broadcast_to(np.asarray(v, dtype=float), (len(first),))[config_of] for k, v in parts.items()}

    out = []
    for i in kinds:
        parts = spread(layer_parts(reps, i, alone=0.0))
        if alone.any():
            solo = spread(layer_parts(reps, i, alone=1.0))
            parts = {k: v + alone * (solo[k] - v) for k, v in parts.items()}
        out.append(parts)
    return out


def evaluate(batch: Batch, per_stage: bool = True) -> StepResult:
    """Cost every plan of the batch (plans whose layout breaks a rule must be filtered first:
    autopar.cost.rules). per_stage=False skips the (plans x stages) result arrays the per-stage
    solver and Estimate.stages read: a million-plan search does not need them."""
    t = batch.tab
    kinds = _layer_kinds(batch)
    per_kind = _layer_parts_by_config(batch, kinds)
    n = len(t)
    p_max = int(t.pp.max()) if n else 1
    groups = layout_groups(t, batch.model)
    for rows, layout in groups:
        if isinstance(layout, str):
            raise InputError("plan.layout", batch.tab.plan(int(rows[0])).text(), layout)
    # memory columns: every stage with per_stage, else one per stage type (_stage_types)
    width = p_max if per_stage else max([1] + [len(_stage_types(layout, _stage_kind_counts(batch, layout, kinds), per_stage, t.take(rows))[0])
                                                for rows, layout in groups])
    out = StepResult(np.zeros(n), {k: np.zeros(n) for k in STEP_PARTS}, {k: np.zeros(n) for k in MEMORY_PARTS},
                     np.zeros(n), np.zeros(n, dtype=int), np.zeros(n, dtype=int), np.zeros(n), np.zeros(n), [[]] * n,
                     np.zeros(n), np.zeros(n), np.zeros((n, width)), np.zeros((n, width)), np.zeros(n),
                     np.full((n, width), -1, dtype=np.int64), host_bytes=np.zeros(n))
    if per_stage:
        out.stage_seconds, out.stage_memory_bytes, out.stage_recomputed_layers = (np.zeros((n, p_max)) for _ in range(3))
        out.stage_step_terms = {k: np.zeros((n, p_max)) for k in STAGE_STEP_TERMS}
    for rows, layout in groups:
        sub = Batch(batch.model, batch.cluster, batch.training, batch.params, t.take(rows))
        _evaluate_layout(sub, layout, kinds, [{k: v[rows] for k, v in pk.items()} for pk in per_kind], out, rows)
    return out


def _stage_types(layout: PipelineLayout, counts: np.ndarray, per_stage: bool, t) -> tuple[np.ndarray, np.ndarray]:
    """(stage index of each column the evaluation keeps, stages each column stands for).

    Stages holding the same layers, embedding and output layers cost the same per micro-batch,
    and the first of them holds the most in-flight activations (in_flight_microbatches falls
    with the stage index under every schedule), so a search costs one column per stage type
    (a 16-stage pipeline has two or three). Per-stage results (out.stage_seconds) and per-stage
    recompute counts keep every stage."""
    P = layout.pp
    if per_stage or bool(np.any(t.rc_stages != NONE)):
        return np.arange(P), np.ones(P)
    last = np.asarray(layout.rank_mtp(), dtype=float)
    last[layout.last_rank] += 1.0
    ends = np.zeros(P)
    ends[0] = 1.0
    ends[layout.last_rank] += 2.0
    _, first, type_of = np.unique(np.vstack([counts, last, ends]), axis=1, return_index=True, return_inverse=True)
    order = np.argsort(first)
    return first[order], np.bincount(type_of.ravel(), minlength=len(first))[order].astype(float)


def _first_max(values: np.ndarray, stage_idx: np.ndarray) -> np.ndarray:
    """Column of the row maximum, the earliest stage among ties (as argmax over all stages)."""
    top = values >= values.max(axis=1, keepdims=True)
    return np.argmin(np.where(top, stage_idx[None, :], np.iinfo(np.int64).max), axis=1)


def _evaluate_layout(b: Batch, layout: PipelineLayout, kinds: list[int], per_kind, out: StepResult, rows: np.ndarray) -> None:
    t, m, tr, prm = b.tab, b.model, b.training, b.params
    P = layout.pp
    counts_all = _stage_kind_counts(b, layout, kinds)  # kinds x P
    stage_idx, mult = _stage_types(layout, counts_all, out.stage_seconds is not None, t)
    counts = counts_all[:, stage_idx]  # kinds x columns kept
    n_layers = counts.sum(axis=0)
    C = len(stage_idx)
    col = lambda x: np.asarray(x, dtype=float)[:, None]  # noqa: E731  per-plan column

    k_rec = _recomputed_layers(t, n_layers)
    share = k_rec / np.maximum(n_layers, 1)
    share_off = _offloaded_layers(t, n_layers) / np.maximum(n_layers, 1)
    parts = {k: sum(counts[j] * col(pk[k]) for j, pk in enumerate(per_kind)) for k in
             ("compute_gemm", "compute_attention", "compute_elementwise", "tp_comm", "cp_comm", "ep_comm", "host_launch", "fwd", "bwd", "flops",
              "fwd_flops", "sac", *MODULE_PARTS)}
    # recompute=selective: the forward of each module recompute_modules names (Megatron-Core
    # recompute_modules); without names, the stack's: Megatron's default ["core_attn"] (the
    # attention core runs again, fused kernel included: Attention.checkpoint_core_attention), or
    # torchtitan's per-op SAC (every other matmul and all element-wise forward kernels)
    per_op = b.stack.selective_recompute == "per_op"
    column = selective_modules(t, per_op)[:, None]
    modules, module_flops = 0.0, 0.0
    for mod in RECOMPUTE_MODULES:
        on = has_module(column, mod)
        if bool(np.any(on)):
            modules = modules + np.where(on, parts[f"rc_{mod.value}"], 0.0)
            module_flops = module_flops + np.where(on, parts[f"rcf_{mod.value}"], 0.0)
    per_op_sac = (col(t.recompute) == 1) & (column == NONE) & per_op
    parts["recompute"] = share * parts["fwd"] + np.where(per_op_sac, parts["sac"], 0.0) + modules
    flops = parts["flops"] + share * parts["fwd_flops"] + module_flops
    fwd, bwd = parts["fwd"], parts["bwd"]

    # output layers: the logits on the last stage, and each MTP module's own
    g = logits_gemm(m, b.tokens, t.tp)
    t_logits = gemm_time(b, g.m, g.n, g.k, tr.precision.gemm_dtype)
    last = np.asarray(layout.rank_mtp(), dtype=float)
    last[layout.last_rank] += 1.0
    last = last[stage_idx]
    parts["compute_gemm"] = parts["compute_gemm"] + last * col((2 + b.wgrad) * t_logits)
    parts["compute_elementwise"] = parts["compute_elementwise"] + last * col(3 * b.hbm_seconds(12 * b.tokens * m.vocab_size / t.tp))
    flops = flops + last * col((2 + b.wgrad) * g.flops)
    fwd = fwd + last * col(t_logits)
    bwd = bwd + last * col((1 + b.wgrad) * t_logits)
    # each MTP module's 2h -> h projection of [embedding; hidden] (DeepSeek-V3 report section 2.2;
    # Megatron-Core MultiTokenPredictionLayer.eh_proj: column-parallel, output left split over TP)
    mtp_here = np.asarray(layout.rank_mtp(), dtype=float)[stage_idx]
    if m.mtp_num_layers:
        t_proj = gemm_time(b, b.tokens, m.hidden_size / t.tp, 2 * m.hidden_size, tr.precision.gemm_dtype)
        parts["compute_gemm"] = parts["compute_gemm"] + mtp_here * col((2 + b.wgrad) * t_proj)
        flops = flops + mtp_here * col((2 + b.wgrad) * 2 * b.tokens * m.hidden_size * 2 * m.hidden_size / t.tp)
        fwd = fwd + mtp_here * col(t_proj)
        bwd = bwd + mtp_here * col((1 + b.wgrad) * t_proj)

    # one activation send and one gradient send per micro-batch on the critical path; the
    # interleaved schedule's extra chunk boundaries overlap with compute (overlap_p2p_comm)
    msg = activation_message_bytes(b.tokens, m.hidden_size, tr.activation_bytes) / b.sp_divisor
    hop = b.collective(Collective.send_recv, msg, b.neighbour(b.group("pp")))
    parts["pp_comm"] = np.broadcast_to(col(np.where(t.pp > 1, 2 * hop, 0.0)), (len(t), C))

    # parameters per stage and ZeRO-3 per-layer gathers
    dense_layer = np.array([layer_params(m, i)[0] for i in kinds])
    routed_layer = np.array([layer_params(m, i)[1] for i in kinds])
    dense = (dense_layer @ counts)[None, :] / col(t.tp)
    routed = (routed_layer @ counts)[None, :] / col(t.ep * t.etp)
    emb = np.zeros(P)
    emb[0] += embedding_params(m)
    if not m.tied_embeddings or layout.last_rank != 0:  # tied: one copy where one rank holds both ends
        emb[layout.last_rank] += embedding_params(m)
    emb = emb[stage_idx]
    dense = dense + (emb + mtp_here * mtp_module_params(m)) / col(t.tp)
    # gradient and ZeRO-3 collectives hide behind a layer's time, but not behind the part of it
    # that is itself communication over the same network links
    fwd_window, bwd_window = _overlap_windows(b, parts, fwd, bwd)
    modules = np.array([layer_weight_modules(m, i) for i in kinds], dtype=float)
    parts["fsdp_comm"], fsdp_per_step, fsdp_copies = _fsdp_exposed(b, counts, dense_layer, routed_layer, modules, n_layers,
                                                                   fwd_window, bwd_window + parts["recompute"])
    parts["compute_elementwise"] = parts["compute_elementwise"] + fsdp_copies
    parts["activation_offload"] = _offload_exposed(b, kinds, per_kind, counts, share, share_off)
    stage_compute = sum(parts[k] for k in ("compute_gemm", "compute_attention", "compute_elementwise", "recompute", "tp_comm", "cp_comm",
                                           "ep_comm", "pp_comm", "activation_offload", "host_launch"))

    stage_seconds = stage_compute + parts["fsdp_comm"]
    mb = b.microbatches.astype(float)
    t_max = stage_seconds.max(axis=1)
    rest = (stage_seconds * mult).sum(axis=1) - t_max
    pipeline = mb * t_max + pipeline_fill(rest, mb, t.vpp, t.schedule, t.pp, np.where(t.pp > 1, hop, 0.0))
    crit = _first_max(stage_seconds, stage_idx)
    pick = lambda x: np.take_along_axis(np.broadcast_to(x, stage_seconds.shape), crit[:, None], axis=1)[:, 0]  # noqa: E731
    time = {k: mb * pick(parts[k]) for k in MICROBATCH_PARTS}
    time["pipeline_bubble"] = pipeline - mb * pick(stage_seconds)
    # stages with the same layers, embedding and output layers reduce the same gradients
    _, same, back = np.unique(np.vstack([counts, last, emb]), axis=1, return_index=True, return_inverse=True)
    dp_stage = _dp_exposed(b, dense[:, same], routed[:, same], fwd_window[:, same], bwd_window[:, same])[:, back.ravel()]
    time["dp_comm"] = dp_stage.max(axis=1) + fsdp_per_step.max(axis=1)
    trained = 0.0 if tr.frozen_weights else 1.0
    shard_d = np.where(col(t.zero) >= 1, col(b.zero_shard), 1)
    shard_r = np.where(col(t.zero) >= 1, col(b.expert_dp), 1)
    opt_stage = trained * b.hbm_seconds((dense / shard_d + routed / shard_r) * prm.memory.optimizer_bytes_moved_per_param)
    time["optimizer_step"] = opt_stage.max(axis=1)
    time["step_overhead"] = np.full(len(t), prm.step_overhead_seconds)

    mem, fixed, per_mb, host = _memory(b, stage_idx, layout.last_rank, kinds, counts, n_layers, k_rec, share_off, dense, routed)
    totals = sum(mem.values())
    worst = _first_max(totals, stage_idx)
    at_worst = lambda x: np.take_along_axis(np.broadcast_to(x, totals.shape), worst[:, None], axis=1)[:, 0]  # noqa: E731

    for k, v in time.items():
        out.time[k][rows] = v
    out.step_seconds[rows] = sum(time.values())
    for k, v in mem.items():
        out.memory[k][rows] = at_worst(v)
    out.memory_bytes[rows] = at_worst(totals)
    out.host_bytes[rows] = host.max(axis=1)
    out.worst_stage[rows] = stage_idx[worst]
    out.critical_stage[rows] = stage_idx[crit]
    out.pipeline_seconds[rows] = pipeline
    out.pp_hop_seconds[rows] = np.where(t.pp > 1, hop, 0.0)
    out.stage_max_seconds[rows] = t_max
    out.stage_rest_seconds[rows] = rest
    out.memory_fixed_stage[rows, :C] = fixed
    out.memory_per_microbatch_stage[rows, :C] = per_mb
    out.memory_stage_index[rows, :C] = stage_idx
    if out.stage_seconds is not None:
        per_stage = [(out.stage_seconds, stage_seconds), (out.stage_memory_bytes, totals), (out.stage_recomputed_layers, k_rec)]
        for key, value in zip(STAGE_STEP_TERMS, (dp_stage, fsdp_per_step, opt_stage)):
            per_stage.append((out.stage_step_terms[key], value))
        for field_, value in per_stage:
            field_[np.ix_(rows, np.arange(P))] = value
    out.hardware_flops[rows] = mb * t.dp * t.cp * t.tp * (flops * mult).sum(axis=1)
    ranks = layout.rank_decoders()
    for r in rows:
        out.stage_layers[r] = ranks


def _recomputed_layers(t, n_layers: np.ndarray) -> np.ndarray:
    """Fully recomputed layers per plan x stage: the plan's per-stage counts, or
    recompute_num_layers on every stage, or all layers (capped by the stage's layers)."""
    col = lambda x: np.asarray(x, dtype=float)[:, None]  # noqa: E731
    k = np.where(col(t.recompute_layers) > 0, np.minimum(n_layers, col(t.recompute_layers)), n_layers)
    for code in np.unique(t.rc_stages[t.rc_stages != NONE]).tolist():
        per_stage = np.asarray(interned(code), dtype=float)
        k = np.where(col(t.rc_stages == code), np.minimum(n_layers, per_stage[: len(n_layers)]), k)
    return np.where(col(t.recompute) == FULL, k, 0.0)


def _offloaded_layers(t, n_layers: np.ndarray) -> np.ndarray:
    """Layers per plan x stage whose saved activations layer-level offloading sends to host
    memory (offload_num_layers, capped by the stage's layers; 0 without it)."""
    n = np.asarray(t.offload_layers, dtype=float)[:, None]
    return np.where(n > 0, np.minimum(n, n_layers[None, :]), 0.0)


def _offload_exposed(b: Batch, kinds: list[int], per_kind, counts, share, share_off) -> np.ndarray:
    """Seconds per micro-batch x stage that fine-grained activation offloading adds: each layer's
    offloaded bytes go to host on a side stream during its forward and come back during the
    backward of the layer after it (Megatron-Core fine_grained_activation_offload: offload after
    the module's forward, reload prefetched one layer ahead), so a copy shows only where it takes
    longer than the layer's compute it overlaps. A fully recomputed layer moves its checkpointed
    input (layer_input) and reloads it before its recompute (backward window: recompute + backward).
    Layer-level offloading (offload_num_layers, share_off of each stage's layers) moves everything
    such a layer saves the same way (Transformer Engine's CPU offload handler under Megatron-Core
    --cpu-offloading: a layer's copy overlaps the next layer's forward, its reload the backward
    of the layer after it)."""
    t = b.tab
    if not bool(np.any(t.offload != NONE)) and not bool(np.any(share_off > 0)):
        return np.zeros((len(t), counts.shape[1]))
    col = lambda x: np.asarray(x, dtype=float)[:, None]  # noqa: E731
    layer_input = b.host_link_seconds(offloaded_input_bytes(b))
    out = 0.0
    for j, i in enumerate(kinds):
        fwd, bwd = per_kind[j]["fwd"], per_kind[j]["bwd"]
        copy = b.host_link_seconds(offloaded_bytes(b, i))
        kept = np.maximum(copy - fwd, 0.0) + np.maximum(copy - bwd, 0.0)
        rebuilt = np.maximum(layer_input - fwd, 0.0) + np.maximum(layer_input - fwd - bwd, 0.0)
        whole = b.host_link_seconds(saved_activation_bytes(b, i))
        whole = np.maximum(whole - fwd, 0.0) + np.maximum(whole - bwd, 0.0)
        out = out + counts[j] * ((1 - share - share_off) * col(kept) + share * col(rebuilt) + share_off * col(whole))
    return np.broadcast_to(out, (len(t), counts.shape[1]))


def _overlap_windows(b: Batch, parts, fwd, bwd) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds per plan x stage behind which data-parallel and ZeRO-3
    collectives can run. When those collectives cross nodes, the TP / CP / EP communication of
    groups that also cross nodes uses the same NICs (a node's scale-out bandwidth is shared,
    seed 001 'Сеть'): that time hides nothing and is taken out of the window. Forward holds
    half of each layer's TP/EP/CP traffic (dispatch and combine, gathers), backward the rest."""
    def crosses(name):
        return np.asarray(b.group(name).nodes, dtype=float)[:, None] > 1
    sync_crosses = crosses("dpcp") | crosses("zero") | (crosses("edp") if b.model.is_moe else False)
    net = sum(np.where(crosses(g), parts[f"{g}_comm"], 0.0) for g in ("tp", "cp", "ep"))
    net = np.where(sync_crosses, net, 0.0)
    return np.maximum(0.0, fwd - net / 2), np.maximum(0.0, bwd - net)


def _zero3_messages(b: Batch, params: np.ndarray, modules: float) -> tuple[float | np.ndarray, np.ndarray]:
    """(AllGathers, ReduceScatters) that one layer's ZeRO-3 weights of `params` elements per rank
    take (StackSpec.zero3_gather, zero3_reduce_bucket_elements): one of each per layer, or one
    gather per linear module and one reduce-scatter per full gradient bucket: params / bucket of
    them, a fraction of one when the layer fills part of a bucket that spans layers."""
    gathers = modules if b.stack.zero3_gather == "module" else 1.0
    bucket = b.stack.zero3_reduce_bucket_elements
    scatters = np.ones_like(params) if bucket is None else np.maximum(params, 1.0) / bucket
    return gathers, scatters


def _fsdp_exposed(b: Batch, counts, dense_layer, routed_layer, modules, n_layers, fwd, bwd) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ZeRO-3 / FSDP communication (seed 000 'FSDP ... около 3N_L коллективных операций';
    torch FSDP2 fully_shard; torch.distributed.pipelining). Per plan x stage: (exposed seconds
    per micro-batch, exposed seconds once per step, HBM seconds of the gather/scatter copies
    per micro-batch).

    Each layer's weights are all-gathered before its forward, prefetched one layer ahead (the
    next layer's gather runs during this layer's compute), so the first gather is exposed and
    each later one only where it outlasts the layer before it. Backward gathers again (unless
    reshard is off; the last block is not resharded) and reduce-scatters each layer's gradients,
    sharing the link, behind the backward of the next layer; the last reduce-scatter is exposed.
    grad_sync=step (torch.distributed.pipelining): weights stay gathered through all
    micro-batches and every reduce-scatter runs once after the last backward, not overlapped.
    A layer's gather and reduce-scatter are one collective each, or as many as the stack splits
    them into (_zero3_messages: DeepSpeed's per-module gathers and gradient buckets)."""
    t, tr, prm = b.tab, b.training, b.params
    n = np.maximum(n_layers, 1)[None, :]
    c_f, c_b = fwd / n, bwd / n
    ag_total = rs_total = copies = 0.0
    reps, config_of = _per_group_config(b)
    # dense weights shard over the ZeRO group; routed experts over their expert-data-parallel
    # group (strided by ep x etp: often one rank per node), each with its own collectives
    for j in range(len(dense_layer)):  # modules[j]: (dense-like, routed) linear modules of kind j
        for params_of, name, kind_modules in ((lambda x: dense_layer[j] / x.tp, "zero", modules[j][0]),
                                              (lambda x: routed_layer[j] / (x.ep * x.etp), "edp", modules[j][1])):
            params = np.broadcast_to(params_of(t), (len(t),))
            if not np.any(params):
                continue
            rep_params = params_of(reps.tab)
            n_ag, n_rs = _zero3_messages(b, rep_params, kind_modules)
            ag = (n_ag * reps.collective(Collective.all_gather, rep_params * tr.gather_bytes_per_param / n_ag, reps.group(name)))[config_of]
            rs = (n_rs * reps.collective(Collective.reduce_scatter, rep_params * tr.grad_reduce_bytes_per_param / n_rs,
                                         reps.group(name)))[config_of]
            ag_total = ag_total + counts[j][None, :] * ag[:, None]
            rs_total = rs_total + counts[j][None, :] * rs[:, None]
            copies = copies + counts[j][None, :] * params[:, None]
    a, r = ag_total / n, rs_total / n
    reshard = (t.reshard == 1)[:, None]
    per_mb_sync = (t.grad_sync == GRAD_SYNC.index(GradSync.microbatch))[:, None]
    # a gather or reduce-scatter that hides behind a layer still slows it: NCCL's blocks hold SMs
    overlap = lambda comm, compute: overlapped_seconds(comm, compute, *_nccl_sms(b))  # noqa: E731
    forward = a + (n - 1) * overlap(a, c_f)
    backward = (n - 1) * overlap(np.where(reshard, a, 0.0) + r, c_b) + r
    # grad_sync=step: gathers once per step (the first micro-batch), reduce-scatters once, exposed
    per_microbatch = np.where(per_mb_sync, forward + backward, 0.0)
    per_step = np.where(per_mb_sync, 0.0, forward + rs_total)
    # FSDP2 copies around each collective on the compute stream: copy-out of every gather and
    # copy-in (cast to the reduce dtype) of every reduce-scatter, per unsharded element
    # (torch _fsdp_collectives.py: split_with_sizes_copy, _chunk_cat)
    fsdp2 = 1.0 if b.stack.fsdp == "fsdp2" else 0.0
    gathers = np.where(per_mb_sync, 1.0 + np.where(reshard, 1.0, 0.0), 0.0)
    # (bf16 read + write per element; an FP8 gather copies out 1-byte elements)
    copy_out = prm.memory.fsdp2_copy_out_bytes_per_element * tr.gather_bytes_per_param / tr.weight_bytes_per_param
    copy_bytes = fsdp2 * copies * (gathers * copy_out + np.where(per_mb_sync, prm.memory.fsdp2_reduce_copy_in_bytes_per_element, 0.0))
    on = (t.zero == 3)[:, None]
    return np.where(on, per_microbatch, 0.0), np.where(on, per_step, 0.0), np.where(on, b.hbm_seconds(copy_bytes), 0.0)


# The plan columns that place the data-parallel and ZeRO groups (with the layout, fixed within
# one evaluation group): the collectives are costed once per distinct combination.
GROUP_COLUMNS = ("tp", "cp", "dp", "ep", "etp", "order", "shard")


def _per_group_config(b: Batch) -> tuple[Batch, np.ndarray]:
    """(a batch of one plan per distinct GROUP_COLUMNS row, the row of every plan in it)."""
    first, config_of = row_groups(*(getattr(b.tab, c) for c in GROUP_COLUMNS))
    return Batch(b.model, b.cluster, b.training, b.params, b.tab.take(first)), config_of


def _nccl_sms(b: Batch) -> tuple[float, int | None]:
    """(SMs an NCCL collective holds while it runs: one block per channel, SMs of the GPU)."""
    return float(b.params.comm.nccl.channels), b.cluster.gpu.num_sms


def _dp_exposed(b: Batch, dense, routed, fwd, bwd) -> np.ndarray:
    """Gradient reduction after the last micro-batch, overlapped with its backward (Megatron
    --overlap-grad-reduce); ZeRO-1/2 add the parameter AllGather (overlapped with the next
    step's first forward). Per plan x stage.

    ZeRO-2 with grad_sync=microbatch keeps only its gradient shard, so it reduce-scatters after
    every micro-batch's backward, each behind that backward, not once per step: DeepSpeed
    stage_1_and_2.py reduce_ready_partitions_and_remove_grads reduces when partition_gradients
    (stage 2) or at the accumulation boundary (stage 1)."""
    t, tr, prm = b.tab, b.training, b.params
    ov = prm.comm.dp_overlap
    sms = _nccl_sms(b)
    every_mb = (t.zero == 2) & (t.grad_sync == GRAD_SYNC.index(GradSync.microbatch))
    reductions = np.where(every_mb, b.microbatches, 1).astype(float)[:, None]
    reps, config_of = _per_group_config(b)
    first = np.unique(config_of, return_index=True)[1]
    total = 0.0
    for count, name in ((dense, "dpcp"), (routed, "edp")):
        group = reps.group(name)
        rep_count = count[first]  # a group configuration fixes tp, ep, etp: the same counts
        ar, rs, ag = (reps.collective(op, rep_count * nbytes, group)[config_of] for op, nbytes in (
            (Collective.all_reduce, tr.grad_reduce_bytes_per_param), (Collective.reduce_scatter, tr.grad_reduce_bytes_per_param),
            (Collective.all_gather, tr.gather_bytes_per_param)))
        sharded = reductions * overlapped_seconds(rs, ov * bwd, *sms) + overlapped_seconds(ag, ov * fwd, *sms)
        total = total + np.where(t.zero[:, None] == 0, overlapped_seconds(ar, ov * bwd, *sms), sharded)
    off = (t.zero == 3) | (t.dp * t.cp == 1) | tr.frozen_weights
    return np.where(off[:, None], 0.0, total)


def gradient_bytes_per_param(tr, stack) -> float:
    """Bytes per parameter of the gradient buffer: the training spec's, or the reduction dtype's when
    the stack keeps its gradients in it (Megatron-Core: 4-byte main gradients with an fp32
    reduction, the 18 = 6 + 12/d bytes per parameter of Megatron-LM's
    docs/user-guide/features/dist_optimizer.md for bf16 parameters and fp32 gradients). The same
    table's fp32 copy of a 16-bit gradient shard (4 + 16/d) is made at the optimizer step, after
    the activations are freed, so it is not part of the peak this model takes."""
    if stack.grads_in_reduce_dtype:
        return max(tr.grad_bytes_per_param, tr.grad_reduce_bytes_per_param)
    return tr.grad_bytes_per_param


def _memory(b: Batch, stage_idx, last_rank, kinds, counts, n_layers, k_rec, share_off, dense, routed):
    """Bytes per GPU by component, per plan x kept stage (stage_idx; last_rank holds the logits); also
    the parts that do not scale with in-flight micro-batches (weights, gradients, optimizer,
    working buffers) and one micro-batch's activations, both with the allocator's fragmentation
    slack on them (Batch.fragmentation), and the activations offloaded to host memory."""
    t, tr, mem, m = b.tab, b.training, b.params.memory, b.model
    col = lambda x: np.asarray(x, dtype=float)[:, None]  # noqa: E731
    C = len(stage_idx)
    zero = col(t.zero)
    shard_d, shard_r = col(b.zero_shard), col(b.expert_dp)

    def sharded(from_stage: int, bytes_per: float):
        on = zero >= from_stage
        return bytes_per * (dense / np.where(on, shard_d, 1) + routed / np.where(on, shard_r, 1))

    trained = 0.0 if tr.frozen_weights else 1.0  # LoRA: adapters' state is negligible
    # gradients reduced once per step accumulate unsharded (ZeRO-2/3 with grad_sync=step)
    grads_sharded = col(t.grad_sync) == GRAD_SYNC.index(GradSync.microbatch)
    grad_bytes = gradient_bytes_per_param(tr, b.stack)
    out = {
        "weights": sharded(3, tr.weight_bytes_per_param),
        "gradients": trained * np.where(grads_sharded, sharded(2, grad_bytes), sharded(99, grad_bytes)),
        "optimizer_states": trained * sharded(1, tr.optimizer_bytes_per_param),
    }
    stored = [stored_activation_bytes(b, i) for i in kinds]
    full = [layer_activation_bytes(b, i) for i in kinds]
    share = k_rec / np.maximum(n_layers, 1)
    # layer-level offloading (share_off of the stage's layers) keeps nothing of those layers in HBM and
    # sends all they save to host: `stored`, as such a plan has no offload_modules (Plan refuses both)
    per_mb = sum(counts[j] * col(stored[j]) for j in range(len(kinds))) * (1 - share - share_off) + k_rec * col(recomputed_input_bytes(b))
    held = in_flight_microbatches(stage_idx[None, :], col(t.pp), col(b.microbatches), col(t.vpp), col(t.schedule))
    out["activations"] = per_mb * held
    moved = [offloaded_bytes(b, i) for i in kinds]
    layer_input = offloaded_input_bytes(b)
    host = (sum(counts[j] * col(moved[j]) for j in range(len(kinds))) * (1 - share - share_off) + k_rec * col(layer_input)
            + sum(counts[j] * col(stored[j]) for j in range(len(kinds))) * share_off) * held
    first_kind = np.array([0 if counts[0, s] > 0 else len(kinds) - 1 for s in range(C)])
    full_first = np.stack([full[j] for j in range(len(kinds))], axis=1)[:, first_kind]  # plans x P
    working = np.where(k_rec > 0, full_first, 0.0)  # one layer rebuilt during its backward
    working = working + col(torch_cp_buffer_bytes(b))  # PyTorch CP's gathered K, V and fp32 gradients
    # offloaded tensors in transit: the layer being copied out and the one prefetched back
    moved_first = np.stack(moved, axis=1)[:, first_kind]
    working = working + 2 * np.maximum(np.where(k_rec < n_layers, moved_first, 0.0), np.where(k_rec > 0, col(layer_input), 0.0))
    stored_first = np.stack(stored, axis=1)[:, first_kind]
    working = working + 2 * np.where(share_off > 0, stored_first, 0.0)  # a whole layer copied out, one prefetched back
    last = (stage_idx == last_rank).astype(float)
    working = working + last * col(b.stack.logits_bytes_per_element * b.tokens * m.vocab_size / t.tp)  # logits at the loss
    # a layer's weights as ZeRO-3 gathers them: only what is sharded (a shard group of one, e.g.
    # routed experts with expert-data-parallel size 1, is used in place and gathers nothing)
    layer_w = np.array([layer_params(m, i)[0] for i in kinds])[first_kind][None, :] / col(t.tp) * (shard_d > 1) \
        + np.array([layer_params(m, i)[1] for i in kinds])[first_kind][None, :] / col(t.ep * t.etp) * (shard_r > 1)
    # ZeRO-3 holds the gathered weights of the layer in hand and the prefetched next one; with
    # reshard off every layer's gathered weights stay until its backward (the stage's weights);
    # DeepSpeed's prefetcher instead keeps up to stage3_max_live_parameters gathered
    if b.stack.zero3_live_elements is None:
        gathered = np.where(col(t.reshard) == 1, 2 * layer_w, (dense + routed) - out["weights"] / tr.weight_bytes_per_param)
    else:
        gathered = np.minimum(float(b.stack.zero3_live_elements), dense + routed)
    # (FP8 parameter gathering: the gathered copy is the 1-byte cast the GEMMs read)
    out["working_buffers"] = working + np.where(zero == 3, tr.gather_bytes_per_param * gathered, 0.0)
    allocated = sum(out.values())
    fixed = allocated - out["activations"]
    slack = 1.0 + b.fragmentation
    out["fragmentation"] = allocated * b.fragmentation
    out["framework_reserve"] = np.full_like(allocated, mem.reserve_bytes)
    return out, fixed * slack, np.broadcast_to(per_mb * slack, allocated.shape), np.broadcast_to(host, allocated.shape)
