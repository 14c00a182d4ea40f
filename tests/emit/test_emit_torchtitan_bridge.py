"""torchtitan and Megatron-Bridge emitters: the artefacts parse (Python, bash),
carry the plan's values under the frameworks' names, and refuse what the frameworks reject."""

from __future__ import annotations

import subprocess

import pytest

from autopar.emit import RuleViolation, refusals
from autopar.emit.bridge import bridge_overrides, emit_bridge
from autopar.emit.torchtitan import emit_torchtitan
from emit_cases import BF16_REDUCE, FP32_REDUCE, GOLDEN_CASES, make_job


R4 = FP32_REDUCE  # torchtitan reduces gradients in fp32 only


def files(arts) -> dict[str, str]:
    return {a.name: a.text for a in arts}


def titan_module(job) -> dict:
    """The module's top-level constants (PARALLELISM, BATCH_*, TRAINING, COMPILE), read without torchtitan."""
    import ast

    tree = ast.parse(files(emit_torchtitan(job))["autopar_torchtitan.py"])
    return {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()}


@pytest.mark.parametrize("case", ["interleaved_vpp", "gqa_sp", "long_context_cp", "fsdp_zero3", "mla_tp_deepep", "fp8_70b"])
def test_torchtitan_artefacts_parse(case, tmp_path):
    out = files(emit_torchtitan(make_job(*GOLDEN_CASES[case])))
    assert sorted(out) == ["autopar_torchtitan.py", "launch_torchtitan.sh"]  # no v0.2.2 TOML: 0.3.0 reads none
    compile(out["autopar_torchtitan.py"], "autopar_torchtitan.py", "exec")
    script = tmp_path / "launch_torchtitan.sh"
    script.write_text(out["launch_torchtitan.sh"])
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_torchtitan_stage_split_reproduces_uneven_stages():
    """126 layers on 16 stages = 7 + 14 x 8 + 7: layers_per_stage 8, one layer less at each end."""
    par = titan_module(make_job(*GOLDEN_CASES["gqa_sp"]))["PARALLELISM"]
    assert (par["pipeline_parallel_layers_per_stage"], par["pipeline_parallel_first_stage_less_layers"],
            par["pipeline_parallel_last_stage_less_layers"]) == (8, 1, 1)
    # ceil((126 + 1 + 1) / 8) = 16 virtual stages = pp: one stage per rank for 1F1B
    assert par["pipeline_parallel_schedule"] == "1F1B" and par["pipeline_parallel_degree"] == 16


def test_torchtitan_batch_keys_in_both_forms():
    consts = titan_module(make_job(*GOLDEN_CASES["interleaved_vpp"]))
    assert consts["BATCH_TOKENS"]["training"]["num_tokens_per_microbatch_per_dp_rank"] == 8192
    assert consts["BATCH_TOKENS"]["parallelism"]["num_pp_microbatches"] == 64  # 2048 / (dp 32 x mbs 1)
    assert consts["BATCH_SEQUENCES"]["training"]["local_batch_size"] == 64
    assert consts["BATCH_SEQUENCES"]["parallelism"]["pipeline_parallel_microbatch_size"] == 1


def test_torchtitan_async_tp_compiles_the_model_and_bf16_has_no_float8():
    """Async TP needs compile.enable with 'model' in compile.components (0.3.0 CompileConfig);
    the stock 405B config's Float8 converter is replaced by none for a bf16 plan."""
    job = make_job(*GOLDEN_CASES["gqa_sp"])
    compile_cfg = titan_module(job)["COMPILE"]
    assert compile_cfg == {"enable_async_tensor_parallel": True, "enable": True, "components": ["model", "loss"]}
    assert "model_registry('405B', converters=None)" in files(emit_torchtitan(job))["autopar_torchtitan.py"]
    fp8 = files(emit_torchtitan(make_job(*GOLDEN_CASES["fp8_70b"])))["autopar_torchtitan.py"]
    # torchtitan 0.3.0's converter has rowwise recipes only: the plan's (here the stack default) is named
    assert "Float8LinearConverter.Config(recipe_name='rowwise', filter_fqns=['lm_head'], model_compile_enabled=True)" in fp8


def test_torchtitan_zero0_is_ddp_and_zero3_is_fsdp():
    ddp = titan_module(make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=0", "bf16", R4))["PARALLELISM"]
    fsdp = titan_module(make_job(*GOLDEN_CASES["fsdp_zero3"]))["PARALLELISM"]
    assert (ddp["data_parallel_replicate_degree"], ddp["data_parallel_shard_degree"]) == (16, 1)
    assert (fsdp["data_parallel_replicate_degree"], fsdp["data_parallel_shard_degree"]) == (1, 8)


TITAN_REFUSED = [
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1", "bf16", "gradients reduced in float32"),  # with BF16_REDUCE below
    ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=1,ep=4", "bf16", "a torchtitan model registry entry for the model"),
    ("deepseek-v3", "hgx-h800", 2048, 4096, 4096, "tp=1,pp=16,ep=64", "bf16", "MTP modules only without pipeline parallelism"),
    ("llama3-70b", "dgx-h100", 64, 4096, 256, "tp=4,pp=4,recompute=full,stage_recompute_layers=16/12/8/4", "bf16", "FullAC wraps every"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,recompute=selective,recompute_modules=layernorm", "bf16", "selective AC is per-op or per-layer"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,cp=4,cp_algo=ulysses", "bf16", "context parallel is ring attention"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,offload_modules=core_attn", "bf16", "no activation offloading"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,offload_num_layers=8", "bf16", "no activation offloading"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,pp=2,schedule=zero-bubble", "bf16", "zero-bubble schedules are multi-stage"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1", "fp16", "precision in {bf16, fp8}"),
    ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=2,ep=4", "bf16", "no expert tensor parallelism"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,recompute=full,recompute_num_layers=4", "bf16", "FullAC wraps every transformer block"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,pp=4,first=2,last=14", "bf16", "stage split = layers_per_stage"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,pp=2,vpp=3", "bf16", "stage split = layers_per_stage"),
    # ranks hold 8 + 8 and 6 + 10 = 16 layers each, but torchtitan's layers_per_stage would build
    # 8 / 8 / 8 / 8 virtual stages, not the plan's 8 / 6 / 8 / 10: refused per virtual stage
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,pp=2,layout=Et*8|t*6|t*8|t*10L", "bf16", "stage split = layers_per_stage"),
    # models/deepseek_v3/mtp.py: "MTP does not support context parallelism yet"
    ("deepseek-v3", "hgx-h800", 2048, 4096, 4096, "tp=1,pp=1,cp=2,ep=64,zero=3", "bf16", "MTP modules only without context parallelism"),
    # distributed/parallel_dims.py builds the mesh ("pp", "dp_replicate", "dp_shard", "cp", "tp") whatever the plan says
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,pp=2,order=tp-cp-ep-pp-dp", "bf16", "device mesh order pp, dp_replicate"),
]


@pytest.mark.parametrize("model, cluster, gpus, seq, gbs, plan, precision, rule", TITAN_REFUSED, ids=[r[-1][:40] for r in TITAN_REFUSED])
def test_torchtitan_refuses_with_the_rule(model, cluster, gpus, seq, gbs, plan, precision, rule):
    with pytest.raises(RuleViolation) as info:
        emit_torchtitan(make_job(model, cluster, gpus, seq, gbs, plan, precision, BF16_REDUCE if "float32" in rule else R4))
    assert rule in str(info.value)


# the golden cases Megatron-Bridge runs (not: Mixtral and the hybrid models, which have no recipe
# autopar maps, and per-stage recompute counts)
BRIDGE_CASES = [c for c in sorted(GOLDEN_CASES) if not refusals(make_job(*GOLDEN_CASES[c]), "megatron-bridge")]


@pytest.mark.parametrize("case", BRIDGE_CASES)
def test_bridge_artefacts_parse(case, tmp_path):
    job = make_job(*GOLDEN_CASES[case])
    out = files(emit_bridge(job))
    assert sorted(out) == ["launch_megatron_bridge.sh", "pretrain_megatron_bridge.py"]  # YAML overrides dropped
    compile(out["pretrain_megatron_bridge.py"], "pretrain_megatron_bridge.py", "exec")
    overrides = bridge_overrides(job)
    assert overrides["model.tensor_model_parallel_size"] == job.plan.tp
    assert overrides["model.pipeline_model_parallel_size"] == job.plan.pp
    assert overrides["train.global_batch_size"] == job.training.global_batch_size
    script = tmp_path / "launch.sh"
    script.write_text(out["launch_megatron_bridge.sh"])
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def _script_functions(source: str) -> dict:
    """The emitted script's declares / apply_overrides, run without Megatron-Bridge installed."""
    start, end = source.index("def declares("), source.index("def autopar_config(")
    namespace: dict = {}
    exec(source[start:end], namespace)
    return namespace


def test_bridge_overrides_reach_fields_of_the_nested_transformer_config():
    # Megatron-Bridge 067f987 (models/gpt/model_config.py): BridgeGPTModelConfig keeps the parallel
    # and shape fields on its nested `transformer` config and forwards assignments there; the guard
    # looked at the outer dataclass only, so every emitted script stopped with AttributeError
    from dataclasses import dataclass, field

    @dataclass
    class Transformer:
        tensor_model_parallel_size: int = 1

    @dataclass
    class Model:
        transformer: Transformer = field(default_factory=Transformer)
        seq_length: int = 2048

        def __setattr__(self, name, value):  # Bridge's forwarding, reduced
            if name in ("transformer", "seq_length"):
                object.__setattr__(self, name, value)
            else:
                setattr(self.transformer, name, value)

    @dataclass
    class Config:
        model: Model = field(default_factory=Model)

    job = make_job(*GOLDEN_CASES[BRIDGE_CASES[0]])
    fns = _script_functions(files(emit_bridge(job))["pretrain_megatron_bridge.py"])
    cfg = fns["apply_overrides"](Config(), {"model.tensor_model_parallel_size": 8, "model.seq_length": 8192})
    assert (cfg.model.transformer.tensor_model_parallel_size, cfg.model.seq_length) == (8, 8192)
    with pytest.raises(AttributeError, match="has no field 'tensor_model_paralel_size'"):  # a typo is still refused
        fns["apply_overrides"](Config(), {"model.tensor_model_paralel_size": 8})


def test_bridge_sets_the_recipe_defaults_that_change_the_plan():
    """DeepSeek-V3 recipe: its layout, MTP and flex dispatcher are replaced by the plan's; the
    precision recipe's grad_reduce_in_fp32 is set from the plan (bf16_mixed defaults to True)."""
    job = make_job(*GOLDEN_CASES["mla_uneven"])
    o = bridge_overrides(job)
    assert o["model.pipeline_model_parallel_layout"] == job.plan.pipeline_layout(61, 1).text()
    assert o["model.mtp_num_layers"] == 1 and o["model.moe_token_dispatcher_type"] == "alltoall"
    assert o["model.moe_router_score_function"] == "sigmoid" and o["model.moe_router_enable_expert_bias"] is True
    assert (o["model.moe_router_num_groups"], o["model.moe_router_group_topk"]) == (8, 4)
    assert o["model.account_for_embedding_in_pipeline_split"] is False
    dense = files(emit_bridge(make_job(*GOLDEN_CASES["dense_1f1b"])))["pretrain_megatron_bridge.py"]
    assert "GRAD_REDUCE_IN_FP32 = False" in dense and "precision.grad_reduce_in_fp32 = GRAD_REDUCE_IN_FP32" in dense


def test_bridge_vpp_and_pipeline_dtype():
    o = bridge_overrides(make_job(*GOLDEN_CASES["interleaved_vpp"]))
    assert o["model.virtual_pipeline_model_parallel_size"] == 5
    assert o["model.pipeline_dtype"] == "torch.bfloat16"


@pytest.mark.parametrize("model, cluster, gpus, seq, gbs, plan, rule", [
    ("llama3-8b", "dgx-h100", 24, 4096, 48, "tp=3", "num_attention_heads % TP == 0"),
    ("llama3-8b", "dgx-h100", 16, 4100, 16, "tp=1,cp=4", "model.seq_length % (2*CP) == 0"),
    ("llama3-8b", "dgx-h100", 16, 4096, 100, "tp=2", "GBS % (MBS * DP) == 0"),
    # training/config.py: "use_tp_pp_dp_mapping is not supported with Megatron FSDP"
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,pp=2,zero=3,order=tp-cp-ep-pp-dp", "Megatron-FSDP with the default rank order"),
])
def test_bridge_refuses_with_bridge_and_core_rules(model, cluster, gpus, seq, gbs, plan, rule):
    with pytest.raises(RuleViolation) as info:
        emit_bridge(make_job(model, cluster, gpus, seq, gbs, plan))
    assert rule in str(info.value) and info.value.framework == "megatron-bridge"


def test_frozen_weights_refused_everywhere():
    from autopar.emit import FORMATS, emit
    job = make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1", frozen_weights=True)
    for fmt in FORMATS:
        with pytest.raises(RuleViolation, match="pretraining only"):
            emit(job, fmt)


def test_fp8_recipe_each_framework_can_run():
    """torchtitan 0.3.0's Float8LinearConverter has recipe_name rowwise | rowwise_with_gw_hp only;
    Transformer Engine (Megatron, Bridge) has no per-row scaling. Each refuses the other's recipe by name."""
    from autopar.emit import RuleViolation, emit
    case = GOLDEN_CASES["fp8_70b"]
    tensorwise = make_job(*case, fp8_recipe="tensorwise")
    rowwise = make_job(*case, fp8_recipe="rowwise")
    with pytest.raises(RuleViolation, match="Float8 recipe_name in"):
        emit(tensorwise, "torchtitan")
    assert "recipe_name='rowwise'" in files(emit_torchtitan(rowwise))["autopar_torchtitan.py"]
    for fmt in ("megatron", "megatron-bridge"):
        with pytest.raises(RuleViolation, match="fp8 recipe in"):
            emit(rowwise, fmt)
        emit(tensorwise, fmt)


def test_bridge_sets_recompute_modules():
    """Megatron-Bridge: the plan's modules go to model.recompute_modules (TransformerConfig)."""
    job = make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,recompute=selective,recompute_modules=layernorm+mlp")
    o = bridge_overrides(job)
    assert o["model.recompute_granularity"] == "selective" and o["model.recompute_modules"] == ["layernorm", "mlp"]


def test_bridge_sets_offload_modules():
    """Megatron-Bridge: the plan's offloaded modules go to TransformerConfig's
    fine_grained_activation_offloading and offload_modules (Megatron-LM fine_grained_activation_offloading.md)."""
    job = make_job("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=2,ep=4,etp=1,recompute=selective,recompute_modules=moe_act,"
                   "offload_modules=expert_fc1+moe_act")
    o = bridge_overrides(job)
    assert o["model.fine_grained_activation_offloading"] is True and o["model.offload_modules"] == ["expert_fc1", "moe_act"]
    assert "model.offload_modules" not in bridge_overrides(make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2"))


def test_bridge_sets_layer_offloading():
    """Megatron-Bridge: layer-level offloading is TransformerConfig cpu_offloading with
    cpu_offloading_num_layers, weights kept on the GPU (Bridge perf_recipes/llama/gb300/llama3.py)."""
    o = bridge_overrides(make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,offload_num_layers=8"))
    assert o["model.cpu_offloading"] is True and o["model.cpu_offloading_num_layers"] == 8
    assert o["model.cpu_offloading_weights"] is False


def test_bridge_hybrid_model_overrides():
    """Nemotron 3 Super on pp 4 (HybridModelProvider, megatron/bridge/models/hybrid/hybrid_provider.py):
    the main pattern carries the stages as '|' segments (the balanced split, autopar.specs.layout:
    88 layers + embedding + loss + 3 units for the '*E' MTP module and its output layer = 93 =
    23, 24, 23, 23 from the middle out, less the embedding on the first stage and loss + MTP on the
    last: 22, 24, 23, 19), the MTP module's '*E' goes
    to mtp_hybrid_override_pattern, which finalize() appends once per MTP layer with repetition off;
    the recipe's deprecated hybrid_override_pattern is cleared (it may not be set beside the pattern);
    no layout fields and no moe_layer_freq (the E letters are the MoE layers)."""
    job = make_job(*GOLDEN_CASES["hybrid_latent_moe_pp"])
    o = bridge_overrides(job)
    segments = o["model.hybrid_layer_pattern"].split("|")
    assert [len(s) for s in segments] == [22, 24, 23, 19]
    assert "".join(segments) == job.model.hybrid_layer_pattern and "/" not in o["model.hybrid_layer_pattern"]
    assert o["model.mtp_hybrid_override_pattern"] == "*E" and o["model.mtp_use_repeated_layer"] is False
    assert o["model.mtp_num_layers"] == 1 and o["model.hybrid_override_pattern"] is None
    assert (o["model.mamba_num_heads"], o["model.mamba_head_dim"], o["model.mamba_state_dim"], o["model.mamba_num_groups"]) \
        == (128, 64, 128, 8)  # the HF config's mamba_num_heads, mamba_head_dim, ssm_state_size, n_groups
    assert o["model.moe_latent_size"] == 1024 and "model.moe_layer_freq" not in o
    assert o["model.pipeline_model_parallel_layout"] is None and o["model.num_layers_in_first_pipeline_stage"] is None


def test_bridge_refuses_virtual_stages_of_hybrid_models():
    """HybridModelProvider.provide asserts virtual_pipeline_model_parallel_size is None; Megatron-LM runs it."""
    from autopar.emit import emit
    job = make_job(*GOLDEN_CASES["hybrid_latent_moe_vpp"])
    with pytest.raises(RuleViolation, match="no virtual pipeline stages for hybrid models") as info:
        emit_bridge(job)
    assert "--format megatron" in str(info.value)
    emit(job, "megatron")


@pytest.mark.parametrize("state_bytes, dtypes", [
    (12.0, (False, "torch.float32", "torch.float32")),   # fp32 master + two fp32 moments (Adam, 12 B)
    (6.0, (True, "torch.float16", "torch.bfloat16")),    # the Super recipe's choice: 2 + 2 + 2 B
    (8.0, (True, "torch.float32", "torch.bfloat16")),    # 4 + 2 + 2 B
])
def test_bridge_writes_the_optimizer_state_the_plan_counts(state_bytes, dtypes):
    """The recipes pick their own Adam state (Super: precision-aware, fp16 main params and bf16
    moments); the plan's memory counts TrainingSpec.optimizer_bytes_per_param, so it is written."""
    o = bridge_overrides(make_job(*GOLDEN_CASES["hybrid_mamba"][:6], optimizer_bytes_per_param=state_bytes))
    assert (o["optimizer.use_precision_aware_optimizer"], o["optimizer.main_params_dtype"], o["optimizer.exp_avg_dtype"]) == dtypes
    assert o["optimizer.exp_avg_sq_dtype"] == dtypes[2] and o["optimizer.main_grads_dtype"] == "torch.float32"


def test_bridge_refuses_an_optimizer_state_it_cannot_hold():
    with pytest.raises(RuleViolation, match="optimizer_bytes_per_param=7"):
        emit_bridge(make_job(*GOLDEN_CASES["dense_1f1b"][:6], optimizer_bytes_per_param=7.0))


def _hf_copy(tmp_path, preset: str, folder: str) -> str:
    """The preset's own config.json (profiles/models, the hub file) in a checkpoint folder of another name."""
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "profiles" / "models" / f"{preset}.json"
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "config.json").write_text(source.read_text())
    return str(tmp_path / folder)


def test_recipes_match_the_architecture_not_the_name(tmp_path):
    # review: an HF config.json identical to the llama3-8b preset was refused by torchtitan and
    # Megatron-Bridge, whose tables were keyed by the preset's name
    from autopar.emit.bridge import recipe_for
    from autopar.emit.torchtitan import base_model

    args = ("dgx-h100", 16, 4096, 64, "tp=2,pp=2,zero=1", "bf16", R4)
    hf = make_job(_hf_copy(tmp_path, "llama3-8b", "Meta-Llama-3-8B"), *args)
    preset = make_job("llama3-8b", *args)
    assert hf.model.name == "Meta-Llama-3-8B"
    assert base_model(hf) == ("llama3", "llama3_8b", "8B", True)
    assert recipe_for(hf) == ("megatron.bridge.recipes.llama", "llama3_8b_pretrain_config")
    for emitter in (emit_torchtitan, emit_bridge):  # the same artefacts as the preset's, but for the model's name
        assert [a.text.replace("Meta-Llama-3-8B", "llama3-8b") for a in emitter(hf)] == [a.text for a in emitter(preset)]
    # a hybrid preset's config.json gets its Bridge recipe too
    nano = make_job(_hf_copy(tmp_path, "nemotron-3-nano-30b-a3b", "nano"), "dgx-h100", 8, 4096, 64, "tp=1,ep=8,zero=1")
    assert recipe_for(nano) == ("megatron.bridge.recipes.nemotronh", "nemotron_3_nano_pretrain_config")


def test_a_preset_name_on_another_network_is_refused_for_the_model():
    # the name alone picked the registry's 32-layer Llama-3 8B for a 16-layer model
    import dataclasses

    job = make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=1", "bf16", R4)
    job = dataclasses.replace(job, model=job.model.model_copy(update={"num_layers": 16}))
    for emitter, framework in ((emit_torchtitan, "torchtitan"), (emit_bridge, "megatron-bridge")):
        with pytest.raises(RuleViolation) as info:
            emitter(job)
        assert info.value.field == "model" and info.value.value == "llama3-8b"
        assert str(info.value).startswith(f"model='llama3-8b': {framework} refuses it: [a ")
        assert "llama3-8b: its architecture is none of " in str(info.value)


def test_bridge_refuses_an_unmapped_model_naming_the_model_field():
    # review: the refusal said plan='tp=...' for what is about the model
    with pytest.raises(RuleViolation) as info:
        emit_bridge(make_job("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=2,ep=8,zero=1"))
    assert (info.value.field, info.value.value) == ("model", "mixtral-8x7b")
    assert str(info.value).startswith("model='mixtral-8x7b': megatron-bridge refuses it: [a Megatron-Bridge recipe for the model] "
                                      "mixtral-8x7b: its architecture is none of the presets autopar maps to recipes (deepseek-v3, ")
    # a plan-only refusal still names the plan
    with pytest.raises(RuleViolation) as info:
        emit_bridge(make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=3"))
    assert info.value.field == "plan"



def test_qwen3_moe_runs_on_bridge():
    # Megatron-Bridge 067f987 (and 0.6.2) recipes/qwen/h100/qwen3_moe.py
    job = make_job("qwen3-30b-a3b", "dgx-h100", 64, 4096, 256, "tp=2,pp=2,ep=8,etp=1,zero=1", "bf16", R4)
    script = files(emit_bridge(job))["pretrain_megatron_bridge.py"]
    assert "from megatron.bridge.recipes.qwen.h100.qwen3_moe import qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config" in script
    assert "'model.moe_aux_loss_coeff': 0.001," in script  # Qwen/Qwen3-30B-A3B router_aux_loss_coef
    big = make_job("qwen3-235b-a22b", "dgx-h100", 256, 4096, 512, "tp=4,pp=8,ep=8,etp=1,zero=1", "bf16", R4)
    assert "from megatron.bridge.recipes.qwen import qwen3_235b_a22b_pretrain_config" in files(emit_bridge(big))["pretrain_megatron_bridge.py"]


@pytest.mark.parametrize("preset, gpus, plan, why", [
    # torchtitan b5bcd76 models/qwen3 flavor 30B-A3B builds the network, but its router takes an expert
    # bias (models/common/moe.py load_balance_coeff 1e-3) and no balance loss: the integration test
    # resolved router_expert_bias True against the model's False
    ("qwen3-30b-a3b", 64, "tp=2,pp=2,ep=8,etp=1,zero=1", r"qwen3-30b-a3b: torchtitan b5bcd76 models/qwen3 has flavor 30B-A3B, "
     r"but its MoE routes with an expert bias and has no balance loss"),
    # models/qwen3/__init__.py _235b_a22b: theta 5000000.0; Qwen/Qwen3-235B-A22B config.json rope_theta
    # 1000000.0, and config_registry.py defines no qwen3_235b_a22b
    ("qwen3-235b-a22b", 256, "tp=4,pp=8,ep=8,etp=1,zero=1", r"qwen3-235b-a22b: torchtitan b5bcd76 models/qwen3/__init__.py "
     r"flavor 235B-A22B sets rope theta 5e6"),
])
def test_torchtitan_names_why_qwen3_moe_has_no_registry_entry(preset, gpus, plan, why):
    job = make_job(preset, "dgx-h100", gpus, 4096, 512, plan, "bf16", R4)
    with pytest.raises(RuleViolation, match=why) as info:
        emit_torchtitan(job)
    assert info.value.field == "model"


def test_torchtitan_llama3_flavors_get_the_models_rope_scaling():
    """torchtitan b5bcd76 (and the 0.3.0 wheel) models/llama3/__init__.py builds its 8B, 70B and 405B
    flavors with ComplexRoPE scaling='llama' (Llama-3.1: factor 8, low 1, high 4, original 8192).
    meta-llama/Meta-Llama-3-8B and -70B have no rope_scaling: the config turns every layer's scaling
    off; Llama-3.1 405B (rope_type llama3) keeps the flavor's."""
    text = files(emit_torchtitan(make_job(*GOLDEN_CASES["fsdp_zero3"])))["autopar_torchtitan.py"]
    assert ("    for layer in config.model_spec.model.layers:  # the model's RoPE scaling, not the flavor's\n"
            "        if layer.attention.rope.scaling != 'llama':\n") in text
    assert "        layer.attention.rope.scaling = 'none'\n" in text
    assert "# note: torchtitan's llama3 8B flavor builds RoPE scaling 'llama' (Llama-3.1's); llama3-8b has no rope_scaling" in text
    seventy = files(emit_torchtitan(make_job(*GOLDEN_CASES["interleaved_vpp"])))["autopar_torchtitan.py"]
    assert "model_registry('70B'" in seventy and "layer.attention.rope.scaling = 'none'" in seventy
    for case in ("gqa_sp", "mla_tp_deepep"):  # Llama-3.1 405B (llama3), DeepSeek-V3 (yarn): the flavor's own
        assert "rope.scaling" not in files(emit_torchtitan(make_job(*GOLDEN_CASES[case])))["autopar_torchtitan.py"]


def _run_autopar_config(source: str, recipe_overlap, fn: str):
    """The emitted autopar_config() over a stand-in recipe whose comm_overlap is recipe_overlap
    (overrides and the mixed-precision registry stubbed: only the comm-overlap lines run for real)."""
    from dataclasses import dataclass
    from types import SimpleNamespace

    @dataclass
    class CommOverlapConfig:  # the fields of Megatron-Bridge 067f987 training/comm_overlap.py the test reads
        tp_comm_overlap: bool
        tp_comm_overlap_cfg: object = None
        defer_embedding_wgrad_compute: bool | None = None
        wgrad_deferral_limit: int | None = None
        overlap_moe_expert_parallel_comm: bool | None = None
        delay_wgrad_compute: bool | None = None

    recipe = SimpleNamespace(comm_overlap=recipe_overlap(CommOverlapConfig) if recipe_overlap else None)
    namespace = {"CommOverlapConfig": CommOverlapConfig, fn: lambda: recipe, "OVERRIDES": {},
                 "apply_overrides": lambda cfg, overrides: cfg, "get_mixed_precision_config": lambda name: SimpleNamespace()}
    exec(source[source.index("MIXED_PRECISION = "):source.index("def declares(")], namespace)
    exec(source[source.index("def autopar_config("):source.index('if __name__ == "__main__":')], namespace)
    return namespace["autopar_config"]().comm_overlap, CommOverlapConfig


def test_bridge_keeps_the_recipes_comm_overlap_tuning():
    """Megatron-Bridge 067f987 recipes/llama/h100/llama3.py llama3_70b_pretrain_config sets
    CommOverlapConfig(tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192)
    and the 405B recipe defer_embedding_wgrad_compute=True, wgrad_deferral_limit=22; the launcher
    replaced the object and lost them. It now sets only the plan's overlaps on the recipe's object."""
    job = make_job(*GOLDEN_CASES["fp8_70b"])  # tp 4 with TP overlap, no EP
    source = files(emit_bridge(job))["pretrain_megatron_bridge.py"]
    tuned = lambda cls: cls(tp_comm_overlap=True, tp_comm_overlap_cfg="userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192",  # noqa: E731
                            defer_embedding_wgrad_compute=True, wgrad_deferral_limit=22, delay_wgrad_compute=True)
    overlap, _ = _run_autopar_config(source, tuned, "llama3_70b_pretrain_config")
    assert overlap.tp_comm_overlap_cfg == "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    assert (overlap.defer_embedding_wgrad_compute, overlap.wgrad_deferral_limit) == (True, 22)
    assert (overlap.tp_comm_overlap, overlap.overlap_moe_expert_parallel_comm) == (True, False)
    assert overlap.delay_wgrad_compute is False  # comm_overlap.py asserts EP overlap for it
    # a plan without TP overlap turns the recipe's off; a recipe without a CommOverlapConfig gets one
    off = make_job("llama3-70b", "dgx-h100", 64, 8192, 64, "tp=8,pp=2,tp_overlap=off,zero=1", "bf16", R4)
    overlap, _ = _run_autopar_config(files(emit_bridge(off))["pretrain_megatron_bridge.py"], tuned, "llama3_70b_pretrain_config")
    assert overlap.tp_comm_overlap is False and overlap.tp_comm_overlap_cfg == "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    overlap, cls = _run_autopar_config(source, None, "llama3_70b_pretrain_config")
    assert overlap == cls(tp_comm_overlap=True, overlap_moe_expert_parallel_comm=False, delay_wgrad_compute=False)


def test_torchtitan_launcher_sets_the_allocator_the_plan_assumed():
    """A plan costed on the torchtitan stack counts no fragmentation slack (its run_train.sh runs
    expandable segments: autopar.cost.context.Batch.fragmentation), so the emitted launcher exports
    them; a plan costed on the Megatron stack (fixed segments, 5% slack counted) leaves the
    allocator alone, as does a run that states expandable_segments off."""
    def launcher(**extra):
        job = make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=3", "bf16", **extra)
        return next(a.text for a in emit_torchtitan(job) if a.name.endswith(".sh"))

    line = 'export PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True${PYTORCH_CUDA_ALLOC_CONF:+,$PYTORCH_CUDA_ALLOC_CONF}"'
    assert line in launcher(stack="torchtitan")
    assert "PYTORCH_CUDA_ALLOC_CONF" not in launcher()
    assert "PYTORCH_CUDA_ALLOC_CONF" not in launcher(stack="torchtitan", expandable_segments=False)
    # the line is valid bash: the script still parses
    subprocess.run(["bash", "-n", "/dev/stdin"], input=launcher(stack="torchtitan"), text=True, check=True)
