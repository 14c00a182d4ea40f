"""Options shared by commands: model, cluster, GPUs, training, output.

Imports of the specs and the cost model happen inside the functions, so that `--help` of a
command stays fast (tests/cli/test_lazy.py)."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from autopar.errors import InputError, Missing
from autopar.limits import MAX_SEQ_LEN, MAX_TOKENS_PER_STEP

if TYPE_CHECKING:
    from autopar.specs import ClusterSpec, ModelSpec, TrainingSpec

# K/M/G/T/P and B (billion, as in "4B tokens": the same as G) for counts; Ki/Mi/Gi/Ti/Pi are always
# powers of two. A byte size reads a trailing B as bytes instead (16MB, 1GiB); money ($5M) takes
# the decimal ones. P is what autopar.report.human_count writes past T (COUNT_UNITS), and plan
# --tokens has always read.
_SUFFIX = {"k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9, "t": 1e12, "p": 1e15,
           "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
_BINARY = {"k": "ki", "m": "mi", "g": "gi", "b": "gi", "t": "ti", "p": "pi"}
_NUMBER = re.compile(r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*(?P<suffix>[a-z]*)")
# '1_000', '1,000': float() reads the first as 1000.0, and a comma separates a list option's items
DIGIT_SEPARATORS = re.compile(r"\d[_,]\d")
DIGIT_SEPARATORS_RULE = "without '_' or ',' between digits"

# The values of autopar.specs.Precision and solvers.base.Objective, spelled here so that --help
# needs neither pydantic nor numpy (tests/cli/test_lazy.py checks they agree).
PRECISIONS = ("bf16", "fp16", "fp8", "fp4")
OBJECTIVES = ("throughput", "cost")
PLAN_OBJECTIVES = ("time", "cost", "energy")  # solvers.plan_choice.OBJECTIVES
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")  # autopar.cost.comm.Collective
COLLECTIVE_ALIASES = {"all_to_all": "alltoall", "send_recv": "sendrecv"}
NCCL_ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat")  # autopar.cost.nccl.ALGORITHMS
NCCL_PROTOCOLS = ("ll", "ll128", "simple")  # autopar.cost.nccl.PROTOCOLS
FRAMEWORKS = ("megatron", "deepspeed", "torchtitan", "megatron-bridge")


# Defaults when a command gets no --seq-len / --global-batch(-tokens) (README 'Defaults'):
# pre-training sequences of min(max_position_embeddings, 8192) tokens -- LLaMA 3 pre-trained
# on 8,192-token sequences and reached its 131,072 max_position_embeddings in a separate
# long-context phase, so a config's maximum is not its pre-training length -- and a global
# batch of about 4M tokens (LLaMA 2 used 4M for every size; LLaMA 3 405B started at 4M),
# rounded down to a power of two sequences so that many data-parallel degrees divide it.
DEFAULT_MAX_SEQ_LEN = 8192
DEFAULT_BATCH_TOKENS = 2**22


def parse_count(value: str, field: str, binary: bool = False, maximum: float | None = None, size_bytes: bool = False) -> int:
    """'16M' -> 16_000_000, '4B' -> 4_000_000_000, '1Gi' -> 2**30, '4096' -> 4096 (parse_quantity),
    a positive whole number up to maximum."""
    result = parse_quantity(value, field, binary, size_bytes)
    if result <= 0 or result != int(result):
        raise InputError(field, value, "must be a positive whole number")
    if maximum is not None and result > maximum:
        raise InputError(field, value, f"must be at most {int(maximum):,}")
    return int(result)


def parse_amount(value: str, field: str, money: bool = False) -> float:
    """A positive decimal amount, fractions allowed: '15T' tokens = 1.5e13, '2.87T', '1.6e6';
    with money=True a leading $ too ('$5M' = 5e6 dollars). parse_quantity's syntax and wording."""
    result = parse_quantity(value, field, money=money)
    if result <= 0:
        raise InputError(field, value, "must be a positive, finite number")
    return result


def parse_quantity(value: str, field: str, binary: bool = False, size_bytes: bool = False, money: bool = False) -> float:
    """A finite number with an optional suffix. binary=True reads K/M/G/B/T/P as powers of two,
    the ML convention for token batches ('16M tokens' = 2048 x 8192 = 16,777,216; 4B = 4G = 2**32).
    size_bytes=True reads a trailing B as bytes ('16MB' = '16M', '4B' = 4 bytes), not as billion,
    so a second B ('4BB') is refused, not read as 4 billion bytes. money=True allows a leading $
    and only the decimal suffixes ('$2.5M'; $1Mi is no amount of money). Digit separators
    ('1_000', '1,000') are refused by name (a comma separates the items of a list option:
    --batch-tokens 8M,16M). Any other suffix is refused by name."""
    text = str(value).strip().lower()
    if money:
        text = text.removeprefix("$")
    as_bytes = size_bytes and text.endswith("b")
    if as_bytes:
        text = text[:-1]
    match = _NUMBER.fullmatch(text)
    if match is None:
        optional = f"with an optional {'leading $ and ' * money}{_suffixes(size_bytes, binary, money)} suffix"
        if DIGIT_SEPARATORS.search(text):
            raise InputError(field, value, f"must be a number {DIGIT_SEPARATORS_RULE} (1000 or 1K, not 1_000), {optional}")
        try:  # nan, inf: a number, but not a count
            number = float(text)
        except ValueError:
            number = 0.0
        if math.isfinite(number):
            raise InputError(field, value, f"must be a number {optional}")
        raise InputError(field, value, "must be a positive, finite number")
    number, suffix = match["number"], match["suffix"]
    if suffix and (suffix not in _SUFFIX or (as_bytes and suffix == "b") or (money and suffix not in _BINARY)):
        raise InputError(field, value, f"unknown suffix {(suffix + 'b' * as_bytes).upper()!r}; use {_suffixes(size_bytes, binary, money)}")
    scale = _SUFFIX[_BINARY.get(suffix, suffix) if binary else suffix] if suffix else 1
    result = float(number) * scale
    if not math.isfinite(result):
        raise InputError(field, value, "must be a positive, finite number")
    return result


def _suffixes(size_bytes: bool, binary: bool, money: bool = False) -> str:
    if size_bytes:
        return "K/M/G/T/P or Ki/Mi/Gi/Ti/Pi (a trailing B is bytes)"
    if money:
        return "K/M/G/T/P or B (= G, billion)"
    return f"K/M/G/T/P or B (= G{', powers of two' if binary else ', billion'}) or Ki/Mi/Gi/Ti/Pi"


MEMORY_HEADROOM_HELP = ("HBM per GPU to keep free of the plan: a size (8GB, 6GiB, 8e9 bytes) or a percentage of HBM (10%); "
                        "every plan must fit in HBM less this. Default: the cluster file's memory_headroom_gb, else 0")


def memory_headroom_option(f: Callable) -> Callable:
    return click.option("--memory-headroom", default=None, help=MEMORY_HEADROOM_HELP)(f)


def parse_memory_headroom(value: str | float | int, cluster: ClusterSpec, field: str = "memory-headroom") -> float:
    """A memory headroom in bytes: a size ('8GB', '6GiB', '8e9' bytes; parse_quantity's byte
    suffixes) or a percentage of the GPU's HBM ('10%'); at least 0 and below the HBM."""
    from autopar.specs.hardware import gb_gib

    hbm = cluster.gpu.hbm_bytes
    rule = (f"must be a size from 0 to below the {cluster.gpu.name}'s HBM of {gb_gib(hbm)} (8GB, 6GiB, 8e9 bytes) "
            "or a percentage of HBM from 0% to below 100% (10%)")
    text = str(value).strip()
    try:
        if isinstance(value, bool):
            raise InputError(field, value, rule)
        if text.endswith("%"):
            number = text[:-1].strip()
            if not _NUMBER.fullmatch(number.lower()) or _NUMBER.fullmatch(number.lower())["suffix"]:
                raise InputError(field, value, rule)
            headroom = float(number) / 100 * hbm
        else:
            headroom = parse_quantity(text, field, size_bytes=True)
    except InputError:
        raise InputError(field, value, rule) from None
    if not (math.isfinite(headroom) and 0 <= headroom < hbm):
        raise InputError(field, value, rule)
    return headroom


def apply_memory_headroom(cluster: ClusterSpec, value: str | float | int | None, field: str = "memory-headroom") -> ClusterSpec:
    """The cluster with --memory-headroom in place of its file's memory_headroom_gb (None: the file's)."""
    if value is None:
        return cluster
    return cluster.with_memory_headroom(parse_memory_headroom(value, cluster, field))


def model_cluster_options(f: Callable) -> Callable:
    f = memory_headroom_option(f)
    f = click.option("--extrapolate-fabric", is_flag=True,
                     help="Allow more GPUs than the cluster file's fabric describes (its top tier is assumed to repeat)")(f)
    f = click.option("--gpus", type=int, default=None, help="Total GPUs (whole nodes); default: the cluster file's size")(f)
    f = click.option("--cluster", "cluster_name", required=True, help="Cluster preset or YAML file")(f)
    f = click.option("--model", "model_name", required=True,
                     help="Model preset, autopar model file, HF config.json or HF checkpoint directory")(f)
    return f


STACKS = ("megatron", "torchtitan", "torchtitan-compile", "pytorch-fsdp", "llm-foundry", "deepspeed")
MOE_ROUTINGS = ("learned", "balanced", "contiguous")  # autopar.specs.training.MoeRouting
ATTENTION_KERNELS = ("fa2", "fa3", "cudnn", "triton")  # autopar.specs.training.AttentionKernel


def training_options(f: Callable) -> Callable:
    f = click.option("--moe-routing", type=click.Choice(MOE_ROUTINGS), default="learned", show_default=True,
                     help="MoE token routing: learned (the router's uneven load), balanced (forced, experts drawn at random: "
                          "Megatron --moe-router-force-load-balancing) or contiguous (forced, k consecutive experts per token: "
                          "NeMo AutoModel's fake balanced gate)")(f)
    f = click.option("--stack", type=click.Choice(STACKS), default=None,
                     help="Training software whose kernels, fusion and overlap are costed (profiles/stacks/). "
                          "Default: the --framework's own stack, else megatron")(f)
    f = click.option("--attention-kernel", type=click.Choice(ATTENTION_KERNELS), default=None,
                     help="Fused attention kernel the run uses (profiles/cost/defaults.yaml attention.kernels): fa2, fa3, "
                          "cudnn or triton. Default: the stack's for the GPU (profiles/stacks/); fa2 for Megatron/NeMo with "
                          "NVTE_FUSED_ATTN=0")(f)
    f = click.option("--fp8-recipe", type=click.Choice(["tensorwise", "rowwise"]), default=None,
                     help="FP8 scaling with --precision fp8: tensorwise (Transformer Engine) or rowwise (torchao). "
                          "Default: the stack's (rowwise for torchtitan, tensorwise otherwise)")(f)
    f = click.option("--fp8-param-gather", is_flag=True, default=False,
                     help="With --precision fp8: ZeRO / FSDP gather weights in FP8, 1 byte each (Megatron-LM --fp8-param-gather, "
                          "on in Megatron-Bridge's FP8 recipes; torchao enable_fsdp_float8_all_gather)")(f)
    f = click.option("--expandable-segments/--fixed-segments", "expandable_segments", default=None,
                     help="PyTorch's caching allocator: expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, "
                          "PyTorch >= 2.1: no memory is stranded between segments, so the memory counts no fragmentation slack, "
                          "and emitted launchers export the setting) or fixed segments (profiles/cost/defaults.yaml "
                          "memory.fragmentation counted). Default: the stack's launcher (torchtitan's sets it; Megatron-LM, "
                          "DeepSpeed and the others do not)")(f)
    f = click.option("--precision", type=click.Choice(PRECISIONS), default="bf16", show_default=True, help="GEMM precision")(f)
    f = click.option("--global-batch-tokens", default=None,
                     help="Global batch in tokens; K/M/G/T are powers of two, B (billion) the same as G "
                          "(16M = 16,777,216; 4B = 4,294,967,296); alternative to --global-batch. "
                          "Default: about 4M tokens, a power of two sequences")(f)
    f = click.option("--global-batch", type=int, default=None, help="Global batch in sequences")(f)
    f = click.option("--seq-len", type=int, default=None,
                     help="Sequence length, tokens. Default: the model's max_position_embeddings, at most 8192")(f)
    return f


def resolve_inputs(model_name: str, cluster_name: str, gpus: int | None, extrapolate_fabric: bool = False,
                   memory_headroom: str | None = None) -> tuple[ModelSpec, ClusterSpec]:
    from autopar.specs import load_cluster, load_model

    model = load_model(model_name)
    cluster = described = load_cluster(cluster_name)
    if gpus is not None:
        cluster = described.with_gpus(gpus, beyond_fabric=extrapolate_fabric)
    else:  # the file's own size: a num_nodes beyond its top tier is as far beyond the fabric as such a --gpus
        described.check_fabric(described.num_gpus, extrapolate_fabric, "cluster.num_nodes", described.num_nodes)
    cluster = apply_memory_headroom(cluster, memory_headroom)
    if cluster.num_gpus > described.fabric_num_gpus:
        note(f"--extrapolate-fabric: {cluster.num_gpus:,} GPUs on {cluster.name}, whose fabric describes "
             f"{described.fabric_num_gpus:,}; its top tier is assumed to repeat")
    return model, cluster


def default_seq_len(model: ModelSpec) -> int:
    if model.max_position_embeddings is None:
        raise InputError("seq-len", Missing(), f"model {model.name} has no max_position_embeddings to default from; give --seq-len")
    return min(model.max_position_embeddings, DEFAULT_MAX_SEQ_LEN)


def default_global_batch(seq_len: int, max_tokens: int | None = None) -> int:
    """The power of two sequences nearest below DEFAULT_BATCH_TOKENS, or below `max_tokens`
    (a critical batch size) when that is smaller (at least one sequence)."""
    sequences = max(1, min(DEFAULT_BATCH_TOKENS, max_tokens or DEFAULT_BATCH_TOKENS) // seq_len)
    return 1 << (sequences.bit_length() - 1)


def resolve_stack(stack: str | None, framework: str | None) -> str:
    """--stack, defaulting to the framework's own stack; the two must agree when both are given."""
    from autopar.emit.common import FRAMEWORK_STACKS

    allowed = FRAMEWORK_STACKS.get(framework or "")
    if stack is None:
        return allowed[0] if allowed else "megatron"
    if allowed and stack not in allowed:
        raise InputError("stack", stack, f"framework {framework} runs {' or '.join(allowed)}; cost the stack the launcher runs")
    return stack


def resolve_training(model: ModelSpec, seq_len: int | None, global_batch: int | None, global_batch_tokens: str | None,
                     precision: str, stack: str | None = None, framework: str | None = None, fp8_recipe: str | None = None,
                     max_batch_tokens: int | None = None, **extra: Any) -> TrainingSpec:
    """The training spec from the options; missing sequence length and batch default from the
    model by the rule above, the batch at most `max_batch_tokens` (--max-gbs-tokens); sane limits
    on every count; the stack from --stack or the framework."""
    from autopar.specs import Precision, TrainingSpec
    from autopar.specs.training import Stack

    defaults = []
    if seq_len is None:
        seq_len = default_seq_len(model)
        defaults.append(f"seq-len {seq_len}")
    if not 0 < seq_len <= MAX_SEQ_LEN:
        raise InputError("seq-len", seq_len, f"must be a positive integer at most {MAX_SEQ_LEN:,}")
    if global_batch is not None and global_batch_tokens is not None:
        raise InputError("global-batch", global_batch, "give one of --global-batch or --global-batch-tokens, not both")
    if global_batch_tokens is not None:
        tokens = parse_count(global_batch_tokens, "global-batch-tokens", binary=True, maximum=MAX_TOKENS_PER_STEP)
        if tokens % seq_len:
            raise InputError("global-batch-tokens", global_batch_tokens, f"must be a multiple of seq-len={seq_len}")
        global_batch = tokens // seq_len
    elif global_batch is None:
        if max_batch_tokens is not None and max_batch_tokens < seq_len:
            raise InputError("max-gbs-tokens", f"{max_batch_tokens:,}", f"is below one sequence of seq-len={seq_len:,} tokens")
        global_batch = default_global_batch(seq_len, max_batch_tokens)
        capped = max_batch_tokens is not None and max_batch_tokens < DEFAULT_BATCH_TOKENS
        defaults.append(f"global batch {global_batch} sequences" + (" (under --max-gbs-tokens)" if capped else ""))
    if global_batch <= 0:
        raise InputError("global-batch", global_batch, "must be a positive integer")
    if global_batch * seq_len > MAX_TOKENS_PER_STEP:
        raise InputError("global-batch", global_batch, f"{global_batch * seq_len:,} tokens per step; at most {MAX_TOKENS_PER_STEP:,}")
    if defaults:
        note(f"defaults from {model.name}: {', '.join(defaults)} ({seq_len * global_batch:,} tokens per step; see --help)")
    if model.max_position_embeddings is not None and seq_len > model.max_position_embeddings:
        note(f"seq-len {seq_len} exceeds {model.name}'s max_position_embeddings {model.max_position_embeddings} (a context-extension run)")
    if fp8_recipe is not None and precision != "fp8":
        raise InputError("fp8-recipe", fp8_recipe, f"scales FP8 GEMMs; give --precision fp8 (is {precision})")
    if extra.get("attention_kernel") is not None and extra.get("flash_attention") is False:
        raise InputError("attention-kernel", extra["attention_kernel"], "names a fused kernel; --no-flash runs unfused attention")
    if extra.get("fp8_param_gather") and precision != "fp8":
        raise InputError("fp8-param-gather", True, f"gathers FP8 weights; give --precision fp8 (is {precision})")
    runs = {"torchtitan": "rowwise", "megatron": "tensorwise", "megatron-bridge": "tensorwise"}.get(framework or "")
    if fp8_recipe is not None and runs is not None and fp8_recipe != runs:
        raise InputError("fp8-recipe", fp8_recipe, f"the {framework} launcher runs {runs} FP8 scaling "
                         "(torchtitan 0.3.0's Float8LinearConverter: rowwise recipes only; Transformer Engine: no rowwise)")
    return TrainingSpec(seq_len=seq_len, global_batch_size=global_batch, precision=Precision(precision),
                        stack=Stack(resolve_stack(stack, framework)), fp8_recipe=fp8_recipe, **extra)


def check_attention_kernel(training: TrainingSpec, cluster: ClusterSpec) -> None:
    """A stated --attention-kernel must have measured efficiencies for the cluster's GPU
    architecture (FlashAttention-3 is Hopper-only; Triton FlashAttention has Ampere and Hopper
    figures), rather than being costed silently as another kernel."""
    from autopar.specs.costparams import params_for_cluster

    kernel = training.attention_kernel
    if kernel is None:
        return
    measured = params_for_cluster(cluster).attention.kernels.get(kernel.value, {})
    arch = cluster.gpu.architecture
    if arch not in measured:
        raise InputError("attention-kernel", kernel.value, f"has no measured efficiency on {cluster.gpu.name} ({arch}); "
                         f"profiles/cost/defaults.yaml attention.kernels has it for {', '.join(sorted(measured)) or 'no GPU'}")


def check_stage_layout(plan, model):
    """A plan's explicit first/last stage layers (and a dense model's etp) checked against the
    model before costing, so the error names the field written rather than a rule that depends on
    it (vpp, ep)."""
    if not model.is_moe and plan.etp is not None and plan.etp != plan.tp:  # otherwise the cost rules blame ep (a default)
        raise InputError("plan.etp", plan.etp, f"expert tensor parallelism needs a MoE model ({model.name} has no experts)")
    stages = plan.layers_per_stage(model.num_layers)
    # recompute counts past a stage's layers were clamped silently (the plan text kept 999)
    if plan.recompute_num_layers is not None and plan.recompute_num_layers > max(stages):
        raise InputError("plan.recompute_num_layers", plan.recompute_num_layers,
                         f"recomputes layers of one pipeline stage: at most {max(stages)} (stages hold {'/'.join(map(str, stages))} layers)")
    counts = plan.stage_recompute_layers
    if counts is not None and any(c > n for c, n in zip(counts, stages)):
        raise InputError("plan.stage_recompute_layers", "/".join(map(str, counts)),
                         f"recomputes layers of each pipeline stage: at most {'/'.join(map(str, stages))}")
    return plan


def check_batch_split(plan, training, num_gpus: int):
    """The global batch against the plan's data-parallel degree, before costing: a batch that no
    mbs splits over dp names the batch option the user gave (--global-batch-tokens, --global-batch,
    or the model's default), not plan.mbs, which the cost rule would blame whatever the user wrote."""
    try:
        dp = plan.data_parallel(num_gpus)
    except InputError:
        return plan  # the cost rules report the GPU product
    gbs, seq = training.global_batch_size, training.seq_len
    if gbs % dp == 0:
        return plan  # a remainder left by mbs is plan.mbs's (autopar.cost.rules)
    ctx = click.get_current_context(silent=True)
    params = ctx.params if ctx is not None else {}
    if params.get("global_batch_tokens") is not None:
        option, value, unit = "global-batch-tokens", params["global_batch_tokens"], f"a multiple of {dp * plan.mbs * seq:,} tokens"
    elif params.get("global_batch") is not None:
        option, value, unit = "global-batch", params["global_batch"], f"a multiple of {dp * plan.mbs} sequences"
    else:
        option, value, unit = "global-batch", gbs, f"the default for {seq:,}-token sequences; give a multiple of {dp * plan.mbs} sequences"
    raise InputError(option, value, f"{gbs} sequence{'s' if gbs != 1 else ''} of seq-len={seq} per step must divide by "
                     f"dp({dp}) * mbs({plan.mbs}): each data-parallel rank takes whole micro-batches ({unit})")


def checked_plan(text: str, model, training, num_gpus: int):
    """A plan the user wrote (--plan, --reference), parsed and checked before costing so its
    errors name the option written: the stage layout, a dense model's etp, the batch split."""
    from autopar.specs.plan import parse_plan

    return check_batch_split(check_stage_layout(parse_plan(text), model), training, num_gpus)


def note(text: str) -> None:
    """Remember a note for stderr; flush_notes() prints the notes once the command has
    succeeded, so that a failure stays the one `Error:` line."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        click.echo(f"note: {text}", err=True)
    else:
        ctx.meta.setdefault("autopar.notes", []).append(text)


def flush_notes() -> None:
    ctx = click.get_current_context(silent=True)
    for text in ctx.meta.pop("autopar.notes", []) if ctx else []:
        click.echo(f"note: {text}", err=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, text: str | bytes, field: str = "out") -> None:
    """Write a results file so that a reader never sees half of it, with the permissions a
    plain open() would give (mkstemp creates 0600, which hides results from teammates)."""
    path = Path(path)
    blocked = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise InputError(field, str(path), f"cannot write: {blocked} is a file, not a folder")
    if path.is_dir():
        raise InputError(field, str(path), "cannot write: it is a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(field, str(path), f"cannot write ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(field, str(path), f"cannot write ({exc.strerror})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"
