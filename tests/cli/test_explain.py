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
