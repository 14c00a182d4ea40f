"""The AllToAll dispatcher's second permutation (Megatron-Core token_dispatcher.py
MoEAlltoAllTokenDispatcher, core_v0.11.0 to HEAD: 'Permutation 2: Sort tokens by local expert',
sort_chunks_by_idxs, and 'Unpermutation 2' before the return AllToAll): a rank holding more than
one expert copies every received token once more each way. DeepEP (flex) permutes once after its
dispatch; a rank with one expert has nothing to sort."""

from __future__ import annotations

import numpy as np
import pytest

from autopar.cost import make_batch
from autopar.cost.layer import layer_forward
from autopar.cost.moe import moe_elementwise_bytes, sort_permutations
from autopar.cost.table import DISPATCHER
from autopar.specs import ModelSpec, TrainingSpec, parse_plan
from autopar.specs.plan import Dispatcher

S, H = 4096, 4096
MOE = ModelSpec(name="moe", num_layers=2, hidden_size=H, num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
                vocab_size=32000, num_experts=8, moe_top_k=2, moe_ffn_hidden_size=14336)


def _forward(plan, node, params):
    training = TrainingSpec(seq_len=S, global_batch_size=64, flash_attention=True, moe_routing="balanced")
    return layer_forward(make_batch(MOE, node, training, [parse_plan(plan)], params), 0)


def test_pairs_by_dispatcher_and_local_experts():
    a2a, deepep, gather = (DISPATCHER.index(d) for d in (Dispatcher.alltoall, Dispatcher.deepep, Dispatcher.allgather))
    ep = np.array([2, 8, 2, 2, 1])
    dispatcher = np.array([a2a, a2a, deepep, gather, a2a])
    # 8 experts: ep 2 holds 4 per rank (sorted again), ep 8 one (nothing to sort); DeepEP and
    # AllGather permute once; without EP nothing is dispatched (one permute)
    assert sort_permutations(MOE, ep, dispatcher).tolist() == [2.0, 1.0, 1.0, 1.0, 1.0]


def test_sort_adds_a_copy_each_way(h100_node, params):
    sorted_, flex = _forward("ep=2,dispatcher=alltoall", h100_node, params), _forward("ep=2,dispatcher=deepep", h100_node, params)
    # tp 1: T = 4096 tokens per micro-batch, k = 2 copies each, balanced routing (load 1); the
    # sort and the unsort each read and write every copy: 2 x 2 x 2 B x 4096 x 2 x 4096 = 268 MB
    extra = 2 * 2 * 2 * S * 2 * H
    assert moe_elementwise_bytes(MOE, S, 1.0, 2, 2) - moe_elementwise_bytes(MOE, S, 1.0, 2, 1) == pytest.approx(extra, rel=1e-12)
    hbm = h100_node.gpu.hbm_bytes_per_second * params.memory.hbm_efficiency
    assert sorted_["moe_elem"][0] - flex["moe_elem"][0] == pytest.approx(extra / hbm, rel=1e-9)
    # the forward element-wise time carries the same bytes; the backward twice them
    assert sorted_["elem"][0] - flex["elem"][0] == pytest.approx(extra / hbm, rel=1e-9)
    assert sorted_["elem_bwd"][0] - flex["elem_bwd"][0] == pytest.approx(2 * extra / hbm, rel=1e-9)
