"""The launchers' checkpoint interval: Young-Daly from the cluster file's storage and MTBF and the
plan's step (seed 000 'Ловушка: использовать фиксированные интервалы контрольных точек')."""

from __future__ import annotations

import math

from autopar.cost import estimate as cost_estimate
from autopar.cost.flops import total_params
from autopar.emit.common import EmitJob, checkpoint_interval_steps
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan


def _job(cluster_name: str, gpus: int | None = None) -> EmitJob:
    model, cluster = load_model("llama3-70b"), load_cluster(cluster_name)
    cluster = cluster.with_gpus(gpus) if gpus else cluster
    training = TrainingSpec(seq_len=8192, global_batch_size=512)
    plan = parse_plan("tp=8,pp=4,vpp=5,mbs=1,zero=1,recompute=selective")
    return EmitJob(model, cluster, training, plan, cost_estimate(model, cluster, training, plan))


def test_interval_is_young_daly_over_the_step():
    job = _job("dgx-h100-superpod")  # 128 nodes, 0.65 GB/s storage per node, 50,000 h per GPU, no node/switch MTBF
    # checkpoint = params x (2 B weights + 12 B Adam fp32 master + 2 moments); 128 nodes write in parallel
    write_s = total_params(job.model) * 14 / (128 * 0.65e9)  # 70.6e9 x 14 / 83.2e9 B/s ~ 11.9 s
    mtbf_s = 50_000 * 3600 / 1024  # 175,781 s = 48.8 h
    tau_s = math.sqrt(2 * write_s * mtbf_s)  # ~2,044 s
    assert checkpoint_interval_steps(job) == round(tau_s / job.estimate.step_seconds)
    assert 1_900 < tau_s < 2_200  # the hand numbers above


def test_no_storage_bandwidth_keeps_the_launcher_default():
    job = _job("dgx-a100", gpus=32)
    assert job.cluster.storage_write_gb_per_s_per_node is None  # the preset names no storage
    assert checkpoint_interval_steps(job) is None
