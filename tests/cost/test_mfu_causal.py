"""MFU counts attention non-causally (Narayanan et al. 2021; Megatron-LM's reported TFLOP/s), so at
long sequences it exceeds what the GPUs execute under the causal mask. Estimate.mfu_causal gives
the causal count beside it, and the estimate table says so where the two differ by 20% or more
(autopar.report.CAUSAL_NOTE_RATIO)."""
import pytest

from autopar.cost.estimate import estimate
from autopar.cost.flops import active_params_per_token
from autopar.report import estimate_table
from autopar.specs import load_cluster, load_model
from autopar.specs.plan import Plan
from autopar.specs.training import TrainingSpec


def _llama3_8b(seq_len: int, batch: int):
    model, cluster = load_model("llama3-8b"), load_cluster("dgx-h100").with_gpus(64)
    plan = Plan(tp=2, pp=2, cp=16, recompute="full")
    return model, estimate(model, cluster, TrainingSpec(seq_len=seq_len, global_batch_size=batch), plan)


def test_mfu_causal_halves_the_attention_scores_only():
    # LLaMA-3 8B (32 layers, 32 heads x 128): forward FLOPs per token 2 P + 32 x 4 s x 4096 non-causal,
    # 2 P + 32 x 4 (s / 2) x 4096 causal (model.attention_keys_per_query); the ratio is the MFUs'
    model, e = _llama3_8b(1 << 20, 4)
    p, s = active_params_per_token(model), float(1 << 20)
    non_causal, causal = 2 * p + 32 * 4 * s * 4096, 2 * p + 32 * 4 * (s / 2) * 4096
    assert e.mfu_causal / e.mfu == pytest.approx(causal / non_causal, rel=1e-9)
    # at 1M tokens attention is ~94% of the non-causal count: the causal MFU is about half (0.514)
    assert e.mfu_causal / e.mfu == pytest.approx(0.514, abs=0.005)
    assert "counted causally, as the kernels run it: MFU" in estimate_table(e)


def test_usual_sequences_print_no_convention_line():
    # at 8,192 tokens attention is 32 x 4 x 8192 x 4096 = 4.3e9 of ~19.3e9 forward FLOPs per token
    # (22%): the causal MFU is 11% lower, under the 20% that earns a line
    _, e = _llama3_8b(8192, 128)
    assert e.mfu_causal / e.mfu == pytest.approx(0.89, abs=0.01)
    assert "counted causally" not in estimate_table(e)
