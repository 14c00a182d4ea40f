"""Text renderings of a torchtitan config (see autopar.emit.torchtitan for the mapping)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from autopar.emit.common import EmitJob, comment_block, header_lines, rendezvous_block

if TYPE_CHECKING:
    from autopar.emit.torchtitan import TitanConfig

FRAMEWORK = "torchtitan"
MODULE_NAME = "autopar_torchtitan"
CONFIG_FN = "autopar_plan"
FLOAT8_BASES = {"llama3_405b"}  # stock configs that already carry a Float8 converter


def _py(value: object) -> str:
    return repr(value)


def _dict_block(name: str, values: dict) -> str:
    body = "".join(f"    {k!r}: {_py(v)},\n" for k, v in values.items())
    return f"{name} = {{\n{body}}}\n"


def render_module(job: EmitJob, tc: "TitanConfig") -> str:
    notes = [f"Run: PYTHONPATH=<this folder> torchrun ... -m torchtitan.train --module {MODULE_NAME} --config {CONFIG_FN}",
             *tc.notes]
    rebuild = tc.float8 or tc.config in FLOAT8_BASES
    converter = ("[Float8LinearConverter.Config(filter_fqns=['lm_head'], model_compile_enabled=True)]"
                 if tc.float8 else "None")
    model_lines = ""
    if rebuild:
        model_lines = (f"    from torchtitan.models.{tc.module} import model_registry\n"
                       + ("    from torchtitan.components.quantization import Float8LinearConverter\n" if tc.float8 else "")
                       + f"    config.model_spec = model_registry({tc.flavor!r}, converters={converter})\n")
    return f'''{comment_block(header_lines(job, FRAMEWORK, notes)).rstrip()}
"""torchtitan config for one autopar plan: the stock {tc.module}.{tc.config} config with the
plan's parallelism, batch, precision and activation checkpointing."""

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
    _set(config.compile, COMPILE)
    config.activation_checkpoint = {{"none": None, "selective": SelectiveAC.Config(), "full": FullAC.Config()}}[ACTIVATION_CHECKPOINT]
{model_lines}    return config
'''


def _flag(section: str, key: str, value: object) -> list[str]:
    """tyro spelling: booleans are bare flags (--s.k / --s.no_k), the rest take a value
    (checked against tyro in torchtitan 0.3.0 by the integration test)."""
    if isinstance(value, bool):
        return [f"--{section}.{key}" if value else f"--{section}.no_{key}"]
    return [f"--{section}.{key}", str(value)]


def cli_overrides(tc: "TitanConfig") -> list[list[str]]:
    """--section.option overrides for a stock registry config (HEAD names; frozen CLI)."""
    parallelism = {**tc.parallelism, **tc.batch_tokens["parallelism"]}
    training = {**tc.training, **tc.training_python, **tc.batch_tokens["training"]}
    out = [_flag("parallelism", k, v) for k, v in parallelism.items()]
    out += [_flag("training", k, v) for k, v in training.items()]
    out += [_flag("compile", k, v) for k, v in tc.compile.items()]
    return out


def render_launcher(job: EmitJob, tc: "TitanConfig") -> str:
    notes = [f"Default: the generated config module ({MODULE_NAME}.py next to this script).",
             f"MODULE={tc.module} CONFIG={tc.config} runs the stock config with the OVERRIDES below instead "
             "(torchtitan HEAD key names; the stage split and Float8 converter need the module)."]
    overrides = "\n".join("  " + " ".join(shlex.quote(t) for t in group) for group in cli_overrides(tc))
    return f"""#!/usr/bin/env bash
{comment_block(header_lines(job, FRAMEWORK, notes)).rstrip()}
set -euo pipefail
HERE=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)
{rendezvous_block(job)}
MODULE=${{MODULE:-{MODULE_NAME}}}
CONFIG=${{CONFIG:-{CONFIG_FN}}}

OVERRIDES=(
{overrides}
)
# tyro reads flags after a subcommand as the subcommand's own, so it goes last
SUBCOMMAND=(activation_checkpoint:{tc.activation_checkpoint})
ARGS=(--module "$MODULE" --config "$CONFIG")
if [ "$MODULE" = {MODULE_NAME} ]; then OVERRIDES=(); SUBCOMMAND=(); fi
export PYTHONPATH="$HERE${{PYTHONPATH:+:$PYTHONPATH}}"

exec torchrun --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE" --node-rank "$NODE_RANK" \\
  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" --local-ranks-filter 0 --role rank --tee 3 \\
  -m torchtitan.train "${{ARGS[@]}}" ${{OVERRIDES[@]+"${{OVERRIDES[@]}}"}} "$@" ${{SUBCOMMAND[@]+"${{SUBCOMMAND[@]}}"}}
"""


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    return str(value)


def _toml_section(name: str, values: dict) -> str:
    return f"[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in values.items())


def render_toml(job: EmitJob, tc: "TitanConfig") -> str:
    """The v0.2.2 TOML job file (torchtitan <= 0.2.2: --job.config_file)."""
    plan = job.plan
    model = {"name": tc.module, "flavor": tc.flavor}
    if tc.float8:
        model["converters"] = ["quantize.linear.float8"]
    parallelism = {**tc.parallelism, **tc.batch_sequences["parallelism"]}
    if plan.ep > 1:
        parallelism["expert_tensor_parallel_degree"] = plan.expert_tp
    if plan.cp > 1:
        parallelism["context_parallel_rotate_method"] = "allgather"
    if tc.compile.get("enable_async_tensor_parallel"):
        parallelism["enable_async_tensor_parallel"] = True
    ac = {"mode": tc.activation_checkpoint}
    if tc.activation_checkpoint == "selective":
        ac["selective_ac_option"] = "op"
    sections = [
        _toml_section("job", {"dump_folder": "./outputs", "description": f"autopar plan {plan.text()}"}),
        "[model]\n" + "".join(f"{k} = {_toml_value(v) if not isinstance(v, list) else '[' + ', '.join(_toml_value(x) for x in v) + ']'}\n"
                              for k, v in model.items()),
        _toml_section("training", {**tc.batch_sequences["training"], **tc.training}),
        _toml_section("parallelism", parallelism),
        _toml_section("activation_checkpoint", ac),
        _toml_section("compile", {"enable": bool(tc.compile.get("enable"))}),
    ]
    notes = ["For torchtitan <= 0.2.2: torchrun ... -m torchtitan.train --job.config_file torchtitan_v0.2.2.toml"]
    return comment_block(header_lines(job, FRAMEWORK, notes)) + "\n" + "\n".join(sections)
