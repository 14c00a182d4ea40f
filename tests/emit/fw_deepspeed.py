"""DeepSpeed 0.19.8: ds_config.json through DeepSpeedConfig (its batch assertion, ZeRO config
model), the pipeline partition through the helper's PipelineModule._partition_layers (the method
DeepSpeed calls to set self.parts), and the Ulysses groups through DeepSpeed's own
parallel_state_sp.initialize_sequence_parallel. torch.distributed is not started: rank 0's
answers (rank, world size, new_group) are stubbed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from unittest import mock


class DataParallelMpu:
    """What DeepSpeedConfig asks an mpu for: the data-parallel world size."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_data_parallel_rank(self) -> int:
        return 0


def load_config(config: dict, dp_world: int):
    from deepspeed.runtime import config as ds_config

    with mock.patch.object(ds_config.dist, "get_rank", lambda *a, **k: 0):
        return ds_config.DeepSpeedConfig(config, mpu=DataParallelMpu(dp_world))


def load_helper(folder: Path):
    spec = importlib.util.spec_from_file_location("autopar_deepspeed_emitted", folder / "autopar_deepspeed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def partition(helper, num_specs: int) -> list[list[int]]:
    """Layer-spec indices of every stage, as DeepSpeed sets them through _partition_layers."""
    from deepspeed.pipe import PipelineModule

    built = {}

    def fake_init(self, layers, num_stages, loss_fn=None, activation_checkpoint_interval=0, **kwargs):
        self._layer_specs, self.num_stages, built["interval"] = list(layers), num_stages, activation_checkpoint_interval
        built["module"] = self

    with mock.patch.object(PipelineModule, "__init__", fake_init):
        module = helper.pipeline_module(list(range(num_specs)))
    stages = []
    for stage in range(module.num_stages):
        module.global_rank = stage
        module._topo = mock.Mock(get_coord=lambda rank: mock.Mock(pipe=rank))
        module._set_bounds = lambda start, stop: stages.append(list(range(start, stop)))
        module._partition_layers()
    return stages, built["interval"]


def ulysses_group(helper, world: int) -> list[int] | None:
    """Rank 0's sequence-parallel group as DeepSpeed builds it."""
    import deepspeed.runtime.sequence_parallel.parallel_state_sp as sp

    with mock.patch.multiple(sp.dist, is_initialized=lambda: True, get_world_size=lambda *a, **k: world,
                             get_rank=lambda *a, **k: 0, new_group=lambda ranks, *a, **k: list(ranks)):
        mpu = helper.sequence_parallel_mpu()
        try:
            return list(mpu.get_sequence_parallel_group()) if mpu is not None else None
        finally:
            sp._release_sequence_parallel_groups()


def resolve_network(helper) -> dict:
    """The network transformers builds from the helper's model_config() (on the meta device): its
    MLP (gated when a gate projection exists) and activation, RoPE type and base, parameter count."""
    import torch
    from transformers import AutoModelForCausalLM

    config = helper.model_config()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    names = [name for name, _ in model.named_parameters()]
    gated = any("gate_proj" in n or "gate_up_proj" in n for n in names)
    act = getattr(config, "hidden_act", None) or config.activation_function
    out = {"mlp": f"{'gated ' if gated else ''}{act}", "params": sum(p.numel() for p in model.parameters())}
    rope = getattr(config, "rope_parameters", None)
    if rope:  # transformers 5: rope_theta and the scaling in one mapping ('default' = unscaled)
        out["rope_theta"] = rope.get("rope_theta")
        out["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope["rope_type"]
    return out


def resolve_deepspeed(folder: Path, job) -> dict:
    config = json.loads((folder / "ds_config.json").read_text())
    helper = load_helper(folder)
    pp, layers = helper.PIPELINE_STAGES, job.model.num_layers
    group = ulysses_group(helper, job.num_gpus)
    cp = len(group) if group else 1
    loaded = load_config(config, job.num_gpus // (pp * cp))
    stages, interval = partition(helper, layers + 2) if pp > 1 else ([list(range(layers + 2))], helper.ACTIVATION_CHECKPOINT_INTERVAL)
    ranks = [sum(1 for i in s if 1 <= i <= layers) for s in stages]  # specs 1..L are the decoder layers
    dp = loaded.train_batch_size // (loaded.train_micro_batch_size_per_gpu * loaded.gradient_accumulation_steps)
    full = interval == 1
    out = {
        "tp": 1, "pp": pp, "cp": cp, "dp": dp, "vpp": 1, "mbs": loaded.train_micro_batch_size_per_gpu,
        "gbs": loaded.train_batch_size, "microbatches": loaded.gradient_accumulation_steps, "rank_layers": ranks,
        "precision": "bf16" if loaded.bfloat16_config.enabled else "fp16" if loaded.float16_config.enabled else "fp32",
        "reduce_fp32": str(loaded.communication_data_type) == "torch.float32",
        "recompute": "full" if full else "none", "recompute_layers": ranks if full else [0] * pp,
        "schedule": "1f1b", "zero": loaded.zero_optimization_stage,
    }
    if cp > 1:
        out["cp_algo"] = "ulysses"
    out.update(resolve_network(helper))
    return out
