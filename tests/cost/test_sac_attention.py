"""torchtitan per-op SAC and the attention kernel it saves. Its save list named only the flash and
memory-efficient SDPA ops until torchtitan PR #2095 (2025-12-01, "add all SDPA backends to
op_sac_save_list"); since 2025-05 torchtitan runs cuDNN attention first on Blackwell
(models/attention.py ScaledDotProductAttention._init_backend at 6fc499f6), so an earlier torchtitan
on a B200 reran the attention forward in backward and kept no attention output."""

from __future__ import annotations

import pytest

from autopar.cost.context import Batch
from autopar.cost.layer import layer_forward, layer_parts
from autopar.cost.memory import per_op_saved_bytes
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan, Recompute
from autopar.specs.training import Stack
from autopar.validation.rows import row_training, software_date

# Llama 3 8B, local batch 1 x 8,192 tokens, FSDP 8 (the torchao MX-format B200 benchmark shape)
LLAMA8B = ModelSpec(name="llama3-8b", num_layers=2, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                    ffn_hidden_size=14336, vocab_size=128256)
SEQ = 8192


def _layer(cluster: str, stack: Stack, saves: bool):
    tab = PlanTable.from_plans([Plan(tp=1, pp=1, dp=8, mbs=1, zero=3, recompute=Recompute.selective)], 8)
    training = TrainingSpec(seq_len=SEQ, global_batch_size=8, stack=stack, sac_saves_cudnn_attention=saves)
    b = Batch(LLAMA8B, load_cluster(cluster).with_gpus(8), training, load_cost_params(), tab)
    return b, {**layer_parts(b, 0), "attn": layer_forward(b, 0)["attn"]}, per_op_saved_bytes(b, 0)


def test_blackwell_cudnn_attention_outside_the_save_list_is_rerun_and_not_kept():
    b, old, old_saved = _layer("dgx-b200", Stack.torchtitan_compile, saves=False)
    _, new, new_saved = _layer("dgx-b200", Stack.torchtitan_compile, saves=True)
    assert b.stack.kernel("blackwell") == "cudnn" and b.sac_reruns_attention
    # backward reruns exactly one attention forward per layer
    assert old["sac"][0] - new["sac"][0] == pytest.approx(new["attn"][0], rel=1e-12)
    assert new["attn"][0] > 0.1 * new["sac"][0]  # not noise: over a tenth of what SAC reran before
    # and keeps neither the attention output (bf16, 8,192 x 4,096: 67.1 MB) nor its fp32
    # log-sum-exp (8,192 x 32 heads x 4 B: 1.05 MB): 68.2 MB less per layer and micro-batch
    assert new_saved[0] - old_saved[0] == pytest.approx(2 * SEQ * 4096 + 4 * SEQ * 32, rel=1e-12)


def test_other_kernels_and_stacks_are_unaffected():
    # Hopper runs FlashAttention-2, which every torchtitan save list names
    _, old, old_saved = _layer("dgx-h100", Stack.torchtitan_compile, saves=False)
    _, new, new_saved = _layer("dgx-h100", Stack.torchtitan_compile, saves=True)
    assert old["sac"][0] == new["sac"][0] and old_saved[0] == new_saved[0]
    # Megatron's selective recompute reruns the attention core by its own rule, not per-op SAC
    b, _, _ = _layer("dgx-b200", Stack.megatron, saves=False)
    assert not b.sac_reruns_attention


@pytest.mark.parametrize("version, date", [
    ("torchtitan 9dec370 (2024-12-26), torch 1963fc8 (2024-12-23)", (2024, 12)),
    ("pytorch 2.9.0.dev20250815+cu128, torchao 0.13.0, torchtitan 6fc499f6", (2025, 8)),
    ("torchtitan Aug 2024 (train_configs/llama3_405b.toml)", (2024, 8)),
    ("torchtitan April 2024 (pre-release)", (2024, 4)),
    ("torchtitan ~2025-12 (commit not stated)", (2025, 12)),
    ("Megatron-LM main(1e057005)", None),
])
def test_software_date_is_the_latest_the_version_states(version, date):
    assert software_date({"software_version": version}) == date


def test_rows_before_the_fix_take_the_old_save_list():
    row = {"seq_len": SEQ, "global_batch_size": 8, "software": "torchtitan + torchao", "precision": "bf16 + torch.compile",
           "software_version": "pytorch 2.9.0.dev20250815+cu128, torchao 0.13.0+gite4e681be6, torchtitan 6fc499f6"}
    assert row_training(row).sac_saves_cudnn_attention is False
    assert row_training({**row, "software_version": "torchtitan ~2025-12"}).sac_saves_cudnn_attention is True
    assert row_training({**row, "software_version": None}).sac_saves_cudnn_attention is True  # no date: today's torchtitan
    assert row_training({**row, "software": "Megatron-LM"}).sac_saves_cudnn_attention is True


def test_only_softmax_attention_layers_call_sdpa():
    # Qwen3-Next: three Gated DeltaNet layers, then one softmax-attention layer (preset layer
    # pattern); the DeltaNet kernels are no SDPA backend, so no save list concerns them
    from autopar.cost.context import sac_reruns_sdpa
    from autopar.specs import load_model
    model = load_model("qwen3-next-80b-a3b")
    tab = PlanTable.from_plans([Plan(tp=1, pp=1, dp=8, mbs=1, zero=3, recompute=Recompute.selective)], 8)
    training = TrainingSpec(seq_len=SEQ, global_batch_size=8, stack=Stack.torchtitan_compile, sac_saves_cudnn_attention=False)
    b = Batch(model, load_cluster("dgx-b200").with_gpus(8), training, load_cost_params(), tab)
    flags = [sac_reruns_sdpa(b, i) for i in range(4)]
    assert flags == [model.has_softmax_attention(i) for i in range(4)] and any(flags) and not all(flags)
