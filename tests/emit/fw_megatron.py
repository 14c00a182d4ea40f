"""Megatron-LM and Megatron Core (megatron-core wheel, which ships megatron.training): parse an
emitted launch script with Megatron-LM's own parse_args + validate_args, build the
TransformerConfig with core_transformer_config_from_args (its __post_init__ checks), and read the
layers every pipeline rank builds from Megatron Core's layout code.

Stubbed, because this runs on a CPU: torch.cuda.get_device_capability/properties answer the plan's GPU
(the grouped-GEMM and CUDA_DEVICE_MAX_CONNECTIONS checks), Transformer Engine version checks answer
'new enough' and TE's fused RoPE and MoE-permutation kernels count as present (TE is not installable without CUDA; a
real run has it)."""

from __future__ import annotations

import typing

import typing_extensions

# megatron-core 0.19.2 is built for Python 3.12; its only 3.12-only name on the import path the
# tests use is typing.override (megatron/training/models/hybrid.py): the same decorator, 3.11 spelling.
if not hasattr(typing, "override"):
    typing.override = typing_extensions.override

import contextlib  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
from unittest import mock  # noqa: E402

from autopar.emit.megatron_parse import argv_from_script, world_size_from_script  # noqa: E402

# TE's fused MoE permutation kernels (moe_permute_fusion, set by the DeepSeek-V3 recipe)
TE_PERMUTE = ("fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
              "fused_sort_chunks_by_index_with_probs", "fused_unpermute")
DISPATCHERS = {"alltoall": "alltoall", "allgather": "allgather", "flex": "deepep"}


def script_env(text: str) -> dict[str, str | None]:
    """The exports (and unsets) of an emitted script."""
    env: dict[str, str | None] = {k: v for k, v in re.findall(r"^export (\w+)=(\S+)", text, re.MULTILINE)}
    env.update({k: None for k in re.findall(r"^unset (\w+)", text, re.MULTILINE)})
    return env


@contextlib.contextmanager
def megatron_process(world: int, env: dict[str, str | None], compute_capability: float, gpu_name: str = "NVIDIA H100"):
    """Environment and stubs of rank 0 of a `world`-GPU job, on this CPU machine."""
    import megatron.core.models.common.embeddings.rope_utils as rope_utils
    import megatron.core.transformer.moe.moe_utils as moe_utils
    import megatron.core.transformer.transformer_config as transformer_config
    import megatron.core.utils as core_utils
    import megatron.training.arguments as arguments
    import torch

    cc = (int(compute_capability), round(compute_capability % 1 * 10))
    saved = {k: os.environ.get(k) for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "CUDA_DEVICE_MAX_CONNECTIONS")}
    os.environ.update({"WORLD_SIZE": str(world), "RANK": "0", "LOCAL_RANK": "0"})
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        props = mock.Mock(major=cc[0], minor=cc[1])
        props.name = gpu_name
        with mock.patch.object(torch.cuda, "get_device_capability", return_value=cc), \
                mock.patch.object(torch.cuda, "get_device_properties", return_value=props), \
                mock.patch.object(arguments, "is_te_min_version", return_value=True), \
                mock.patch.object(core_utils, "is_te_min_version", return_value=True), \
                mock.patch.object(transformer_config, "is_te_min_version", return_value=True), \
                mock.patch.object(arguments, "get_device_arch_version", return_value=cc[0]), \
                mock.patch.object(rope_utils, "fused_apply_rotary_pos_emb", rope_utils.fused_apply_rotary_pos_emb or (lambda *a, **k: None)), \
                mock.patch.multiple(moe_utils, **{name: getattr(moe_utils, name) or (lambda *a, **k: None) for name in TE_PERMUTE}):
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def parse_validate(argv: list[str], world: int, env: dict, cc: float):
    """Megatron-LM's args namespace after parse_args and validate_args, and its TransformerConfig."""
    from megatron.training.argument_utils import core_transformer_config_from_args
    from megatron.training.arguments import parse_args, validate_args

    with megatron_process(world, env, cc), mock.patch.object(sys, "argv", ["pretrain_gpt.py", *argv]):
        args = parse_args()
        validate_args(args, {})
        config = core_transformer_config_from_args(args)
    return args, config


def hybrid_segments(pattern: str, pp: int, vpp: int) -> list[list[str]]:
    """[pp rank][virtual stage] -> the layer letters Megatron Core's HybridModel builds there
    (hybrid_layer_allocation.select_pipeline_segment, with the pipeline group's rank stubbed)."""
    import torch
    from megatron.core.models.hybrid import hybrid_layer_allocation as hla

    main = hla.parse_hybrid_pattern(pattern).main_pattern
    grid = []
    for rank in range(pp):
        with mock.patch.object(torch.distributed, "get_rank", return_value=rank), \
                mock.patch.object(torch.distributed, "get_world_size", return_value=pp), \
                mock.patch.object(hla, "log_on_each_pipeline_stage", lambda *a, **k: None):
            grid.append(["".join(hla.select_pipeline_segment(main, object(), v if vpp > 1 else None)[0]) for v in range(vpp)])
    return grid


def layers_per_rank(config, pp: int, vpp: int, args=None) -> tuple[list[int], list[int]]:
    """Decoder and MTP layers each pipeline rank builds, from Megatron Core's own code."""
    from megatron.core import parallel_state
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    if args is not None and args.hybrid_layer_pattern:  # MTP depths run on the last stage
        grid = hybrid_segments(args.hybrid_layer_pattern, pp, vpp)
        return [sum(map(len, row)) for row in grid], [0] * (pp - 1) + [args.mtp_num_layers or 0]

    layout = config.pipeline_model_parallel_layout
    if layout is not None:
        grid = layout.layout  # [pp rank][virtual stage] -> layer types
        return ([sum(grid[r][v].count(LayerType.decoder) for v in range(vpp)) for r in range(pp)],
                [sum(grid[r][v].count(LayerType.mtp) for v in range(vpp)) for r in range(pp)])
    decoders = []
    for rank in range(pp):
        with mock.patch.object(parallel_state, "get_pipeline_model_parallel_rank", return_value=rank), \
                mock.patch.object(parallel_state, "get_pipeline_model_parallel_world_size", return_value=pp), \
                mock.patch.object(parallel_state, "get_virtual_pipeline_model_parallel_world_size", return_value=vpp if vpp > 1 else None):
            decoders.append(sum(get_num_layers_to_build(config, vp_stage=v if vpp > 1 else None, pp_rank=rank) for v in range(vpp)))
    mtp = [0] * pp
    mtp[-1] = config.mtp_num_layers or 0  # without a layout Megatron puts MTP on the last stage
    return decoders, mtp


def recompute_per_rank(args, chunk_layers: list[list[int]]) -> tuple[str, list[int]]:
    if args.recompute_granularity is None:
        return "none", [0] * len(chunk_layers)
    if args.recompute_granularity == "selective":
        return "selective", [0] * len(chunk_layers)
    n = args.recompute_num_layers
    if args.recompute_method == "uniform":  # every layer, in groups of n
        return "full", [sum(chunks) for chunks in chunk_layers]
    return "full", [sum(min(n, c) for c in chunks) for chunks in chunk_layers]  # block: first n of each chunk


def chunk_layers(config, pp: int, vpp: int, ranks: list[int], args=None) -> list[list[int]]:
    from megatron.core.transformer.enums import LayerType

    if args is not None and args.hybrid_layer_pattern:
        return [list(map(len, row)) for row in hybrid_segments(args.hybrid_layer_pattern, pp, vpp)]
    layout = config.pipeline_model_parallel_layout
    if layout is not None:
        return [[layout.layout[r][v].count(LayerType.decoder) for v in range(vpp)] for r in range(pp)]
    return [[n // vpp] * vpp for n in ranks]  # Megatron splits a rank's layers evenly over its chunks


def resolve_megatron(folder, job) -> dict:
    text = (folder / "launch_megatron.sh").read_text()
    world = world_size_from_script(text)
    argv = argv_from_script(text) + ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(job.model.vocab_size),
                                     "--train-iters", "10", "--lr", "3e-4"]
    args, config = parse_validate(argv, world, script_env(text), job.cluster.gpu.compute_capability)
    pp = args.pipeline_model_parallel_size
    vpp = args.virtual_pipeline_model_parallel_size or 1
    ranks, mtp = layers_per_rank(config, pp, vpp, args)
    granularity, recomputed = recompute_per_rank(args, chunk_layers(config, pp, vpp, ranks, args))
    precision = "fp8" if args.fp8 else "fp4" if getattr(args, "fp4", None) else "fp16" if args.fp16 else "bf16"
    zero = {"optim_grads": 2, "optim_grads_params": 3}.get(args.data_parallel_sharding_strategy, 1) if args.use_megatron_fsdp \
        else int(bool(args.use_distributed_optimizer))
    out = {
        "tp": args.tensor_model_parallel_size, "pp": pp, "cp": args.context_parallel_size, "dp": args.data_parallel_size,
        "vpp": vpp, "mbs": args.micro_batch_size, "gbs": args.global_batch_size,
        "microbatches": args.global_batch_size // (args.micro_batch_size * args.data_parallel_size),
        "rank_layers": ranks, "precision": precision, "reduce_fp32": bool(args.accumulate_allreduce_grads_in_fp32),
        "recompute": granularity, "recompute_layers": recomputed, "schedule": "interleaved" if vpp > 1 else "1f1b",
        "zero": zero,
    }
    if args.position_embedding_type in ("rope", "yarn"):
        out["rope_scaling"] = rope_scaling_of(args.position_embedding_type, config, args.use_rope_scaling,
                                              args.rotary_seq_len_interpolation_factor)
    if args.fp8:  # Megatron's 'tensorwise' is TE per-tensor current scaling (fp8_utils.py get_fp8_recipe)
        out["fp8_recipe"] = getattr(config.fp8_recipe, "value", config.fp8_recipe)
        out["fp8_bf16_end_layers"] = bool(config.first_last_layers_bf16)
    if args.context_parallel_size > 1:
        out["cp_algo"] = {"p2p": "ring", "a2a": "ulysses", "a2a+p2p": "hybrid"}[args.cp_comm_type[0] if isinstance(args.cp_comm_type, list) else args.cp_comm_type]
    if args.hybrid_layer_pattern:
        out.update(hybrid_values(args.hybrid_layer_pattern, config))
    if args.num_experts:
        out.update(moe_values(args, config, mtp))
    return out


def rope_scaling_of(position_embedding_type: str, config, llama3: bool, interpolation) -> str | None:
    """The RoPE scaling Megatron Core builds, in HF's names: MLA its own RoPE (MLATransformerConfig
    rope_type), GPTModel YarnRotaryEmbedding for 'yarn', RotaryEmbedding with llama3 scaling
    (rope_scaling) or position interpolation (seq_len_interpolation_factor)."""
    if config.multi_latent_attention:
        return "yarn" if config.rope_type == "yarn" else None
    if position_embedding_type == "yarn":
        return "yarn"
    return "llama3" if llama3 else "linear" if interpolation else None


def hybrid_values(pattern: str, config) -> dict:
    """The layer letters, MTP blocks and Mamba-2 shape Megatron Core's HybridModel builds from a
    full pattern ('|' stages, '/' MTP depths) and its TransformerConfig."""
    from megatron.core.models.hybrid.hybrid_layer_allocation import parse_hybrid_pattern

    parsed = parse_hybrid_pattern(pattern)
    out = {"layer_pattern": parsed.main_pattern.replace("|", ""), "mtp_pattern": parsed.mtp_pattern}
    if "M" in out["layer_pattern"]:
        out["mamba"] = (config.mamba_num_heads, config.mamba_head_dim, config.mamba_state_dim, config.mamba_num_groups)
    return out


def pattern_moe_layers(pattern: str) -> list[int]:
    """HybridModel builds a MoE layer for each E letter of the main pattern."""
    return [int(c == "E") for c in pattern.split("/")[0].replace("|", "")]


def moe_values(args, config, mtp: list[int]) -> dict:
    freq = config.moe_layer_freq
    layers = list(freq) if isinstance(freq, list) else [int(i % freq == 0) for i in range(config.num_layers)]
    if args.hybrid_layer_pattern:
        layers = pattern_moe_layers(args.hybrid_layer_pattern)
    return {
        "ep": args.expert_model_parallel_size, "etp": args.expert_tensor_parallel_size,
        "dispatcher": DISPATCHERS[args.moe_token_dispatcher_type], "experts": args.num_experts, "topk": args.moe_router_topk,
        "router_score": args.moe_router_score_function, "router_expert_bias": bool(args.moe_router_enable_expert_bias),
        "router_groups": args.moe_router_num_groups, "router_group_topk": args.moe_router_group_topk,
        "mtp_layers": sum(mtp), "moe_layers": layers, "moe_latent": config.moe_latent_size,
    }
