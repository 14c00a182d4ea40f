"""Context parallelism the way PyTorch runs it (torchtitan): torch's experimental context_parallel
all-gathers K and V once per call (rotate_method ALL_GATHER), merges the blocks' outputs and
accumulates the gradients in fp32, passes dK, dV around the ring in fp32; torchtitan repeats K, V
to the query heads before SDPA, so every exchange carries all query heads. Megatron's ring passes
the GQA chunk and has none of these kernels. Byte counts: profiles/cost/defaults.yaml
attention.torch_cp_bytes (counted from torch/distributed/tensor/experimental/_attention.py)."""

from __future__ import annotations

import pytest

from autopar.cost.comm import Collective
from autopar.cost.context import Batch
from autopar.cost.layer import layer_forward, torch_cp_merge_seconds
from autopar.cost.memory import qkv_bytes, torch_cp_buffer_bytes
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan
from autopar.specs.training import Stack
from autopar.validation import load_rows
from autopar.validation.predict import predict_row

# Llama 3.1 8B at 256k tokens on one 8-GPU node, CP 8: the torchtitan Dec 2024 benchmark's
# long-context row (benchmarks/llama3_h100_202412_torchtitan.md Table 2, FSDP 1 CP 8)
LLAMA8B = ModelSpec(name="llama3-8b", num_layers=2, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                    ffn_hidden_size=14336, vocab_size=128256)
SEQ, CP = 262144, 8
T = SEQ // CP                      # 32,768 tokens per rank
OUT = T * 32 * 128                 # 134,217,728 elements of the local attention output (and of Q)
KV_REPEATED = 2 * T * 32 * 128     # K plus V repeated to 32 heads: 268,435,456 elements
KV_GQA = 2 * T * 8 * 128           # the 8 KV heads: 67,108,864 elements


def _batch(stack: Stack, cp: int = CP) -> Batch:
    cluster = load_cluster("dgx-h100").with_gpus(8)
    tab = PlanTable.from_plans([Plan(tp=1, pp=1, dp=8 // cp, cp=cp, mbs=1, zero=3)], 8)
    training = TrainingSpec(seq_len=SEQ, global_batch_size=8 // cp, stack=stack)
    return Batch(LLAMA8B, cluster, training, load_cost_params(), tab)


def test_merge_bytes_are_the_counted_kernels():
    b = _batch(Stack.torchtitan)
    fwd, bwd = torch_cp_merge_seconds(b)
    # forward: (32.5 x 7 steps + 12) B per output element + 4 x 7 B per K+V element
    # = 239.5 x 134.2M + 28 x 268.4M = 32.15 GB + 7.52 GB
    assert fwd[0] == pytest.approx(b.hbm_seconds(239.5 * OUT + 28 * KV_REPEATED), rel=1e-12)
    assert 239.5 * OUT + 28 * KV_REPEATED == pytest.approx(39.66e9, rel=1e-3)
    # backward: (11.5 x 7 + 20) per query element + (23.5 x 7 + 28) per K+V element = 65.16 GB
    assert bwd[0] == pytest.approx(b.hbm_seconds(100.5 * OUT + 192.5 * KV_REPEATED), rel=1e-12)
    assert 100.5 * OUT + 192.5 * KV_REPEATED == pytest.approx(65.16e9, rel=1e-3)
    # Megatron's ring has no eager merges, and without CP there is nothing to merge
    assert torch_cp_merge_seconds(_batch(Stack.megatron))[0][0] == 0.0
    assert torch_cp_merge_seconds(_batch(Stack.torchtitan, cp=1))[1][0] == 0.0


def test_allgather_hides_behind_the_first_block_only():
    b = _batch(Stack.torchtitan)
    f = layer_forward(b, 0)
    group = b.group("cp")
    gather = b.collective(Collective.all_gather, CP * 2 * KV_REPEATED, group)   # 8 x 537 MB of bf16 K, V
    grads = b.collective(Collective.send_recv, 4 * KV_REPEATED, b.neighbour(group))  # fp32 dK, dV: 1.07 GB
    block, block_bwd = f["attn"][0] / CP, f["attn_bwd"][0] / CP
    # on NVLink the 4.3 GB gather (~12 ms) fits in the first of 8 blocks (~30 ms of FA2 at 32k x 32k)
    assert gather < block
    assert f["cp"][0] == pytest.approx(max(0.0, gather - block), abs=1e-12)
    # backward: gather again behind block 0, each fp32 hop behind the next block, the last hop exposed
    expected_bwd = max(0.0, gather - block_bwd) + (CP - 1) * max(0.0, grads - block_bwd) + grads
    assert f["cp_bwd"][0] == pytest.approx(expected_bwd, rel=1e-12)
    assert f["cp_bwd"][0] == pytest.approx(grads, rel=1e-12)


def test_megatron_ring_passes_the_gqa_chunk():
    b = _batch(Stack.megatron)
    f = layer_forward(b, 0)
    hop = b.collective(Collective.send_recv, 2 * KV_GQA, b.neighbour(b.group("cp")))  # 134 MB bf16 per hop
    ring = (CP - 1) * hop
    assert f["cp"][0] == pytest.approx(max(0.0, ring - f["attn"][0]), abs=1e-12)
    assert f["cp_merge"][0] == 0.0


def test_repeated_heads_in_memory():
    titan, mega = _batch(Stack.torchtitan), _batch(Stack.megatron)
    # autograd keeps SDPA's inputs: Q plus K, V repeated to 32 heads (12,288 values per token)
    # against Q plus the 8 KV heads (6,144) under Megatron
    assert qkv_bytes(titan)[0] == pytest.approx(2 * T * (32 + 2 * 32) * 128)
    assert qkv_bytes(mega)[0] == pytest.approx(2 * T * (32 + 2 * 8) * 128)
    # PyTorch CP holds the gathered K, V of the whole sequence (8 x 537 MB) and fp32 dQ, dK, dV
    # (4 B x (134M + 268M)): 4.29 GB + 1.61 GB
    assert torch_cp_buffer_bytes(titan)[0] == pytest.approx(CP * 2 * KV_REPEATED + 4 * (OUT + KV_REPEATED), rel=1e-12)
    assert torch_cp_buffer_bytes(titan)[0] == pytest.approx(5.91e9, rel=1e-3)
    assert torch_cp_buffer_bytes(mega)[0] == 0.0


def test_torchtitan_long_context_rows():
    """The Dec 2024 torchtitan CP rows (tests/data/fsdp_runs.json, Table 2): the merges and the
    repeated-head exchanges add 5-6% to the 8B step at CP 2-8 (model, when they landed: 11.35 ->
    11.92 s at CP 2, 36.7 -> 38.9 s at CP 8). The model stays optimistic at CP 4 and 8 (+43%,
    +52%: the remaining gap is not explained, see results/validation), so this pins the
    direction and size of the mechanisms, not a fit."""
    rows = {r["id"]: r for r in load_rows("tests/data/fsdp_runs.json")}
    cp2 = predict_row(rows["new-tt-dec24-t2-8b-8-fsdp4cp2"])
    cp8 = predict_row(rows["new-tt-dec24-t2-8b-8-fsdp1cp8"])
    # with the ring's later steps run as non-causal calls (tests/cost/test_attention_length.py):
    assert cp2.error == pytest.approx(0.044, abs=0.02)   # 2,540 measured, 2,652 predicted (was +13.7%, then +8.3%)
    assert cp8.error == pytest.approx(0.519, abs=0.03)   # 548 measured, 832 predicted (was +62.9%, then +53.6%)


def test_stack_refuses_an_unknown_cp_mechanism():
    from pydantic import ValidationError

    from autopar.specs.stack import StackSpec, load_stack

    fields = load_stack(Stack.torchtitan).model_dump()
    with pytest.raises(ValidationError, match="context_parallel"):
        StackSpec.model_validate({**fields, "context_parallel": "allgather"})
    # every switch the cost model compares by name is a closed set: a typo in a stack file
    # would otherwise silently select the other branch (e.g. 'fsdp_2' costing no FSDP2 copies)
    for field, typo in (("fsdp", "fsdp_2"), ("elementwise", "Eager"), ("selective_recompute", "per-op"),
                        ("tp_overlap", "asynctp"), ("zero3_gather", "modules")):
        with pytest.raises(ValidationError, match=field):
            StackSpec.model_validate({**fields, field: typo})
    assert load_stack(Stack.torchtitan).torch_context_parallel and not load_stack(Stack.megatron).torch_context_parallel
