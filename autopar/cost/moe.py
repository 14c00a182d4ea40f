"""Mixture-of-experts terms (seed 000 'Параллелизм экспертов'; docs/design.md 'Cost model').

The busiest expert-parallel rank sets the pace of every MoE layer: its grouped GEMMs, its
routed activations and its share of the dispatch all scale with the tokens it receives.
Legend: T tokens of a micro-batch on one GPU, k experts per token, E experts, c capacity factor.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from autopar.cost.comm import Collective, overlapped_seconds
from autopar.cost.table import DISPATCHER
from autopar.specs.model import ModelSpec, RouterBalance
from autopar.specs.plan import Dispatcher
from autopar.specs.training import MoeRouting


@lru_cache(maxsize=None)
def expected_max_standard_normal(n: int) -> float:
    """E[max of n i.i.d. standard normals] (1.42 for 8, 2.34 for 64): integral of
    x n phi(x) Phi(x)^(n-1) over a grid fine enough for 3 digits."""
    if n <= 1:
        return 0.0
    x = np.linspace(-8.0, 8.0, 8001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return float(np.sum(x * n * phi * cdf ** (n - 1)) * (x[1] - x[0]))


def local_experts(model: ModelSpec, ep) -> np.ndarray:
    """Routed experts each GPU holds per plan: E / ep, at least one."""
    return np.maximum(model.num_experts / np.maximum(np.asarray(ep, dtype=float), 1.0), 1.0)


def sequences_per_dispatch(tab) -> np.ndarray:
    """Sequences whose tokens one expert-parallel group routes together in a micro-batch, per
    plan. The group's ep x etp ranks are consecutive in Megatron's expert grid (etp - ep - edp -
    pp) as the attention ranks are in theirs (tp - cp - dp - pp), and tp x cp of them hold the
    parts of one micro-batch of mbs sequences; a group inside one such block (ep x etp <= tp x
    cp) still sees whole sequences' worth of one domain."""
    return tab.mbs * np.maximum(1.0, tab.ep * tab.etp / (tab.tp * tab.cp))


def expert_load_cv(batch) -> np.ndarray:
    """Coefficient of variation of the tokens per expert within one expert-parallel group's
    micro-batch, per plan. A router balanced per micro-batch or by a loss-free bias scatters
    by its corpus-level skew (profiles/cost/defaults.yaml moe). A router balanced over the global
    batch adds each sequence's domain skew, which averages out over the n sequences routed
    together: CV^2 = cv_corpus^2 + cv_sequence^2 / n."""
    model, moe = batch.model, batch.params.moe
    cv = moe.expert_load_cv_expert_bias if model.moe_router_expert_bias else moe.expert_load_cv_aux_loss
    if model.moe_router_balance != RouterBalance.global_batch:
        return np.full(np.shape(batch.tab.ep), cv)
    return np.sqrt(cv ** 2 + moe.expert_load_cv_sequence ** 2 / sequences_per_dispatch(batch.tab))


def expert_load_factor(batch):
    """Tokens at the busiest expert-parallel rank over the balanced mean T k ep / E, per plan.

    Forced balanced routing: 1. Learned routing: expert loads scatter with coefficient of
    variation CV (expert_load_cv); a rank holding m = E / ep experts sums m of them
    (CV / sqrt(m)), and the step waits for the busiest of ep ranks:
    1 + E[max of ep standard normals] x CV / sqrt(m). A measured max/mean
    (TrainingSpec.moe_load_imbalance) replaces it. Token dropping caps it at the capacity
    factor c (an expert takes at most c times its balanced share, the rest is dropped)."""
    training, model = batch.training, batch.model
    ep = np.asarray(batch.tab.ep, dtype=float)
    if training.moe_routing != MoeRouting.learned or not model.is_moe:
        return np.ones_like(ep)
    if training.moe_load_imbalance:
        imbalance = np.full_like(ep, training.moe_load_imbalance)
    else:
        cv = expert_load_cv(batch)
        per_rank = local_experts(model, ep)
        degrees, where = np.unique(ep, return_inverse=True)
        spread = np.array([expected_max_standard_normal(int(e)) for e in degrees])[where.reshape(ep.shape)]
        imbalance = 1.0 + spread * cv / np.sqrt(per_rank)
    return np.minimum(imbalance, training.moe_capacity_factor) if training.moe_capacity_factor else imbalance


def routed_tokens(tokens, tp, etp, sequence_parallel):
    """Tokens each GPU routes per micro-batch. With sequence parallelism a TP rank holds T/tp of
    them; the expert-TP group gathers etp ranks' tokens (Megatron MoE: etp = tp gathers the full
    T, MoE parallel folding with etp = 1 routes each rank's own T/tp). The per-GPU expert work
    is the same for every etp; the GEMM shapes and the dispatch volume are not."""
    return np.where(sequence_parallel, tokens * etp / tp, tokens)


def destination_nodes(model: ModelSpec, ep_nodes, top_k: int, routing: MoeRouting = MoeRouting.learned):
    """Expected distinct nodes a token's k experts sit on, when the EP group spans `ep_nodes`
    nodes and routing picks experts uniformly; group-limited routing (DeepSeek-V3: 8 groups,
    top-4 groups, one group per node of EP64) caps the nodes a token may reach. Contiguous
    routing (k consecutive experts of E, E / nodes on each node) crosses a node boundary at
    each of its k - 1 gaps with probability nodes / E: 1 + (k - 1) nodes / E nodes (1.33 for
    22 of 512 experts on 8 nodes, where uniform picks reach 7.6)."""
    nodes = np.maximum(np.asarray(ep_nodes, dtype=float), 1.0)
    if routing == MoeRouting.contiguous:
        return np.minimum(nodes, 1.0 + (top_k - 1) * nodes / max(model.num_experts, 1))
    limit = nodes
    if model.moe_router_num_groups and model.moe_router_group_topk:
        limit = np.minimum(nodes, model.moe_router_group_topk * np.maximum(1.0, nodes / model.moe_router_num_groups))
    return limit * (1.0 - (1.0 - 1.0 / limit) ** top_k)


def moe_elementwise_bytes(model: ModelSpec, moe_tokens, load: float, bytes_per_element: float, permutations=1):
    """Forward HBM bytes of a MoE layer's memory-bound kernels per micro-batch (the backward
    moves twice as much, as for the other element-wise work): the router's fp32 scores, softmax
    or sigmoid and top-k over E experts (read and write 4 B each: 16 B per score), the permute
    that gathers each of the k token copies into expert order and the unpermute that scatters
    them back and sums them with the routing weights (each reads and writes a copy: 2 x 2 B per
    element; Megatron-LM moe_utils.py permute/unpermute, index_select and index_add). A LatentMoE
    layer permutes its tokens at the latent width. `permutations` (per plan) counts the
    permute/unpermute pairs: 2 where the AllToAll dispatcher sorts the received copies again by
    local expert (sort_permutations)."""
    router = 16.0 * moe_tokens * model.num_experts
    permute = 2 * 2 * bytes_per_element * moe_tokens * model.moe_top_k * load * model.moe_expert_width
    return router + permute * np.asarray(permutations, dtype=float)


def sort_permutations(model: ModelSpec, ep, dispatcher):
    """Permute/unpermute pairs of a MoE layer per plan. Megatron-Core's AllToAll dispatcher
    permutes the rank's token copies into destination order before the AllToAll, and when a rank
    holds more than one expert it sorts what arrived by local expert ('Permutation 2', a second
    copy of every received token, sort_chunks_by_idxs: split + cat, or TE's fused
    moe_sort_chunks_by_index) and unsorts the outputs before the return AllToAll
    (token_dispatcher.py MoEAlltoAllTokenDispatcher, core_v0.11.0 to HEAD); torchtitan's
    all-to-all EP does the same (its second permute aligns the received tokens per local expert
    for the grouped GEMM). DeepEP (flex) and AllGather dispatch once and permute once after it.
    Without expert parallelism nothing is sent: torchtitan runs its local experts on the one
    permute, and Megatron's default AllGather dispatcher permutes once."""
    ep = np.asarray(ep, dtype=float)
    sorts = (np.asarray(dispatcher) == DISPATCHER.index(Dispatcher.alltoall)) & (ep > 1) & (model.num_experts > ep)
    return 1 + sorts.astype(float)


def dispatch_seconds(batch, moe_tokens, load: float):
    """One token dispatch (or combine) of a MoE layer per GPU, the busiest rank's share.

    alltoall: every token copy goes to its expert's rank; the copies bound for other nodes
    cross the NICs, the rest NVLink. deepep (DeepEP / Megatron flex): a token crosses the
    network once per destination node and is forwarded to its experts' GPUs over NVLink
    (DeepSeek-V3 report section 3.2.2). allgather: every token goes to every EP rank.
    With expert TP (etp > 1) each rank sends only its own share of the etp ranks' tokens into
    the all-to-all, and the expert-TP group then all-gathers what arrived (reduce-scatters it on
    the way back): Megatron-LM MoEAlltoAllTokenDispatcher 'permute -> A2A(EP) -> AG(TP)'.
    A LatentMoE layer dispatches its tokens at the latent width (Megatron-Core token_dispatcher.py
    hidden_dim = moe_latent_size or hidden_size), the router's choice made at h beforehand.
    Bandwidths: the cluster's links at the comm efficiencies (DeepEP normal kernels reach
    43-58 GB/s of a 50 GB/s CX7 RDMA link and 153 of ~160 GB/s NVLink on H800: DeepEP README)."""
    m, t, tr, prm, c = batch.model, batch.tab, batch.training, batch.params, batch.cluster
    group = batch.group("ep")
    ep, per_node, nodes = (np.asarray(x, dtype=float) for x in (group.size, group.per_node, group.nodes))
    token_bytes = tr.activation_bytes * m.moe_expert_width
    etp = np.asarray(t.etp, dtype=float)
    copies = moe_tokens / etp * m.moe_top_k * load * token_bytes
    expert_tp = np.where(etp > 1, batch.collective(Collective.all_gather, copies * etp, batch.group("etp")), 0.0)
    nvlink = c.intra_node.bandwidth_gb_per_s * 1e9 * prm.comm.nvlink_efficiency
    nic = max(c.nic_bytes_per_second_per_gpu * prm.comm.network_efficiency, 1.0)
    off_share = np.where(ep > 0, (ep - per_node) / ep, 0.0)
    on_share = np.where(ep > 0, (per_node - 1) / ep, 0.0)
    a2a = np.maximum(copies * off_share / nic, copies * on_share / nvlink)
    remote_nodes = destination_nodes(m, nodes, m.moe_top_k, tr.moe_routing) * (nodes - 1) / nodes
    deep = np.maximum(moe_tokens / etp * load * remote_nodes * token_bytes / nic, copies * (1 - 1 / per_node) / nvlink)
    gather_bytes = moe_tokens * token_bytes * (ep - 1)
    allgather = np.maximum(gather_bytes * (nodes - 1) / nodes / nic, gather_bytes / nvlink)
    latency = c.intra_node.latency_us * 1e-6 + np.where(nodes > 1, (c.tiers[0].latency_us if c.tiers else 0.0) * 1e-6, 0.0)
    code = t.dispatcher
    seconds = np.select([code == DISPATCHER.index(Dispatcher.deepep), code == DISPATCHER.index(Dispatcher.allgather)],
                        [deep + expert_tp, allgather], default=a2a + expert_tp)
    return np.where(ep > 1, seconds + latency, expert_tp)


def overlap_exposed(batch, comm_seconds, compute_seconds):
    """Seconds a dispatch overlapped with compute still costs (DeepEP's normal kernels take a
    set number of SMs; the compute beside them runs on the rest)."""
    return overlapped_seconds(comm_seconds, compute_seconds, batch.params.moe.dispatch_sms, batch.cluster.gpu.num_sms)
