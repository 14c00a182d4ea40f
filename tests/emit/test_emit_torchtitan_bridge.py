"""torchtitan and Megatron-Bridge emitters: the artefacts parse (Python, bash, TOML, YAML),
carry the plan's values under the frameworks' names, and refuse what the frameworks reject."""

from __future__ import annotations

import subprocess
import tomllib

import pytest
import yaml

from autopar.emit import RuleViolation
from autopar.emit.bridge import emit_bridge
from autopar.emit.torchtitan import emit_torchtitan
from emit_cases import GOLDEN_CASES, make_job


def files(arts) -> dict[str, str]:
    return {a.name: a.text for a in arts}


@pytest.mark.parametrize("case", ["dense_1f1b", "interleaved_vpp", "gqa_sp", "long_context_cp", "fsdp_zero3", "mla_uneven"])
def test_torchtitan_artefacts_parse(case, tmp_path):
    out = files(emit_torchtitan(make_job(*GOLDEN_CASES[case])))
    compile(out["autopar_torchtitan.py"], "autopar_torchtitan.py", "exec")
    tomllib.loads(out["torchtitan_v0.2.2.toml"])
    script = tmp_path / "launch_torchtitan.sh"
    script.write_text(out["launch_torchtitan.sh"])
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_torchtitan_stage_split_reproduces_uneven_stages():
    """126 layers on 16 stages = 7 + 14 x 8 + 7: layers_per_stage 8, one layer less at each end."""
    toml = tomllib.loads(files(emit_torchtitan(make_job(*GOLDEN_CASES["gqa_sp"])))["torchtitan_v0.2.2.toml"])
    par = toml["parallelism"]
    assert (par["pipeline_parallel_layers_per_stage"], par["pipeline_parallel_first_stage_less_layers"],
            par["pipeline_parallel_last_stage_less_layers"]) == (8, 1, 1)
    # ceil((126 + 1 + 1) / 8) = 16 virtual stages = pp: one stage per rank for 1F1B
    assert par["pipeline_parallel_schedule"] == "1F1B" and par["pipeline_parallel_degree"] == 16


def test_torchtitan_batch_keys_in_both_forms():
    out = files(emit_torchtitan(make_job(*GOLDEN_CASES["interleaved_vpp"])))
    module, launcher = out["autopar_torchtitan.py"], out["launch_torchtitan.sh"]
    assert "'num_tokens_per_microbatch_per_dp_rank': 8192" in module and "'num_pp_microbatches': 64" in module
    assert "'local_batch_size': 64" in module and "'pipeline_parallel_microbatch_size': 1" in module
    assert "--training.num_tokens_per_train_step 16777216" in launcher and "--module \"$MODULE\" --config \"$CONFIG\"" in launcher
    assert "--parallelism.enable_sequence_parallel" in launcher and "activation_checkpoint:selective" in launcher


def test_torchtitan_zero0_is_ddp_and_zero3_is_fsdp():
    ddp = tomllib.loads(files(emit_torchtitan(make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=0")))["torchtitan_v0.2.2.toml"])
    fsdp = tomllib.loads(files(emit_torchtitan(make_job(*GOLDEN_CASES["fsdp_zero3"])))["torchtitan_v0.2.2.toml"])
    assert (ddp["parallelism"]["data_parallel_replicate_degree"], ddp["parallelism"]["data_parallel_shard_degree"]) == (16, 1)
    assert (fsdp["parallelism"]["data_parallel_replicate_degree"], fsdp["parallelism"]["data_parallel_shard_degree"]) == (1, 16)


TITAN_REFUSED = [
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,cp=4,cp_algo=ulysses", "bf16", "context parallel is ring attention"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,pp=2,schedule=zero-bubble", "bf16", "zero-bubble schedules are multi-stage"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1", "fp16", "precision in {bf16, fp8}"),
    ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=2,ep=4", "bf16", "no expert tensor parallelism"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,recompute=full,recompute_num_layers=4", "bf16", "FullAC wraps every transformer block"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,pp=4,first=2,last=14", "bf16", "stage split = layers_per_stage"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,pp=2,vpp=3", "bf16", "stage split = layers_per_stage"),
]


@pytest.mark.parametrize("model, cluster, gpus, seq, gbs, plan, precision, rule", TITAN_REFUSED, ids=[r[-1][:40] for r in TITAN_REFUSED])
def test_torchtitan_refuses_with_the_rule(model, cluster, gpus, seq, gbs, plan, precision, rule):
    with pytest.raises(RuleViolation) as info:
        emit_torchtitan(make_job(model, cluster, gpus, seq, gbs, plan, precision))
    assert rule in str(info.value)


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_bridge_artefacts_parse(case, tmp_path):
    job = make_job(*GOLDEN_CASES[case])
    out = files(emit_bridge(job))
    compile(out["pretrain_megatron_bridge.py"], "pretrain_megatron_bridge.py", "exec")
    overrides = yaml.safe_load(out["megatron_bridge_overrides.yaml"])
    assert overrides["model"]["tensor_model_parallel_size"] == job.plan.tp
    assert overrides["model"]["pipeline_model_parallel_size"] == job.plan.pp
    assert overrides["train"]["global_batch_size"] == job.training.global_batch_size
    assert overrides["dataset"]["seq_length"] == job.training.seq_len
    script = tmp_path / "launch.sh"
    script.write_text(out["launch_megatron_bridge.sh"])
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_bridge_vpp_and_pipeline_dtype():
    overrides = yaml.safe_load(files(emit_bridge(make_job(*GOLDEN_CASES["interleaved_vpp"])))["megatron_bridge_overrides.yaml"])
    assert overrides["model"]["virtual_pipeline_model_parallel_size"] == 5
    assert overrides["model"]["pipeline_dtype"] == "torch.bfloat16"
    assert overrides["mixed_precision"] == "bf16_mixed"


@pytest.mark.parametrize("model, cluster, gpus, seq, gbs, plan, rule", [
    ("llama3-8b", "dgx-h100", 24, 4096, 48, "tp=3", "num_attention_heads % TP == 0"),
    ("llama3-8b", "dgx-h100", 16, 4100, 16, "tp=1,cp=4", "model.seq_length % (2*CP) == 0"),
    ("llama3-8b", "dgx-h100", 16, 4096, 100, "tp=2", "GBS % (MBS * DP) == 0"),
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
