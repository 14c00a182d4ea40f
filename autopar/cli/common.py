"""Options shared by commands: model, cluster, GPUs, training, output."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import click

from autopar.errors import InputError
from autopar.specs import ClusterSpec, ModelSpec, Precision, TrainingSpec, load_cluster, load_model

_SUFFIX = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_count(value: str, field: str, binary: bool = False) -> int:
    """'16M' -> 16_000_000, '1Gi' -> 2**30, '4096' -> 4096 (a trailing B is ignored).
    binary=True reads K/M/G/T as powers of two, the ML convention for token batches
    ('16M tokens' = 2048 x 8192 = 16,777,216)."""
    text = str(value).strip().lower().removesuffix("b")
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], _SUFFIX[suffix]
            if binary and not suffix.endswith("i"):
                scale = _SUFFIX[suffix + "i"]
            break
    else:
        number, scale = text, 1
    try:
        result = float(number) * scale
    except ValueError:
        raise InputError(field, value, "must be a number with an optional K/M/G/T or Ki/Mi/Gi suffix") from None
    if result <= 0 or result != int(result):
        raise InputError(field, value, "must be a positive whole number")
    return int(result)


def model_cluster_options(f: Callable) -> Callable:
    f = click.option("--gpus", type=int, default=None, help="Total GPUs (whole nodes); default: the preset's size")(f)
    f = click.option("--cluster", "cluster_name", required=True, help="Cluster preset or YAML file")(f)
    f = click.option("--model", "model_name", required=True, help="Model preset, autopar model file or HF config.json")(f)
    return f


def training_options(f: Callable) -> Callable:
    f = click.option("--precision", type=click.Choice([p.value for p in Precision]), default="bf16", show_default=True, help="GEMM precision")(f)
    f = click.option("--global-batch-tokens", default=None, help="Global batch in tokens; K/M/G are powers of two (16M = 16,777,216); alternative to --global-batch")(f)
    f = click.option("--global-batch", type=int, default=None, help="Global batch in sequences")(f)
    f = click.option("--seq-len", type=int, required=True, help="Sequence length, tokens")(f)
    return f


def resolve_inputs(model_name: str, cluster_name: str, gpus: int | None) -> tuple[ModelSpec, ClusterSpec]:
    model = load_model(model_name)
    cluster = load_cluster(cluster_name)
    if gpus is not None:
        cluster = cluster.with_gpus(gpus)
    return model, cluster


def resolve_training(seq_len: int, global_batch: int | None, global_batch_tokens: str | None, precision: str, **extra: Any) -> TrainingSpec:
    if seq_len <= 0:
        raise InputError("seq-len", seq_len, "must be a positive integer")
    if (global_batch is None) == (global_batch_tokens is None):
        raise InputError("global-batch", global_batch, "give exactly one of --global-batch or --global-batch-tokens")
    if global_batch_tokens is not None:
        tokens = parse_count(global_batch_tokens, "global-batch-tokens", binary=True)
        if tokens % seq_len:
            raise InputError("global-batch-tokens", global_batch_tokens, f"must be a multiple of seq-len={seq_len}")
        global_batch = tokens // seq_len
    if global_batch is None or global_batch <= 0:
        raise InputError("global-batch", global_batch, "must be a positive integer")
    return TrainingSpec(seq_len=seq_len, global_batch_size=global_batch, precision=Precision(precision), **extra)


def write_atomic(path: str | Path, text: str) -> None:
    """Write a results file so that a reader never sees half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"
