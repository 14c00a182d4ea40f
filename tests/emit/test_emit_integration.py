"""Load the emitted configs with the frameworks' own config code (optional: marked integration,
skipped unless deepspeed / torchtitan are installed; both install on a CPU-only machine with
the CPU torch wheel; torchtitan's model modules also import triton).

    pip install torch==2.13.0 deepspeed torchtitan triton && pytest -m integration tests/emit
"""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from autopar.emit import write_artefacts
from autopar.emit.deepspeed import emit_deepspeed
from autopar.emit.torchtitan import emit_torchtitan
from emit_cases import GOLDEN_CASES, make_job

pytestmark = pytest.mark.integration

DS_CASES = {
    "zero3_full": ("llama3-8b", "dgx-h100", 16, 8192, 128, "tp=1,zero=3,recompute=full"),
    "zero1_pp": ("llama3-8b", "dgx-h100", 16, 4096, 256, "tp=1,pp=2,mbs=2,zero=1"),
    "zero0_fp16": ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=0", "fp16"),
    "ulysses": ("llama3-8b", "dgx-h100", 16, 32768, 16, "tp=1,cp=4,cp_algo=ulysses,zero=3"),
    "golden_mla_uneven": GOLDEN_CASES["mla_uneven"],
}
TITAN_CASES = ["dense_1f1b", "interleaved_vpp", "gqa_sp", "long_context_cp", "fsdp_zero3", "mla_uneven"]


class _DataParallelMpu:
    """What DeepSpeedConfig asks an mpu for: the data-parallel world size."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_data_parallel_rank(self) -> int:
        return 0


@pytest.fixture(scope="module")
def deepspeed_config_class():
    pytest.importorskip("torch")
    pytest.importorskip("deepspeed")
    from deepspeed.runtime import config as ds_config

    # DeepSpeedConfig asks torch.distributed for the rank first; answer for rank 0 of a job
    # that is not started, so the data-parallel size comes from the mpu.
    saved = ds_config.dist.get_rank
    ds_config.dist.get_rank = lambda *a, **k: 0
    yield ds_config.DeepSpeedConfig
    ds_config.dist.get_rank = saved


@pytest.mark.parametrize("case", sorted(DS_CASES))
def test_deepspeed_config_loads(case, deepspeed_config_class):
    job = make_job(*DS_CASES[case])
    config = json.loads(emit_deepspeed(job)[0].text)
    dp_world = job.num_gpus // (job.plan.pp * job.plan.cp)
    loaded = deepspeed_config_class(config, mpu=_DataParallelMpu(dp_world))
    assert loaded.train_batch_size == job.training.global_batch_size
    assert loaded.gradient_accumulation_steps == job.num_microbatches
    assert loaded.zero_optimization_stage == job.plan.zero
    # and DeepSpeed rejects what our validator rejects: a wrong data-parallel size
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        deepspeed_config_class(config, mpu=_DataParallelMpu(dp_world + 1))


def test_deepspeed_rejects_removed_mics_key(deepspeed_config_class):
    config = json.loads(emit_deepspeed(make_job(*DS_CASES["zero3_full"]))[0].text)
    config["zero_optimization"]["mics_shard_size"] = 8
    with pytest.raises(Exception, match="MiCS"):
        deepspeed_config_class(config, mpu=_DataParallelMpu(16))


@pytest.fixture(scope="module")
def titan():
    pytest.importorskip("torch")
    pytest.importorskip("torchtitan")
    pytest.importorskip("triton")
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed import pipeline_parallel
    from torchtitan.distributed.parallel_dims import ParallelDims

    return ConfigManager, ParallelDims, pipeline_parallel


@pytest.mark.parametrize("case", TITAN_CASES)
def test_torchtitan_config_module_parses(case, titan, tmp_path, monkeypatch):
    ConfigManager, ParallelDims, pipeline_parallel = titan
    job = make_job(*GOLDEN_CASES[case])
    write_artefacts(emit_torchtitan(job), tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("autopar_torchtitan", None)
    try:
        config = ConfigManager().parse_args(["--module", "autopar_torchtitan", "--config", "autopar_plan"])
    except ValueError as exc:
        if "only supported on NVIDIA SM89" in str(exc):  # the stock llama3_405b config builds a Float8 converter
            pytest.skip("stock config needs an fp8-capable GPU to build")
        raise
    dims = ParallelDims.from_config(config.parallelism, job.num_gpus)  # runs torchtitan's _validate
    assert dims.tp == job.plan.tp and dims.pp == job.plan.pp and dims.cp == job.plan.cp
    if job.plan.pp > 1:
        stages, layers, first_less, last_less = pipeline_parallel._get_pipeline_metadata(dims, config.parallelism, config.model_spec.model)
        assert stages == job.plan.pp * job.plan.vpp
        parts = pipeline_parallel._generate_llm_fqn_per_model_part(stages, layers, first_less, last_less)
        per_rank = [sum(sum(m.startswith("layers.") for m in parts[p + v * job.plan.pp]) for v in range(job.plan.vpp))
                    for p in range(job.plan.pp)]
        assert per_rank == job.plan.layers_per_stage(job.model.num_layers)


@pytest.mark.parametrize("case", ["interleaved_vpp", "long_context_cp"])
def test_torchtitan_overrides_parse_on_the_stock_config(case, titan, tmp_path):
    """The OVERRIDES array of the launcher, on the stock registry config. Batch keys this
    torchtitan does not have (HEAD token keys on the 0.3.0 wheel) are the only ones dropped."""
    import dataclasses

    from torchtitan.config import TrainingConfig

    ConfigManager = titan[0]
    job = make_job(*GOLDEN_CASES[case])
    launcher = {a.name: a.text for a in emit_torchtitan(job)}["launch_torchtitan.sh"]
    body = launcher.split("OVERRIDES=(\n", 1)[1].split("\n)\n", 1)[0]
    tokens = shlex.split(body)
    have = {f.name for f in dataclasses.fields(TrainingConfig)}
    head_only = {"num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step", "max_context_length", "num_pp_microbatches"}
    kept, dropped, i = [], [], 0
    while i < len(tokens):
        tok = tokens[i]
        takes_value = tok.startswith("--") and i + 1 < len(tokens) and not tokens[i + 1].startswith("--") and ":" not in tokens[i + 1]
        group = tokens[i:i + 2] if takes_value else [tok]
        key = tok.split(".", 1)[-1]
        (dropped if key in head_only and "num_tokens_per_microbatch_per_dp_rank" not in have else kept).append(group)
        i += len(group)
    module, config_fn = ("llama3", "llama3_70b") if job.model.name == "llama3-70b" else ("llama3", "llama3_8b")
    args = ["--module", module, "--config", config_fn, *[t for g in kept for t in g]]
    if "num_tokens_per_microbatch_per_dp_rank" not in have:  # the sequence-count keys of this release
        args += ["--training.local_batch_size", str(job.plan.mbs * (job.num_microbatches if job.plan.pp > 1 else 1)),
                 "--training.seq_len", str(job.training.seq_len)]
    subcommand = launcher.split("SUBCOMMAND=(", 1)[1].split(")", 1)[0]
    config = ConfigManager().parse_args([*args, subcommand])
    assert config.parallelism.tensor_parallel_degree == job.plan.tp
    assert config.parallelism.context_parallel_degree == job.plan.cp
    assert {g[0].split(".", 1)[-1] for g in dropped} <= head_only
    assert type(config.activation_checkpoint).__qualname__.split(".")[0] == {"selective": "SelectiveAC", "full": "FullAC"}[subcommand.split(":")[1]]


@pytest.fixture(scope="module")
def transformer_config():
    pytest.importorskip("torch")
    module = pytest.importorskip("megatron.core.transformer.transformer_config")
    return module


def _core_fields(job, module) -> dict:
    """The Bridge cfg.model overrides that are TransformerConfig fields (the provider adds
    seq_length, vocab_size and max_position_embeddings)."""
    import dataclasses

    import torch

    from autopar.emit.bridge import bridge_overrides

    cls = module.MLATransformerConfig if job.model.mla else module.TransformerConfig
    names = {f.name for f in dataclasses.fields(cls)}
    fields = {k.split(".", 1)[1]: v for k, v in bridge_overrides(job).items() if k.startswith("model.")}
    fields = {k: v for k, v in fields.items() if k in names}
    if fields.get("pipeline_dtype") == "torch.bfloat16":
        fields["pipeline_dtype"] = torch.bfloat16
    fields.update(bf16=True, params_dtype=torch.bfloat16, add_bias_linear=False)  # --disable-bias-linear
    return fields


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_megatron_core_accepts_bridge_model_overrides(case, transformer_config):
    """Megatron Core's TransformerConfig.__post_init__ (recompute, uneven PP, VPP, MoE, CP rules)."""
    job = make_job(*GOLDEN_CASES[case])
    cls = transformer_config.MLATransformerConfig if job.model.mla else transformer_config.TransformerConfig
    config = cls(**_core_fields(job, transformer_config))
    assert config.tensor_model_parallel_size == job.plan.tp and config.num_layers == job.model.num_layers


def test_megatron_core_rejects_expert_tp_with_bias(transformer_config):
    """The rule our validator names 'MoE with linear bias needs ETP == 1' is Megatron Core's too."""
    job = make_job(*GOLDEN_CASES["moe_ep_etp"])
    fields = {**_core_fields(job, transformer_config), "add_bias_linear": True}
    with pytest.raises((AssertionError, ValueError)):
        transformer_config.TransformerConfig(**fields)
