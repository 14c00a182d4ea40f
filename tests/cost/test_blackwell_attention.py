"""cuDNN attention on Blackwell and Blackwell Ultra (profiles/cost/defaults.yaml attention.kernels.cudnn).
The forward figure on B200 comes from the FlashAttention-4 blog (cuDNN 9.13, 0.549 of the peak);
the backward / forward ratio on Blackwell and the Blackwell Ultra / Blackwell ratio come from
cudnn-frontend's own SDPA training benchmark, both measured within one cuDNN release (9.22) on
GB200 and GB300 (calibration/data/attention/, NVIDIA/cudnn-frontend @3929da2)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autopar.cost.context import Batch
from autopar.cost.layer import layer_forward
from autopar.cost.table import PlanTable
from autopar.specs import ModelSpec, TrainingSpec, load_cluster
from autopar.specs.costparams import load_cost_params, sm_key
from autopar.specs.plan import Plan
from autopar.specs.training import Stack

DATA = Path(__file__).resolve().parents[2] / "calibration" / "data" / "attention"
# LLaMA-3 8B's attention (32 query / 8 KV heads, head dim 128), two layers, 16K tokens
LLAMA8B = ModelSpec(name="llama3-8b", num_layers=2, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                    ffn_hidden_size=14336, vocab_size=128256)
SEQ = 16384


def _measured(gpu: str) -> tuple[float, float]:
    """bf16 forward and (non-deterministic) backward TFLOP/s at 16K tokens, no mask: the
    longest non-causal length of the kernel's length curves (the reference of its figures)."""
    rows = list(csv.DictReader(open(DATA / f"{gpu}_cudnn_sdpa_llama3.1_cudnn-frontend-3929da2.csv")))
    pick = {r["profile_pass"]: float(r["tflops"]) for r in rows
            if r["backend"] == "cudnn" and r["data_type"] == "bfloat16" and r["attn_mask"] == "no_mask"
            and r["q_seqlen"] == str(SEQ) and r["deterministic_bwd"] == "False"}
    assert rows[0]["gpu_name"] == f"NVIDIA {gpu.upper()}" and rows[0]["cudnn_backend_version"] == "92200.000"
    return pick["fwd"], pick["bwd"]


def test_the_profile_takes_the_measured_ratios():
    cudnn = load_cost_params().attention.kernels["cudnn"]
    (f200, b200), (f300, b300) = _measured("gb200"), _measured("gb300")
    assert (f200, b200, f300, b300) == (1697.0, 1374.0, 2014.0, 1536.0)  # the files' rows, as the comment quotes them
    fwd, bwd = cudnn["blackwell"]
    assert fwd == 0.549  # FA4 blog: cuDNN 9.13 ~1235 of B200's 2250
    assert bwd / fwd == pytest.approx(b200 / f200, rel=0.005)  # 0.810, not Hopper's 516 / 595 = 0.867
    ultra_fwd, ultra_bwd = cudnn[sm_key(10.3)]
    assert ultra_fwd / fwd == pytest.approx(f300 / f200, rel=0.005)  # 1.187
    assert ultra_bwd / bwd == pytest.approx(b300 / b200, rel=0.005)  # 1.118


def test_efficiency_takes_the_part_family_before_its_architecture():
    attention = load_cost_params().attention
    assert sm_key(10.3) == "sm_103" and sm_key(9.0) == "sm_90"
    assert attention.efficiency("cudnn", "blackwell", 10.3) == (0.652, 0.497)
    assert attention.efficiency("cudnn", "blackwell", 10.0) == (0.549, 0.445)
    assert attention.efficiency("cudnn", "blackwell") == (0.549, 0.445)
    # a kernel without a figure for the family keeps its architecture's
    assert attention.efficiency("fa2", "blackwell", 10.3) == attention.efficiency("fa2", "blackwell")


def _attention_seconds(cluster: str) -> tuple[float, float]:
    tab = PlanTable.from_plans([Plan(tp=1, pp=1, dp=8, mbs=1)], 8)
    training = TrainingSpec(seq_len=SEQ, global_batch_size=8, stack=Stack.megatron)
    b = Batch(LLAMA8B, load_cluster(cluster).with_gpus(8), training, load_cost_params(), tab)
    assert b.attention_kernel == "cudnn"  # Megatron-Core with TE on Blackwell (profiles/stacks/megatron.yaml)
    out = layer_forward(b, 0)
    return float(out["attn"][0]), float(out["attn_bwd"][0])


@pytest.mark.parametrize("ultra, base", [("gb300-nvl72", "gb200-nvl72"), ("dgx-b300", "dgx-b200")])
def test_blackwell_ultra_runs_the_same_attention_faster_by_the_measured_ratio(ultra, base):
    """GB300 and GB200 (B300 and B200) have equal bf16 peaks, so the same layer's attention
    time falls by the efficiency ratio alone: forward 0.652 / 0.549 = 1.188, backward
    0.497 / 0.445 = 1.117 (cudnn-frontend GB300 / GB200 at 16K: 2014 / 1697, 1536 / 1374)."""
    assert load_cluster(ultra).gpu.peak_tflops.bf16 == load_cluster(base).gpu.peak_tflops.bf16
    (uf, ub), (bf, bb) = _attention_seconds(ultra), _attention_seconds(base)
    assert bf / uf == pytest.approx(0.652 / 0.549, rel=1e-6)
    assert bb / ub == pytest.approx(0.497 / 0.445, rel=1e-6)
