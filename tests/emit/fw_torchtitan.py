"""torchtitan (0.3.0 wheel, with torchao for the Float8 converter): load the emitted config module
with torchtitan's ConfigManager, build ParallelDims from it (its _validate), and split the model
with torchtitan's own pipeline code (_get_pipeline_metadata, _generate_llm_fqn_per_model_part).
Float8 converters are read from the config's model_spec; their GPU probe (has_cuda_capability) is
answered with the plan's GPU, as there is none here."""

from __future__ import annotations

import sys
from pathlib import Path


def load_config(folder: Path, compute_capability: float = 9.0):
    """The config the module builds; the Float8 converters' GPU probe answers the plan's GPU."""
    from unittest import mock

    import torchtitan.components.quantization.float8 as float8
    from torchtitan.config.manager import ConfigManager

    cc = (int(compute_capability), round(compute_capability % 1 * 10))
    sys.path.insert(0, str(folder))
    sys.modules.pop("autopar_torchtitan", None)
    try:
        with mock.patch.object(float8, "has_cuda_capability", lambda major, minor: cc >= (major, minor)):
            return ConfigManager().parse_args(["--module", "autopar_torchtitan", "--config", "autopar_plan"])
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("autopar_torchtitan", None)


def stage_layers(dims, config, pp: int) -> tuple[list[int], int, list[int]]:
    """Decoder layers per pipeline rank, VPP, and MTP modules per rank, as torchtitan splits them."""
    from torchtitan.distributed import pipeline_parallel as ppl

    model = config.model_spec.model
    if pp == 1:
        return [len(model.layers)], 1, [len(getattr(model, "mtp_layers", None) or [])]
    stages, layers, first_less, last_less = ppl._get_pipeline_metadata(dims, config.parallelism, model)
    parts = ppl._generate_llm_fqn_per_model_part(stages, layers, first_less, last_less)
    vpp = stages // pp
    per_rank = [sum(sum(m.startswith("layers.") for m in parts[p + v * pp]) for v in range(vpp)) for p in range(pp)]
    mtp = [sum(sum("mtp" in m for m in parts[p + v * pp]) for v in range(vpp)) for p in range(pp)]
    return per_rank, vpp, mtp


def _walk(obj, depth: int = 0):
    """Every config object under obj (dataclass fields, lists)."""
    import dataclasses

    if depth > 8:
        return
    yield obj
    children = [getattr(obj, f.name) for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else obj if isinstance(obj, list) else []
    for child in children:
        if dataclasses.is_dataclass(child) or isinstance(child, list):
            yield from _walk(child, depth + 1)


def resolve_torchtitan(folder: Path, job) -> dict:
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.distributed.parallel_dims import ParallelDims

    config = load_config(folder, job.cluster.gpu.compute_capability)
    par, tr = config.parallelism, config.training
    dims = ParallelDims.from_config(par, job.num_gpus)  # runs torchtitan's _validate
    ranks, vpp, mtp = stage_layers(dims, config, dims.pp)
    dp = dims.dp_replicate * dims.dp_shard
    mbs = par.pipeline_parallel_microbatch_size if dims.pp > 1 else tr.local_batch_size
    ac = config.activation_checkpoint
    recompute = "full" if isinstance(ac, FullAC.Config) else "selective" if isinstance(ac, SelectiveAC.Config) else "none"
    float8 = any("float8" in type(m).__name__.lower() for m in _walk(config.model_spec.model))
    out = {
        "tp": dims.tp, "pp": dims.pp, "cp": dims.cp, "dp": dp, "vpp": vpp, "mbs": mbs, "gbs": tr.global_batch_size,
        # gradient accumulation x pipeline micro-batches, as the trainer computes them
        "microbatches": tr.global_batch_size // (tr.local_batch_size * dp) * (tr.local_batch_size // mbs),
        "rank_layers": ranks, "precision": "fp8" if float8 else tr.mixed_precision_param.replace("bfloat16", "bf16"),
        "reduce_fp32": tr.mixed_precision_reduce == "float32", "recompute": recompute,
        "recompute_layers": ranks if recompute == "full" else [0] * dims.pp,
        "schedule": {"1F1B": "1f1b", "Interleaved1F1B": "interleaved", "GPipe": "gpipe"}.get(par.pipeline_parallel_schedule, par.pipeline_parallel_schedule) if dims.pp > 1 else "1f1b",
    }
    # ZeRO-1/2 run as FSDP2 that never reshards (the artefact says so); only ZeRO-3's reshard choice is a setting
    if job.plan.zero == 3:
        mode = par.fsdp_reshard_after_forward
        out["reshard"] = {"always": True, "never": False}.get(mode, dims.pp == 1)
    if dims.cp > 1:
        out["cp_algo"] = "ring"  # torchtitan's context parallelism is ring attention
    if config.compile.enable_async_tensor_parallel:  # CompileConfig.__post_init__ already checked compile
        out["async_tp_compiled"] = config.compile.enable and "model" in config.compile.components
    # every layer's RoPE.Config.scaling (models/common/rope.py), in HF's names; one kind for the model
    scalings = {o.scaling for o in _walk(config.model_spec.model) if type(o).__qualname__.endswith("RoPE.Config")}
    if len(scalings) == 1:
        out["rope_scaling"] = {"none": None, "llama": "llama3", "yarn": "yarn"}.get(*scalings, *scalings)
    else:
        out["rope_scaling"] = sorted(scalings)
    if job.model.is_moe:
        out.update(moe_values(config, dims, mtp))
    return out


def moe_values(config, dims, mtp: list[int]) -> dict:
    layers = config.model_spec.model.layers
    moe = [getattr(layer, "moe", None) for layer in layers]
    first = next(m for m in moe if m is not None)
    router = first.router
    dispatcher = type(first.routed_experts.token_dispatcher).__qualname__.split(".")[0]
    return {
        "ep": dims.ep, "etp": 1, "dispatcher": "deepep" if dispatcher.startswith("DeepEP") else "alltoall",
        "experts": router.num_experts, "topk": router.top_k, "router_score": router.score_func,
        "router_expert_bias": first.load_balance_coeff is not None,  # aux-loss-free bias updates
        "router_groups": router.num_expert_groups, "router_group_topk": router.num_limited_groups,
        "mtp_layers": sum(mtp), "moe_layers": [int(m is not None) for m in moe],
    }
