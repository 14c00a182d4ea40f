"""autopar sweep: records, resume after a kill, a torn line or a dead worker, summaries, plots, baseline check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autopar.cli import main
from autopar.cli.sweep import WORKER_DIED
from autopar.plots import PLOT_FILES
from autopar.specs import load_cluster
from solvers.sweep import CASES_FILE, cases, load_sweep

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(name="small", models=["gpt2-xl", "llama3-8b"], clusters=["dgx-h100"], gpus=[8, 16], seq_lens=[2048],
             global_batches=[64, 128], top_k=3)
SUMMARIES = ("summary.csv", "summary.md", "summary.json")


def _sweep_file(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**SMALL, **changes}))
    return path


def _run(*args: str):
    return CliRunner().invoke(main, ["sweep", *args, "--quiet"], catch_exceptions=False)


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("full")
    res = _run(str(_sweep_file(tmp)), "--out", str(tmp / "out"))
    assert res.exit_code == 0, res.output
    return tmp / "out"


def test_every_case_is_one_line_and_summaries_exist(full):
    lines = (full / CASES_FILE).read_text().splitlines()
    assert len(lines) == 8
    records = [json.loads(line) for line in lines]
    assert {r["status"] for r in records} == {"ok"}
    for name in SUMMARIES:
        assert (full / name).stat().st_size > 0
    md = (full / "summary.md").read_text()
    assert md.count("\n| gpt2-xl |") == 4 and "tokens/s/GPU" in md


def test_plots_exist_and_are_png(full):
    pngs = sorted((full / "plots").glob("*.png"))
    assert [p.name for p in pngs] == sorted(PLOT_FILES)
    for p in pngs:
        assert p.stat().st_size > 5_000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_after_torn_line_gives_same_summary(full, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    lines = (full / CASES_FILE).read_text().splitlines(keepends=True)
    (out / CASES_FILE).write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # died mid-write
    res = _run(str(_sweep_file(tmp_path)), "--out", str(out), "--resume")
    assert res.exit_code == 0, res.output
    assert len((out / CASES_FILE).read_text().splitlines()) == 8
    for name in SUMMARIES:
        assert (out / name).read_text() == (full / name).read_text(), name


def test_resume_after_kill_gives_same_summary(tmp_path):
    """A real sweep process with 2 workers, SIGKILLed after its first finished cases."""
    spec = _sweep_file(tmp_path, models=["gpt2-xl", "llama3-8b", "llama3-70b"], gpus=[8, 16, 32])
    out, whole = tmp_path / "killed", tmp_path / "whole"
    cmd = [sys.executable, "-c", "from autopar.cli import main; main()", "sweep", str(spec), "--workers", "2", "--quiet", "--out"]
    proc = subprocess.Popen([*cmd, str(out)], cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        path = out / CASES_FILE
        if path.exists() and len(path.read_text().splitlines()) >= 2:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    got = len((out / CASES_FILE).read_text().splitlines())
    assert 2 <= got < len(cases(load_sweep(spec))), "the kill must land mid-sweep"
    assert not (out / "summary.csv").exists()
    subprocess.run([*cmd, str(out), "--resume"], cwd=ROOT, check=True)
    subprocess.run([*cmd, str(whole)], cwd=ROOT, check=True)
    for name in SUMMARIES:
        assert (out / name).read_text() == (whole / name).read_text(), name


def test_baseline_passes_unchanged(full, tmp_path):
    res = _run(str(_sweep_file(tmp_path)), "--out", str(tmp_path / "again"), "--baseline", str(full / "summary.json"), "--no-plots")
    assert res.exit_code == 0, res.output
    assert "no differences (8 cases)" in res.output


def test_baseline_fails_on_changed_coefficient(full, tmp_path):
    override = tmp_path / "override.yaml"
    override.write_text("memory.hbm_efficiency: 0.45\n")  # defaults.yaml: 0.90
    res = _run(str(_sweep_file(tmp_path)), "--out", str(tmp_path / "changed"), "--baseline", str(full / "summary.json"),
               "--cost-override", str(override), "--no-plots")
    assert res.exit_code == 1
    assert "difference(s)" in res.output
    assert "best tokens/s per GPU" in res.output and "gpt2-xl/dgx-h100/8gpu/s2048/b64" in res.output


@pytest.mark.parametrize("changes, args, message", [
    ({"gpus": [0]}, [], "sweep.gpus="),
    ({"models": []}, [], "sweep.models="),
    ({"colour": "red"}, [], "sweep.colour="),
    ({"stack": "jax"}, [], "sweep.stack="),
    ({}, ["--workers", "0"], "workers=0: must be a positive integer"),
])
def test_bad_input_is_one_line(tmp_path, changes, args, message):
    res = CliRunner().invoke(main, ["sweep", str(_sweep_file(tmp_path, **changes)), "--out", str(tmp_path / "o"), "--quiet", *args])
    assert res.exit_code == 1
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_unknown_override_and_existing_out(full, tmp_path):
    override = tmp_path / "o.yaml"
    override.write_text("comm.no_such_thing: 1\n")
    res = CliRunner().invoke(main, ["sweep", str(_sweep_file(tmp_path)), "--out", str(tmp_path / "x"), "--cost-override", str(override)])
    assert res.exit_code == 1 and "cost-override.comm.no_such_thing=1: unknown coefficient" in res.output
    res = CliRunner().invoke(main, ["sweep", str(_sweep_file(tmp_path)), "--out", str(full), "--quiet"])
    assert res.exit_code == 1 and "pass --resume" in res.output


@pytest.mark.parametrize("override, line", [
    # the value was left out ("cost-override='comm.network_efficiency': Input should be ...")
    ("comm.network_efficiency: 5\n", "Error: cost-override.comm.network_efficiency=5: Input should be less than or equal to 1"),
    ("comm.network_efficiency: abc\n",
     "Error: cost-override.comm.network_efficiency='abc': Input should be a valid number, unable to parse string as a number"),
])
def test_cost_override_errors_name_the_value(tmp_path, override, line):
    path = tmp_path / "o.yaml"
    path.write_text(override)
    res = CliRunner().invoke(main, ["sweep", str(_sweep_file(tmp_path)), "--out", str(tmp_path / "x"), "--quiet", "--cost-override", str(path)])
    assert res.exit_code == 1 and res.output == line + "\n", res.output


def test_ci_sweep_file_matches_its_baseline_cases():
    spec = load_sweep(ROOT / "profiles/sweeps/ci.yaml")
    baseline = json.loads((ROOT / "results/ci/baseline.json").read_text())
    assert [c["case"] for c in cases(spec)] == [r["case"] for r in baseline["cases"]]


def _children(pid: int) -> list[int]:
    """Live child processes of pid (Linux /proc)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum, code, to_group, early", [(signal.SIGTERM, 143, False, False), (signal.SIGINT, 130, True, False),
                                                           (signal.SIGINT, 130, True, True)])
def test_signal_stops_sweep_and_workers_within_seconds(tmp_path, signum, code, to_group, early):
    """issue 12: Ctrl-C (SIGINT to the terminal's process group) or SIGTERM to the parent stops
    a 2-worker sweep within a few seconds, workers included; finished cases stay; --resume
    completes the sweep; stderr is one Error line (no worker traceback). `early`: the Ctrl-C
    lands while the spawned workers are still importing numpy/OR-Tools, before any pool
    initializer ran (CI once printed a worker's KeyboardInterrupt traceback from that window)."""
    spec = _sweep_file(tmp_path, models=["llama3-70b", "llama3-8b"], gpus=[16, 32], global_batches=[64])
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", "from autopar.cli import main; main()", "sweep", str(spec), "--workers", "2", "--quiet", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 90
    if early:  # three children: the resource tracker and two workers, the second possibly still between fork
               # and exec -- both windows solvers/workers.py holds the signal across
        while time.time() < deadline and len(_children(proc.pid)) < 3:
            time.sleep(0.005)
    while not early and time.time() < deadline and not ((out / CASES_FILE).exists() and (out / CASES_FILE).read_text().count("\n") >= 1):
        time.sleep(0.02)
    workers = _children(proc.pid)
    assert len(workers) >= 2, "the workers must be running"
    sent = time.time()
    os.killpg(proc.pid, signum) if to_group else proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=30)
    stopped = time.time() - sent
    assert proc.returncode == code and stopped < 5, (proc.returncode, stopped, stderr)
    assert stderr.strip().splitlines() == [f"Error: signal='{signal.Signals(signum).name}': stopped; finished results were kept"], stderr
    deadline = time.time() + 5
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers), "a worker outlived the sweep"
    finished = (out / CASES_FILE).read_text().count("\n") if (out / CASES_FILE).exists() else 0
    assert (0 if early else 1) <= finished < 4
    res = _run(str(spec), "--out", str(out), "--resume", "--no-plots")
    assert res.exit_code == 0 and (out / CASES_FILE).read_text().count("\n") == 4


def test_a_dead_worker_loses_its_cases_not_the_sweep(full, tmp_path, monkeypatch):
    """issue: a worker the OOM killer ends breaks the process pool, and BrokenProcessPool ended
    the sweep as an internal error with no summary. The finished cases stay in cases.jsonl, the
    lost ones show as failed in the summaries, the error line counts them, and --resume runs
    them: the result is the uninterrupted sweep's."""
    import dying_worker

    spec, out = _sweep_file(tmp_path), tmp_path / "out"
    order = [c["case"] for c in cases(load_sweep(spec))]
    monkeypatch.setattr("solvers.sweep.run_case", dying_worker.run_case)  # the workers import it by name
    monkeypatch.setenv(dying_worker.DIE_CASE, order[3])
    monkeypatch.setenv(dying_worker.DIE_AFTER, f"{out / CASES_FILE}:2")  # after two cases finished
    res = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(out), "--workers", "2", "--quiet", "--threshold", "0.05"])
    assert res.exit_code == 1
    kept = [json.loads(line) for line in (out / CASES_FILE).read_text().splitlines()]
    rows = json.loads((out / "summary.json").read_text())["cases"]
    lost = [r["case"] for r in rows if r["status"] == "error"]
    assert len(kept) >= 2 and {r["status"] for r in kept} == {"ok"}
    assert order[3] in lost and sorted([*lost, *(r["case"] for r in kept)]) == sorted(order)  # each case kept or lost
    assert [r["best_plan"] for r in rows if r["status"] == "error"] == [WORKER_DIED] * len(lost)
    assert res.stderr.strip().splitlines()[-1] == (
        f"Error: sweep='small': {len(lost)} of 8 cases lost: a worker process died (killed or out of memory); "
        f"`autopar sweep {spec} --out {out} --threshold 0.05 --resume` runs them (with fewer --workers if memory ran out); "
        f"all in {out / 'summary.md'}")  # the hint repeats the run's own --cost-override / --baseline / --threshold
    assert "Traceback" not in res.output and "internal=" not in res.output
    assert f"\n| gpt2-xl | dgx-h100 | 16 | 2048 | 128 | - | - | - | - | error | {WORKER_DIED} |" in (out / "summary.md").read_text()  # order[3]
    assert sorted(p.name for p in (out / "plots").glob("*.png")) == sorted(PLOT_FILES)

    monkeypatch.undo()
    res = _run(str(spec), "--out", str(out), "--resume", "--workers", "2", "--no-plots")
    assert res.exit_code == 0, res.output
    for name in SUMMARIES:
        assert (out / name).read_text() == (full / name).read_text(), name


def test_resume_refuses_a_different_sweep(full, tmp_path):
    res = _run(str(_sweep_file(tmp_path, gpus=[8])), "--out", str(full), "--resume")
    assert res.exit_code == 1
    assert res.output.startswith(f"Error: resume='{full}': the folder holds a different sweep (differs in gpus")


def test_resume_refuses_other_cost_overrides_and_allows_another_threshold(full, tmp_path):
    # the folder's finished cases ran without overrides: resuming with one would put two cost
    # models' cases in one summary; the threshold only changes the baseline check
    override = tmp_path / "override.yaml"
    override.write_text("memory.hbm_efficiency: 0.45\n")
    res = _run(str(_sweep_file(tmp_path)), "--out", str(full), "--resume", "--cost-override", str(override), "--no-plots")
    assert res.exit_code == 1
    assert res.output.startswith(f"Error: resume='{full}': the folder holds a different sweep (differs in --cost-override;")
    res = _run(str(_sweep_file(tmp_path, threshold=0.2)), "--out", str(full), "--resume", "--no-plots")
    assert res.exit_code == 0, res.output


def test_a_folder_without_finished_cases_takes_a_new_sweep(tmp_path):
    # a sweep stopped before its first case leaves only sweep.json: a new sweep may use the folder
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"name": "other", "gpus": [64]}))
    res = _run(str(_sweep_file(tmp_path, models=["gpt2-xl"], gpus=[8], global_batches=[64])), "--out", str(out), "--no-plots")
    assert res.exit_code == 0, res.output
    assert json.loads((out / "sweep.json").read_text())["gpus"] == [8]


def test_failed_case_exits_1_after_writing_the_summary(tmp_path):
    # objective=cost needs the cluster's GPU-hour price; dgx-a100-40gb has none, so its case fails
    out = tmp_path / "out"
    spec = _sweep_file(tmp_path, clusters=["dgx-h100", "dgx-a100-40gb"], models=["gpt2-xl"], gpus=[8], global_batches=[64], objective="cost")
    res = CliRunner().invoke(main, ["sweep", str(spec), "--out", str(out), "--quiet", "--no-plots"])
    assert res.exit_code == 1
    assert res.stderr.strip().splitlines()[-1].startswith(
        "Error: sweep='small': 1 of 2 cases failed (first: gpt2-xl/dgx-a100-40gb/8gpu/s2048/b64: objective='cost': cluster dgx-a100-40gb has no price")
    rows = json.loads((out / "summary.json").read_text())["cases"]
    assert [r["status"] for r in rows] == ["ok", "error"]


@pytest.mark.parametrize("changes, message", [
    ({"models": ["gpt2-xl", "no-such-model"]}, "model='no-such-model': unknown model preset"),
    ({"solver": "gurobi"}, "sweep.solver='gurobi': Input should be 'auto', 'exhaustive' or 'cpsat'"),
    ({"precision": "fp3"}, "sweep.precision='fp3': Input should be 'bf16', 'fp16', 'fp8' or 'fp4'"),
    ({"gpus": [32768], "clusters": ["dgx-h100"]}, "gpus=32768: cluster dgx-h100 describes a fabric of 16,384 GPUs"),
    ({"seq_lens": [True]}, "sweep.seq_lens="),
    # a repeated entry ran its cases twice under one case id; an unknown pinned dimension failed every case
    ({"models": ["gpt2-xl", "gpt2-xl"]}, "sweep.models=['gpt2-xl', 'gpt2-xl']: gpt2-xl listed more than once"),
    # the key and its value, not the file's path
    ({"fixed": {"tpp": 2}}, "sweep.fixed.tpp=2: unknown dimension; can fix: tp, pp, dp,"),
    ({"fixed": {"tp": "x"}}, "sweep.fixed.tp='x': Input should be a valid integer"),
    ({"fixed": {"sp": "maybe"}}, "sweep.fixed.sp='maybe': must be on or off"),
    # fixed values no case can take (autopar.space's rules, as search --fix reads them): every case
    # was recorded as no_plan and the sweep exited 0
    ({"fixed": {"vpp": 2, "pp": 1}}, "sweep.fixed.vpp=2: virtual pipeline stages need pipeline parallelism: pp > 1, not pp=1\n"),
    ({"fixed": {"vpp": 2, "schedule": "1f1b"}}, "sweep.fixed.vpp=2: virtual pipeline stages need the interleaved schedule, not 1f1b\n"),
    ({"fixed": {"tp": 1, "sp": "on"}}, "sweep.fixed.sp=on: needs tp > 1 (Megatron turns it off at tp=1)\n"),
    # a rule about the model that both of SMALL's dense models break
    ({"fixed": {"ep": 8}}, "sweep.fixed.ep=8: expert parallelism needs a MoE model (gpt2-xl has no experts); "
                           "no model of the sweep can take it (gpt2-xl, llama3-8b)\n"),
    # degrees no GPU count of the sweep can have: every case was recorded as an error, after running
    ({"gpus": [8], "fixed": {"tp": 16}}, "sweep.fixed.tp=16: tp(16) = 16 is incompatible with GPUs(8)\n"),
    ({"fixed": {"tp": 8, "pp": 4}}, "sweep.fixed='tp=8,pp=4': tp(8) * pp(4) = 32 is incompatible with GPUs(8); "
                                    "no GPU count of the sweep can take it (8, 16)\n"),
])
def test_sweep_file_errors_fail_before_any_case(tmp_path, changes, message):
    res = CliRunner().invoke(main, ["sweep", str(_sweep_file(tmp_path, **changes)), "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 1 and res.output.startswith(f"Error: {message}"), res.output
    assert not (tmp_path / "o").exists()


def test_a_fixed_value_one_case_cannot_take_is_that_case_without_a_plan(tmp_path):
    # ep=8 on a dense model is refused by its rule (autopar.space.check_fixed) -- for one case of a
    # sweep that is a case without a plan, as before the rule existed, not a failed sweep; a value
    # the YAML gives as text ('2') is read as search --fix reads it, not compared as a string
    spec = _sweep_file(tmp_path, models=["llama3-8b", "mixtral-8x7b"], gpus=[8], global_batches=[64], seq_lens=[4096],
                       fixed={"ep": 8, "vpp": "1"})
    res = _run(str(spec), "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in (tmp_path / "out" / CASES_FILE).read_text().splitlines()]
    dense = next(r for r in records if r["model"] == "llama3-8b")
    assert dense["status"] == "no_plan" and "fix.ep=8: expert parallelism needs a MoE model" in dense["message"]
    assert load_sweep(spec).fixed == {"ep": 8, "vpp": 1}


def test_fixed_degrees_one_gpu_count_cannot_take_leave_that_case_without_a_plan(tmp_path):
    # dp=16 on 8 GPUs was recorded as an error (an internal InputError of the search) and the sweep exited 1
    spec = _sweep_file(tmp_path, models=["gpt2-xl"], gpus=[8, 16], global_batches=[64], fixed={"dp": 16})
    res = _run(str(spec), "--out", str(tmp_path / "out"), "--no-plots")
    assert res.exit_code == 0, res.output
    eight, sixteen = [json.loads(line) for line in (tmp_path / "out" / CASES_FILE).read_text().splitlines()]
    assert (eight["status"], eight["message"]) == ("no_plan", "fix='dp=16': dp(16) = 16 is incompatible with GPUs(8)")
    assert sixteen["status"] == "ok"


def test_an_impossible_fixed_plan_is_refused_on_resume_too(full, tmp_path):
    # the check runs when the file is loaded, before the --out folder is read or written
    out = tmp_path / "out"
    out.mkdir()
    (out / CASES_FILE).write_text((full / CASES_FILE).read_text())
    res = CliRunner().invoke(main, ["sweep", str(_sweep_file(tmp_path, fixed={"vpp": 2, "pp": 1})), "--out", str(out), "--resume", "--quiet"])
    assert res.exit_code == 1
    assert res.stderr == "Error: sweep.fixed.vpp=2: virtual pipeline stages need pipeline parallelism: pp > 1, not pp=1\n"
    assert (out / CASES_FILE).read_text() == (full / CASES_FILE).read_text() and not (out / "sweep.json").exists()


def test_a_case_no_plan_fits_is_still_no_plan(tmp_path):
    # tp=8,pp=1 is a legal pin; GPT-3 175B on 8 H100 needs 416.2 GB per GPU at its smallest
    # (the search's own message), so the case has no plan and the sweep exits 0
    spec = _sweep_file(tmp_path, models=["gpt3-175b"], gpus=[8], seq_lens=[2048], global_batches=[64], fixed={"tp": 8, "pp": 1})
    res = _run(str(spec), "--out", str(tmp_path / "out"), "--no-plots")
    assert res.exit_code == 0, res.output
    [record] = [json.loads(line) for line in (tmp_path / "out" / CASES_FILE).read_text().splitlines()]
    assert record["status"] == "no_plan" and record["message"].startswith("no plan fits: smallest memory need is 416.2 GB per GPU")


def test_a_case_s_best_plan_is_search_s(tmp_path):
    """A sweep is a grid of searches, the per-stage step included (search's defaults): LLaMA-3 8B
    on 8 H100 at 256 x 4,096 tokens. Without it the sweep picked tp=1,pp=1,dp=8,...,zero=2 at
    10.5996 s; search picks pp=2,vpp=16 with 17/15 layers at 10.5967 s. per_stage: false is the
    balanced ranking alone."""
    r = CliRunner().invoke(main, ["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "4096",
                                  "--global-batch", "256", "--top", "5", "--json"])
    assert r.exit_code == 0, r.output
    best = json.loads(r.stdout)["plans"][0]["estimate"]
    one = dict(models=["llama3-8b"], gpus=[8], seq_lens=[4096], global_batches=[256], top_k=5)

    def record(out: Path, **changes) -> dict:
        res = _run(str(_sweep_file(tmp_path, **one, **changes)), "--out", str(out), "--no-plots")
        assert res.exit_code == 0, res.output
        [line] = (out / CASES_FILE).read_text().splitlines()
        return json.loads(line)

    on = record(tmp_path / "default")
    assert "pp=2" in best["plan"] and "layout=" in best["plan"]
    assert (on["best_plan"], on["step_seconds"]) == (best["plan"], best["step_seconds"])
    assert on["step_seconds"] == pytest.approx(10.5967, abs=5e-5)
    off = record(tmp_path / "off", per_stage=False)
    assert off["best_plan"].startswith("tp=1,pp=1,dp=8,") and off["step_seconds"] == pytest.approx(10.5996, abs=5e-5)


def test_a_folder_from_before_per_stage_resumes_with_per_stage_false(full, tmp_path):
    # its sweep.json has no per_stage: its cases ran without the per-stage step, so the default
    # (per_stage: true) would mix two rankings in one summary and is refused, naming the way out
    out = tmp_path / "out"
    out.mkdir()
    (out / CASES_FILE).write_text("".join((full / CASES_FILE).read_text().splitlines(keepends=True)[:3]))
    recorded = json.loads((full / "sweep.json").read_text())
    (out / "sweep.json").write_text(json.dumps({k: v for k, v in recorded.items() if k != "per_stage"}))
    res = _run(str(_sweep_file(tmp_path)), "--out", str(out), "--resume", "--no-plots")
    assert res.exit_code == 1
    assert "differs in per_stage; see sweep.json); its cases ran without the per-stage step: per_stage: false resumes it" in res.output
    res = _run(str(_sweep_file(tmp_path, per_stage=False)), "--out", str(out), "--resume", "--no-plots")
    assert res.exit_code == 0, res.output
    assert len((out / CASES_FILE).read_text().splitlines()) == 8


def test_memory_headroom_holds_every_case_and_a_changed_one_is_refused_on_resume(tmp_path):
    # llama3-8b on 8 H100 at seq 2048, batch 64: without a headroom the best plan (dp=8, ZeRO-2,
    # mbs=4) fills 81.7 GB of 85.5 GB in 1.279 s; 60 GB held back (25.5 GB usable) leaves only
    # tp=4 pp=2 with full recompute on a stage, 25.5 GB in 1.677 s, and every top plan under the limit
    base = dict(name="hr", models=["llama3-8b"], clusters=["dgx-h100"], gpus=[8], seq_lens=[2048], global_batches=[64], top_k=3)
    free, held = tmp_path / "free.yaml", tmp_path / "held.yaml"
    free.write_text(yaml.safe_dump(base))
    held.write_text(yaml.safe_dump({**base, "memory_headroom": "60GB"}))
    assert _run(str(free), "--out", str(tmp_path / "a"), "--no-plots").exit_code == 0
    res = _run(str(held), "--out", str(tmp_path / "b"), "--no-plots")
    assert res.exit_code == 0, res.output
    (a,), (b,) = ([json.loads(line) for line in (tmp_path / d / CASES_FILE).read_text().splitlines()] for d in "ab")
    assert a["status"] == b["status"] == "ok"
    usable = load_cluster("dgx-h100").gpu.hbm_bytes / 1e9 - 60
    assert a["memory_gb"] > usable >= b["memory_gb"]
    assert all(p["memory_gb"] <= usable for p in b["top"])
    assert a["memory_gb"] == pytest.approx(81.71, abs=0.01) and a["step_seconds"] == pytest.approx(1.2793, abs=1e-3)
    assert b["memory_gb"] == pytest.approx(25.48, abs=0.01) and b["step_seconds"] == pytest.approx(1.6767, abs=1e-3)
    assert b["best_plan"] != a["best_plan"]
    assert b["hbm_gb"] == a["hbm_gb"]  # the GPU's HBM, not the usable part
    res = _run(str(free), "--out", str(tmp_path / "b"), "--resume", "--no-plots")
    assert res.exit_code == 1
    assert res.output.startswith(f"Error: resume='{tmp_path / 'b'}': the folder holds a different sweep (differs in memory_headroom;")


def test_a_bad_sweep_memory_headroom_is_one_line(tmp_path):
    res = _run(str(_sweep_file(tmp_path, memory_headroom="110%")), "--out", str(tmp_path / "out"))
    assert res.exit_code == 1
    assert res.output.startswith("Error: sweep.memory_headroom='110%': must be a size from 0 to below the H100's HBM")
    assert res.output.count("\n") == 1
