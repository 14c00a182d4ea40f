"""`autopar plan` end to end (CliRunner): the seeds' worked numbers through the command, the
`--json` contract of issue 11, files written, bad input as one line and exit code 1."""

from __future__ import annotations

import json
import math
import re

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.cost import estimate
from autopar.cost.flops import embedding_params, model_flops_per_token
from autopar.specs import Precision, TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.costparams import params_for_cluster

CONTRACT = ["gpus", "global_batch_tokens", "plan", "step_seconds", "mfu", "goodput", "checkpoint_interval_seconds", "wall_days",
            "gpu_hours", "cost_usd", "energy_mwh", "pareto"]
SMALL = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--tokens", "1T", "--seq-len", "8192"]


def run(args):
    return CliRunner().invoke(main, ["plan", *args])


def run_json(args) -> dict:
    r = run([*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_seed_young_daly_through_plan():
    # seed 000 'Ловушка: использовать фиксированные интервалы контрольных точек': 1,024 GPUs,
    # 50,000 h per GPU, 5 min write -> checkpoint every 171.2 min, tax 5.8%
    report = run_json(SMALL + ["--gpus", "1024", "--batch-tokens", "4M", "--mtbf-hours-per-gpu", "50000",
                               "--checkpoint-write-seconds", "300", "--restart-seconds", "0"])
    p = report["points"][0]
    assert p["checkpoint_interval_seconds"] / 60 == pytest.approx(171.2, abs=0.05)
    assert 1 - p["goodput"] == pytest.approx(0.058, abs=0.0005)
    assert p["mtbf_hours"] == pytest.approx(48.8, abs=0.05)
    # the emitters' --save-interval: the interval in optimizer steps
    assert p["checkpoint_interval_steps"] == round(p["checkpoint_interval_seconds"] / p["step_seconds"])
    # wall time = training time / goodput; GPU-hours and cost follow
    assert p["wall_days"] == pytest.approx(p["train_days"] / p["goodput"])
    assert p["gpu_hours"] == pytest.approx(1024 * p["wall_days"] * 24)
    assert p["cost_usd"] == pytest.approx(p["gpu_hours"] * load_cluster("dgx-h100").price_usd_per_gpu_hour)


def test_llama3_compute_bound_batch_through_plan(tmp_path):
    # seed 001 'Параллелизм данных': LLaMA-3 on 16K H100 would need >= 40M tokens of batch to be
    # compute-bound (C/W = 990e12 / 400e9 = 2,475 per GPU); it used 16M
    r = run(["--model", "llama3-405b", "--cluster", "dgx-h100", "--tokens", "15T", "--seq-len", "8192", "--gpus", "16384",
             "--batch-tokens", "16M", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "compute-bound from 38.6M tokens" in r.stdout  # 40.5e6 tokens in the legend's M = 2^20
    p = json.loads((tmp_path / "plan.json").read_text())["points"][0]
    assert p["compute_bound_batch_tokens"] / 40e6 == pytest.approx(1.0, abs=0.015)
    assert p["global_batch_tokens"] < p["compute_bound_batch_tokens"]  # 16M used < 40M needed


def test_compute_bound_batch_formula_in_json():
    # N x C / W with W = 8 x 50 GB/s node egress (dgx-h100): 1,024 x 989.4e12 / 400e9 = 2.533M
    p = run_json(SMALL + ["--gpus", "1024", "--batch-tokens", "4M", "--checkpoint-write-seconds", "60"])["points"][0]
    assert p["compute_bound_batch_tokens"] == pytest.approx(1024 * 989.4e12 / 400e9)


def test_goodput_trap_through_plan(tmp_path):
    # seed 000 'Ловушка: оптимизировать MFU, не учитывая эффективность масштабирования': useful work
    # is N x MFU x goodput, and a linear extrapolation from the small run overstates it by 1/eta
    r = run(["--model", "gpt2-xl", "--cluster", "dgx-h100", "--tokens", "100B", "--seq-len", "1024", "--gpus", "8,1024",
             "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "plan.json").read_text())
    small, large = report["points"]
    eta = (large["tokens_per_second"] / 1024) / (small["tokens_per_second"] / 8)
    assert large["scaling_efficiency"] == pytest.approx(eta)
    assert large["mfu"] == pytest.approx(small["mfu"] * eta, rel=1e-6)  # same batch: MFU_N = MFU_8 x eta
    line = next(t for t in r.stdout.splitlines() if t.startswith("linear scaling from 8 GPUs"))
    numbers = [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", line.split("MFU x goodput = ")[1])]
    useful_small, useful_large, promised = numbers[:3]
    assert useful_small == pytest.approx(8 * small["mfu"] * small["goodput"], abs=0.5)
    assert useful_large == pytest.approx(1024 * large["mfu"] * large["goodput"], abs=0.5)
    assert promised == pytest.approx(1024 * small["mfu"] * small["goodput"], abs=0.5)
    assert useful_large < promised  # the trap: less useful work than linear scaling promises


def test_json_contract_and_files(tmp_path):
    args = SMALL + ["--gpus", "8:32", "--batches", "2", "--deadline", "200d", "--out", str(tmp_path / "p")]
    report = run_json(args)
    assert set(report) >= {"points", "chosen", "critical_batch_tokens"}
    for p in report["points"]:
        assert list(p)[: len(CONTRACT)] == CONTRACT
    assert len(report["points"]) == 3 * 2
    assert isinstance(report["chosen"], int) and report["points"][report["chosen"]]["wall_days"] <= 200
    assert any(p["pareto"] for p in report["points"])
    # the default objective under --deadline: cost, in dollars on a cluster with a price
    assert (report["objective"], report["cost_unit"]) == ("cost", "usd")
    saved = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert saved["points"] == report["points"]
    assert (tmp_path / "p" / "plan.csv").read_text().splitlines()[0].startswith("gpus,global_batch_tokens,plan,")
    assert (tmp_path / "p" / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the chart is written like the other results, not with mkstemp's private 0600
    assert (tmp_path / "p" / "plan.png").stat().st_mode == (tmp_path / "p" / "plan.json").stat().st_mode
    assert not list((tmp_path / "p").glob(".*tmp"))  # atomic writes leave no temporaries


def test_critical_batch_law_value():
    # DeepSeek LLM sec. 3.1 with C = M D, M = non-embedding training FLOPs per token (causal attention)
    model = load_model("llama3-8b")
    m = model_flops_per_token(model, 8192, causal=True) - 6 * embedding_params(model)
    report = run_json(SMALL + ["--gpus", "8", "--checkpoint-write-seconds", "60"])
    assert report["critical_batch_tokens"] == pytest.approx(0.2920 * (m * 1e12) ** 0.3271, rel=1e-9)
    # the grid's batch: the largest 2^k or 3 x 2^k sequences of 8,192 tokens under the cap
    batch = report["points"][0]["global_batch_tokens"]
    assert batch <= report["critical_batch_tokens"] < batch * 4 / 3


def test_critical_batch_override_and_batch_above_it():
    report = run_json(SMALL + ["--gpus", "8", "--critical-batch-tokens", "2M", "--batches", "2", "--checkpoint-write-seconds", "60"])
    assert report["critical_batch_tokens"] == 2 * 2**20
    assert [p["global_batch_tokens"] for p in report["points"]] == [1536 * 1024, 2 * 2**20]  # 192 and 256 sequences
    r = run(SMALL + ["--gpus", "8", "--critical-batch-tokens", "2M", "--batch-tokens", "4M"])
    assert r.exit_code == 1 and r.output.startswith("Error: batch-tokens='4M': 4,194,304 tokens exceeds the critical batch 2,097,152 tokens")
    # each batch is quoted as typed, whichever of a list breaks a rule (plan --batch-tokens 1K read 1024)
    r = run(SMALL + ["--gpus", "8", "--batch-tokens", "1M, 1K"])
    assert r.exit_code == 1 and r.output == "Error: batch-tokens='1K': 1,024 tokens must be a multiple of seq-len=8192\n"


def test_gradient_noise_critical_batch():
    # seed 000 'Критический размер батча', control question: tr(Sigma) = 1.6e6, |mu|^2 = 100 ->
    # B* = 16,000 examples; the proposed 8,192 (64 x 4 x 32) stays below it
    report = run_json(SMALL[:-2] + ["--seq-len", "2048", "--gpus", "64", "--gradient-noise", "1.6e6/100", "--checkpoint-write-seconds", "60"])
    assert report["critical_batch_tokens"] == pytest.approx(16_000 * 2048)
    assert "16,000 sequences" in report["critical_batch_source"]
    assert 8192 * 2048 < report["points"][0]["global_batch_tokens"] <= 16_000 * 2048


def test_learning_rate_rules_through_plan():
    # seed 000: Adam takes the square-root rule, SGD the linear rule below the critical batch
    base = SMALL + ["--gpus", "8", "--batch-tokens", "4M", "--lr0", "3e-4", "--batch0", "1M", "--checkpoint-write-seconds", "60"]
    adam = run_json(base)
    sgd = run_json(base + ["--optimizer", "sgd"])
    assert adam["points"][0]["learning_rate"] == pytest.approx(3e-4 * 2)
    assert sgd["points"][0]["learning_rate"] == pytest.approx(3e-4 * 4)
    assert adam["learning_rate_rule"].startswith("square-root rule (Adam)")


def test_ramp_is_costed_at_the_points_layout():
    # 50B tokens at a 2M-token batch, then 4M: training time = 50e9 / tps(2M, same layout) + 950e9 / tps(4M)
    args = SMALL + ["--gpus", "16", "--batch-tokens", "4M", "--checkpoint-write-seconds", "60"]
    flat = run_json(args)["points"][0]
    ramped = run_json(args + ["--ramp", "2M@50B"])["points"][0]
    assert ramped["plan"] == flat["plan"]
    cluster = load_cluster("dgx-h100").with_gpus(16)
    small = estimate(load_model("llama3-8b"), cluster, TrainingSpec(seq_len=8192, global_batch_size=256, precision=Precision.bf16),
                     parse_plan(ramped["plan"]), params_for_cluster(cluster))
    expected = 50e9 / small.tokens_per_second + 950e9 / ramped["tokens_per_second"]
    assert ramped["train_days"] * 86400 == pytest.approx(expected, rel=1e-9)


def test_node_and_switch_mtbf_from_cluster_file(tmp_path):
    # per-node and per-switch failure rates add to the per-GPU rate (1/M = sum of N_i / M_i)
    text = (tmp_path / "c.yaml")
    base = open(load_cluster.__globals__["preset_files"]("clusters")["dgx-h100"]).read()
    text.write_text(base + "\nmtbf_hours_per_node: 100000\nmtbf_hours_per_switch: 200000\nswitches_per_node: 0.375\n")
    p = run_json(["--model", "llama3-8b", "--cluster", str(text), "--tokens", "1T", "--seq-len", "8192", "--gpus", "1024",
                  "--batch-tokens", "4M"])["points"][0]
    rate = 1024 / 50_000 + 128 / 100_000 + 128 * 0.375 / 200_000
    assert p["mtbf_hours"] == pytest.approx(1 / rate)


@pytest.mark.parametrize("args, start", [
    (["--tokens", "0"], "Error: tokens='0': must be a positive, finite number"),
    (["--tokens", "nan"], "Error: tokens='nan': must be a positive, finite number"),
    (["--tokens", "-5T"], "Error: tokens='-5T': must be a positive, finite number"),
    (["--tokens", "lots"], "Error: tokens='lots': must be a number"),
    # --tokens and --budget read with the shared count parser (autopar/cli/common.py parse_amount):
    # its syntax and wording, as --global-batch-tokens; plan's own parser dropped '_' and ',' and
    # took a $ on any amount
    (["--tokens", "15_000_000"], "Error: tokens='15_000_000': must be a number without '_' or ',' between digits (1000 or 1K, "
                                 "not 1_000), with an optional K/M/G/T/P or B (= G, billion) or Ki/Mi/Gi/Ti/Pi suffix\n"),
    (["--tokens", "$1T"], "Error: tokens='$1T': must be a number with an optional K/M/G/T/P or B (= G, billion) or Ki/Mi/Gi/Ti/Pi suffix\n"),
    (["--tokens", "1T", "--budget", "5Mi"], "Error: budget='5Mi': unknown suffix 'MI'; use K/M/G/T/P or B (= G, billion)\n"),
    (["--tokens", "1T", "--budget", "lots"], "Error: budget='lots': must be a number with an optional leading $ and K/M/G/T/P "
                                             "or B (= G, billion) suffix\n"),
    (["--tokens", "1T", "--deadline", "0d"], "Error: deadline='0d': must be a positive, finite duration (60d, 1440h, 8w)"),
    # a duration: days, hours or weeks, not the K/M/G/T of counts (it asked for a K/M/G/T suffix)
    (["--tokens", "1T", "--deadline", "1x"], "Error: deadline='1x': must be a duration: a number of days, or with a d/h/w suffix (60d, 1440h, 8w)"),
    (["--tokens", "1T", "--deadline", "5k"], "Error: deadline='5k': must be a duration: a number of days, or with a d/h/w suffix"),
    # digit separators refused as the amount options refuse them; --deadline alone dropped them (1_000 was 1000 days)
    (["--tokens", "1T", "--deadline", "1_000"], "Error: deadline='1_000': must be a duration without '_' or ',' between digits "
                                                "(1440h, not 1,440h): a number of days, or with a d/h/w suffix (60d, 1440h, 8w)\n"),
    (["--tokens", "1T", "--deadline", "1,440h"], "Error: deadline='1,440h': must be a duration without '_' or ',' between digits "
                                                 "(1440h, not 1,440h): a number of days, or with a d/h/w suffix (60d, 1440h, 8w)\n"),
    (["--tokens", "1T", "--budget", "inf"], "Error: budget='inf': must be a positive, finite number"),
    (["--tokens", "1T", "--batch-tokens", "nan"], "Error: batch-tokens='nan': must be a positive, finite number"),
    (["--tokens", "1T", "--gpus", "64:8"], "Error: gpus='64:8': the range must run from the smaller count to the larger"),
    (["--tokens", "1T", "--gpus", "12"], "Error: gpus=12: must be a multiple of gpus_per_node=8"),
    (["--tokens", "1T", "--ramp", "4M"], "Error: ramp='4M': each step is BATCH@UNTIL_TOKENS"),
    (["--tokens", "1T", "--gradient-noise", "5"], "Error: gradient-noise='5': must be TRACE/NORM2"),
    (["--tokens", "1T", "--lr0", "1e-3"], "Error: batch0=None: give both --lr0 and --batch0"),
    (["--tokens", "1T", "--mtbf-hours-per-gpu", "-1"], "Error: mtbf-hours-per-gpu=-1.0: must be a positive, finite number"),
    # as search: dgx-h100's fabric is 2,048 nodes of 8 (its core tier)
    (["--tokens", "1T", "--gpus", "8,32768"], "Error: gpus=32768: cluster dgx-h100 describes a fabric of 16,384 GPUs"),
    # the step as typed, not its token count (ramp='2,870,000,000,000'), the numbers in the rule
    (["--tokens", "1T", "--ramp", "4M@2T"], "Error: ramp='4M@2T': a ramp step must end before the run's --tokens 1,000,000,000,000 "
                                            "(this one ends at 2,000,000,000,000)\n"),
    (["--tokens", "1T", "--ramp", "4M@252M, 8M@2.87T"], "Error: ramp='8M@2.87T': a ramp step must end before the run's --tokens "
                                                        "1,000,000,000,000 (this one ends at 2,870,000,000,000)\n"),
    # 64M tokens per step is above DeepSeek LLM's B_opt for 8B x 1T (7.7M): shown as typed, not ramp=67108864
    (["--tokens", "1T", "--ramp", "64M@252M"], "Error: ramp='64M@252M': batch 67,108,864 tokens exceeds the critical batch 7,679,908 tokens"),
    (["--tokens", "1M", "--batch-tokens", "4M"], "Error: batch-tokens='4M': 4,194,304 tokens exceeds the whole run of --tokens 1,000,000"),
    # --fix as in search: the field, the value and the rule
    (["--tokens", "1T", "--fix", "ep=8"], "Error: fix.ep=8: expert parallelism needs a MoE model (llama3-8b has no experts)"),
    (["--tokens", "1T", "--fix", "vpp=2,schedule=1f1b"], "Error: fix.vpp=2: virtual pipeline stages need the interleaved schedule, not 1f1b"),
])
def test_bad_input_is_one_line(args, start):
    r = run(["--model", "llama3-8b", "--cluster", "dgx-h100", "--seq-len", "8192", "--gpus", "8", *args])
    assert r.exit_code == 1
    assert r.output.startswith(start), r.output
    assert len(r.output.strip().splitlines()) == 1


def test_json_says_when_the_cost_objective_ranked_by_gpu_hours():
    # the default objective under --deadline on a cluster without price_usd_per_gpu_hour ranks the
    # points by GPU-hours (plan_choice.money); the text says "cost in GPU-hours", and --json read
    # plain "cost", as if in dollars. cost_unit carries it: gpu_hours here, null for time
    args = ["--model", "llama3-8b", "--cluster", "dgx-a100-40gb", "--tokens", "1T", "--seq-len", "8192", "--gpus", "8,16",
            "--checkpoint-write-seconds", "30"]
    report = run_json(args + ["--deadline", "900d"])
    assert (report["objective"], report["cost_unit"]) == ("cost", "gpu_hours")
    chosen = report["points"][report["chosen"]]
    # no dollars to rank by, so the fewest GPU-hours wins: 16 GPUs (MFU 71.6% against 68.8% at 8)
    assert chosen["cost_usd"] is None and chosen["gpus"] == 16
    assert chosen["gpu_hours"] == min(p["gpu_hours"] for p in report["points"] if p["gpu_hours"] is not None)
    report = run_json(args)  # no deadline: time, no cost ranking at all
    assert (report["objective"], report["cost_unit"]) == ("time", None)


def test_deadline_nothing_meets_names_the_fastest_point():
    r = run(SMALL + ["--gpus", "8:16", "--checkpoint-write-seconds", "60", "--deadline", "1d"])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert r.output.startswith("Error: deadline='1d': no point finishes in time; nearest: 16 GPUs x ")


def test_budget_below_the_cheapest_point_names_it():
    r = run(SMALL + ["--gpus", "8:16", "--checkpoint-write-seconds", "60", "--budget", "$1k"])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert r.output.startswith("Error: budget='$1,000': no point costs that little; nearest: ")


def test_no_gpu_count_fits_is_one_line():
    r = run(["--model", "llama3-405b", "--cluster", "dgx-h100", "--tokens", "15T", "--seq-len", "8192", "--gpus", "32"])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "no GPU count of [32] has a plan" in r.output and "--gpus 128 fits" in r.output


def test_deterministic_and_workers_agree():
    args = SMALL + ["--gpus", "8:16", "--checkpoint-write-seconds", "60"]
    one, again, two = run_json(args), run_json(args), run_json(args + ["--workers", "2"])
    strip = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    assert strip(one) == strip(again) == strip(two)
    assert math.isfinite(one["seconds"])


def test_critical_batch_is_capped_at_the_run():
    """A critical batch of 2T tokens on a 1T-token run: no batch may exceed the run itself, so the
    bound becomes 1e12 tokens and says why (the batch grid then stays under it)."""
    report = run_json(["--model", "llama3-8b", "--cluster", "dgx-h100", "--tokens", "1T", "--seq-len", "8192", "--gpus", "64",
                       "--critical-batch-tokens", "2T", "--batches", "1"])
    assert report["critical_batch_tokens"] == 1e12 and "capped at the run's" in report["critical_batch_source"]
    assert report["points"] and all(p["global_batch_tokens"] <= 1e12 for p in report["points"])


def test_counts_print_in_human_units():
    """A 10M-token run: the header printed '1e-05T tokens' and '1 points', the batch column
    '0.125M', GPU-hours '0.000' millions and the cost '$0.00M'. Now: 10M tokens, 1 point, a
    128K-token batch (2**17: 16 sequences of 8,192), hundreds of GPU-hours and cents in dollars."""
    r = run(["--model", "llama3-8b", "--cluster", "dgx-h100", "--tokens", "10M", "--seq-len", "8192", "--gpus", "64",
             "--checkpoint-write-seconds", "60"])
    assert r.exit_code == 0, r.output
    head, columns, row = r.stdout.splitlines()[:3]
    assert ", 10M tokens, seq 8192, bf16; 1 point planned in " in head
    assert columns.split()[:2] == ["GPUs", "batch"] and "GPU-h" in columns.split() and "M GPU-h" not in columns
    assert row.split()[2] == "128K"
    p = run_json(["--model", "llama3-8b", "--cluster", "dgx-h100", "--tokens", "10M", "--seq-len", "8192", "--gpus", "64",
                  "--checkpoint-write-seconds", "60"])["points"][0]
    assert p["global_batch_tokens"] == 2**17 and p["gpu_hours"] < 1 and p["cost_usd"] < 10
    assert f" ${p['cost_usd']:.3g} " in row
    assert "x 10M tokens = 4.83e+17 FLOPs" in r.stdout  # FLOPs alone stay in scientific notation
    assert not re.search(r"\d[eE][+-]\d", re.sub(r"[\d.]+e\+\d+ FLOPs", "", r.stdout)), r.stdout


def test_a_batch_near_the_whole_run_prints_in_its_unit():
    """A 768G-token batch (96 x 2**33, under a 1T critical batch) printed as '786432M'; the
    1e12-token critical batch as '1,000,000.0M'."""
    r = run(["--model", "llama3-8b", "--cluster", "dgx-h100", "--tokens", "1T", "--seq-len", "8192", "--gpus", "64",
             "--critical-batch-tokens", "2T", "--batches", "1", "--checkpoint-write-seconds", "60"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[2].split()[2] == "768G"
    # the cap is the run's 1e12 tokens: 931G by the table's legend (G = 2^30), with the exact count beside it
    assert "critical batch: 931G tokens = 1,000,000,000,000 (" in r.stdout


@pytest.mark.parametrize("value, binary, text", [
    (1e7, False, "10M"), (1.048576e12, False, "1.05T"), (15e12, False, "15T"), (512, False, "512"), (999_600, False, "1M"),
    (40.5e6, False, "40.5M"), (2**17, True, "128K"), (2**40, True, "1T"), (1.5 * 2**20, True, "1.5M"), (1000 * 2**10, True, "0.977M"),
])
def test_human_count(value, binary, text):
    from autopar.report import human_count

    assert human_count(value, binary=binary) == text


def test_batch_tokens_print_in_the_unit_that_spells_them():
    """review: --critical-batch-tokens 16M (read as 2**24, like --batch-tokens) printed as 16.8M; then
    (review item 7) a non-power-of-two cap printed in decimal beside the binary batch column, so the
    batch tokens of a plan report are all binary (the legend: batch K/M/G = 2^10/2^20/2^30 tokens)."""
    from autopar.report import human_tokens

    # 1e12 / 2**30 = 931.3; 40.5e6 / 2**20 = 38.62
    assert [human_tokens(v) for v in (2**24, 3 * 2**20, 1e12, 40.5e6)] == ["16M", "3M", "931G", "38.6M"]
    r = run(["--model", "llama3-8b", "--cluster", "dgx-h100", "--tokens", "1T", "--seq-len", "8192", "--gpus", "64",
             "--critical-batch-tokens", "16M", "--batches", "1"])
    assert r.exit_code == 0, r.output
    assert "critical batch: 16M tokens = 16,777,216 (" in r.stdout


def test_plan_prints_every_batch_in_the_legends_binary_units():
    # review item 7: "critical batch: 7.68M tokens" (decimal) under a legend of M = 2^20. DeepSeek LLM's
    # B_opt = 0.2920 C^0.3271 for llama3-8b at seq 8192 and 1T tokens (C = 4.83e22 FLOPs) is 7,679,908
    # tokens = 7.32 x 2^20; the batch cap line and the compute-bound batch follow the same units
    r = run(["--model", "llama3-8b", "--cluster", "dgx-h100-superpod", "--tokens", "1T", "--seq-len", "8192", "--gpus", "256,512"])
    assert r.exit_code == 0, r.output
    assert "batch K/M/G = 2^10/2^20/2^30 tokens" in r.stdout
    assert "critical batch: 7.32M tokens = 7,679,908 (DeepSeek LLM" in r.stdout
    assert "holds the global batch at <= 7.32M tokens" in r.stdout
    assert "7.68M" not in r.stdout


def test_dollars_and_plural():
    from autopar.report import dollars, plural

    assert [dollars(x) for x in (0.834, 73_700, 5.123e6, 1.2e9, None)] == ["$0.834", "$73.7K", "$5.12M", "$1.2B", "-"]
    # the sign goes before the dollar sign; past the top unit (T for money, P for counts) whole numbers
    # with separators: 9.995e17 is 999.5P, which rounds to 1,000P at 3 digits
    assert dollars(-1234) == "-$1.23K"
    from autopar.report import human_count
    assert human_count(9.995e17) == "1,000P" and human_count(2.5e18) == "2,500P"
    # below 1e-3 positional digits, three significant, trailing zeros dropped as %g drops them
    assert [dollars(x) for x in (4.44e-5, 3e-4, 9.99e-4, 1e-3)] == ["$0.0000444", "$0.0003", "$0.000999", "$0.001"]
    assert [plural(1, "point"), plural(2, "point"), plural(1024, "GPU")] == ["1 point", "2 points", "1,024 GPUs"]


def test_a_run_shorter_than_one_checkpoint_interval_pays_no_checkpoint_tax():
    """10M tokens on 64 GPUs at 50,000 h per GPU: M = 50,000 x 3,600 / 64 = 2,812,500 s and a 300 s
    write give tau = sqrt(2 x 300 x 2,812,500) = 41,079 s (684.7 min); the run trains ~15 s, so it
    writes no periodic checkpoint. The tax was T_w / tau + tau / (2 M) = 0.73% + 0.73% = 1.46%;
    now only the rework of a failure, half the run: T / (2 M) = 15 / 5,625,000, about 3e-6."""
    args = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--tokens", "10M", "--seq-len", "8192", "--gpus", "64",
            "--mtbf-hours-per-gpu", "50000", "--checkpoint-write-seconds", "300", "--restart-seconds", "0"]
    p = run_json(args)["points"][0]
    train, mtbf = p["train_days"] * 86400, 50_000 * 3600 / 64
    assert p["checkpoint_interval_seconds"] == pytest.approx(math.sqrt(2 * 300 * mtbf)) and train < p["checkpoint_interval_seconds"]
    assert p["checkpoint_tax"] == pytest.approx(train / (2 * mtbf)) and p["goodput"] == pytest.approx(1 - train / (2 * mtbf))
    assert p["wall_days"] == pytest.approx(p["train_days"] / p["goodput"])
    line = next(l for l in run(args).stdout.splitlines() if l.startswith("  step "))
    assert ("checkpoint (300 s to write): none periodic, the run trains 0.3 min, and losing half of it to a failure costs less "
            "than checkpointing every 684.7 min; checkpoint tax 0.0%") in line


def test_a_fix_one_gpu_count_cannot_take_leaves_that_count_without_a_plan():
    # ep=16 cannot run on 8 GPUs (the search offers ep 1-8 there): that point has no plan and the
    # 16-GPU point is planned, instead of the whole plan ending on the 8-GPU refusal
    r = run(["--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--tokens", "100G", "--seq-len", "4096", "--gpus", "8,16",
             "--fix", "ep=16"])
    assert r.exit_code == 0, r.output
    assert "fix.ep=16: no candidate plan for 8 GPUs" in r.stdout and "ep=16" in r.stdout.split("\n")[3]


def test_fixed_degrees_one_gpu_count_cannot_take_leave_that_count_without_a_plan():
    # dp=16 on 8 GPUs ended the whole plan on an input error ("fix=...: dp(16) = 16 is incompatible
    # with GPUs(8)"); the 16-GPU point is planned
    report = run_json(["--model", "gpt2-xl", "--cluster", "dgx-h100", "--tokens", "1B", "--seq-len", "1024", "--gpus", "8,16", "--fix", "dp=16"])
    eight, sixteen = report["points"]
    assert (eight["gpus"], eight["plan"], eight["note"]) == (8, None, "fix='order=tp-cp-ep-dp-pp,cp_algo=ring,dp=16': dp(16) = 16 is incompatible with GPUs(8)")
    assert sixteen["plan"].startswith("tp=1,pp=1,dp=16,") and report["chosen"] == 1


def test_deadline_is_a_duration_in_days_hours_or_weeks():
    from autopar.cli.plan import parse_days

    assert [parse_days(v) for v in ("60d", "1440h", "8w", "60", " 1440H ")] == [60.0, 60.0, 56.0, 60.0, 60.0]


@pytest.mark.parametrize("text, money, expected", [
    ("15T", False, 1.5e13),      # decimal: --tokens help, 15T = 1.5e13
    ("2.87T", False, 2.87e12),   # fractions, as --ramp's UNTIL_TOKENS (4M@2.87T)
    ("1P", False, 1e15),         # P, which plan's own parser read
    ("1.6e6", False, 1.6e6),     # --gradient-noise TRACE
    ("$2.5M", True, 2.5e6),      # --budget help: 5M, $2.5M
    ("$1.2B", True, 1.2e9),      # B is billion: autopar.report.dollars writes $1.2B
])
def test_amounts_plan_reads(text, money, expected):
    from autopar.cli.plan import parse_amount

    assert parse_amount(text, "f", money=money) == expected


def test_a_budget_reads_back_as_dollars_writes_it():
    from autopar.cli.plan import parse_amount
    from autopar.report import dollars

    assert dollars(5e6) == "$5M" and parse_amount(dollars(5e6), "budget", money=True) == 5e6


def test_plan_picks_the_layout_search_picks():
    """plan is the search per point, its per-stage step included (search's defaults): LLaMA-3 8B
    on 8 H100 at 256 x 4,096 tokens. The balanced ranking's best is tp=1,pp=1,dp=8,...,zero=2 at
    10.5996 s, which plan reported; search's per-stage step finds pp=2,vpp=16 with 17/15 layers
    at 10.5967 s."""
    r = CliRunner().invoke(main, ["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "4096",
                                  "--global-batch", "256", "--top", "5", "--json"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.stdout)["plans"][0]["estimate"]
    point = run_json(["--model", "llama3-8b", "--cluster", "dgx-h100", "--tokens", "1T", "--seq-len", "4096", "--gpus", "8",
                      "--batch-tokens", "1M", "--full-space"])["points"][0]
    assert "pp=2" in best["plan"] and "layout=" in best["plan"]
    assert (point["plan"], point["step_seconds"]) == (best["plan"], best["step_seconds"])
    assert point["step_seconds"] == pytest.approx(10.5967, abs=5e-5)


def test_no_per_stage_plans_the_balanced_ranking_as_search_does():
    """--no-per-stage turns the per-stage step off in plan as in search: the same LLaMA-3 8B point
    on 8 H100 at 256 x 4,096 tokens then takes the balanced ranking's best, tp=1,pp=1,dp=8 at
    10.5996 s (search --no-per-stage's first plan), not the per-stage pp=2,vpp=16 layout at 10.5967 s."""
    r = CliRunner().invoke(main, ["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "4096",
                                  "--global-batch", "256", "--top", "5", "--no-per-stage", "--json"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.stdout)["plans"][0]["estimate"]
    point = run_json(["--model", "llama3-8b", "--cluster", "dgx-h100", "--tokens", "1T", "--seq-len", "4096", "--gpus", "8",
                      "--batch-tokens", "1M", "--full-space", "--no-per-stage"])["points"][0]
    assert (point["plan"], point["step_seconds"]) == (best["plan"], best["step_seconds"])
    assert point["plan"].startswith("tp=1,pp=1,dp=8,") and "layout=" not in point["plan"]
    assert point["step_seconds"] == pytest.approx(10.5996, abs=5e-5)


def test_plan_reports_the_memory_search_reports():
    """Each point carries its plan's peak HBM per GPU and the capacity it was held to, as search's
    estimate does (the same plan: same bytes), and the table prints it: LLaMA-3 8B on 8 H100 at
    256 x 4,096 tokens, with 10% of the H100's 85.52 GB held back (76.97 GB usable)."""
    args = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "4096", "--memory-headroom", "10%"]
    r = CliRunner().invoke(main, ["search", *args, "--global-batch", "256", "--top", "1", "--json"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.stdout)["plans"][0]["estimate"]
    plan_args = [*args, "--tokens", "1T", "--batch-tokens", "1M", "--full-space"]
    point = run_json(plan_args)["points"][0]
    assert point["plan"] == best["plan"]
    assert point["memory_bytes_per_gpu"] == best["memory_bytes_per_gpu"] <= point["memory_capacity_bytes"]
    assert point["memory_capacity_bytes"] / 1e9 == pytest.approx(85.52353628 * 0.9, abs=1e-6)
    text = run(plan_args)
    assert text.exit_code == 0, text.output
    row = next(line for line in text.output.splitlines() if line.startswith(">"))
    assert f" {point['memory_bytes_per_gpu'] / 1e9:.1f}  tp=" in row
    assert "mem GB = peak HBM per GPU (fullest stage) of 77.0 GB the plan may fill" in text.output
