"""Tensor parallelism the way PyTorch DTensor runs it (torchtitan): sequence parallel shards dim 1
of a [batch, seq, hidden] activation, so the functional collectives copy the whole tensor after
each AllGather and before each ReduceScatter; tensorwise float8 gathers the 1-byte cast forward.
Megatron's [seq, batch, hidden] gathers along dim 0 and copies nothing."""

from __future__ import annotations

import pytest

from autopar.cost.comm import Collective
from autopar.cost.context import Batch
from autopar.cost.layer import layer_forward
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan
from autopar.specs.training import Fp8Recipe, Precision, Stack

# Llama 3 8B on one 8-GPU node, TP 8 with sequence parallel (torchtitan asyncTP benchmark shape)
LLAMA8B = ModelSpec(name="llama3-8b", num_layers=2, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                    ffn_hidden_size=14336, vocab_size=128256)
SEQ, MBS = 8192, 2
MESSAGE = MBS * SEQ * 4096 * 2  # one bf16 activation [b, s, h]: 134 MB


def _layer(stack: Stack, **training):
    cluster = load_cluster("dgx-h100").with_gpus(8)
    tab = PlanTable.from_plans([Plan(tp=8, pp=1, dp=1, mbs=MBS, sp=True, tp_overlap=False)], 8)
    b = Batch(LLAMA8B, cluster, TrainingSpec(seq_len=SEQ, global_batch_size=MBS, stack=stack, **training), load_cost_params(), tab)
    return b, layer_forward(b, 0)


def test_sequence_dim_copies_cost_one_read_and_write_per_collective():
    b, titan = _layer(Stack.torchtitan)
    _, mega = _layer(Stack.megatron)
    # per layer: 2 AllGather + 2 ReduceScatter each way; each copies 134 MB in and out:
    # 4 x 2 x 134 MB = 1.07 GB of HBM traffic per pass on top of the same collectives
    copies = b.hbm_seconds(4 * 2 * MESSAGE)
    assert titan["tp"][0] - mega["tp"][0] == pytest.approx(copies, rel=1e-9)
    assert titan["tp_bwd"][0] - mega["tp_bwd"][0] == pytest.approx(copies, rel=1e-9)
    assert copies > 0.1 * mega["tp"][0]  # not noise: >10% of the collectives' own time at 8 x H100


def test_tensorwise_fp8_gathers_one_byte_forward_only():
    b, bf16 = _layer(Stack.torchtitan)
    _, fp8 = _layer(Stack.torchtitan, precision=Precision.fp8, fp8_recipe=Fp8Recipe.tensorwise)
    _, rowwise = _layer(Stack.torchtitan, precision=Precision.fp8, fp8_recipe=Fp8Recipe.rowwise)
    group = b.group("tp")
    half_gather = b.collective(Collective.all_gather, MESSAGE, group) - b.collective(Collective.all_gather, MESSAGE / 2, group)
    # two forward gathers per layer move half the bytes, and their copies half as much
    saved = 2 * half_gather + b.hbm_seconds(2 * MESSAGE)
    assert bf16["tp"][0] - fp8["tp"][0] == pytest.approx(saved, rel=1e-9)
    assert fp8["tp_bwd"][0] == pytest.approx(bf16["tp_bwd"][0], rel=1e-12)  # bf16 gradients backward
    assert rowwise["tp"][0] == pytest.approx(bf16["tp"][0], rel=1e-12)       # rowwise gathers bf16


def test_per_op_sac_gathers_the_sp_inputs_again():
    # torchtitan's per-op SAC save list names mm, SDPA, reduce_scatter_tensor and max, not the
    # AllGather (torchtitan@3f20451b parallelize_llama.py): recomputing a block in backward runs
    # the two forward gathers of each layer again, each with its dim-1 copy (read + write 134 MB)
    b, titan = _layer(Stack.torchtitan)
    group = b.group("tp")
    gather = b.collective(Collective.all_gather, MESSAGE, group)
    assert titan["sac_tp"][0] == pytest.approx(2 * gather + 2 * b.hbm_seconds(2 * MESSAGE), rel=1e-9)
    # a tensorwise float8 block re-gathers the 1-byte cast, as its forward did
    _, fp8 = _layer(Stack.torchtitan, precision=Precision.fp8, fp8_recipe=Fp8Recipe.tensorwise)
    gather8 = b.collective(Collective.all_gather, MESSAGE / 2, group)
    assert fp8["sac_tp"][0] == pytest.approx(2 * gather8 + 2 * b.hbm_seconds(MESSAGE), rel=1e-9)
    # half the forward's TP time: the two gathers of its four collectives of one size (NCCL's
    # ring AllGather and ReduceScatter move the same bytes per rank; measured 0.5 at 8 x H100)
    assert 0.4 < titan["sac_tp"][0] / titan["tp"][0] < 0.6
