"""The study `autopar tune` keeps: every start's parameters fit one study, and a study made
for other inputs (another model, GPU count, batch) is refused in one line when resumed."""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import optuna
from click.testing import CliRunner

from autopar.cli import main
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from solvers.refine import INPUTS_ATTR, choices, distributions, start_params, study_inputs, suggest_plan

TRIAL = f"{sys.executable} {Path(__file__).parent / 'fake_trial.py'} {{plan_file}}"
CASE = ["--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "24", "--seq-len", "8192", "--global-batch", "64"]
OTHER = ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--seq-len", "8192", "--global-batch", "64"]

# an MLA model under flash attention: the search keeps selective recompute (its modules) for
# some plans, so one start's recompute choices add a mode the others lack
MLA = load_model("deepseek-v2-lite")
MLA_CLUSTER = load_cluster("dgx-h100").with_gpus(16)
MLA_TRAINING = TrainingSpec(seq_len=4096, global_batch_size=256)
MLA_STARTS = ["tp=1,pp=1,dp=16,ep=16,mbs=2,zero=1,recompute=none,dispatcher=deepep",
              "tp=1,pp=1,dp=16,ep=16,mbs=2,zero=1,recompute=selective,recompute_modules=layernorm+moe_act+mla_up_proj,dispatcher=deepep"]


def _sampled(spaces, num_layers: int, n_trials: int):
    """(plans, study) of a seeded random study over the starts, the starts enqueued first."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for i, c in enumerate(spaces):
        study.enqueue_trial(start_params(i, c))
    plans = []
    study.optimize(lambda t: plans.append(suggest_plan(t, spaces, num_layers)) or 1.0, n_trials=n_trials)
    return plans, study


def test_starts_with_different_recompute_choices_share_a_study():
    # issue: a start whose own mode (selective) was added to its recompute choices asked for
    # the shared 'recompute' parameter with other choices: Optuna's ValueError ended the run
    spaces = [choices(MLA, MLA_CLUSTER, MLA_TRAINING, parse_plan(p)) for p in MLA_STARTS]
    assert [s.recomputes for s in spaces] == [["none", "full"], ["none", "full", "selective"]]
    plans, _ = _sampled(spaces, MLA.num_layers, 12)
    assert [p.text() for p in plans[:2]] == [s.plan.text() for s in spaces]  # the enqueued starts, as they are
    assert {p.recompute.value for p in plans} == {"none", "full", "selective"}
    for p in plans:  # a plan the Plan validator accepts: modules only under selective recompute
        assert parse_plan(p.text()).text() == p.text()


def test_distributions_are_what_suggest_plan_asks_for():
    """check_study_params compares a resumed study's trials with distributions(): it must be
    exactly what suggest_plan asks with, for every kind of start (explicit layouts, per-stage
    counts, an MLA start's own recompute choices)."""
    model, cluster, training = load_model("llama3-70b"), load_cluster("dgx-h100").with_gpus(24), TrainingSpec(seq_len=8192, global_batch_size=64)
    dense = [choices(model, cluster, training, parse_plan(p)) for p in (
        "tp=8,pp=3,mbs=1,zero=1,recompute=full", "tp=8,pp=3,mbs=1,zero=1,recompute=full,layout=Et*27|t*27|t*26L,stage_recompute_layers=9/3/0",
        "tp=4,pp=6,mbs=1,zero=1,recompute=none")]
    mla = [choices(MLA, MLA_CLUSTER, MLA_TRAINING, parse_plan(p)) for p in MLA_STARTS]
    for spaces, num_layers in ((dense, model.num_layers), (mla, MLA.num_layers)):
        space = distributions(spaces)
        _, study = _sampled(spaces, num_layers, 40)
        asked = {name: dist for t in study.trials for name, dist in t.distributions.items()}
        assert {"start", "mbs_0", "recompute"} <= set(asked)
        assert {name: space[name] for name in asked} == asked
    assert {"uneven_0", "first_0", "middle_0", "recompute_layers_0", "recompute_layers_1"} <= set(distributions(dense))
    assert "recompute_1" in distributions(mla) and "recompute_0" not in distributions(mla)


def _tune(out: Path, case: list[str], study: str = "s"):
    return CliRunner().invoke(main, ["tune", *case, "--trial-cmd", TRIAL, "--trials", "2", "--study", study, "--out", str(out)])


def _finished(out: Path, study: str = "s") -> int:
    s = optuna.load_study(study_name=study, storage=f"sqlite:///{out / 'tune.db'}")
    return sum(t.state.is_finished() for t in s.get_trials(deepcopy=False))


def test_resuming_a_study_made_for_another_model_is_refused(tmp_path):
    # issue: resumed with another model, tune mixed the two models' trials in one study until a
    # trial drew a parameter the study had with other choices, then failed inside Optuna
    # ('CategoricalDistribution does not support dynamic value space', an internal error)
    first = _tune(tmp_path, CASE)
    assert first.exit_code == 0, first.output
    inputs = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'tune.db'}").user_attrs[INPUTS_ATTR]
    assert inputs == study_inputs(load_model("llama3-70b"), load_cluster("dgx-h100").with_gpus(24), TrainingSpec(seq_len=8192, global_batch_size=64))
    assert (inputs["model"], inputs["gpus"], inputs["global_batch"]) == ("llama3-70b", 24, 64)

    other = _tune(tmp_path, OTHER)
    assert other.exit_code == 1
    assert other.output.splitlines() == ["Error: study='s': was created for model llama3-70b, not llama3-8b; GPUs 24, not 16: "
                                         "use a new --study name, or another --storage or --out"]
    assert _finished(tmp_path) == 2  # no trial added

    again = _tune(tmp_path, CASE)  # the same inputs resume it
    assert again.exit_code == 0, again.output
    assert _finished(tmp_path) == 4


def test_an_older_study_is_resumed_only_when_its_parameters_fit(tmp_path):
    """A study without the inputs attribute (an older autopar's) is checked by its trials'
    parameters; once resumed, it records the inputs it runs with."""
    assert _tune(tmp_path, CASE, "old").exit_code == 0
    with sqlite3.connect(tmp_path / "tune.db") as db:  # as an older autopar left it
        assert db.execute("DELETE FROM study_user_attributes WHERE key = ?", (INPUTS_ATTR,)).rowcount == 1

    other = _tune(tmp_path, OTHER, "old")
    assert other.exit_code == 1
    assert re.fullmatch(r"Error: study='old': trial \d+ drew \w+ from \[.*\], these inputs give \[.*\] \(the study was made for another "
                        r"model, cluster, batch, --top, --fix or --emit\): use a new --study name, or another --storage or --out\n",
                        other.output), other.output
    assert _finished(tmp_path, "old") == 2

    same = _tune(tmp_path, CASE, "old")
    assert same.exit_code == 0, same.output
    assert _finished(tmp_path, "old") == 4
    attrs = optuna.load_study(study_name="old", storage=f"sqlite:///{tmp_path / 'tune.db'}").user_attrs
    assert attrs[INPUTS_ATTR]["model"] == "llama3-70b"
