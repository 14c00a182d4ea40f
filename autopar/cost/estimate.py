"""estimate(): one plan through the batch cost model, as an Estimate with its breakdowns."""

from __future__ import annotations

from autopar.cost.context import Batch
from autopar.cost.flops import model_flops_per_token
from autopar.cost.rules import plan_violations
from autopar.cost.step import COMM_PARTS, StepResult, evaluate
from autopar.cost.table import PlanTable
from autopar.errors import InputError
from autopar.specs.costparams import CostParams, load_cost_params
from autopar.specs.estimate import Bottleneck, Estimate, StageEstimate
from autopar.specs.hardware import ClusterSpec, gb_gib
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan
from autopar.specs.training import TrainingSpec
from autopar.specs.trust import family_error, family_of


def bottleneck(time: dict[str, float]) -> Bottleneck:
    groups = {
        Bottleneck.compute: time["compute_gemm"] + time["compute_attention"] + time["recompute"],
        Bottleneck.memory: time["compute_elementwise"] + time["optimizer_step"],
        Bottleneck.communication: sum(time[k] for k in COMM_PARTS),
        Bottleneck.bubble: time["pipeline_bubble"],
        Bottleneck.coordination: time["step_overhead"] + time["host_launch"],
    }
    return max(groups, key=lambda k: groups[k])


def tp_span_reason(tp: int) -> str:
    """The start of the reason a tp group wider than a node gives (cli.estimate drops it with
    --allow-tp-across-nodes)."""
    return f"tp={tp} spans nodes"


def infeasibility(memory_bytes: float, host_bytes: float, worst_stage: int, cluster: ClusterSpec, plan: Plan) -> list[str]:
    reasons = []
    if memory_bytes > cluster.usable_hbm_bytes:
        limit = (f"HBM is {gb_gib(cluster.gpu.hbm_bytes)}" if not cluster.memory_headroom_gb else
                 f"the limit is {cluster.hbm_limit_text()}")
        reasons.append(f"memory: needs {memory_bytes / 1e9:.1f} GB per GPU on stage {worst_stage}, {limit}")
    host_capacity = cluster.host_memory_bytes_per_gpu
    if host_capacity is not None and host_bytes > host_capacity:
        reasons.append(f"host memory: activation offloading puts {host_bytes / 1e9:.1f} GB per GPU in pinned host memory, "
                       f"the node gives each GPU {cluster.host_memory_gb_per_gpu:g} GB (cluster host_memory_gb_per_gpu)")
    if plan.tp > cluster.gpus_per_node:
        reasons.append(f"{tp_span_reason(plan.tp)}: the NVLink domain has {cluster.gpus_per_node} GPUs")
    return reasons


def to_estimate(batch: Batch, result: StepResult, i: int) -> Estimate:
    """Row i of a batch result as an Estimate."""
    model, cluster, training = batch.model, batch.cluster, batch.training
    plan = batch.tab.plan(i)
    step = float(result.step_seconds[i])
    time = {k: float(v[i]) for k, v in result.time.items()}
    memory = {k: float(v[i]) for k, v in result.memory.items()}
    tokens = training.tokens_per_step
    model_flops = model_flops_per_token(model, training.seq_len, frozen_weights=training.frozen_weights) * tokens
    causal_flops = model_flops_per_token(model, training.seq_len, causal=True, frozen_weights=training.frozen_weights) * tokens
    peak = cluster.gpu.peak_flops_per_second(training.precision.gemm_dtype) * cluster.num_gpus
    tps = tokens / step
    ttt = training.target_tokens / tps if training.target_tokens else None
    price = cluster.price_usd_per_gpu_hour
    pipeline = float(result.pipeline_seconds[i])
    reasons = infeasibility(float(result.memory_bytes[i]), float(result.host_bytes[i]), int(result.worst_stage[i]), cluster, plan)
    stages = [StageEstimate(layers=n, recompute_layers=int(round(result.stage_recomputed_layers[i, s])),
                            memory_bytes=float(result.stage_memory_bytes[i, s]), seconds=float(result.stage_seconds[i, s]))
              for s, n in enumerate(result.stage_layers[i])]
    return Estimate(
        plan=plan.text(), feasible=not reasons, reasons=reasons, num_gpus=cluster.num_gpus, dp=int(batch.tab.dp[i]),
        num_microbatches=int(batch.microbatches[i]), stage_layers=list(result.stage_layers[i]), stages=stages, step_seconds=step,
        tokens_per_second=tps, tokens_per_second_per_gpu=tps / cluster.num_gpus,
        model_flops_per_step=model_flops, hardware_flops_per_step=float(result.hardware_flops[i]),
        model_tflops_per_gpu=model_flops / step / cluster.num_gpus / 1e12,
        mfu=model_flops / step / peak, hfu=float(result.hardware_flops[i]) / step / peak, mfu_causal=causal_flops / step / peak,
        bubble_fraction=time["pipeline_bubble"] / pipeline if pipeline else 0.0,
        memory_bytes_per_gpu=float(result.memory_bytes[i]), memory_capacity_bytes=cluster.usable_hbm_bytes,
        memory_headroom_bytes=cluster.memory_headroom_bytes,
        host_memory_bytes_per_gpu=float(result.host_bytes[i]),
        host_memory_capacity_bytes=cluster.host_memory_bytes_per_gpu,
        worst_stage=int(result.worst_stage[i]), memory_breakdown=memory, time_breakdown=time,
        bottleneck=bottleneck(time), time_to_train_seconds=ttt,
        validated=family_error(family_of(model.is_moe, plan.zero, training.precision.value, cluster.gpu.architecture)),
        cost_usd=ttt / 3600 * price * cluster.num_gpus if ttt is not None and price is not None else None,
    )


def check_plan(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, plan: Plan) -> None:
    """Raise InputError naming the first structural rule the plan breaks."""
    broken = plan_violations(model, cluster, training, plan)
    if broken:
        raise InputError(*broken[0])


def make_batch(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, plans: list[Plan], params: CostParams | None = None) -> Batch:
    return Batch(model, cluster, training, params or load_cost_params(), PlanTable.from_plans(plans, cluster.num_gpus))


def estimate(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, plan: Plan, params: CostParams | None = None) -> Estimate:
    """Cost one plan. Raises InputError when the plan breaks a structural rule; a plan that
    does not fit in memory comes back with feasible=False and the reasons."""
    check_plan(model, cluster, training, plan)
    batch = make_batch(model, cluster, training, [plan], params)
    return to_estimate(batch, evaluate(batch), 0)
