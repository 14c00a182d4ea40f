"""Text renderings of a torchtitan config (see autopar.emit.torchtitan for the mapping)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autopar.emit.common import EmitJob, allocator_export, checkpoint_interval_steps, comment_block, header_lines, lines_of, rendezvous_block

if TYPE_CHECKING:
    from autopar.emit.torchtitan import TitanConfig

FRAMEWORK = "torchtitan"
MODULE_NAME = "autopar_torchtitan"
CONFIG_FN = "autopar_plan"


def _py(value: object) -> str:
    return repr(value)


def _dict_block(name: str, values: dict) -> str:
    body = "".join(f"    {k!r}: {_py(v)},\n" for k, v in values.items())
    return f"{name} = {{\n{body}}}\n"


def _model_spec_lines(job: EmitJob, tc: "TitanConfig") -> str:
    """config.model_spec rebuilt with the plan's converters (none for bf16: the stock 405B config
    carries a Float8 converter) and, for DeepSeek-V3, the plan's MoE dispatch and MTP layers."""
    extra = ", ".join(f"{k}={v!r}" for k, v in tc.model_kwargs.items())
    converters = "None"
    imports = f"    from torchtitan.models.{tc.module} import model_registry\n"
    if tc.float8:
        imports += "    from torchtitan.components.quantization import Float8LinearConverter\n"
        converters = (f"[Float8LinearConverter.Config(recipe_name={tc.float8_recipe!r}, filter_fqns={tc.float8_skip!r}, "
                      "model_compile_enabled=True)]")
    lines = imports + f"    config.model_spec = model_registry({tc.flavor!r}, converters={converters}{', ' + extra if extra else ''})\n"
    if tc.rope_override is not None:
        # the flavor's RoPE scaling differs from the model's (torchtitan.FLAVOR_ROPE_SCALING): every
        # layer's RoPE.Config.scaling (models/common/rope.py), as the model trained
        flavor, want = tc.rope_override
        lines += ("    for layer in config.model_spec.model.layers:  # the model's RoPE scaling, not the flavor's\n"
                  f"        if layer.attention.rope.scaling != {flavor!r}:\n"
                  "            raise ValueError('this torchtitan flavor does not build the RoPE the config expects')\n"
                  f"        layer.attention.rope.scaling = {want!r}\n")
    if tc.model_kwargs.get("num_mtp_layers"):
        # the MTP decoder returns one prediction per head, which only MTPLoss takes (the stock
        # chunked loss skips the lm_head, which mtp.py refuses); as deepseek_v3_debugmodel_mtp does
        lines += ("    from torchtitan.models.common.config_utils import decoder_vocab_size\n"
                  "    from torchtitan.models.deepseek_v3.mtp import MTPLoss\n"
                  "    config.loss = MTPLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec))\n")
    return lines


def _checkpoint_line(job: EmitJob) -> str:
    steps = checkpoint_interval_steps(job)
    why = ("Young-Daly interval sqrt(2 x write time x job MTBF) / step, from the cluster file"
           if steps else "the cluster file gives no storage bandwidth: torchtitan's default interval")
    return f"CHECKPOINT_INTERVAL = {steps!r}  # {why}\n"


def render_module(job: EmitJob, tc: "TitanConfig") -> str:
    notes = [f"Run: launch_torchtitan.sh (PYTHONPATH=<this folder> torchrun ... -m torchtitan.train --module {MODULE_NAME} --config {CONFIG_FN})",
             *tc.notes]
    return f'''{comment_block(header_lines(job, FRAMEWORK, notes)).rstrip()}
"""torchtitan config for one autopar plan: the stock {tc.module}.{tc.config} config with the
plan's parallelism, batch, precision, activation checkpointing and model options."""

import dataclasses

from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.models.{tc.module}.config_registry import {tc.config} as _base

{_dict_block("PARALLELISM", tc.parallelism)}
# Batch keys differ between releases: HEAD counts tokens, the 0.3.0 wheel counts sequences.
{_dict_block("BATCH_TOKENS", tc.batch_tokens)}
{_dict_block("BATCH_SEQUENCES", tc.batch_sequences)}
{_dict_block("TRAINING", {**tc.training, **tc.training_python})}
{_dict_block("COMPILE", tc.compile)}
ACTIVATION_CHECKPOINT = {tc.activation_checkpoint!r}
{_checkpoint_line(job)}

def _set(section, values):
    names = {{f.name for f in dataclasses.fields(section)}}
    for key, value in values.items():
        if key not in names:
            raise KeyError(f"{{type(section).__name__}} has no field {{key!r}}: this torchtitan does not match the config")
        setattr(section, key, value)


def {CONFIG_FN}():
    config = _base()
    _set(config.parallelism, PARALLELISM)
    tokens = "num_tokens_per_microbatch_per_dp_rank" in {{f.name for f in dataclasses.fields(config.training)}}
    batch = BATCH_TOKENS if tokens else BATCH_SEQUENCES
    _set(config.training, {{**TRAINING, **batch["training"]}})
    _set(config.parallelism, batch["parallelism"])
    # a fresh CompileConfig, so its own check (async TP needs the model compiled) runs
    config.compile = type(config.compile)(**{{**{{f.name: getattr(config.compile, f.name) for f in dataclasses.fields(config.compile)}}, **COMPILE}})
    config.activation_checkpoint = {{"none": None, "selective": SelectiveAC.Config(), "full": FullAC.Config()}}[ACTIVATION_CHECKPOINT]
    if CHECKPOINT_INTERVAL:  # saving stays off until checkpoint.enable; this sets how often
        _set(config.checkpoint, {{"interval": CHECKPOINT_INTERVAL}})
{_model_spec_lines(job, tc)}    return config
'''


def render_launcher(job: EmitJob, tc: "TitanConfig") -> str:
    notes = [f"Runs the generated config module ({MODULE_NAME}.py next to this script) with torchtitan >= 0.3.0."]
    return f"""#!/usr/bin/env bash
{comment_block(header_lines(job, FRAMEWORK, notes)).rstrip()}
set -euo pipefail
HERE=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)
{rendezvous_block(job)}
export PYTHONPATH="$HERE${{PYTHONPATH:+:$PYTHONPATH}}"
{lines_of(allocator_export(job))}
exec torchrun --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE" --node-rank "$NODE_RANK" \\
  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" --local-ranks-filter 0 --role rank --tee 3 \\
  -m torchtitan.train --module {MODULE_NAME} --config {CONFIG_FN} "$@"
"""
