"""Emitters for a model with Gated DeltaNet layers (Qwen3-Next): Megatron-LM gets the
TransformerConfig GDN fields as flags (megatron/core/transformer/transformer_config.py
experimental_attention_variant, linear_attention_freq, linear_*; attention_output_gate) and its
own TP x CP head-split rule; torchtitan, which builds no such layer, refuses by rule."""

from __future__ import annotations

import pytest

from autopar.emit import RuleViolation
from autopar.emit.common import Rules
from autopar.emit.megatron import emit_megatron
from autopar.emit.megatron_parse import parse_megatron_argv
from autopar.emit.megatron_rules import validate_megatron
from autopar.emit.torchtitan import emit_torchtitan
from emit_cases import make_job

NEXT = "qwen3-next-80b-a3b"


def test_megatron_flags_and_rules():
    job = make_job(NEXT, "dgx-h100", 128, 4096, 256, "tp=1,pp=4,vpp=3,ep=32,recompute=selective")
    text = emit_megatron(job)[0].text
    for flag in ("--experimental-attention-variant gated_delta_net", "--linear-attention-freq 4", "--linear-num-key-heads 16",
                 "--linear-num-value-heads 32", "--linear-key-head-dim 128", "--linear-value-head-dim 128",
                 "--linear-conv-kernel-dim 4", "--attention-output-gate",
                 # 64 of 256 head dims rotated, RMSNorm x (1 + w): without them Megatron builds another model
                 "--rotary-percent 0.25", "--apply-layernorm-1p"):
        assert flag in text
    # Megatron's own TP x CP head split, applied to arguments that break it
    argv = ["--tensor-model-parallel-size", "4", "--context-parallel-size", "8", "--num-attention-heads", "16",
            "--hidden-size", "2048", "--num-layers", "48", "--seq-length", "8192", "--micro-batch-size", "1", "--global-batch-size", "8", "--experimental-attention-variant", "gated_delta_net", "--linear-attention-freq", "4"]
    rules = validate_megatron(argv, 32, {}, 9.0, Rules("megatron"))
    assert any(v.rule == "linear_num_key_heads % (TP*CP) == 0" for v in rules.found)
    assert parse_megatron_argv(argv).linear_num_key_heads == 16  # Megatron's default shape


def test_torchtitan_refuses_linear_attention():
    with pytest.raises(RuleViolation) as info:
        emit_torchtitan(make_job(NEXT, "dgx-h100", 128, 4096, 256, "tp=1,pp=1,ep=8"))
    assert "softmax-attention decoder layers" in str(info.value)
