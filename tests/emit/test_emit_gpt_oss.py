"""gpt-oss adds two things to a transformer that Megatron-LM's command line cannot say: a learned
sink logit per head in every softmax and a clamped GLU (transformers GptOssAttention.sinks,
GptOssExperts: clamp at swiglu_limit 7.0, gate x sigmoid(1.702 x), linear half + 1). Megatron-Core
has them only as TransformerConfig fields (softmax_type 'learnable', activation_func_clamp_value,
glu_linear_offset) with no arguments.py flag, so the Megatron emitter refuses the model by rule
instead of writing a config that trains a different network."""

from __future__ import annotations

import pytest

from autopar.emit import RuleViolation
from autopar.emit.megatron import emit_megatron
from autopar.specs import load_model
from emit_cases import make_job


def test_gpt_oss_config_states_sinks_and_clamp():
    m = load_model("gpt-oss-120b")
    assert m.attention_sinks and m.swiglu_limit == 7.0
    # its sliding-window layers are still read (layer_types: even layers sliding, 128 tokens)
    assert m.attention_window == 128 and m.global_attention_layers[:3] == (1, 3, 5)
    assert not load_model("llama3-8b").attention_sinks and load_model("llama3-8b").swiglu_limit is None


def test_megatron_refuses_gpt_oss_by_rule():
    with pytest.raises(RuleViolation) as info:
        emit_megatron(make_job("gpt-oss-20b", "dgx-h100", 8, 4096, 64, "tp=1,pp=1,ep=8"))
    assert "softmax and GLU have pretrain_gpt.py flags" in str(info.value)
    # a MoE model without them is emitted as before
    assert "--num-experts 8" in emit_megatron(make_job("mixtral-8x7b", "dgx-h100", 8, 4096, 64, "tp=1,pp=1,ep=8"))[0].text
