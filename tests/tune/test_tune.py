"""autopar tune end to end: a real subprocess trial command (tests/tune/fake_trial.py) with
ok, failed and out-of-memory trials; two worker processes sharing one SQLite study; the same
against PostgreSQL when AUTOPAR_TEST_POSTGRES_URL names a server (.ci/run starts one)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from autopar.cli import main
from solvers.tune import parse_trial_output

ROOT = Path(__file__).resolve().parents[2]
TRIAL = f"{sys.executable} {Path(__file__).parent / 'fake_trial.py'} {{plan_file}}"
CASE = ["--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "24", "--seq-len", "8192", "--global-batch", "64"]
CLI = [sys.executable, "-c", "from autopar.cli import main; main()"]


@pytest.mark.parametrize("output, code, status, seconds", [
    ("warmup\nautopar-step-seconds: 1.5\n", 0, "ok", 1.5),
    ("autopar-step-seconds: 9\nautopar-step-seconds: 2.25e0\n", 0, "ok", 2.25),
    ("RuntimeError: CUDA out of memory. Tried to allocate", 1, "oom", None),
    ("autopar-oom\n", 0, "oom", None),
    ("autopar-step-seconds: 1.5\n", 2, "failed", None),
    ("done\n", 0, "failed", None),
    ("autopar-step-seconds: -1\n", 0, "failed", None),
])
def test_trial_output_protocol(output, code, status, seconds):
    outcome = parse_trial_output(output, code)
    assert (outcome.status, outcome.measured_seconds) == (status, seconds)


def _fake_status(plan: str) -> str:
    """The outcome tests/tune/fake_trial.py gives a plan: zero=3 fails, pp >= 12 or mbs >= 4
    run out of memory, the rest run."""
    fields = dict(kv.split("=", 1) for kv in plan.split(","))
    if fields["zero"] == "3":
        return "failed"
    return "oom" if int(fields["pp"]) >= 12 or int(fields["mbs"]) >= 4 else "ok"


def _rows(out: Path) -> list[dict]:
    (table,) = out.glob("tune-*.csv")
    return list(csv.DictReader(table.open()))


def test_single_worker_end_to_end(tmp_path):
    out = tmp_path / "tune"
    # --emit megatron starts from the best plans Megatron-LM runs (no zero-bubble); the 10th is pp=12
    args = ["tune", *CASE, "--trial-cmd", TRIAL, "--trials", "15", "--emit", "megatron", "--top", "10"]
    res = CliRunner().invoke(main, [*args, "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rows = _rows(out)
    assert len(rows) == 15
    statuses = [r["status"] for r in rows]
    # the ten enqueued predictions, in rank order, each with the status fake_trial.py gives its plan
    assert statuses[:10] == [_fake_status(r["plan"]) for r in rows[:10]]
    assert "ok" in statuses[:10] and {"failed", "oom"} <= set(statuses[:10])
    assert [r["source"] for r in rows[:11]] == ["prediction"] * 10 + ["sampler"]
    assert all(r["state"] == ("FAIL" if r["status"] == "failed" else "COMPLETE") for r in rows[:10])
    assert all("schedule=zero-bubble" not in r["plan"] for r in rows[:10])
    for r in rows:
        if r["status"] == "ok":
            assert float(r["measured_over_predicted"]) == pytest.approx(1.07, abs=0.05)
    trial0 = out / "trials" / "llama3-70b-24gpu-s8192-b64" / "0000"
    assert json.loads((trial0 / "plan.json").read_text())["plans"][0]["estimate"]["stage_layers"] == [26, 28, 26]
    assert "autopar-step-seconds" in (trial0 / "log.txt").read_text()
    assert any((trial0 / "launch").iterdir())
    assert "best measured:" in res.output and "predicted" in res.output
    assert (out / "tune.db").exists()

    again = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "again")], catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert [r["plan"] for r in _rows(tmp_path / "again")] == [r["plan"] for r in rows]  # seeded: same trials


def test_queued_predictions_are_counted_not_shown_as_blank_rows(tmp_path):
    # --top 5 enqueues five predictions; two trials run them. The other three stayed WAITING and
    # printed as rows with status 'waiting', no plan and no times (in the table and the CSV)
    res = CliRunner().invoke(main, ["tune", *CASE, "--trial-cmd", TRIAL, "--trials", "2", "--top", "5", "--out", str(tmp_path)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert ("study llama3-70b-24gpu-s8192-b64 (2 trials, all workers; 3 queued predictions not run yet: more --trials or another "
            "worker runs them)") in res.stdout
    assert "waiting" not in res.stdout
    rows = _rows(tmp_path)
    assert [r["number"] for r in rows] == ["0", "1"] and all(r["plan"] for r in rows)


def test_a_trial_another_worker_is_running_is_not_read_as_measured():
    # CI (PostgreSQL, two workers) once ended in TypeError: the other worker's trial had its status
    # 'ok' written but not yet its measured seconds, and best_measured compared None with a float
    import optuna

    from solvers.tune import best_measured, trial_rows

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    done = study.ask()
    done.set_user_attr("measured_seconds", 12.5)
    done.set_user_attr("status", "ok")
    study.tell(done, 12.5)
    running = study.ask()
    running.set_user_attr("status", "ok")  # the measurement is not written yet
    rows = trial_rows(study)
    assert [(r["number"], r["status"], r["measured_seconds"]) for r in rows] == [(0, "ok", 12.5), (1, "running", None)]
    assert best_measured(rows)["number"] == 0
    assert best_measured([dict(number=3, status="ok", measured_seconds=None)]) is None


def _two_workers(tmp_path: Path, storage: list[str], study: str) -> list[dict]:
    out = tmp_path / "shared"
    procs = [subprocess.Popen([*CLI, "tune", *CASE, "--trial-cmd", TRIAL, "--trials", "6", "--out", str(out), "--seed", str(seed),
                               "--study", study, *storage], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in (1, 2)]
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
    last = subprocess.run([*CLI, "tune", *CASE, "--trial-cmd", TRIAL, "--trials", "1", "--out", str(out), "--seed", "3",
                           "--study", study, *storage], cwd=ROOT, capture_output=True, text=True, check=True)
    assert f"study {study} (13 trials, all workers)" in last.stdout
    rows = list(csv.DictReader((out / f"tune-{study}.csv").open()))
    assert len(rows) == 13
    assert len({r["worker"] for r in rows}) == 3
    starts = [r["plan"] for r in rows if r["source"] == "prediction"]
    assert len(starts) == len(set(starts)) == 5  # the predictions enqueued once, by the worker that created the study
    assert {"ok", "oom", "failed"} <= {r["status"] for r in rows}
    return rows


def test_two_workers_share_one_sqlite_study(tmp_path):
    _two_workers(tmp_path, [], "shared")


def test_two_workers_share_one_postgres_study(tmp_path):
    url = os.environ.get("AUTOPAR_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("AUTOPAR_TEST_POSTGRES_URL is not set (.ci/run starts a PostgreSQL server and sets it)")
    if not any(importlib.util.find_spec(m) for m in ("psycopg", "psycopg2")):
        pytest.skip("no PostgreSQL driver installed (pip install -e '.[postgres]')")
    _two_workers(tmp_path, ["--storage", url], f"pg-{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize("args, message", [
    (["--trial-cmd", "true", "--trials", "3"], "trial-cmd='true': must contain {plan_file}"),
    (["--trial-cmd", TRIAL, "--trials", "0"], "trials=0: must be a positive integer"),
    (["--trial-cmd", TRIAL, "--trials", "2", "--storage", "redis://x"], "storage='redis://x': must be an SQLAlchemy URL"),
    (["--trial-cmd", TRIAL, "--trials", "2", "--timeout", "-1"], "timeout=-1.0: must be a positive number of seconds"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    res = CliRunner().invoke(main, ["tune", *CASE, "--out", str(tmp_path), *args])
    assert res.exit_code == 1
    assert message in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_relative_out_runs_trials_inside_their_folder(tmp_path, monkeypatch):
    # issue 12: with a relative --out (the default is one) {plan_file} must still name the plan
    # from inside the trial folder, where the command runs
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["tune", *CASE, "--trial-cmd", TRIAL, "--trials", "2", "--out", "rel/tune"])
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path / "rel" / "tune")[:2]
    assert [r["status"] for r in rows] == [_fake_status(r["plan"]) for r in rows]  # not 'failed: no such file'
    assert "ok" in [r["status"] for r in rows]


def test_no_successful_trial_exits_1_and_says_why(tmp_path):
    cmd = "echo 'NCCL WARN socket timeout'; exit 7 # {plan_file}"
    res = CliRunner().invoke(main, ["tune", *CASE, "--trial-cmd", cmd, "--trials", "2", "--out", str(tmp_path)])
    assert res.exit_code == 1
    err = res.stderr.strip().splitlines()
    assert all("-- exit code 7: NCCL WARN socket timeout" in line for line in err if line.startswith("trial "))
    assert err[-1].startswith("Error: trial-cmd=") and "no trial measured a step time (trial 0 failed: exit code 7: NCCL WARN" in err[-1]
    assert [r["status"] for r in _rows(tmp_path)][:2] == ["failed", "failed"]  # the table is written either way


def test_a_timed_out_trial_leaves_no_process_behind(tmp_path):
    """The trial command's shell starts a child (as torchrun starts workers); at the timeout the
    whole process group is killed, not only the shell, so nothing keeps the GPUs."""
    from solvers.tune import run_trial_command

    marker = "37.123"  # a sleep nobody else runs
    outcome = run_trial_command(f"sleep {marker}; echo 'autopar-step-seconds: 1'", tmp_path / "p.json", "tp=1", tmp_path, 0.5)
    assert outcome.status == "timeout"
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()
    assert left == []
