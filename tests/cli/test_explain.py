"""autopar/cli/explain.py: the plan keys that differ between the best plan and the runner-up
(and between folded equal-cost variants) cover every field of the plan language."""

from __future__ import annotations

import pytest

from autopar.cli.explain import NOT_COMPARED, _resolved, plan_differences
from autopar.specs import parse_plan
from autopar.specs.plan import Plan


@pytest.mark.parametrize("best, other, expected", [
    # these plans printed "differs in stage layout only": the keys were a hand list without them
    ("tp=8,ep=8", "tp=8,ep=8,dispatcher=deepep", ["dispatcher=alltoall (vs deepep)"]),
    ("tp=8,ep=8", "tp=8,ep=8,ep_overlap=on", ["ep_overlap=off (vs on)"]),
    ("tp=8,zero=3", "tp=8,zero=3,reshard=off", ["reshard=on (vs off)"]),
    ("tp=8,zero=3", "tp=8,zero=3,grad_sync=step", ["grad_sync=microbatch (vs step)"]),
    ("tp=8,recompute=selective", "tp=8,recompute=selective,recompute_modules=mlp+core_attn",
     ["recompute_modules=- (vs core_attn+mlp)"]),
    ("tp=8", "tp=8,tp_overlap=off", ["tp_overlap=on (vs off)"]),
    ("tp=8,pp=2,recompute=full", "tp=8,pp=2,recompute=full,stage_recompute_layers=1/2", ["stage_recompute_layers=- (vs 1/2)"]),
    ("tp=8,pp=2", "tp=8,pp=2,layout=Et*3|t*3L", ["layout=- (vs Et*3|t*3L)"]),
    # resolved defaults: sp and schedule as the plan runs them; cp_algo only with cp > 1
    ("tp=8", "tp=8,sp=on,schedule=1f1b,cp_algo=ulysses", []),
])
def test_plan_differences(best, other, expected):
    assert plan_differences(parse_plan(best), parse_plan(other)) == expected


def test_every_plan_field_is_compared():
    assert set(_resolved(Plan())) == set(Plan.model_fields) - set(NOT_COMPARED)


def test_values_that_follow_another_are_not_restated():
    """etp defaults to tp and tp_overlap to sp: where both plans keep the default, 'tp=4 (vs 2)' and
    'sp=on (vs off)' already say it (gpt3-175b's rank 2 read 'etp=4 (vs 2)' on a dense model);
    set apart from its leader, the value is named."""
    assert plan_differences(parse_plan("tp=4,pp=8,sp=on"), parse_plan("tp=2,pp=16,sp=off")) == [
        "tp=4 (vs 2)", "pp=8 (vs 16)", "sp=on (vs off)"]
    assert plan_differences(parse_plan("tp=4,sp=on,tp_overlap=off"), parse_plan("tp=4,sp=on")) == ["tp_overlap=off (vs on)"]
    assert plan_differences(parse_plan("tp=4,ep=8,etp=1"), parse_plan("tp=4,ep=8")) == ["etp=1 (vs 4)"]


# LLaMA-3 70B has 80 decoder layers (profiles/models), no MTP: 80 / pp=5 = 16 a stage
LLAMA70 = "llama3-70b"


@pytest.mark.parametrize("best, other, expected", [
    # first=16,last=16 on pp=5 is the balanced split itself: 16/16/16/16/16 either way
    ("tp=8,pp=5,first=16,last=16", "tp=8,pp=5", []),
    # first=7,last=7 with vpp=2: rank 0 holds 4+3, rank 3 holds 4+3, the middle ranks 17+16
    # (Plan.model_layout); the same eight virtual stages written as a layout string
    ("tp=8,pp=4,vpp=2,first=7,last=7", "tp=8,pp=4,layout=Et*4|(t*17|)*2,t*4|t*3|(t*16|)*2,t*3L", []),
    # a real difference is named once, as the layers of every virtual stage: 8 + 32 + 32 + 8 = 80
    # against the balanced 4 x 20
    ("tp=8,pp=4,first=8,last=8", "tp=8,pp=4", ["layout=Et*8|(t*32|)*2,t*8L (vs Et*20|(t*20|)*2,t*20L)"]),
    # two balanced splits differ only where pp does; 'pp=4 (vs 8)' says it
    ("tp=8,pp=4", "tp=8,pp=8", ["pp=4 (vs 8)"]),
])
def test_the_stage_layout_is_compared_as_run_not_as_spelled(best, other, expected):
    from autopar.specs import load_model

    assert plan_differences(parse_plan(best), parse_plan(other), load_model(LLAMA70)) == expected


def test_without_the_model_the_spelling_is_all_there_is():
    # no num_layers to resolve the balanced split with: the keys as written (the search passes the model)
    assert plan_differences(parse_plan("tp=8,pp=5,first=16,last=16"), parse_plan("tp=8,pp=5")) == [
        "first_stage_layers=16 (vs -)", "last_stage_layers=16 (vs -)"]


def test_equal_cost_variants_spelled_differently_are_the_same_values():
    from autopar.cli.explain import variant_hint
    from autopar.specs import load_model
    from autopar.specs.results import RankedPlan

    ranked = RankedPlan.model_construct(plan=parse_plan("tp=8,pp=5,first=16,last=16"),
                                        equal_cost_variants=["tp=8,pp=5", "tp=8,pp=5,order=tp-cp-ep-pp-dp"])
    # the first variant is the same balanced 16 x 5 split; the second moves the rank order only
    assert variant_hint(ranked, load_model(LLAMA70)) == "differ in order"
