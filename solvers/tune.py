"""Measured refinement (`autopar tune`): the refine search space, but each trial writes its plan
and runs a user command that trains a few steps and prints the measured step time. The study
lives in an Optuna RDB storage: SQLite by default (one file next to the results), or a
PostgreSQL URL so that workers on several machines share one study.

Trial command protocol (documented in `autopar tune --help`):
  - placeholders {plan_file} (the plan as a results JSON that `autopar emit` reads), {plan}
    (the plan's text form) and {trial_dir} (a directory for the trial's files) are replaced,
    shell-quoted, and the command runs in a shell;
  - it prints `autopar-step-seconds: <seconds>` on stdout (the last such line counts);
  - a line containing `autopar-oom` or `out of memory` (any case) marks an out-of-memory trial;
  - a non-zero exit without an OOM line, no step line, or the timeout marks a failed trial.
A failed trial is an Optuna FAIL; an OOM trial is complete with its memory constraint violated;
the study goes on either way.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import optuna

from autopar import __version__
from autopar.cost import estimate
from autopar.errors import InputError
from autopar.specs.costparams import CostParams
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan
from autopar.specs.results import Inputs, RankedPlan, Results, SearchInfo
from autopar.specs.training import TrainingSpec
from solvers.refine import ILLEGAL, choices, make_sampler, set_constraint, stamp_study, start_params, study_inputs, suggest_plan

STEP_LINE = re.compile(r"^\s*autopar-step-seconds:\s*([0-9.eE+-]+)\s*$", re.MULTILINE)
OOM_LINE = re.compile(r"autopar-oom|out of memory", re.IGNORECASE)
PLACEHOLDERS = ("{plan_file}", "{plan}", "{trial_dir}")
MAX_TRIALS = 100_000  # each trial is a training run
LOG_TAIL_CHARS = 400  # of the trial's output, kept in the study for failed trials


@dataclass
class TrialOutcome:
    status: str  # ok | oom | failed | timeout
    measured_seconds: float | None
    message: str


def parse_trial_output(output: str, returncode: int) -> TrialOutcome:
    """Read a trial command's combined output by the protocol above."""
    if OOM_LINE.search(output):
        return TrialOutcome("oom", None, "out of memory")
    steps = STEP_LINE.findall(output)
    if returncode != 0:
        return TrialOutcome("failed", None, f"exit code {returncode}: {output[-LOG_TAIL_CHARS:].strip()}")
    if not steps:
        return TrialOutcome("failed", None, "no 'autopar-step-seconds: <seconds>' line in the output")
    try:
        value = float(steps[-1])
    except ValueError:
        return TrialOutcome("failed", None, f"unreadable step time {steps[-1]!r}")
    if not (value > 0 and math.isfinite(value)):  # also NaN
        return TrialOutcome("failed", None, f"step time must be a positive number, got {steps[-1]}")
    return TrialOutcome("ok", value, "")


def run_trial_command(cmd: str, plan_file: Path, plan_text: str, trial_dir: Path, timeout_seconds: float | None) -> TrialOutcome:
    command = (cmd.replace("{plan_file}", shlex.quote(str(plan_file))).replace("{plan}", shlex.quote(plan_text))
               .replace("{trial_dir}", shlex.quote(str(trial_dir))))
    # its own process group, so that a timeout stops the launcher and everything it started (a
    # torchrun left running would hold the GPUs while the next trial starts); killing the shell
    # alone, as subprocess.run's timeout does, leaves them running
    with subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          text=True, cwd=trial_dir, start_new_session=True) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, _ = proc.communicate()
            (trial_dir / "log.txt").write_text(out or "")
            return TrialOutcome("timeout", None, f"no result after {timeout_seconds:g} s")
    (trial_dir / "log.txt").write_text(out)
    return parse_trial_output(out, proc.returncode)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the trial's whole process group (the shell, the launcher and its workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # already gone
        pass


@dataclass
class TuneRequest:
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    starts: list[Plan]
    trial_cmd: str
    num_trials: int
    out_dir: Path
    storage: str | None = None
    study_name: str = "autopar"
    seed: int = 0
    timeout_seconds: float | None = None
    params: CostParams | None = None
    prepare: Callable[[Path, Results], list[str]] | None = field(default=None, repr=False)  # e.g. write the launcher


STUDY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]{0,127}$")  # a folder name under OUT/trials: no '/' or '..'


def check_request(req: TuneRequest) -> None:
    check_options(req)
    if not req.starts:
        raise InputError("top", 0, "tune needs at least one predicted plan to start from")


def check_options(req: TuneRequest) -> None:
    """The checks that need no starting plans (the CLI runs them before its search)."""
    if not STUDY_NAME.match(req.study_name) or ".." in req.study_name:
        raise InputError("study", req.study_name, "must be 1-128 letters, digits and . _ = + - (it names a folder under --out)")
    if not any(p in req.trial_cmd for p in PLACEHOLDERS):
        raise InputError("trial-cmd", req.trial_cmd, "must contain {plan_file} (or {plan} / {trial_dir}) so the command knows which plan to run")
    if not 0 < req.num_trials <= MAX_TRIALS:
        raise InputError("trials", req.num_trials, f"must be a positive integer at most {MAX_TRIALS:,}")
    if req.timeout_seconds is not None and not (req.timeout_seconds > 0 and math.isfinite(req.timeout_seconds)):
        raise InputError("timeout", req.timeout_seconds, "must be a positive number of seconds")


def storage_url(req: TuneRequest) -> str:
    return req.storage or f"sqlite:///{(req.out_dir / 'tune.db').resolve()}"


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """An RDB storage; SQLite waits for the other workers' locks instead of failing."""
    if not re.match(r"^(sqlite|postgresql|postgres|mysql)(\+\w+)?://", url):
        raise InputError("storage", url, "must be an SQLAlchemy URL such as sqlite:///tune.db or postgresql://user@host/db")
    url = with_postgres_driver(url)
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    for attempt in range(5):  # two workers creating the tables of a fresh database at once
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except ImportError as exc:
            raise InputError("storage", url, f"needs a database driver: {exc} (pip install 'autopar[postgres]')") from None
        except Exception as exc:  # noqa: BLE001  (sqlalchemy OperationalError / IntegrityError on the race)
            if attempt == 4:
                raise InputError("storage", url, f"cannot open the study storage: {' '.join(str(exc).split())[:200]}") from None
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def with_postgres_driver(url: str) -> str:
    """postgresql://... with the driver that is installed (SQLAlchemy 2.0 defaults to psycopg2,
    2.1 to psycopg 3; the postgres extra installs psycopg 3)."""
    m = re.match(r"^postgres(ql)?://", url)
    if not m:
        return url
    import importlib.util

    for module, dialect in (("psycopg", "postgresql+psycopg"), ("psycopg2", "postgresql+psycopg2")):
        if importlib.util.find_spec(module) is not None:
            return dialect + url[m.end() - 3:]
    return url


def open_study(req: TuneRequest, sampler: optuna.samplers.BaseSampler) -> tuple[optuna.Study, bool]:
    """The shared study and whether this worker created it (the database's unique study name
    decides, so exactly one worker of many enqueues the predictions)."""
    storage = open_storage(storage_url(req))
    try:
        study = optuna.create_study(storage=storage, study_name=req.study_name, direction="minimize", sampler=sampler)
    except optuna.exceptions.DuplicatedStudyError:
        return optuna.load_study(storage=storage, study_name=req.study_name, sampler=sampler), False
    stamp_study(study, study_inputs(req.model, req.cluster, req.training))  # what it is for: a resume is checked against it
    return study, True


def _plan_results(req: TuneRequest, plan: Plan, est) -> Results:
    info = SearchInfo(solver="tune", seconds=0.0, num_feasible=1, num_evaluated=1, proved_optimal=False)
    return Results(autopar_version=__version__, inputs=Inputs(model=req.model, cluster=req.cluster, training=req.training),
                   plans=[RankedPlan(plan=plan, estimate=est)], search=info)


def tune(req: TuneRequest, progress: Callable[[dict[str, Any]], None] | None = None) -> optuna.Study:
    """Run num_trials trials in this process against the shared study; returns the study."""
    check_request(req)
    spaces = [choices(req.model, req.cluster, req.training, p) for p in req.starts]
    req.out_dir.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study, created = open_study(req, make_sampler(req.seed, n_startup_trials=min(10, req.num_trials)))
    if created:
        for i, c in enumerate(spaces):
            study.enqueue_trial(start_params(i, c))
    worker = f"{socket.gethostname()}:{os.getpid()}"

    def objective(trial: optuna.Trial) -> float:
        trial.set_user_attr("worker", worker)
        plan = suggest_plan(trial, spaces, req.model.num_layers)
        if plan is None:
            return _skip(trial, "illegal", ILLEGAL, "the chosen stage layout leaves no layer for the last stage", progress)
        est = estimate(req.model, req.cluster, req.training, plan, req.params)
        trial.set_user_attr("plan", plan.text())
        trial.set_user_attr("predicted_seconds", est.step_seconds)
        trial.set_user_attr("predicted_memory_gb", est.memory_bytes_per_gpu / 1e9)
        if not est.feasible:  # not worth a run: the cost model says it overflows HBM
            return _skip(trial, "predicted_oom", est.memory_bytes_per_gpu / est.memory_capacity_bytes - 1, "; ".join(est.reasons), progress,
                         2 * est.step_seconds)
        earlier = _earlier_run(study, plan.text(), trial.number)
        if earlier is not None:  # a measured run costs GPU time: reuse the first one of this plan
            return _reuse(trial, earlier, est, progress)
        trial_dir = (req.out_dir / "trials" / req.study_name / f"{trial.number:04d}").resolve()  # the command runs inside it
        trial_dir.mkdir(parents=True, exist_ok=True)
        results = _plan_results(req, plan, est)
        plan_file = trial_dir / "plan.json"
        plan_file.write_text(results.model_dump_json(indent=2) + "\n")
        notes = req.prepare(trial_dir, results) if req.prepare else []
        outcome = run_trial_command(req.trial_cmd, plan_file, plan.text(), trial_dir, req.timeout_seconds)
        if outcome.status == "ok":  # before the status: another worker may read this trial between the two writes
            trial.set_user_attr("measured_seconds", outcome.measured_seconds)
        trial.set_user_attr("status", outcome.status)
        trial.set_user_attr("message", "; ".join([*notes, outcome.message]) if notes or outcome.message else "")
        if progress:
            progress(dict(number=trial.number, status=outcome.status, plan=plan.text(), predicted=est.step_seconds,
                          measured=outcome.measured_seconds, message=trial.user_attrs["message"]))
        if outcome.status == "ok":
            set_constraint(trial, 0.0)
            return float(outcome.measured_seconds)
        if outcome.status == "oom":  # complete, but infeasible: the sampler learns the region
            set_constraint(trial, ILLEGAL)
            return 2 * est.step_seconds
        return float("nan")  # Optuna records a FAIL and goes on

    lock = _sqlite_lock_path(storage_url(req))
    for _ in range(req.num_trials):
        with _exclusive(lock):  # SQLite has no SELECT FOR UPDATE: two workers could pop one enqueued trial
            trial = study.ask()
        value = objective(trial)
        if math.isnan(value):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)
    return study


def _sqlite_lock_path(url: str) -> Path | None:
    return Path(url.split(":///", 1)[1] + ".lock") if url.startswith("sqlite:///") else None


@contextmanager
def _exclusive(path: Path | None):
    """An advisory file lock (fcntl.flock) shared by the workers of one SQLite study."""
    if path is None:
        yield
        return
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _earlier_run(study: optuna.Study, plan_text: str, number: int):
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)):
        if t.number < number and t.user_attrs.get("plan") == plan_text and t.user_attrs.get("status") in ("ok", "oom", "failed", "timeout"):
            return t
    return None


def _reuse(trial, earlier, est, progress) -> float:
    status, measured = earlier.user_attrs["status"], earlier.user_attrs.get("measured_seconds")
    if status == "ok":  # before the status, as in the objective
        trial.set_user_attr("measured_seconds", measured)
    trial.set_user_attr("status", status)
    trial.set_user_attr("message", f"same plan as trial {earlier.number}; not run again")
    if progress:
        progress(dict(number=trial.number, status=status, plan=trial.user_attrs["plan"], predicted=est.step_seconds, measured=measured))
    if status == "ok":
        set_constraint(trial, 0.0)
        return float(measured)
    if status == "oom":
        set_constraint(trial, ILLEGAL)
        return 2 * est.step_seconds
    return float("nan")


def _skip(trial, status: str, constraint: float, message: str, progress, value: float | None = None) -> float:
    trial.set_user_attr("status", status)
    trial.set_user_attr("message", message)
    set_constraint(trial, max(constraint, 1e-9))
    if progress:
        progress(dict(number=trial.number, status=status, plan=trial.user_attrs.get("plan", ""), predicted=trial.user_attrs.get("predicted_seconds"), measured=None))
    return value if value is not None else 1e9


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """Predicted vs measured for every trial of the study (all workers) that has started, by trial
    number. An enqueued prediction no worker has asked for yet (WAITING: more predictions than
    --trials) has no plan, prediction or status to show; queued_trials counts them. A trial another
    worker is still running shows 'running' until it is told: its attributes are written one at a
    time, so a status read before the trial ends may come without its measurement."""
    rows = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if t.state == optuna.trial.TrialState.WAITING:
            continue
        a = t.user_attrs
        predicted, measured = a.get("predicted_seconds"), a.get("measured_seconds")
        source = "prediction" if "fixed_params" in t.system_attrs else "sampler"  # enqueued top prediction or TPE
        status = a.get("status", t.state.name.lower()) if t.state.is_finished() else t.state.name.lower()
        rows.append(dict(number=t.number, source=source, state=t.state.name, status=status, worker=a.get("worker", ""),
                         plan=a.get("plan", ""), predicted_seconds=predicted, measured_seconds=measured,
                         measured_over_predicted=measured / predicted if measured and predicted else None, message=a.get("message", "")))
    return rows


def queued_trials(study: optuna.Study) -> int:
    """Enqueued predictions not yet run by any worker."""
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))


def best_measured(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in rows if r["status"] == "ok" and r["measured_seconds"] is not None]
    return min(ok, key=lambda r: (r["measured_seconds"], r["number"])) if ok else None
