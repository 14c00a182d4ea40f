"""Megatron-Bridge 0.6.2: run the emitted pretrain script's autopar_config() (the recipe with the
plan applied), then Bridge's own runtime_config_update (mixed-precision recipe, data-parallel size,
comm-overlap setup, ConfigContainer.validate, model finalize), and read the resolved values.

The recipes read the model's HuggingFace config.json from the hub: the test serves the preset's
config.json (profiles/models, the hub file) from an offline cache. Bridge's LoRA module imports
transformer_engine.pytorch at import time, and the DeepSeek-V3 recipe's precision-aware optimizer
checks TE's FusedAdam signature; TE does not install without CUDA, so stand-in modules answer those
two look-ups (no resolved value comes from them)."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path
from unittest import mock

from fw_megatron import (
    chunk_layers, hybrid_values, layers_per_rank, megatron_process, pattern_moe_layers, recompute_per_rank, rope_scaling_of,
)

ROOT = Path(__file__).resolve().parents[2]
HF_REPOS = {  # recipe's hub id -> preset file (profiles/models/SOURCES.md names the hub file)
    "meta-llama/Meta-Llama-3-8B": "llama3-8b.json",
    "meta-llama/Meta-Llama-3-70B": "llama3-70b.json",
    "meta-llama/Meta-Llama-3.1-405B": "llama3-405b.json",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3.json",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b.json",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b.json",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16": "nemotron-3-super-120b-a12b.json",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": "nemotron-3-ultra-550b-a55b.json",
}

HF_REVISIONS = {"Qwen/Qwen3-30B-A3B": ("ad44e777bcd18fa416d9da3bd8f70d33ebb85d39",)}  # pragma: allowlist secret


def offline_hub(cache: Path) -> dict[str, str]:
    """A HuggingFace hub cache holding the presets' config.json files; the environment to use it."""
    commit = "0" * 40
    for repo, preset in HF_REPOS.items():
        base = cache / "hub" / ("models--" + repo.replace("/", "--"))
        (base / "refs").mkdir(parents=True, exist_ok=True)
        (base / "refs" / "main").write_text(commit)
        # the Qwen3-30B-A3B recipe asks for a pinned revision (recipes/qwen/h100/qwen3_moe.py)
        for snapshot in (commit, *HF_REVISIONS.get(repo, ())):
            snap = base / "snapshots" / snapshot
            snap.mkdir(parents=True, exist_ok=True)
            (snap / "config.json").write_text((ROOT / "profiles" / "models" / preset).read_text())
    return {"HF_HOME": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


class _AnyType(type):
    def __getattr__(cls, name):
        return _AnyType(name, (), {})


class _StandIn(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyType(name, (), {})


def import_bridge() -> None:
    """Import Megatron-Bridge once, with Megatron Core already settled on 'no TE'."""
    if "megatron.bridge.training.config" in sys.modules:
        return
    import megatron.core.models.gpt.gpt_layer_specs  # noqa: F401  (HAVE_TE resolved without TE)
    import megatron.training.arguments  # noqa: F401

    te = _StandIn("transformer_engine")
    te.__path__ = []
    te.pytorch = _StandIn("transformer_engine.pytorch")
    sys.modules.update({"transformer_engine": te, "transformer_engine.pytorch": te.pytorch})
    try:
        import megatron.bridge.recipes.deepseek  # noqa: F401
        import megatron.bridge.recipes.llama  # noqa: F401
        import megatron.bridge.recipes.nemotronh  # noqa: F401
        import megatron.bridge.recipes.qwen  # noqa: F401
        import megatron.bridge.training.config  # noqa: F401
    finally:  # only Bridge's import-time reference stays; later 'import transformer_engine' fails as on any CPU
        del sys.modules["transformer_engine"], sys.modules["transformer_engine.pytorch"]


def te_fused_adam():
    """TE's FusedAdam signature, for the precision-aware-optimizer check of the DeepSeek-V3 recipe
    (megatron/core/optimizer/optimizer_config.py inspects it; TE >= 2.x has these arguments)."""
    optimizers = types.ModuleType("transformer_engine.pytorch.optimizers")

    def FusedAdam(params, master_weight_dtype=None, exp_avg_dtype=None, exp_avg_sq_dtype=None, use_decoupled_grad=False):  # noqa: N802
        raise NotImplementedError

    optimizers.FusedAdam = FusedAdam
    te, pytorch = types.ModuleType("transformer_engine"), types.ModuleType("transformer_engine.pytorch")
    te.pytorch, pytorch.optimizers = pytorch, optimizers
    te.__path__ = pytorch.__path__ = []
    return mock.patch.dict(sys.modules, {"transformer_engine": te, "transformer_engine.pytorch": pytorch,
                                         "transformer_engine.pytorch.optimizers": optimizers})


def load_script(folder: Path, hub: Path):
    spec = importlib.util.spec_from_file_location("autopar_bridge_emitted", folder / "pretrain_megatron_bridge.py")
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(os.environ, offline_hub(hub)):
        import_bridge()
        spec.loader.exec_module(module)
        return module.autopar_config()


def resolve_bridge(folder: Path, job, hub: Path) -> dict:
    cfg = load_script(folder, hub)
    from megatron.bridge.training.config import runtime_config_update

    with megatron_process(job.num_gpus, {}, job.cluster.gpu.compute_capability, job.cluster.gpu.name), te_fused_adam():
        runtime_config_update(cfg)
    m, t = cfg.model, cfg.train
    pp, vpp = m.pipeline_model_parallel_size, m.virtual_pipeline_model_parallel_size or 1
    # a HybridModelProvider's finalized hybrid_layer_pattern ('|' stages, '/' MTP depths) reads
    # as Megatron-LM's args; a GPT provider has no such field
    hybrid = m if getattr(m, "hybrid_layer_pattern", None) else None
    ranks, mtp = layers_per_rank(m, pp, vpp, hybrid)
    dp = cfg.data_parallel_size
    # the provider is a TransformerConfig: recompute_granularity/method/num_layers as Megatron-LM's args
    recompute, recomputed = recompute_per_rank(m, chunk_layers(m, pp, vpp, ranks, hybrid))
    out = {
        "tp": m.tensor_model_parallel_size, "pp": pp, "cp": m.context_parallel_size, "dp": dp, "vpp": vpp,
        "mbs": t.micro_batch_size, "gbs": t.global_batch_size, "microbatches": t.global_batch_size // (t.micro_batch_size * dp),
        "rank_layers": ranks, "precision": "fp8" if m.fp8 else "fp16" if m.fp16 else "bf16" if m.bf16 else "fp32",
        "reduce_fp32": bool(cfg.ddp.grad_reduce_in_fp32), "recompute": recompute, "recompute_layers": recomputed,
        "schedule": "interleaved" if vpp > 1 else "1f1b",
        "zero": ({"optim_grads": 2, "optim_grads_params": 3}.get(cfg.ddp.data_parallel_sharding_strategy, 1)
                 if cfg.ddp.use_megatron_fsdp else int(bool(cfg.ddp.use_distributed_optimizer))),
    }
    if m.position_embedding_type in ("rope", "yarn"):  # the recipe provider's RoPE, as Megatron-LM's args
        out["rope_scaling"] = rope_scaling_of(m.position_embedding_type, m, getattr(m, "rope_scaling", False),
                                              getattr(m, "seq_len_interpolation_factor", None))
    if m.fp8:  # the mixed-precision recipe applied onto the provider (TransformerConfig fp8_recipe)
        out["fp8_recipe"] = getattr(m.fp8_recipe, "value", m.fp8_recipe)
        out["fp8_bf16_end_layers"] = bool(m.first_last_layers_bf16)
    if m.context_parallel_size > 1:
        out["cp_algo"] = {"p2p": "ring", "a2a": "ulysses", "a2a+p2p": "hybrid"}[m.cp_comm_type]
    if hybrid:
        out.update(hybrid_values(m.hybrid_layer_pattern, m))
    if m.num_moe_experts:
        freq = m.moe_layer_freq
        out.update({
            "ep": m.expert_model_parallel_size, "etp": m.expert_tensor_parallel_size,
            "dispatcher": {"flex": "deepep"}.get(m.moe_token_dispatcher_type, m.moe_token_dispatcher_type),
            "experts": m.num_moe_experts, "topk": m.moe_router_topk, "router_score": m.moe_router_score_function,
            "router_expert_bias": bool(m.moe_router_enable_expert_bias), "router_groups": m.moe_router_num_groups,
            "router_group_topk": m.moe_router_group_topk, "mtp_layers": sum(mtp),
            "moe_layers": pattern_moe_layers(m.hybrid_layer_pattern) if hybrid
            else list(freq) if isinstance(freq, list) else [int(i % freq == 0) for i in range(m.num_layers)],
            "moe_latent": m.moe_latent_size,
        })
    return out
