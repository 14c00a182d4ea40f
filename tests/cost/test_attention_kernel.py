"""The attention kernel a run states overrides its stack's (TrainingSpec.attention_kernel). NeMo
Framework Launcher's launcher_scripts/conf/config.yaml set NVTE_FUSED_ATTN: 0 ('Disable cudnn FA
until we've tested it more') from 562dcb45 (2024-02-13) in its tags 24.01 to 24.07 and dropped it
in 04b8d098 (2024-08-29, 'enable fused attention', tag 24.09): Transformer Engine then runs its
flash-attn backend, FlashAttention-2, on Hopper rather than cuDNN's fused attention."""

from __future__ import annotations

import pytest

from autopar.cost.context import Batch
from autopar.cost.layer import layer_forward
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import load_cost_params
from autopar.specs.plan import Plan
from autopar.specs.training import AttentionKernel, Stack
from autopar.validation.rows import row_inputs

# LLaMA-2 7B at 32K tokens, TP 2 (the NeMo 24.03.01 long-sequence shape), two layers
LLAMA7B = ModelSpec(name="llama2-7b", num_layers=2, hidden_size=4096, num_attention_heads=32, num_kv_heads=32,
                    ffn_hidden_size=11008, vocab_size=32000)
SEQ = 32768
# a published-run row with what row_inputs needs (LLaMA-3 8B on 64 H100, tests/validation/test_rows.py BASE)
ROW = {"id": "x", "source_group": "g", "model_name": "Llama 3 8B", "num_layers": 32, "hidden_size": 4096,
       "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336, "seq_len": 8192, "num_gpus": 64,
       "global_batch_size": 64, "gpu_normalized": "H100-80GB", "tp": 1, "pp": 1, "tokens_per_sec_per_gpu": 5000.0}


def _attention_seconds(kernel: AttentionKernel | None) -> tuple[Batch, float]:
    tab = PlanTable.from_plans([Plan(tp=2, pp=1, dp=4, mbs=1)], 8)
    training = TrainingSpec(seq_len=SEQ, global_batch_size=4, stack=Stack.megatron, attention_kernel=kernel)
    b = Batch(LLAMA7B, load_cluster("dgx-h100").with_gpus(8), training, load_cost_params(), tab)
    return b, float(layer_forward(b, 0)["attn"][0])


def test_a_stated_kernel_overrides_the_stack_and_costs_its_efficiency():
    default, cudnn = _attention_seconds(None)
    stated, fa2 = _attention_seconds(AttentionKernel.fa2)
    assert default.attention_kernel == "cudnn"  # Megatron-Core with TE on Hopper (profiles/stacks/megatron.yaml)
    assert stated.attention_kernel == "fa2"
    # one causal call of 32K keys: the forward time scales by the kernels' long-call forward figures,
    # cuDNN 595 / FA2 370 TFLOP/s on H100 (FA3 paper figures; profiles/cost/defaults.yaml 0.602 / 0.374 of
    # the peak) = 1.610; measured 1.6105, the two length curves at 32K keys agreeing within 0.1%
    assert fa2 / cudnn == pytest.approx(0.602 / 0.374, rel=0.01)


@pytest.mark.parametrize("version, kernel", [
    ("NeMo 24.03.01.framework container", AttentionKernel.fa2),  # long-sequence page's container
    ("NeMo 24.07", AttentionKernel.fa2),                         # the 24.07 performance summary
    ("NeMo 24.09 container", None),                              # launcher 24.09: NVTE_FUSED_ATTN no longer set
    ("NeMo 23.11 container", None),                              # before 562dcb45
    ("NeMo 25.04.rc2 container", None),
])
def test_nemo_launcher_containers_from_24_01_to_24_07_run_flash_attention_2(version, kernel):
    row = {**ROW, "software": "NeMo (Megatron Core)", "software_version": version}
    assert row_inputs(row).training.attention_kernel == kernel
    # Megatron-LM itself never set the variable: its rows keep the stack's kernel
    assert row_inputs({**row, "software": "Megatron-LM"}).training.attention_kernel is None


def test_the_kernels_a_run_can_state_are_the_ones_with_measured_figures():
    # AttentionKernel spells profiles/cost/defaults.yaml attention.kernels: a kernel added to one and not
    # the other would be refused by the CLI (no figures) or unreachable from it
    assert {k.value for k in AttentionKernel} == set(load_cost_params().attention.kernels)
