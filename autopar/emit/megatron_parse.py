"""Read Megatron-LM arguments back: an argparse subset with Megatron's names, types and
defaults (docs/reference/launchers.md 1.1-1.3), and the inverse map to Plan + TrainingSpec.
Used by the validator (it checks what was emitted, not what was meant) and by round trips."""

from __future__ import annotations

import argparse
import re
import shlex

from autopar.errors import InputError
from autopar.specs.plan import CpAlgo, Plan, RankOrder, Recompute
from autopar.specs.training import Precision, TrainingSpec


def megatron_parser() -> argparse.ArgumentParser:
    """The flags autopar emits or checks, with Megatron-LM's dest names and defaults."""
    p = argparse.ArgumentParser(prog="pretrain_gpt.py", add_help=False, allow_abbrev=False)
    ints = {  # flag: default
        "--tensor-model-parallel-size": 1, "--pipeline-model-parallel-size": 1, "--context-parallel-size": 1,
        "--expert-model-parallel-size": 1, "--expert-tensor-parallel-size": None,
        "--num-layers-per-virtual-pipeline-stage": None, "--num-virtual-stages-per-pipeline-rank": None,
        "--microbatch-group-size-per-virtual-pipeline-stage": None,
        "--decoder-first-pipeline-num-layers": None, "--decoder-last-pipeline-num-layers": None,
        "--num-distributed-optimizer-instances": 1, "--micro-batch-size": None, "--global-batch-size": None,
        "--seq-length": None, "--max-position-embeddings": None, "--num-layers": None, "--hidden-size": None,
        "--ffn-hidden-size": None, "--num-attention-heads": None, "--kv-channels": None, "--num-query-groups": 1,
        "--recompute-num-layers": None, "--num-experts": None, "--moe-router-topk": 2, "--moe-ffn-hidden-size": None,
        "--moe-shared-expert-intermediate-size": None, "--moe-latent-size": None, "--moe-router-num-groups": None,
        "--moe-router-group-topk": None,
        "--q-lora-rank": None, "--kv-lora-rank": 32, "--qk-head-dim": 128, "--qk-pos-emb-head-dim": 64, "--v-head-dim": 128,
        "--fp8-amax-history-len": 1, "--vocab-size": None,
        "--linear-num-key-heads": 16, "--linear-num-value-heads": 32, "--linear-key-head-dim": 128, "--linear-value-head-dim": 128,
        "--linear-conv-kernel-dim": 4,
        "--mamba-num-heads": None, "--mamba-head-dim": 64, "--mamba-state-dim": 128, "--mamba-num-groups": 8,
    }
    for flag, default in ints.items():
        p.add_argument(flag, type=int, default=default)
    flags = [
        "--sequence-parallel", "--use-tp-pp-dp-mapping", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split", "--bf16", "--fp16", "--fp8-param-gather", "--fp4-param-gather",
        "--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32", "--use-distributed-optimizer",
        "--overlap-grad-reduce", "--overlap-param-gather", "--overlap-param-gather-with-optimizer-step",
        "--tp-comm-overlap", "--use-megatron-fsdp", "--use-torch-fsdp2", "--distribute-saved-activations",
        "--group-query-attention", "--swiglu", "--untie-embeddings-and-output-weights", "--add-qkv-bias",
        "--qk-layernorm", "--multi-latent-attention", "--moe-grouped-gemm", "--moe-router-pre-softmax",
        "--moe-router-enable-expert-bias", "--moe-shared-expert-gate", "--mock-data", "--overlap-moe-expert-parallel-comm",
        "--squared-relu",
    ]
    for flag in flags:
        p.add_argument(flag, action="store_true")
    p.add_argument("--no-overlap-p2p-communication", dest="overlap_p2p_comm", action="store_false")
    p.add_argument("--disable-bias-linear", dest="add_bias_linear", action="store_false")
    p.add_argument("--no-bias-gelu-fusion", dest="bias_gelu_fusion", action="store_false")
    p.add_argument("--cp-comm-type", nargs="+", default=["p2p"])
    p.add_argument("--hierarchical-context-parallel-sizes", nargs="+", type=int, default=None)
    p.add_argument("--window-size", type=_window_size, default=None)  # AR tuple_type: "left,right"
    p.add_argument("--pipeline-model-parallel-layout", default=None)
    p.add_argument("--hybrid-layer-pattern", default=None)
    p.add_argument("--hybrid-override-pattern", dest="hybrid_layer_pattern")  # deprecated spelling, same value
    p.add_argument("--data-parallel-sharding-strategy", default="optim_grads_params",
                   choices=["no_shard", "optim", "optim_grads", "optim_grads_params"])
    p.add_argument("--fp8-format", dest="fp8", choices=["e4m3", "hybrid"], default=None)
    p.add_argument("--fp8-recipe", choices=["tensorwise", "delayed", "mxfp8", "blockwise", "custom"], default="delayed")
    p.add_argument("--fp8-amax-compute-algo", choices=["most_recent", "max"], default="most_recent")
    p.add_argument("--fp4-format", dest="fp4", choices=["e2m1"], default=None)
    p.add_argument("--fp4-recipe", choices=["nvfp4", "custom"], default="nvfp4")
    p.add_argument("--recompute-granularity", choices=["full", "selective"], default=None)
    p.add_argument("--recompute-method", choices=["uniform", "block"], default=None)
    p.add_argument("--recompute-modules", nargs="+", default=None)
    p.add_argument("--fine-grained-activation-offloading", action="store_true")
    p.add_argument("--offload-modules", nargs="+", default=None)
    p.add_argument("--cpu-offloading-num-layers", type=int, default=0)
    p.add_argument("--moe-layer-freq", default="1")
    p.add_argument("--experimental-attention-variant", choices=["gdn", "gdn2", "dsa", "gated_delta_net"], default=None)
    p.add_argument("--linear-attention-freq", default=None)
    p.add_argument("--moe-token-dispatcher-type", choices=["allgather", "alltoall", "flex"], default="allgather")
    p.add_argument("--moe-router-score-function", choices=["softmax", "sigmoid", "sqrtsoftplus"], default="softmax")
    p.add_argument("--moe-router-load-balancing-type", nargs="+", default=["aux_loss"])
    p.add_argument("--ckpt-format", default="torch_dist")
    p.add_argument("--attention-backend", choices=["flash", "fused", "unfused", "local", "auto"], default="auto")
    p.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm")
    p.add_argument("--position-embedding-type", default="learned_absolute")
    p.add_argument("--attention-dropout", type=float, default=0.1)
    p.add_argument("--hidden-dropout", type=float, default=0.1)
    return p


def _window_size(text: str) -> tuple[int, ...]:
    """--window-size as Megatron-LM's tuple_type reads it: comma-separated ints ("4096,0")."""
    return tuple(int(x) for x in text.strip("()").split(","))


def parse_megatron_argv(argv: list[str], resolve_hybrid: bool = True) -> argparse.Namespace:
    """Known flags into a namespace; unknown flags (data, optimizer, logging) are ignored. With
    a hybrid layer pattern the layer count and (with '|' segments) the pipeline layout, MTP
    modules included, are the pattern's (resolve_hybrid; the rules read the flags as written first)."""
    try:
        ns, _ = megatron_parser().parse_known_args(argv)
    except SystemExit:  # argparse reports a bad value by exiting
        raise InputError("megatron args", " ".join(argv[:6]) + " ...", "a flag has a value Megatron-LM rejects") from None
    if resolve_hybrid and ns.hybrid_layer_pattern:
        main, *mtp = ns.hybrid_layer_pattern.split("/")
        segments = main.split("|")
        ns.num_layers = sum(map(len, segments))
        if len(segments) > 1 and len(segments) % ns.pipeline_model_parallel_size == 0:
            # as the layout string Megatron's GPT path reads: E first, MTP and L last (segments
            # that do not divide by pp are the hybrid rules' to report)
            stages = [f"t*{len(seg)}" if seg else "" for seg in segments]
            stages[0], stages[-1] = "E" + stages[0], stages[-1] + "m" * len(mtp) + "L"
            ns.pipeline_model_parallel_layout = "|".join(stages)
    return ns


def argv_from_script(text: str) -> list[str]:
    """The MEGATRON_ARGS=( ... ) array of an emitted script, split as bash would."""
    match = re.search(r"^MEGATRON_ARGS=\($(.*?)^\)$", text, re.MULTILINE | re.DOTALL)
    if not match:
        raise InputError("script", "MEGATRON_ARGS", "no MEGATRON_ARGS=( ... ) array found")
    return shlex.split(match.group(1), comments=True)


def world_size_from_script(text: str) -> int:
    nodes = re.search(r"^NNODES=\$\{NNODES:-(\d+)\}$", text, re.MULTILINE)
    gpus = re.search(r"^GPUS_PER_NODE=\$\{GPUS_PER_NODE:-(\d+)\}$", text, re.MULTILINE)
    if not nodes or not gpus:
        raise InputError("script", "NNODES/GPUS_PER_NODE", "default node and GPU counts not found")
    return int(nodes.group(1)) * int(gpus.group(1))


def layout_stage_layers(layout: str, pp: int) -> tuple[list[int], int]:
    """Decoder layers per physical pipeline stage, and VPP, from a layout string."""
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    stages = text.split("|")
    if len(stages) % pp:
        raise InputError("pipeline-model-parallel-layout", layout, f"{len(stages)} stages do not divide by pp={pp}")
    vpp = len(stages) // pp
    return [sum(stages[v * pp + p].count("t") for v in range(vpp)) for p in range(pp)], vpp


_CP_ALGO = {"p2p": CpAlgo.ring, "a2a": CpAlgo.ulysses, "a2a+p2p": CpAlgo.hybrid}


def _zero(ns: argparse.Namespace) -> int:
    if ns.use_megatron_fsdp:
        return {"optim_grads": 2, "optim_grads_params": 3}.get(ns.data_parallel_sharding_strategy, 1)
    return 1 if ns.use_distributed_optimizer else 0


def plan_from_megatron(ns: argparse.Namespace, world_size: int) -> Plan:
    """The plan these arguments run (canonical form: see autopar.emit.common.canonical_plan)."""
    tp, pp, cp = ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size
    dp = world_size // (tp * pp * cp)
    first, last = ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers
    vpp = ns.num_virtual_stages_per_pipeline_rank or 1
    if ns.num_layers_per_virtual_pipeline_stage:
        vpp = ns.num_layers // pp // ns.num_layers_per_virtual_pipeline_stage
    layout = ns.pipeline_model_parallel_layout
    if layout:
        vpp = layout_stage_layers(layout, pp)[1]
    zero = _zero(ns)
    recompute = Recompute(ns.recompute_granularity or "none")
    recompute_layers = None
    if recompute == Recompute.full and ns.recompute_method == "block":
        recompute_layers = ns.recompute_num_layers * vpp
    etp = ns.expert_tensor_parallel_size
    instances = ns.num_distributed_optimizer_instances
    return Plan(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ns.expert_model_parallel_size,
        etp=None if etp in (None, tp) else etp, vpp=vpp, mbs=ns.micro_batch_size, zero=zero,
        zero_shard_size=(dp * cp) // instances if instances > 1 else None,
        recompute=recompute, recompute_num_layers=recompute_layers,
        recompute_modules=tuple(ns.recompute_modules) if recompute == Recompute.selective and ns.recompute_modules else None,
        offload_modules=tuple(ns.offload_modules) if ns.fine_grained_activation_offloading and ns.offload_modules else None,
        offload_num_layers=ns.cpu_offloading_num_layers or None,
        sp=bool(ns.sequence_parallel and tp > 1), tp_overlap=bool(ns.tp_comm_overlap and ns.sequence_parallel and tp > 1),
        schedule="interleaved" if vpp > 1 else "1f1b",
        cp_algo=_CP_ALGO.get(ns.cp_comm_type[0], CpAlgo.ring) if cp > 1 else CpAlgo.ring,
        order=RankOrder.tp_cp_ep_pp_dp if ns.use_tp_pp_dp_mapping else RankOrder.tp_cp_ep_dp_pp,
        first_stage_layers=None if layout else first, last_stage_layers=None if layout else last, layout=layout or None,
        dispatcher={"flex": "deepep"}.get(ns.moe_token_dispatcher_type, ns.moe_token_dispatcher_type) if ns.num_experts else "alltoall",
        ep_overlap=ns.overlap_moe_expert_parallel_comm,
    )


def training_from_megatron(ns: argparse.Namespace) -> TrainingSpec:
    """seq_len, global batch, precision, gradient-reduction bytes and FP8 parameter gathering (the
    rest keep defaults)."""
    if ns.fp4:
        precision = Precision.fp4
    elif ns.fp8:
        precision = Precision.fp8
    else:
        precision = Precision.fp16 if ns.fp16 else Precision.bf16
    if precision == Precision.fp16:
        reduce_bytes = 4.0 if ns.accumulate_allreduce_grads_in_fp32 else 2.0
    else:
        reduce_bytes = 2.0 if ns.grad_reduce_in_bf16 else 4.0
    return TrainingSpec(
        seq_len=ns.seq_length, global_batch_size=ns.global_batch_size, precision=precision,
        grad_reduce_bytes_per_param=reduce_bytes, grad_bytes_per_param=reduce_bytes,
        flash_attention=ns.attention_backend != "unfused",
        fp8_param_gather=bool(ns.fp8_param_gather) and precision == Precision.fp8,
    )


def parse_megatron_script(text: str) -> tuple[Plan, TrainingSpec]:
    """Plan and training spec of an emitted launch script."""
    ns = parse_megatron_argv(argv_from_script(text))
    return plan_from_megatron(ns, world_size_from_script(text)), training_from_megatron(ns)
