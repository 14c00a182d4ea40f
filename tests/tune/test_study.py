"""The study `autopar tune` keeps: every start's parameters fit one study."""

from __future__ import annotations

import optuna
import pytest

from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from solvers.refine import choices, start_params, suggest_plan

# an MLA model under flash attention: the search keeps selective recompute (its modules) for
# some plans, so one start's recompute choices add a mode the others lack
MLA = load_model("deepseek-v2-lite")
MLA_CLUSTER = load_cluster("dgx-h100").with_gpus(16)
MLA_TRAINING = TrainingSpec(seq_len=4096, global_batch_size=256)
MLA_STARTS = ["tp=1,pp=1,dp=16,ep=16,mbs=2,zero=1,recompute=none,dispatcher=deepep",
              "tp=1,pp=1,dp=16,ep=16,mbs=2,zero=1,recompute=selective,recompute_modules=layernorm+moe_act+mla_up_proj,dispatcher=deepep"]


def test_starts_with_different_recompute_choices_share_a_study():
    # issue: a start whose own mode (selective) was added to its recompute choices asked for
    # the shared 'recompute' parameter with other choices: Optuna's ValueError ended the run
    spaces = [choices(MLA, MLA_CLUSTER, MLA_TRAINING, parse_plan(p)) for p in MLA_STARTS]
    assert [s.recomputes for s in spaces] == [["none", "full"], ["none", "full", "selective"]]
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for i, c in enumerate(spaces):
        study.enqueue_trial(start_params(i, c))
    plans = []
    study.optimize(lambda t: plans.append(suggest_plan(t, spaces, MLA.num_layers)) or 1.0, n_trials=12)
    assert [p.text() for p in plans[:2]] == [s.plan.text() for s in spaces]  # the enqueued starts, as they are
    assert {p.recompute.value for p in plans} == {"none", "full", "selective"}
    for p in plans:  # a plan the Plan validator accepts: modules only under selective recompute
        assert parse_plan(p.text()).text() == p.text()
