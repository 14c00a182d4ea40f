"""`autopar emit` on a results file built in code (the search command is not needed), and the
--model/--cluster/--plan form of a hand-written plan. Errors are one line and exit 1."""

from __future__ import annotations

import subprocess

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.cost import estimate
from autopar.emit.common import canonical_plan
from autopar.emit.megatron_parse import parse_megatron_script
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.results import Inputs, RankedPlan, Results, SearchInfo

README = ["--model", "llama3-70b", "--cluster", "dgx-h100-superpod", "--gpus", "1024", "--seq-len", "8192",
          "--global-batch-tokens", "16M"]


@pytest.fixture(scope="module")
def results_file(tmp_path_factory):
    model = load_model("llama3-70b")
    cluster = load_cluster("dgx-h100-superpod").with_gpus(1024)
    training = TrainingSpec(seq_len=8192, global_batch_size=2048)
    plans = [parse_plan("tp=8,pp=4,vpp=5,recompute=selective"), parse_plan("tp=8,pp=8,recompute=selective")]
    results = Results(
        autopar_version="0.1.0", inputs=Inputs(model=model, cluster=cluster, training=training),
        plans=[RankedPlan(plan=p, estimate=estimate(model, cluster, training, p)) for p in plans],
        search=SearchInfo(solver="given", seconds=0.0, num_feasible=2, num_evaluated=2, proved_optimal=False),
    )
    path = tmp_path_factory.mktemp("results") / "llama3-70b.json"
    path.write_text(results.model_dump_json(indent=2))
    return path


def test_emit_megatron_from_results(results_file, tmp_path):
    result = CliRunner().invoke(main, ["emit", str(results_file), "--format", "megatron", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    script = tmp_path / "launch_megatron.sh"
    assert result.output.strip() == str(script)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    plan, training = parse_megatron_script(script.read_text())
    model = load_model("llama3-70b")
    assert canonical_plan(plan, model, 1024) == canonical_plan(parse_plan("tp=8,pp=4,vpp=5,recompute=selective"), model, 1024)
    assert training.global_batch_size == 2048


def test_rank_selects_the_plan(results_file):
    result = CliRunner().invoke(main, ["emit", str(results_file), "--rank", "2", "--format", "megatron-bridge"])
    assert result.exit_code == 0, result.output
    assert "==> pretrain_megatron_bridge.py <==" in result.output
    assert "'model.pipeline_model_parallel_size': 8" in result.output and "plan rank 2" in result.output


@pytest.mark.parametrize("args, message", [
    (["--rank", "3", "--format", "megatron"], "rank=3: must be in 1..2"),
    (["--format", "deepspeed"], "deepspeed refuses it: [tp == 1 without Megatron-DeepSpeed]"),
])
def test_errors_are_one_line_exit_1(results_file, args, message):
    result = CliRunner().invoke(main, ["emit", str(results_file), *args])
    assert result.exit_code == 1
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_missing_results_file_is_one_line():
    result = CliRunner().invoke(main, ["emit", "/nonexistent/results.json", "--format", "megatron"])
    assert result.exit_code == 1 and "cannot read file" in result.output


def test_hand_written_plan_options(tmp_path):
    args = ["emit", *README, "--plan", "tp=8,pp=4,vpp=5,recompute=selective", "--format", "torchtitan", "--out", str(tmp_path),
            "--grad-reduce-bytes", "4"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["autopar_torchtitan.py", "launch_torchtitan.sh"]


def test_neither_results_nor_plan_is_an_error():
    # review: the error named --model/--cluster/--plan, which --help did not show
    result = CliRunner().invoke(main, ["emit", "--format", "megatron"])
    assert result.exit_code == 1
    assert result.output == ("Error: results=(missing): give a RESULTS.json file (from `autopar search --out`), or a hand-written "
                             "plan with --model, --cluster and --plan (see `autopar emit --help`)\n")
    result = CliRunner().invoke(main, ["emit", "--format", "megatron", "--model", "llama3-8b", "--cluster", "dgx-h100"])
    assert result.exit_code == 1
    assert result.output == ("Error: plan=(missing): a hand-written plan needs --model, --cluster and --plan (missing --plan); "
                             "or give a RESULTS.json file\n")


def test_help_shows_the_hand_written_plan_options():
    text = CliRunner().invoke(main, ["emit", "--help"], terminal_width=200).output
    for option in ("--model", "--cluster", "--gpus", "--seq-len", "--global-batch", "--global-batch-tokens", "--precision", "--plan"):
        assert f"  {option} " in text, option
    assert "Instead of RESULTS: the plan to launch" in text


def test_emit_results_helper_for_search(results_file, tmp_path):
    from autopar.emit import emit_results
    from autopar.specs.results import load_results

    paths = emit_results(load_results(results_file), "megatron", tmp_path, rank=2)
    assert [p.name for p in paths] == ["launch_megatron.sh"]
    assert "--pipeline-model-parallel-size 8" in paths[0].read_text()
