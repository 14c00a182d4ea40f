"""torchtitan: a Python config module (--module/--config) and its torchrun launcher.
torchtitan dropped TOML job files in 0.3.0 (the v0.2.2 TOML is no longer written); the stock
config's CLI overrides cannot replace the model's converters, so only the module is emitted.

Names and rules: docs/reference/launchers.md section 3 (HEAD b5bcd76, 2026-08-21; v0.2.2).
Released Python-config versions differ in the batch keys: HEAD counts tokens
(num_tokens_per_microbatch_per_dp_rank, num_pp_microbatches), the 0.3.0 wheel still counts
sequences (local_batch_size, pipeline_parallel_microbatch_size); the config module sets the
form its torchtitan has. Stage split: pipeline_parallel_layers_per_stage with
first/last_stage_less_layers reproduces the plan's stage layers exactly
(torchtitan/distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autopar.emit.common import HYBRID_RULE, LATENT_MOE_RULE, Artefact, EmitJob, Rules, Violation, check_common
from autopar.emit.presets import preset_of, refuse
from autopar.emit.torchtitan_render import render_launcher, render_module
from autopar.specs.plan import CpAlgo, Dispatcher, RankOrder, Recompute, Schedule
from autopar.specs.stack import load_stack
from autopar.specs.training import Fp8Recipe, Precision, Stack

FRAMEWORK = "torchtitan"

# autopar preset whose architecture the entry builds -> (torchtitan module, config_registry
# function, model flavor); a model matches by its architecture, not its name (autopar.emit.presets)
MODELS = {
    "llama3-8b": ("llama3", "llama3_8b", "8B"),
    "llama3-70b": ("llama3", "llama3_70b", "70B"),
    "llama3-405b": ("llama3", "llama3_405b", "405B"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b", "671B"),
}
# RoPE.Config.scaling each registry flavor builds (torchtitan b5bcd76 and the 0.3.0 wheel,
# models/llama3/__init__.py _8b/_70b/_405b: ComplexRoPE scaling='llama', Llama-3.1's factor 8, low 1,
# high 4, original 8192; models/deepseek_v3/__init__.py _671b: scaling='yarn', factor 40)
FLAVOR_ROPE_SCALING = {"8B": "llama", "70B": "llama", "405B": "llama", "671B": "yarn"}
# the model's HF rope_scaling type (None: unscaled) -> torchtitan RoPE.Config.scaling (models/common/rope.py)
ROPE_SCALING = {None: "none", "llama3": "llama", "yarn": "yarn"}
# presets torchtitan has a near miss for, and why its entry does not train the preset's model
QWEN3_MOE_ROUTER = ("its MoE routes with an expert bias and has no balance loss (models/common/moe.py load_balance_coeff "
                    "1e-3, auxiliary-loss-free; the 0.3.0 wheel alike), where Qwen3-MoE trained without a bias under a "
                    "global-batch balance loss (router_aux_loss_coef 0.001)")
NOT_IN_REGISTRY = {
    "qwen3-30b-a3b": f"torchtitan b5bcd76 models/qwen3 has flavor 30B-A3B, but {QWEN3_MOE_ROUTER}",
    "qwen3-235b-a22b": "torchtitan b5bcd76 models/qwen3/__init__.py flavor 235B-A22B sets rope theta 5e6 (the 2507 "
                       f"refresh), the Qwen3-235B-A22B release 1e6, config_registry.py has no qwen3_235b_a22b config, and "
                       f"{QWEN3_MOE_ROUTER}",
}
SCHEDULES = {Schedule.one_f_one_b: "1F1B", Schedule.interleaved: "Interleaved1F1B", Schedule.gpipe: "GPipe",
             Schedule.dualpipev: "DualPipeV"}
AC_MODES = {Recompute.none: "none", Recompute.selective: "selective", Recompute.full: "full"}


@dataclass
class TitanConfig:
    """The emitted settings, in torchtitan's names; one source for the three renderings."""

    module: str
    config: str
    flavor: str
    stock: bool
    parallelism: dict = field(default_factory=dict)
    batch_tokens: dict = field(default_factory=dict)  # HEAD: {"training": {...}, "parallelism": {...}}
    batch_sequences: dict = field(default_factory=dict)  # 0.3.0 wheel and v0.2.2 TOML
    training: dict = field(default_factory=dict)
    training_python: dict = field(default_factory=dict)  # Python-config releases only (not in v0.2.2 TOML)
    compile: dict = field(default_factory=dict)
    activation_checkpoint: str = "selective"
    float8: bool = False
    float8_skip: list[str] = field(default_factory=lambda: ["lm_head"])  # Linear layers kept in bf16
    float8_recipe: str = "tensorwise"  # torchao Float8LinearConfig recipe_name
    model_kwargs: dict = field(default_factory=dict)  # model_registry keyword arguments
    rope_override: tuple[str, str] | None = None  # (flavor's, model's) RoPE.Config.scaling when they differ
    notes: list[str] = field(default_factory=list)


# plan.dispatcher -> DeepSeek-V3 model_registry(moe_comm_backend=...) (models/common/config_utils.py)
MOE_COMM = {Dispatcher.alltoall: "standard", Dispatcher.deepep: "deepep"}


def registry_preset(model) -> str | None:
    """The preset of MODELS whose network the model is (an HF config.json of it under any name)."""
    return preset_of(model, tuple(MODELS))


def base_model(job: EmitJob) -> tuple[str, str, str, bool]:
    preset = registry_preset(job.model)
    if preset is not None:
        return (*MODELS[preset], True)
    return "llama3", "llama3_8b", "8B", False


REGISTRY_RULE = "a torchtitan model registry entry for the model"
LINEAR_RULE = "softmax-attention decoder layers"
# rules about the model whatever the plan (check_common's included): refused as model=NAME
MODEL_RULES = {REGISTRY_RULE, LINEAR_RULE, HYBRID_RULE, LATENT_MOE_RULE}


def model_violations(model) -> list[Violation]:
    """What torchtitan refuses about the model itself, whatever the plan (checked before a search
    for its plans: autopar.cli.framework)."""
    found = []
    if model.linear_attention is not None:
        found.append(Violation(LINEAR_RULE, f"{model.name} has Gated DeltaNet (linear-attention) layers; torchtitan's model "
                               "registry builds none (Megatron-LM, Megatron-Bridge or an HF-model DeepSpeed run can train it)", "TT"))
    if registry_preset(model) is None:
        near = preset_of(model, tuple(NOT_IN_REGISTRY))
        why = f" ({near}: {NOT_IN_REGISTRY[near]})" if near else ""
        found.append(Violation(REGISTRY_RULE, f"{model.name}: its architecture is none of torchtitan's registry models "
                               f"({', '.join(sorted(MODELS))}; an HF config.json of one of them matches under any name){why}; "
                               "another registry model would train a different network", "TT"))
    return found


def stage_split(job: EmitJob, rules: Rules) -> tuple[int, int, int] | None:
    """(layers_per_stage, first_stage_less_layers, last_stage_less_layers) giving the plan's
    stage layers: torchtitan splits L + first_less + last_less evenly over pp*vpp virtual stages
    (model order) and takes first_less/last_less off the first/last virtual stage; it places
    them round-robin, or in a V for DualPipeV (_get_pp_rank_to_stage_indices_mapping), as the
    plan's layout does. Checked per virtual stage: equal rank totals can hide chunks that are not."""
    stages = list(job.plan.model_layout(job.model).decoders)
    body = stages[1:-1] or [max(stages)]
    chunk = max(body)
    ok = len(set(body)) == 1 and stages[0] <= chunk and stages[-1] <= chunk
    if not rules.check(ok, "stage split = layers_per_stage with first/last_stage_less_layers",
                       f"virtual stage layers {stages} are not an even split less some layers on the first and last stage", "PP"):
        return None
    return chunk, chunk - stages[0], chunk - stages[-1]


def titan_fp8_recipe(training) -> Fp8Recipe:
    """The FP8 recipe the launcher runs: the training spec's, else torchtitan's own (rowwise)."""
    return training.fp8_recipe or load_stack(Stack.torchtitan).fp8_recipe


def plan_checks(job: EmitJob, rules: Rules) -> None:
    plan, t = job.plan, job.training
    found = model_violations(job.model)
    rules.found.extend(v for v in found if v.rule == LINEAR_RULE)
    rules.check(t.precision in (Precision.bf16, Precision.fp8), "precision in {bf16, fp8}",
                f"precision={t.precision.value}: mixed_precision_param is bfloat16|float32; autopar maps fp8 to the Float8 converter only", "TT")
    rules.check(t.precision != Precision.fp8 or titan_fp8_recipe(t) == Fp8Recipe.rowwise, "Float8 recipe_name in {rowwise, rowwise_with_gw_hp}",
                f"fp8_recipe={titan_fp8_recipe(t).value}: torchtitan 0.3.0's Float8LinearConverter runs torchao's rowwise recipes only "
                "(recipe_name rowwise | rowwise_with_gw_hp); cost the plan with --fp8-recipe rowwise", "F8")
    rules.check(not t.fp8_param_gather, "FP8 all-gather only with tensorwise scaling",
                "fp8_param_gather=True: torchao gathers FP8 weights (enable_fsdp_float8_all_gather) for tensorwise scaling only, "
                "and torchtitan 0.3.0 runs the rowwise recipes; cost the plan without --fp8-param-gather", "F8")
    rules.check(plan.cp == 1 or plan.cp_algo == CpAlgo.ring, "context parallel is ring attention",
                f"cp_algo={plan.cp_algo.value}: torchtitan's ParallelismConfig has no Ulysses all-to-all", "TT")
    schedule = plan.pipeline_schedule
    rules.check(schedule in SCHEDULES, "zero-bubble schedules are multi-stage (>= 2 stages per rank)",
                f"schedule={schedule.value} with vpp={plan.vpp}: InterleavedZeroBubble/ZBVZeroBubble need vpp >= 2", "PP")
    rules.check(plan.recompute_modules is None, "selective AC is per-op or per-layer",
                f"recompute_modules={'+'.join(m.value for m in plan.recompute_modules or ())}: torchtitan's selective AC "
                "(mode selective, selective_ac_option op | n) names no submodules", "ACT")
    rules.check(plan.offload_modules is None, "no activation offloading",
                f"offload_modules={'+'.join(m.value for m in plan.offload_modules or ())}: torchtitan has no per-module activation "
                "offloading to host memory (Megatron-Core --fine-grained-activation-offloading)", "ACT")
    rules.check(plan.offload_num_layers is None, "no activation offloading",
                f"offload_num_layers={plan.offload_num_layers}: torchtitan has no layer-level activation offloading to host memory "
                "(Megatron-Core --cpu-offloading)", "ACT")
    rules.check(plan.recompute_num_layers is None and plan.stage_recompute_layers is None, "FullAC wraps every transformer block",
                f"recompute_num_layers={plan.recompute_num_layers}, stage_recompute_layers={plan.stage_recompute_layers}: "
                "partial full recompute has no torchtitan setting", "ACT")
    rules.check(t.grad_reduce_bytes_per_param >= 4, "gradients reduced in float32 (mixed_precision_reduce has one value)",
                f"grad_reduce_bytes_per_param={t.grad_reduce_bytes_per_param:g}: torchtitan reduces gradients in float32 only; "
                "plan with 4-byte gradient reduction", "TT config/configs.py TrainingConfig")
    rules.found.extend(v for v in found if v.rule == REGISTRY_RULE)
    if job.model.is_moe:
        rules.check(not plan.ep_overlap, "no EP communication overlap", "ep_overlap=on: torchtitan has no "
                    "overlap of one micro-batch's expert all-to-all with another's compute", "TT")
    if job.model.mtp_num_layers and plan.cp > 1:
        rules.check(False, "MTP modules only without context parallelism",
                    f"mtp_num_layers={job.model.mtp_num_layers} with cp={plan.cp}: torchtitan's MTP decoder refuses context "
                    "parallelism (models/deepseek_v3/mtp.py: 'MTP does not support context parallelism yet')", "CP")
    rules.check(plan.order == RankOrder.tp_cp_ep_dp_pp, "device mesh order pp, dp_replicate, dp_shard, cp, tp (tp fastest)",
                f"order={plan.order.value}: torchtitan builds its mesh in one fixed order (distributed/parallel_dims.py)", "PD")
    if job.model.mtp_num_layers and plan.pp > 1:
        rules.check(False, "MTP modules only without pipeline parallelism",
                    f"mtp_num_layers={job.model.mtp_num_layers} with pp={plan.pp}: torchtitan's pipeline split "
                    "(_generate_llm_fqn_per_model_part) places no MTP module", "PP")
    if job.model.is_moe:
        rules.check(plan.dispatcher in MOE_COMM, "MoE dispatch in {all-to-all, DeepEP}",
                    f"dispatcher={plan.dispatcher.value}: torchtitan's moe_comm_backend is standard (all-to-all), deepep or hybridep", "TT")
    if job.model.is_moe and plan.ep > 1:
        rules.check(plan.expert_tp == 1, "no expert tensor parallelism (sparse mesh pp, dp_replicate, efsdp, ep)",
                    f"etp={plan.expert_tp}: expert_tensor_parallel_degree is gone from HEAD; set etp=1", "PD")
    if plan.zero_shard_size is not None:
        rules.check(plan.zero_shard_size % plan.cp == 0, "HSDP shard group = dp_shard * cp",
                    f"zero_shard_size({plan.zero_shard_size}) % cp({plan.cp})", "PD")


ROPE_RULE = "the registry flavor's RoPE scaling, or none"


def _rope_override(tc: TitanConfig, model, rules: Rules) -> None:
    """Llama-3 8B/70B (no rope_scaling) on the registry's 8B/70B flavors, which are Llama-3.1's
    (scaled RoPE): the config turns every layer's RoPE scaling off. Turning scaling on, or to
    another kind, has no override (the scaling parameters are the flavor's): refused."""
    kind = model.rope_scaling.type if model.rope_scaling is not None else None
    want, flavor = ROPE_SCALING.get(kind), FLAVOR_ROPE_SCALING[tc.flavor]
    if want == flavor:
        return
    if rules.check(want == "none", ROPE_RULE,
                   f"rope_scaling type={kind}: torchtitan's {tc.module} {tc.flavor} flavor builds RoPE scaling '{flavor}' "
                   "(ComplexRoPE.Config scaling); only turning it off has an override", "TT models/common/rope.py"):
        tc.rope_override = (flavor, want)
        tc.notes.append(f"torchtitan's {tc.module} {tc.flavor} flavor builds RoPE scaling '{flavor}' (Llama-3.1's); "
                        f"{model.name} has no rope_scaling, so the config turns every layer's RoPE scaling off.")


def build(job: EmitJob, rules: Rules) -> TitanConfig | None:
    plan, t, model = job.plan, job.training, job.model
    module, config, flavor, stock = base_model(job)
    tc = TitanConfig(module, config, flavor, stock)
    if model.is_moe:  # the plan's dispatch; DeepSeek-V3's model_registry also takes its MTP modules (Qwen3's does not)
        tc.model_kwargs = {"attn_backend": "flex", "moe_comm_backend": MOE_COMM.get(plan.dispatcher, "standard")}
        if module == "deepseek_v3":
            tc.model_kwargs["num_mtp_layers"] = model.mtp_num_layers
        tc.float8_skip = ["lm_head", "router.gate"]
        if model.moe_aux_loss_coeff is not None:
            # models/common/moe.py (b5bcd76, 0.3.0): every MoE balances with an expert bias
            # (load_balance_coeff, auxiliary-loss-free); no balance-loss weight exists to set
            tc.notes.append(f"torchtitan balances the experts by an expert-bias update (MoE load_balance_coeff 1e-3), not by "
                            f"the model's balance loss (weight {model.moe_aux_loss_coeff:g}): it has no such loss.")
    _rope_override(tc, model, rules)
    dp, m = job.dp, job.num_microbatches
    shard = dp if plan.zero >= 1 else 1
    if plan.zero >= 1 and plan.zero_shard_size is not None:
        shard = plan.zero_shard_size // plan.cp
    p = tc.parallelism
    p["data_parallel_replicate_degree"] = dp // shard if shard else dp
    p["data_parallel_shard_degree"] = shard
    if plan.zero in (1, 2):
        p["fsdp_reshard_after_forward"] = "never"
        tc.notes.append(f"torchtitan has no optimizer-only ZeRO-{plan.zero}; FSDP2 with reshard_after_forward=never "
                        "shards gradients and optimizer states (ZeRO-2 memory, same traffic).")
    elif plan.zero == 3:  # the plan's resolved choice, not torchtitan's default (which depends on PP)
        p["fsdp_reshard_after_forward"] = "always" if plan.reshard_after_forward else "never"
    p["tensor_parallel_degree"] = plan.tp
    p["enable_sequence_parallel"] = plan.sequence_parallel
    p["pipeline_parallel_degree"] = plan.pp
    p["context_parallel_degree"] = plan.cp
    p["expert_parallel_degree"] = plan.ep
    if plan.pp > 1:
        p["pipeline_parallel_schedule"] = SCHEDULES.get(plan.pipeline_schedule, "1F1B")
        split = stage_split(job, rules)
        if split:
            lps, first_less, last_less = split
            p["pipeline_parallel_layers_per_stage"] = lps
            p["pipeline_parallel_first_stage_less_layers"] = first_less
            p["pipeline_parallel_last_stage_less_layers"] = last_less
    tokens_mb = plan.mbs * t.seq_len
    tc.batch_tokens = {
        "training": {"num_tokens_per_microbatch_per_dp_rank": tokens_mb, "num_tokens_per_train_step": t.tokens_per_step,
                     "max_context_length": t.seq_len},
        "parallelism": {"num_pp_microbatches": m if plan.pp > 1 else 1},
    }
    tc.batch_sequences = {
        "training": {"local_batch_size": plan.mbs * (m if plan.pp > 1 else 1), "global_batch_size": t.global_batch_size,
                     "seq_len": t.seq_len},
        "parallelism": {"pipeline_parallel_microbatch_size": plan.mbs},
    }
    tc.training = {"mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32"}
    # CUDA graphs reject PP > 1, and EP > 1 with the stock (host-synchronizing) dispatchers
    # (torchtitan 0.3.0 trainer.py _validate_cuda_graphs; found by the integration test).
    tc.training_python = {"disable_cuda_graphs": plan.pp > 1 or plan.ep > 1}
    # Async TP and Float8 need the model compiled (CompileConfig.__post_init__ in 0.3.0)
    async_tp = plan.tp > 1 and plan.tp_comm_overlap
    tc.float8 = t.precision == Precision.fp8
    tc.float8_recipe = titan_fp8_recipe(t).value
    tc.compile = {"enable_async_tensor_parallel": async_tp}
    if async_tp or tc.float8:
        tc.compile.update({"enable": True, "components": ["model", "loss"]})
        if t.stack == Stack.torchtitan:
            tc.notes.append("the config compiles the model (async TP and Float8 need torch.compile); the prediction above is "
                            "the eager stack's: `autopar estimate --stack torchtitan-compile` costs the plan as this config runs it")
    tc.activation_checkpoint = AC_MODES[plan.recompute]
    return tc


def validate(tc: TitanConfig, job: EmitJob, rules: Rules) -> Rules:
    """torchtitan's checks on the emitted values (PD _validate, TR, PP; v0.2.2 train.py)."""
    p, world = tc.parallelism, job.num_gpus
    rep, shard, tp, pp, cp, ep = (p[k] for k in ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                                                 "tensor_parallel_degree", "pipeline_parallel_degree",
                                                 "context_parallel_degree", "expert_parallel_degree"))
    rules.check(min(rep, shard, tp, pp, cp, ep) >= 1, "every degree >= 1", f"degrees {p}", "PD")
    rules.check(rep * shard * cp * tp * pp == world, "dp_replicate * dp_shard * cp * tp * pp == WORLD_SIZE",
                f"dp_replicate({rep}) * dp_shard({shard}) * cp({cp}) * tp({tp}) * pp({pp}) != WORLD_SIZE({world})", "PD")
    rules.check((shard * cp * tp) % ep == 0, "(dp_shard * cp * tp) % ep == 0",
                f"dp_shard({shard}) * cp({cp}) * tp({tp}) = {shard * cp * tp} % ep({ep})", "PD")
    tokens = tc.batch_tokens["training"]["num_tokens_per_microbatch_per_dp_rank"]
    divisor = (tp if p["enable_sequence_parallel"] else 1) * (2 * cp if cp > 1 else 1)
    rules.check(tokens % divisor == 0, "tokens per microbatch % (tp if SP) * (2cp if cp > 1) == 0",
                f"{tokens} % {divisor} = {tokens % divisor}", "TR")
    step = tc.batch_tokens["training"]["num_tokens_per_train_step"]
    per_iter = tokens * tc.batch_tokens["parallelism"]["num_pp_microbatches"] * rep * shard
    rules.check(step % per_iter == 0, "num_tokens_per_train_step % (tokens per microbatch * num_pp_microbatches * dp) == 0",
                f"{step} % {per_iter} = {step % per_iter}", "TR")
    rules.check(tc.training_python.get("disable_cuda_graphs") or (pp == 1 and ep == 1),
                "CUDA graphs need PP == 1 and no host-synchronizing EP dispatcher (else disable_cuda_graphs)",
                f"pp={pp}, ep={ep} with CUDA graphs on", "0.3.0 trainer.py _validate_cuda_graphs")
    seqs = tc.batch_sequences
    local, micro = seqs["training"]["local_batch_size"], seqs["parallelism"]["pipeline_parallel_microbatch_size"]
    rules.check(seqs["training"]["global_batch_size"] % (local * rep * shard) == 0, "v0.2.2: global_batch_size % (local_batch_size * dp) == 0",
                f"{seqs['training']['global_batch_size']} % ({local} * {rep * shard})", "v0.2.2 train.py")
    rules.check(pp == 1 or local % micro == 0, "local_batch_size % pipeline_parallel_microbatch_size == 0",
                f"{local} % {micro}", "v0.2.2 JC / 0.3.0 trainer.py")
    if pp > 1 and "pipeline_parallel_layers_per_stage" in p:
        lps = p["pipeline_parallel_layers_per_stage"]
        eff = job.model.num_layers + p["pipeline_parallel_first_stage_less_layers"] + p["pipeline_parallel_last_stage_less_layers"]
        stages = -(-eff // lps)
        single = p["pipeline_parallel_schedule"] in ("1F1B", "GPipe")
        if rules.check(stages % pp == 0, "num_virtual_stages % pp == 0", f"ceil({eff} / {lps}) = {stages} stages, pp={pp}", "PP"):
            per_rank = stages // pp
            rules.check(per_rank == 1 if single else per_rank >= 2,
                        "single-stage schedules need 1 stage per rank, multi-stage ones >= 2",
                        f"{p['pipeline_parallel_schedule']} with {per_rank} stages per rank", "PP")
    return rules


def check_torchtitan(job: EmitJob) -> tuple[Rules, TitanConfig | None]:
    rules = Rules(FRAMEWORK)
    check_common(job, rules)
    plan_checks(job, rules)
    if rules.found or not job.num_microbatches:
        rules.check(bool(job.num_microbatches), "global batch divides by dp * micro-batch",
                    f"global batch {job.training.global_batch_size} % (dp({job.dp}) * mbs({job.plan.mbs}))", "TR")
        return rules, None
    tc = build(job, rules)
    return validate(tc, job, rules), tc


def emit_torchtitan(job: EmitJob) -> list[Artefact]:
    rules, tc = check_torchtitan(job)
    refuse(FRAMEWORK, job.model.name, job.plan.text(), rules.found, MODEL_RULES)
    return [
        Artefact("autopar_torchtitan.py", render_module(job, tc)),
        Artefact("launch_torchtitan.sh", render_launcher(job, tc), executable=True),
    ]
