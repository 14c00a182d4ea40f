"""ZeRO-2 reduce-scatters after every micro-batch (it keeps only its gradient shard); ZeRO-1
reduces once per step. DeepSpeed runtime/zero/stage_1_and_2.py: reduce_ready_partitions_and_
remove_grads reduces `if self.partition_gradients or self.is_gradient_accumulation_boundary()`."""

from __future__ import annotations

import pytest

from autopar.cost import estimate
from autopar.specs import parse_plan
from autopar.specs.hardware import load_cluster
from autopar.specs.model import load_model
from autopar.specs.training import TrainingSpec


def _dp_comm(zero: int, global_batch: int) -> float:
    """LLaMA-3 8B on 64 A100 (8 nodes), DeepSpeed, dp=64, mbs=1: global_batch/64 micro-batches."""
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-a100").with_gpus(64)
    training = TrainingSpec(seq_len=2048, global_batch_size=global_batch, stack="deepspeed", flash_attention=True)
    return estimate(model, cluster, training, parse_plan(f"tp=1,pp=1,dp=64,mbs=1,zero={zero}")).time_breakdown["dp_comm"]


def test_zero2_pays_one_reduce_scatter_per_micro_batch():
    """Both stages gather the updated parameters once per step and reduce-scatter the same bytes;
    only ZeRO-2 repeats the reduce-scatter per micro-batch. So (ZeRO-2 - ZeRO-1) is (m - 1)
    exposed reduce-scatters: 1 with m = 2 micro-batches, 7 with m = 8 (each behind an equal
    backward, so each exposes the same time)."""
    extra_2 = _dp_comm(2, 128) - _dp_comm(1, 128)
    extra_8 = _dp_comm(2, 512) - _dp_comm(1, 512)
    assert extra_2 > 0
    assert extra_8 / extra_2 == pytest.approx(7.0, rel=1e-9)


def test_one_micro_batch_costs_the_same():
    """With one micro-batch both reduce once: the same DP time."""
    assert _dp_comm(2, 64) == pytest.approx(_dp_comm(1, 64), rel=1e-12)
