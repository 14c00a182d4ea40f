"""Shared pieces of the launcher emitters: the job being emitted, the artefact type, the
header every artefact carries, rule violations, and the canonical plan used by round trips."""

from __future__ import annotations

from dataclasses import dataclass, field

from autopar import __version__
from autopar.errors import InputError
from autopar.specs.estimate import Estimate
from autopar.specs.hardware import GB, ClusterSpec, usable_hbm_text
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan, Recompute
from autopar.specs.results import Results
from autopar.specs.stack import runs_expandable_segments
from autopar.specs.training import TrainingSpec

# The software stacks each launcher framework runs (profiles/stacks/); the first is its default
# (--stack with --framework, and the emitted headers' warning).
FRAMEWORK_STACKS = {"megatron": ("megatron",), "megatron-bridge": ("megatron",), "deepspeed": ("deepspeed",),
                    "torchtitan": ("torchtitan", "torchtitan-compile")}


MEGATRON_CORE_FRAMEWORKS = ("megatron", "megatron-bridge")


@dataclass(frozen=True)
class EmitJob:
    """Everything an emitter needs: the inputs, the plan and its estimate (for the header)."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    plan: Plan
    estimate: Estimate
    rank: int = 1
    version: str = __version__
    searched_with: str | None = None  # autopar version that wrote the results file, when different

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def dp(self) -> int:
        return self.plan.data_parallel(self.num_gpus)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per step per pipeline: gbs / (dp * mbs) (0 when it does not divide)."""
        per_step = self.dp * self.plan.mbs
        return self.training.global_batch_size // per_step if self.training.global_batch_size % per_step == 0 else 0


def job_from_results(results: Results, rank: int = 1) -> EmitJob:
    """The job for the rank-th plan (1-based) of a results file."""
    if not 1 <= rank <= len(results.plans):
        raise InputError("rank", rank, f"must be in 1..{len(results.plans)} (plans in the results file)")
    ranked = results.plans[rank - 1]
    inputs = results.inputs
    searched = results.autopar_version if results.autopar_version != __version__ else None
    return EmitJob(inputs.model, inputs.cluster, inputs.training, ranked.plan, ranked.estimate, rank, __version__, searched)


@dataclass(frozen=True)
class Artefact:
    """One emitted file: name relative to the output folder, its text, executable or not."""

    name: str
    text: str
    executable: bool = False


@dataclass
class Violation:
    """One framework rule the emitted config breaks: the rule as the framework states it, the
    offending numbers, and where the rule comes from."""

    rule: str
    detail: str
    source: str = ""

    def __str__(self) -> str:
        return f"[{self.rule}] {self.detail}"


class RuleViolation(InputError):
    """A framework refuses the plan: names the framework and every rule the config breaks."""

    def __init__(self, framework: str, plan_text: str, violations: list[Violation]):
        self.framework = framework
        self.violations = violations
        rules = "; ".join(str(v) for v in violations)
        super().__init__("plan", plan_text, f"{framework} refuses it: {rules}")


@dataclass
class Rules:
    """Collects violations: `rules.check(ok, rule, detail)` records one when ok is false."""

    framework: str
    found: list[Violation] = field(default_factory=list)

    def check(self, ok: bool, rule: str, detail: str, source: str = "") -> bool:
        if not ok:
            self.found.append(Violation(rule, detail, source))
        return ok

    def refuse_if_any(self, plan_text: str) -> None:
        if self.found:
            raise RuleViolation(self.framework, plan_text, self.found)


# check_common's rules about the model itself, whatever the plan (an emitter refuses them as model=NAME)
HYBRID_RULE = "decoder layers of attention plus MLP"
LATENT_MOE_RULE = "routed experts at the model width"


def check_common(job: EmitJob, rules: Rules) -> None:
    """Checks every emitter makes before its framework's own rules."""
    rules.check(not job.training.frozen_weights, "pretraining only",
                "autopar emits pretraining launchers; frozen-weight (LoRA/adapter) runs need the framework's PEFT recipe")
    check_common_model(job.model, rules)
    try:
        job.plan.data_parallel(job.num_gpus)
    except InputError as exc:
        rules.check(False, "tp * cp * pp * dp == GPUs", exc.rule)


def check_common_model(m: ModelSpec, rules: Rules) -> None:
    """check_common's rules about the model itself, whatever the plan (HYBRID_RULE, LATENT_MOE_RULE)."""
    # Mamba-2 blocks and LatentMoE's projections are Megatron-Core modules (HybridModel, MoELayer):
    # Megatron-LM and Megatron-Bridge (HybridModelProvider) build them, torchtitan and DeepSpeed do not
    core = rules.framework in MEGATRON_CORE_FRAMEWORKS
    rules.check(m.hybrid_layer_pattern is None or core, HYBRID_RULE,
                f"{m.name} is a hybrid model (one block per layer, pattern {m.hybrid_layer_pattern}): of the emitters only "
                "Megatron-LM (--format megatron: pretrain_hybrid.py --hybrid-layer-pattern) and Megatron-Bridge (--format "
                "megatron-bridge: HybridModelProvider) write it; torchtitan and DeepSpeed have no Mamba-2 layers",
                "megatron/training/arguments.py --hybrid-layer-pattern")
    rules.check(m.moe_latent_size is None or core, LATENT_MOE_RULE,
                f"{m.name} runs its experts at moe_latent_size={m.moe_latent_size} (LatentMoE); of the emitters only Megatron-LM "
                "(--moe-latent-size) and Megatron-Bridge (model.moe_latent_size) have it",
                "megatron/core/transformer/moe/moe_layer.py fc1_latent_proj")


def header_lines(job: EmitJob, framework: str, notes: list[str] = ()) -> list[str]:
    """The header every artefact carries (without comment markers)."""
    est, model, cluster, training = job.estimate, job.model, job.cluster, job.training
    mem_gb = est.memory_bytes_per_gpu / GB
    cap_gb = est.memory_capacity_bytes / GB
    lines = [
        f"Generated by autopar {job.version} (autopar emit --format {framework}); plan rank {job.rank}"
        + (f", searched with autopar {job.searched_with}." if job.searched_with else "."),
        f"model:    {model.name} ({model.num_layers} layers, hidden {model.hidden_size}, {model.num_attention_heads} heads, "
        f"{model.kv_heads} kv heads{', ' + str(model.num_experts) + ' experts top-' + str(model.moe_top_k) if model.is_moe else ''})",
        f"cluster:  {cluster.name}, {job.num_gpus} x {cluster.gpu.name} ({cluster.num_nodes} nodes x {cluster.gpus_per_node})",
        f"training: seq {training.seq_len}, global batch {training.global_batch_size} sequences "
        f"({training.tokens_per_step:,} tokens), {training.precision_label}",
        f"plan:     {job.plan.text()}",
        f"layout:   dp={est.dp}, {est.num_microbatches} micro-batches per step, stage layers {est.stage_layers}",
        f"predicted ({training.stack.value} stack) step time {est.step_seconds:.3f} s, {est.tokens_per_second:,.0f} tokens/s, "
        f"MFU {100 * est.mfu:.1f}%, "
        f"memory {mem_gb:.2f} GB per GPU of "
        + (usable_hbm_text(est.memory_capacity_bytes, est.memory_headroom_bytes) if est.memory_headroom_bytes else f"{cap_gb:.2f} GB"),
    ]
    runs = FRAMEWORK_STACKS.get(framework, ())
    if runs and training.stack.value not in runs:
        lines.append(f"WARNING: predicted for the {training.stack.value} stack; this launcher runs {' or '.join(runs)}: "
                     f"`autopar estimate --stack {runs[0]}` costs the plan as it runs here")
    if not est.feasible:
        lines.append("WARNING: the cost model marks this plan infeasible: " + "; ".join(est.reasons))
    lines += [f"note: {n}" for n in notes]
    return lines


def comment_block(lines: list[str], marker: str = "#") -> str:
    return "\n".join(f"{marker} {line}".rstrip() for line in lines) + "\n"


# ---- canonical plan (round trips compare these) ----------------------------------------

def uneven_first_last(stages: list[int]) -> tuple[int, int] | None:
    """(first, last) when the middle stages are equal and the split is uneven; None when even.
    Raises ValueError when the middle stages differ (needs an explicit layout)."""
    if len(set(stages)) == 1:
        return None
    middle = stages[1:-1]
    if len(set(middle)) > 1:
        raise ValueError(f"middle stages differ: {stages}")
    return stages[0], stages[-1]


def canonical_plan(plan: Plan, model: ModelSpec, num_gpus: int) -> Plan:
    """The plan with every derived value made explicit, so two spellings of one plan compare
    equal: dp, sp and schedule resolved; etp null when it equals tp; first/last stage layers set
    replaced by the layout string of every virtual stage;
    recompute_num_layers only with full recompute; zero_shard_size null when it spans dp*cp."""
    dp = plan.data_parallel(num_gpus)
    # the layers of every virtual stage, written as a layout string: one form for first/last
    # counts, balanced defaults and explicit layouts alike
    layout = plan.model_layout(model).text() if plan.pp > 1 else None
    shard = plan.zero_shard_size if plan.zero_shard_size not in (None, dp * plan.cp) else None
    update = {
        "dp": dp,
        "etp": None if plan.expert_tp == plan.tp else plan.etp,
        "sp": plan.sequence_parallel,
        "tp_overlap": plan.tp_comm_overlap and plan.tp > 1,
        "schedule": plan.pipeline_schedule,
        "first_stage_layers": None,
        "last_stage_layers": None,
        "layout": layout,
        "recompute_num_layers": plan.recompute_num_layers if plan.recompute == Recompute.full else None,
        "zero_shard_size": shard,
    }
    return Plan.model_validate({**plan.model_dump(), **update})


def training_key(training: TrainingSpec) -> dict:
    """The TrainingSpec fields a launcher config carries (round trips compare these)."""
    return {
        "seq_len": training.seq_len,
        "global_batch_size": training.global_batch_size,
        "precision": training.precision,
        "grad_reduce_bytes_per_param": training.grad_reduce_bytes_per_param,
        "fp8_param_gather": training.fp8_param_gather,
    }


def checkpoint_interval_steps(job: EmitJob) -> int | None:
    """Young-Daly steps between checkpoints for this plan on this cluster: sqrt(2 T_write M) / step
    (seed 000 'Ловушка: использовать фиксированные интервалы контрольных точек'; T_write from the
    cluster file's storage bandwidth, M from its MTBF fields, the step from the estimate); None
    when the cluster file gives no storage bandwidth (the launcher then keeps its default)."""
    from autopar.cost.flops import total_params
    from autopar.cost.goodput import checkpoint_interval_steps as young_daly_steps

    if job.estimate is None:
        return None
    return young_daly_steps(total_params(job.model), job.training, job.cluster, job.estimate.step_seconds)


def rendezvous_block(job) -> str:
    """The torchrun rendezvous variables (from the environment, defaulting to the plan's
    cluster) and the check that they add up to the plan's GPU count."""
    c = job.cluster
    return f"""NNODES=${{NNODES:-{c.num_nodes}}}
GPUS_PER_NODE=${{GPUS_PER_NODE:-{c.gpus_per_node}}}
NODE_RANK=${{NODE_RANK:-0}}
MASTER_ADDR=${{MASTER_ADDR:-127.0.0.1}}
MASTER_PORT=${{MASTER_PORT:-29500}}
if [ $((NNODES * GPUS_PER_NODE)) -ne {job.num_gpus} ]; then
  echo "this plan needs {job.num_gpus} GPUs; NNODES * GPUS_PER_NODE = $((NNODES * GPUS_PER_NODE))" >&2
  exit 1
fi"""


def allocator_export(job: EmitJob) -> str | None:
    """The allocator setting the plan's memory assumed, as a launcher line: a plan costed with
    expandable segments counts no fragmentation slack (autopar.cost.context.Batch.fragmentation),
    so its launcher exports them (torchtitan's run_train.sh does the same, and Megatron-Bridge's
    perf recipes set it in their env_vars); None where the plan was costed with fixed segments,
    whose slack is counted, and the launcher leaves the allocator alone."""
    if not runs_expandable_segments(job.training):
        return None
    return ('export PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True${PYTORCH_CUDA_ALLOC_CONF:+,$PYTORCH_CUDA_ALLOC_CONF}"'
            "  # the plan's memory counts no fragmentation slack with expandable segments")


def lines_of(*lines: str | None) -> str:
    """The given lines of a script, each ending in a newline; None and empty ones left out."""
    return "".join(line + "\n" for line in lines if line)


def fp8_param_gather(job: EmitJob) -> bool:
    """Whether the launcher gathers weights in FP8: the training spec asks for it and the plan
    shards them (Megatron-LM refuses --fp8-param-gather without the distributed optimizer or FSDP;
    without sharding nothing is gathered, so the cost is the same)."""
    return job.training.fp8_param_gather and job.plan.zero >= 1
