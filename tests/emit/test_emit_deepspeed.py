"""DeepSpeed emitter: ds_config.json parses back to the plan and training spec; plans DeepSpeed
cannot run are refused with the reason."""

from __future__ import annotations

import json
import subprocess

import pytest

from autopar.emit import RuleViolation
from autopar.emit.common import Rules, canonical_plan, training_key
from autopar.emit.deepspeed import emit_deepspeed, parse_deepspeed_config, validate_config
from emit_cases import make_job

GOOD = {
    "zero3_full": ("llama3-8b", "dgx-h100", 16, 8192, 128, "tp=1,zero=3,recompute=full"),
    "zero1_pp": ("llama3-8b", "dgx-h100", 16, 4096, 256, "tp=1,pp=2,mbs=2,zero=1"),
    "zero0_pp_uneven": ("llama3-405b", "dgx-h100-superpod", 1024, 4096, 1024, "tp=1,pp=16,zero=0,recompute=full"),
    "zero2": ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=2,recompute=full"),
    "ulysses": ("llama3-8b", "dgx-h100", 16, 32768, 16, "tp=1,cp=4,cp_algo=ulysses,zero=3"),
    "moe_autoep": ("mixtral-8x7b", "dgx-h100", 16, 4096, 64, "tp=1,ep=8,zero=1"),
}


def config_of(job) -> dict:
    return json.loads(emit_deepspeed(job)[0].text)


@pytest.mark.parametrize("case", sorted(GOOD))
def test_round_trip(case):
    job = make_job(*GOOD[case])
    plan, training = parse_deepspeed_config(config_of(job), job.num_gpus, job.model.num_layers)
    assert canonical_plan(plan, job.model, job.num_gpus) == canonical_plan(job.plan, job.model, job.num_gpus)
    assert training_key(training) == training_key(job.training)


def test_round_trip_fp16_fp32_reduce():
    job = make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=1", "fp16", grad_reduce_bytes_per_param=4.0)
    config = config_of(job)
    assert config["fp16"]["enabled"] and "bf16" not in config and config["communication_data_type"] == "fp32"
    assert training_key(parse_deepspeed_config(config, 16, 32)[1]) == training_key(job.training)


def test_zero3_buckets_are_the_costed_ones():
    # the cost model's ZeRO-3 reduce-scatters carry profiles/stacks/deepspeed.yaml's bucket
    # (5e8 elements, DeepSpeed's reduce_bucket_size default); the config must run that bucket
    zero = config_of(make_job(*GOOD["zero3_full"]))["zero_optimization"]
    assert zero["reduce_bucket_size"] == 500_000_000
    assert (zero["stage3_prefetch_bucket_size"], zero["stage3_param_persistence_threshold"]) == (50_000_000, 100_000)
    # and the live-parameter window the working-buffer memory counts (stage3_max_live_parameters)
    assert zero["stage3_max_live_parameters"] == 1_000_000_000


def test_batch_keys_and_pipeline_section():
    config = config_of(make_job(*GOOD["zero1_pp"]))
    # 256 = micro 2 * gradient accumulation 16 * dp 8 (16 GPUs / 2 stages)
    assert (config["train_batch_size"], config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]) == (256, 2, 16)
    assert config["pipeline"]["stages"] == 2 and config["zero_optimization"]["stage"] == 1
    assert config["_autopar"]["plan"].startswith("tp=1,pp=2")


def test_launcher_passes_bash_n(tmp_path):
    script = emit_deepspeed(make_job(*GOOD["zero3_full"]))[-1]
    path = tmp_path / script.name
    path.write_text(script.text)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert "--deepspeed_config" in script.text and "--num_gpus" in script.text
    assert "this plan needs 16 GPUs" in script.text  # the GPU-count check the torchrun launchers have


def test_helper_carries_the_plans_partition():
    """405B on pp 16: the balanced split is 7 + 14 x 8 + 7 decoder layers (Dubey et al. 2024,
    section 3.3.2); with the embedding spec on stage 0 and the head on stage 15 the PipelineModule
    bounds are 0, 8, 16, ..., 120, 128 (8 = embedding + 7 layers; 128 = 126 layers + 2)."""
    from autopar.emit.deepspeed_script import partition_bounds

    job = make_job(*GOOD["zero0_pp_uneven"])
    bounds = partition_bounds(job)
    assert bounds[:3] == [0, 8, 16] and bounds[-2:] == [120, 128] and len(bounds) == 17
    helper = emit_deepspeed(job)[1]
    assert helper.name == "autopar_deepspeed.py" and f"PARTS = {bounds!r}" in helper.text


def test_helper_without_pipeline_stages_builds_no_pipeline_module():
    # DeepSpeed refuses a PipelineModule, even of one stage, with ZeRO-2/3 ('ZeRO-2 and ZeRO-3 are
    # incompatible with pipeline parallelism', runtime/pipe/engine.py, checked whatever the stage
    # count) and with an mpu (deepspeed/__init__.py); the pp=1 helper told users to build one
    job = make_job(*GOOD["zero3_full"])
    helper = emit_deepspeed(job)[1].text
    assert "def pipeline_module(" not in helper and "def checkpointed(layer):" in helper
    assert "not a PipelineModule" in helper and "use_reentrant=False" in helper
    namespace: dict = {}
    exec(compile(helper, "autopar_deepspeed.py", "exec"), namespace)
    assert namespace["ACTIVATION_CHECKPOINT_INTERVAL"] == 1  # recompute=full: each layer is wrapped
    piped = emit_deepspeed(make_job(*GOOD["zero0_pp_uneven"]))[1].text
    assert "def pipeline_module(" in piped and "def checkpointed(" not in piped


REFUSED = [
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=2,recompute=full,recompute_num_layers=16", "bf16",
     "activation_checkpoint_interval recomputes every layer"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2", "bf16", "tp == 1 without Megatron-DeepSpeed"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,pp=2,zero=3", "bf16", "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,pp=2,zero=2", "bf16", "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=1", "fp8", "precision in {bf16, fp16}"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,recompute=selective", "bf16", "recompute in {none, full}"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,offload_modules=attn_norm", "bf16", "no per-module activation offloading"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=3,zero_shard_size=8", "bf16", "no hybrid-sharded ZeRO"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,cp=2,cp_algo=ring", "bf16", "context parallel = Ulysses"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,pp=2,vpp=2", "bf16", "pipeline schedule = 1F1B"),
    ("llama3-8b", "dgx-h100", 16, 4096, 60, "tp=1", "bf16", "train_batch_size == micro_batch * gradient_accumulation_steps * dp_world_size"),
    # a PipelineModule counts DP as world / pp and deepspeed.initialize refuses an mpu with it
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,pp=2,cp=2,cp_algo=ulysses", "bf16", "Ulysses sequence parallelism without pipeline"),
    # AutoEP refuses the Ulysses mpu's model-parallel group (runtime/engine.py)
    ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=1,cp=2,cp_algo=ulysses,ep=4,zero=3", "bf16", "Ulysses sequence parallelism without AutoEP"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,pp=2,order=tp-cp-ep-pp-dp", "bf16", "rank order pipe outermost"),
]


@pytest.mark.parametrize("model, cluster, gpus, seq, gbs, plan, precision, rule", REFUSED, ids=[r[-1][:40] for r in REFUSED])
def test_refuses_with_the_rule(model, cluster, gpus, seq, gbs, plan, precision, rule):
    with pytest.raises(RuleViolation) as info:
        emit_deepspeed(make_job(model, cluster, gpus, seq, gbs, plan, precision))
    assert rule in str(info.value) and info.value.framework == "deepspeed"


@pytest.mark.parametrize("change, rule", [
    ({"train_batch_size": 100}, "train_batch_size == micro_batch * gradient_accumulation_steps * dp_world_size"),
    ({"fp16": {"enabled": True}}, "bf16 and fp16 not both enabled"),
    ({"zero_optimization": {"stage": 3, "mics_shard_size": 8}}, "no unknown or removed keys"),
    ({"zero_optimization": {"stage": 2}, "pipeline": {"stages": 2}}, "ZeRO-2 and ZeRO-3 are incompatible"),
    ({"expert_parallel": {"enabled": True, "autoep_size": 8, "expert_tensor_parallel_size": 2}}, "AutoEP expert_tensor_parallel_size must be 1"),
])
def test_validator_on_config_dicts(change, rule):
    config = config_of(make_job(*GOOD["zero3_full"]))
    config.update(change)
    found = [v.rule for v in validate_config(config, 16, Rules("deepspeed")).found]
    assert any(rule in f for f in found), found


# ---- the network the training script builds (autopar.emit.deepspeed_model) -------------------

def model_config_of(job) -> dict:
    """MODEL_CONFIG of the emitted helper, as the training script imports it."""
    namespace: dict = {}
    exec(compile(emit_deepspeed(job)[1].text, "autopar_deepspeed.py", "exec"), namespace)
    return namespace["MODEL_CONFIG"]


def test_helper_writes_the_models_activation_and_rope():
    # meta-llama/Llama-3.1-405B config.json: hidden_act silu, rope_theta 500000, rope_scaling llama3
    # factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192
    cfg = model_config_of(make_job(*GOOD["zero0_pp_uneven"]))
    assert (cfg["model_type"], cfg["hidden_act"], cfg["rope_theta"]) == ("llama", "silu", 500000.0)
    assert cfg["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    # meta-llama/Meta-Llama-3-8B: no rope_scaling (unscaled), 126 -> 32 layers, GQA 32/8
    cfg = model_config_of(make_job(*GOOD["zero3_full"]))
    assert "rope_scaling" not in cfg and (cfg["num_hidden_layers"], cfg["num_key_value_heads"]) == (32, 8)


def test_a_gated_gelu_is_written_not_refused():
    # a GeGLU (gelu_pytorch_tanh gate): Megatron-LM's CLI refuses it (GATED_RULE), but transformers'
    # LlamaMLP applies ACT2FN[hidden_act] to its gate projection, so the DeepSpeed run trains it
    import dataclasses
    job = make_job(*GOOD["zero3_full"])
    job = dataclasses.replace(job, model=job.model.model_copy(update={"activation": "gelu_pytorch_tanh"}))
    assert model_config_of(job)["hidden_act"] == "gelu_pytorch_tanh"


def test_longrope_is_carried_whole(tmp_path):
    # microsoft/Phi-3-mini-128k-instruct's form (no factor, per-frequency short/long factors,
    # original 4096 at the top level): transformers builds longrope from these keys
    import json
    short, long = [1.0 + i / 100 for i in range(64)], [1.0 + i for i in range(64)]
    path = tmp_path / "longrope.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 8, "num_attention_heads": 32,
                                "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32064, "rope_theta": 10000.0,
                                "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                                "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long}}))
    cfg = model_config_of(make_job(str(path), "dgx-h100", 16, 4096, 64, "tp=1,zero=1"))
    assert cfg["rope_scaling"] == {"rope_type": "longrope", "original_max_position_embeddings": 4096,
                                   "short_factor": short, "long_factor": long}
    assert cfg["max_position_embeddings"] == 131072  # longrope's factor is max / original


def test_mixtral_trains_its_balance_loss():
    # mistralai/Mixtral-8x7B-v0.1 router_aux_loss_coef 0.02; transformers adds the loss only with
    # output_router_logits (MixtralForCausalLM.forward)
    cfg = model_config_of(make_job(*GOOD["moe_autoep"]))
    assert (cfg["model_type"], cfg["num_local_experts"], cfg["num_experts_per_tok"]) == ("mixtral", 8, 2)
    assert (cfg["router_aux_loss_coef"], cfg["output_router_logits"], cfg["sliding_window"]) == (0.02, True, None)


def test_gpt3_is_a_gpt2_network_with_exact_gelu():
    # Brown et al. 2020: GPT-2's architecture (learned positions, LayerNorm, biases, tied); the preset's
    # exact GeLU is transformers' 'gelu'; its 2048-row position table bounds the sequence
    job = make_job("gpt3-175b", "dgx-h100", 256, 2048, 256, "tp=1,pp=8,zero=1,recompute=full")
    cfg = model_config_of(job)
    assert (cfg["model_type"], cfg["activation_function"], cfg["n_positions"], cfg["resid_pdrop"]) == ("gpt2", "gelu", 2048, 0.0)
    with pytest.raises(RuleViolation, match=r"\[sequence within the learned position table\] seq_len=4096 exceeds gpt3-175b's"):
        emit_deepspeed(make_job("gpt3-175b", "dgx-h100", 256, 4096, 256, "tp=1,pp=8,zero=1,recompute=full"))


@pytest.mark.parametrize("model, gpus, plan, why", [
    ("gpt-oss-20b", 16, "tp=1,ep=8,zero=1", "attention sinks and a clamped GLU (gpt-oss)"),
    ("qwen3-30b-a3b", 64, "tp=1,ep=8,zero=1", "a balance loss over the global batch (Qwen3-MoE)"),
    ("deepseek-v2-lite", 16, "tp=1,ep=8,zero=1", "a sequence-wise balance loss (weight 0.001)"),
    ("llama4-scout", 64, "tp=1,ep=8,zero=1", "chunked local attention (Llama-4)"),
    ("nemotron4-340b", 64, "tp=1,pp=8,zero=1", "a non-gated squared_relu MLP with RoPE"),
    # MPT's LayerNorm, non-gated GeLU: a Llama config would read back as another network
    ("mpt-7b", 16, "tp=1,zero=1", "gated_mlp: model False, config True"),
])
def test_a_model_transformers_would_train_differently_is_refused_by_name(model, gpus, plan, why):
    from autopar.emit.presets import ModelRefused
    with pytest.raises(ModelRefused) as info:
        emit_deepspeed(make_job(model, "dgx-h100", gpus, 2048, 256, plan))
    assert str(info.value).startswith(f"model='{model}': deepspeed refuses it: [a transformers model of the model's network]")
    assert why in str(info.value)


def test_a_local_rope_base_is_refused():
    # a sliding-window model whose local layers rotate by their own base (Gemma-3's rope_local_base_freq):
    # the Mistral config autopar writes has one rope_theta, so the read-back names the field
    import dataclasses
    from autopar.emit.presets import ModelRefused
    job = make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=1")
    model = job.model.model_copy(update={"attention_window": 4096, "rope_local_theta": 10000.0})
    with pytest.raises(ModelRefused) as info:
        emit_deepspeed(dataclasses.replace(job, model=model))
    assert str(info.value) == ("model='llama3-8b': deepspeed refuses it: [a transformers model of the model's network] llama3-8b: the "
                               "transformers mistral config autopar writes for it reads back as another network (rope_local_theta: "
                               "model 10000.0, config None)")


def test_every_written_config_reads_back_as_the_model():
    # the read-back (autopar.specs.hf) is the emitter's own check; every preset it writes passes it
    from autopar.emit.deepspeed_model import model_violations, read_back_differences
    from autopar.specs import load_model
    written = []
    for name in ("llama2-7b", "llama3-8b", "llama3-405b", "mixtral-8x22b", "qwen2-57b-a14b", "gpt2-xl", "gpt3-175b"):
        model = load_model(name)
        cfg, found = model_violations(model, 2048)
        assert not found and read_back_differences(model, cfg) == []
        written.append(cfg["model_type"])
    assert written == ["llama", "llama", "llama", "mixtral", "qwen2_moe", "gpt2", "gpt2"]

