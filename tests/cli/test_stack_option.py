"""`--stack` on the CLI: the software stack whose kernels are costed (profiles/stacks/), defaulting
to the launcher framework's own stack."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autopar.cli import main

EST = ["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "8192", "--global-batch", "64",
       "--plan", "tp=1,pp=1,dp=8,mbs=1,zero=3", "--json"]


def _estimate(*extra):
    r = CliRunner().invoke(main, EST + list(extra))
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_stack_switches_the_attention_kernel_by_its_profile():
    # The same GEMM work, but torchtitan runs wq, wk, wv and w1, w3 as separate, narrower GEMMs
    # (tests/cost/test_separate_projections.py): a little slower, 0.5% of this plan's GEMM time.
    # Attention costs fwd/(peak*eff_f) + 2.5 fwd/(peak*eff_b). Hopper, profiles/cost/defaults.yaml:
    # torchtitan runs SDPA's FlashAttention-2 (0.374, 0.326), Megatron TE's cuDNN (0.602, 0.522), each
    # times its causal 8k call's share of the long-call bars (attention.length_curves, FA3 paper Fig. 5-6):
    # FA2 forward 333/370, backward 318/322 x 333/370; cuDNN 529/595, 518/516 x 529/600, so
    # torchtitan / megatron = (1/0.3366 + 2.5/0.28976) / (1/0.53523 + 2.5/0.46201) = 11.599 / 7.279 = 1.593.
    mega, titan = _estimate(), _estimate("--stack", "torchtitan")
    gemm_ratio = titan["time_breakdown"]["compute_gemm"] / mega["time_breakdown"]["compute_gemm"]
    assert 1.0 < gemm_ratio < 1.01
    ratio = titan["time_breakdown"]["compute_attention"] / mega["time_breakdown"]["compute_attention"]
    assert ratio == pytest.approx(11.599 / 7.279, rel=2e-3)
    # eager RMSNorm/RoPE/SwiGLU kernels read and write more bytes than the fused ones
    assert titan["time_breakdown"]["compute_elementwise"] > 1.5 * mega["time_breakdown"]["compute_elementwise"]


def test_framework_sets_the_default_stack_and_a_contradiction_is_one_line(tmp_path):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(main, ["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "4096",
                                  "--global-batch", "32", "--framework", "torchtitan", "--top", "1", "--no-per-stage",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["inputs"]["training"]["stack"] == "torchtitan"
    r = CliRunner().invoke(main, EST[:-1] + ["--stack", "torchtitan", "--framework", "megatron"])
    assert r.exit_code != 0  # estimate has no --framework: click's usage error, one line
    r = CliRunner().invoke(main, ["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "4096",
                                  "--global-batch", "32", "--framework", "megatron", "--stack", "torchtitan"])
    assert r.exit_code == 1
    assert r.output.strip().startswith("Error: stack='torchtitan'") and "megatron" in r.output and len(r.output.strip().splitlines()) == 1


def test_estimate_says_how_far_to_trust_it():
    r = CliRunner().invoke(main, EST[:-1])
    assert r.exit_code == 0
    # the family's mean error over the published runs (profiles/validation/families.json)
    fam = json.loads(open("profiles/validation/families.json").read())["families"]["dense/fsdp/bf16/hopper"]
    assert f"dense/fsdp/bf16/hopper: mean error {100 * fam['mape']:.1f}% over {fam['num_rows']} published runs" in r.output


def test_fp8_recipe_follows_the_stack_and_is_checked_against_the_launcher():
    # torchtitan stacks run torchao rowwise (its 0.3.0 converter has no tensorwise recipe): more cast
    # bytes, same GEMMs, so a slower step than the same stack forced to tensorwise
    rowwise = _estimate("--precision", "fp8", "--stack", "torchtitan-compile")
    tensorwise = _estimate("--precision", "fp8", "--stack", "torchtitan-compile", "--fp8-recipe", "tensorwise")
    assert rowwise["time_breakdown"]["compute_gemm"] == pytest.approx(tensorwise["time_breakdown"]["compute_gemm"], rel=1e-9)
    assert rowwise["step_seconds"] > tensorwise["step_seconds"]
    r = CliRunner().invoke(main, ["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--precision", "fp8",
                                  "--fp8-recipe", "rowwise", "--framework", "megatron"])
    assert r.exit_code == 1 and "megatron launcher runs tensorwise" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, EST[:-1] + ["--fp8-recipe", "rowwise"])
    assert r.exit_code == 1 and "give --precision fp8" in r.output


def test_attention_kernel_option_costs_the_named_kernel_on_the_same_stack():
    # Megatron with NVTE_FUSED_ATTN=0 (NeMo Framework Launcher 24.01-24.07) runs FlashAttention-2:
    # the attention costs what torchtitan's FA2 does above (ratio 11.599 / 7.279 = 1.593 to cuDNN),
    # everything else stays Megatron's (fused element-wise kernels, the same GEMMs)
    mega, fa2 = _estimate(), _estimate("--attention-kernel", "fa2")
    ratio = fa2["time_breakdown"]["compute_attention"] / mega["time_breakdown"]["compute_attention"]
    assert ratio == pytest.approx(11.599 / 7.279, rel=2e-3)
    assert fa2["time_breakdown"]["compute_gemm"] == mega["time_breakdown"]["compute_gemm"]
    assert fa2["time_breakdown"]["compute_elementwise"] == mega["time_breakdown"]["compute_elementwise"]
    text = CliRunner().invoke(main, EST[:-1] + ["--attention-kernel", "fa2"])
    assert text.exit_code == 0 and ", megatron, attention fa2\n" in text.output


def test_attention_kernel_with_no_flash_is_one_line():
    r = CliRunner().invoke(main, EST + ["--no-flash", "--attention-kernel", "cudnn"])
    assert r.exit_code == 1
    assert r.output == "Error: attention-kernel='cudnn': names a fused kernel; --no-flash runs unfused attention\n"


def test_attention_kernel_without_figures_for_the_gpu_is_one_line():
    # FlashAttention-3 is a Hopper kernel (profiles/cost/defaults.yaml attention.kernels.fa3: hopper only);
    # on an A100 it is refused, not costed silently as FlashAttention-2
    a100 = [a if a != "dgx-h100" else "dgx-a100" for a in EST]
    r = CliRunner().invoke(main, a100 + ["--attention-kernel", "fa3"])
    assert r.exit_code == 1
    assert r.output.startswith("Error: attention-kernel='fa3': has no measured efficiency on A100") and "for hopper\n" in r.output
    assert _estimate("--attention-kernel", "fa3")["time_breakdown"]["compute_attention"] > 0  # on the H100 it runs
