"""solvers.refine: the neighbourhood measured tuning (`autopar tune`) explores around its start
plans -- balanced starts and per-stage starts from solvers.stages."""

from __future__ import annotations

import optuna
import pytest

from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from solvers.refine import ALL_LAYERS, STAGE_COUNTS, choices, start_params, suggest_plan

# llama3-70b (80 layers) on 24 H100 = tp 8 x pp 3, 64 sequences of 8192 tokens
MODEL, CLUSTER = load_model("llama3-70b"), load_cluster("dgx-h100").with_gpus(24)
TRAINING = TrainingSpec(seq_len=8192, global_batch_size=64)
BALANCED = parse_plan("tp=8,pp=3,mbs=1,zero=1,recompute=full")
PER_STAGE = parse_plan("tp=8,pp=3,mbs=1,zero=1,recompute=full,layout=Et*27|t*27|t*26L,stage_recompute_layers=9/3/0")


def _replay(params: dict, starts) -> object:
    """The plan suggest_plan builds from fixed parameters (what an enqueued trial gets)."""
    return suggest_plan(optuna.trial.FixedTrial(params), starts, MODEL.num_layers)


@pytest.mark.parametrize("start", [BALANCED, PER_STAGE], ids=["balanced", "per-stage"])
def test_start_params_reproduce_the_start(start):
    c = choices(MODEL, CLUSTER, TRAINING, start)
    plan = _replay(start_params(0, c), [c])
    assert plan.text() == c.plan.text()
    assert plan.pipeline_layout(80).rank_decoders() == start.pipeline_layout(80).rank_decoders()
    assert plan.stage_recompute_layers == start.stage_recompute_layers


def test_per_stage_start_keeps_its_layout_and_counts():
    c = choices(MODEL, CLUSTER, TRAINING, PER_STAGE)
    assert c.first_range is None and c.middle_range is None  # the solved layout is not re-tuned
    params = start_params(0, c)
    assert params["recompute_layers_0"] == STAGE_COUNTS
    uniform = _replay({**params, "recompute_layers_0": 4}, [c])  # a uniform count replaces the per-stage ones
    assert uniform.recompute_num_layers == 4 and uniform.stage_recompute_layers is None
    assert uniform.layout == PER_STAGE.layout
    none = _replay({**params, "recompute": "none"}, [c])
    assert none.recompute.value == "none" and none.stage_recompute_layers is None and none.recompute_num_layers is None


def test_balanced_start_offers_first_last_layouts_and_only_legal_values():
    c = choices(MODEL, CLUSTER, TRAINING, BALANCED)
    assert c.mbs == [1, 2, 4, 8, 16]  # divisors of 64 sequences per data-parallel replica, <= 16
    assert c.first_range == (23, 29) and c.middle_range == (25, 29)  # even split 26, spread 3
    assert c.layout(80, 27, 27) == (27, 26)
    assert c.layout(80, 40, 40) is None  # leaves no layer for the last stage
    assert start_params(0, c)["recompute_layers_0"] == ALL_LAYERS
    pp1 = choices(MODEL, CLUSTER, TRAINING, parse_plan("tp=8,pp=1,dp=3,mbs=1,zero=3,recompute=full"))
    assert pp1.first_range is None
