"""`autopar search`: the seed's expert layouts, determinism, results file, bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.cost import estimate
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.results import load_results


def run(args):
    return CliRunner().invoke(main, ["search", *args])


LLAMA405 = ["--model", "llama3-405b", "--cluster", "dgx-h100-superpod", "--gpus", "16384", "--seq-len", "8192",
            "--global-batch-tokens", "16M"]


def test_llama3_405b_seed_layout_rank_and_gap(tmp_path):
    # seed 001 'Примеры' / seed 000 'Архетип A': LLaMA-3 405B on 16,384 H100, 16M tokens,
    # TP8 PP16 DP128. It must fit (with full recompute) and the output shows rank and gap.
    out = tmp_path / "r.json"
    r = run(LLAMA405 + ["--top", "3", "--reference", "tp=8,pp=16,dp=128,recompute=full", "--out", str(out)])
    assert r.exit_code == 0, r.output
    line = next(l for l in r.output.splitlines() if l.startswith("reference tp=8,pp=16,dp=128"))
    assert "vs best, rank" in line and line.endswith("fits")
    results = load_results(out)
    assert results.search.proved_optimal and results.search.num_feasible > 0
    assert len(results.plans) == 3
    steps = [p.estimate.step_seconds for p in results.plans]
    assert steps == sorted(steps)
    gap = float(line.split("s, ")[1].split("%")[0])
    assert gap > 0  # the seed's plan is not better than the proven optimum


@pytest.mark.parametrize(
    "model, cluster, gpus, seq, batch, plan, where",
    [
        ("gpt3-175b", "dgx-h100-superpod", 8192, 2048, 1536, "tp=8,pp=8,dp=128",
         "seed 000 'Пример: автоматизированный поиск в пространстве проектирования'"),
        ("deepseek-v3", "hgx-h800", 2048, 4096, 15360, "tp=1,pp=16,dp=128,ep=64,zero=1,recompute=full",
         "seed 001 'Примеры': EP64 PP16 DP2 (=128/64) ZeRO-1, 4096 x 15360 tokens"),
    ],
)
def test_seed_expert_layouts_fit(model, cluster, gpus, seq, batch, plan, where):
    est = estimate(load_model(model), load_cluster(cluster).with_gpus(gpus), TrainingSpec(seq_len=seq, global_batch_size=batch), parse_plan(plan))
    assert est.feasible, (where, est.reasons)


def test_same_command_same_ranking():
    args = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "8192", "--global-batch", "64", "--top", "5", "--json"]
    for solver in ("exhaustive", "cpsat"):
        a, b = run(args + ["--solver", solver]), run(args + ["--solver", solver])
        plans_a = [p["estimate"]["plan"] for p in json.loads(a.output)["plans"]]
        plans_b = [p["estimate"]["plan"] for p in json.loads(b.output)["plans"]]
        assert plans_a == plans_b and len(plans_a) == 5


def test_fix_pins_dimensions():
    r = run(["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "8192", "--global-batch", "64",
             "--fix", "tp=2,pp=2,recompute=full", "--json"])
    plans = [p["plan"] for p in json.loads(r.output)["plans"]]
    assert plans and all(p["tp"] == 2 and p["pp"] == 2 and p["recompute"] == "full" for p in plans)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "0", "--seq-len", "1024", "--global-batch", "8"], "gpus=0"),
        (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "1024", "--global-batch", "8", "--fix", "tp=8,pp=4"],
         "tp(8) * pp(4) = 32 is incompatible with GPUs(16)"),
        (["--model", "gpt2-xl", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "1024", "--global-batch", "7", "--fix", "pp=1,cp=1"],
         "every candidate breaks plan.mbs: global_batch_size=7 must divide by dp(16)"),
        (["--model", "llama3-8b", "--cluster", "dgx-h100", "--seq-len", "1024", "--global-batch", "8", "--fix", "warp=2"], "fix='warp'"),
        (["--model", "llama3-8b", "--cluster", "dgx-h100", "--seq-len", "8192", "--global-batch-tokens", "16M", "--max-gbs-tokens", "4M"], "critical batch"),
        (["--model", "llama3-8b", "--cluster", "dgx-h100", "--seq-len", "1024", "--global-batch", "8", "--top", "0"], "top=0"),
    ],
)
def test_bad_input_is_one_line(args, fragment):
    r = run(args)
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], r.output


def test_nothing_fits_names_memory_and_a_way_out():
    # 405B on one 8-GPU node: even 16 bytes/param / 8 GPUs is ~810 GB per GPU
    r = run(["--model", "llama3-405b", "--cluster", "dgx-h100", "--seq-len", "8192", "--global-batch", "16"])
    assert r.exit_code == 1
    msg = r.output.strip()
    assert "smallest memory need is" in msg and "HBM is 80 GB" in msg and "--gpus" in msg and "fits" in msg


def test_readme_search_emits_a_valid_megatron_script(tmp_path):
    # issue 5: `autopar search ... --emit megatron` on the README's example passes bash -n and
    # the Megatron validator (the emitter refuses plans that break Megatron's rules)
    import subprocess

    r = run(["--model", "llama3-70b", "--cluster", "dgx-h100-superpod", "--gpus", "1024", "--seq-len", "8192",
             "--global-batch-tokens", "16M", "--top", "3", "--emit", "megatron", "--emit-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    scripts = list(tmp_path.glob("*.sh"))
    assert len(scripts) == 1
    assert subprocess.run(["bash", "-n", str(scripts[0])], capture_output=True).returncode == 0
    text = scripts[0].read_text()
    assert "--tensor-model-parallel-size" in text and "torchrun" in text


def test_emit_skips_plans_the_framework_cannot_run(tmp_path):
    # with vpp pinned to 1, zero-bubble (ZB-H2) beats 1F1B at pp=4; Megatron-LM runs only 1F1B
    # and interleaved, so the launcher is written for the best plan it accepts and the refused
    # ranks are named
    args = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "4096", "--global-batch", "64",
            "--fix", "pp=4,vpp=1,zero=1", "--top", "60"]  # the best 1F1B plan ranks 23rd
    ranked = json.loads(run(args + ["--json"]).output)["plans"]
    assert ranked[0]["plan"]["schedule"] == "zero-bubble"
    first_runnable = next(i for i, p in enumerate(ranked) if p["plan"]["schedule"] == "1f1b")
    r = run(args + ["--emit", "megatron", "--emit-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "rank 1 not emitted for megatron" in r.output
    script = next(tmp_path.glob("*.sh")).read_text()
    assert ranked[first_runnable]["estimate"]["plan"] in script
