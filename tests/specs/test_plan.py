"""Plan text form, defaults, stage layouts and structural rules."""

from __future__ import annotations

import pytest

from autopar.cost.rules import plan_violations
from autopar.errors import InputError
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.plan import Recompute, Schedule


def test_issue_example_round_trips():
    text = "tp=8,pp=16,dp=128,cp=1,ep=1,etp=1,vpp=1,mbs=1,zero=1,recompute=selective,sp=on,schedule=1f1b,cp_algo=ring"
    p = parse_plan(text)
    assert (p.tp, p.pp, p.dp, p.recompute, p.sequence_parallel, p.pipeline_schedule) == (8, 16, 128, Recompute.selective, True, Schedule.one_f_one_b)
    assert parse_plan(p.text()) == p


def test_defaults_and_derived_dp():
    p = parse_plan("tp=4,pp=2")
    assert p.data_parallel(64) == 8 and p.vpp == 1 and p.zero == 1 and p.sequence_parallel
    assert parse_plan("tp=2,pp=2,vpp=3").pipeline_schedule == Schedule.interleaved


def test_llama3_405b_uneven_stages():
    # 126 layers on 16 stages: one layer fewer on the first and last (Dubey et al. 2024, sec 3.3.2)
    assert parse_plan("pp=16").layers_per_stage(126) == [7] + [8] * 14 + [7]
    assert parse_plan("pp=4,first=5,last=5").layers_per_stage(30) == [5, 10, 10, 5]


@pytest.mark.parametrize(
    "text, field",
    [
        ("tp=8,pp=x", "plan.pp"),
        ("tp", "plan"),
        ("tp=8,tp=4", "plan"),
        ("sp=maybe", "plan.sp"),
        ("zero=4", "plan.zero"),
        ("tp=0", "plan.tp"),
        ("vpp=2", "plan.vpp"),  # a cross-field rule, at the field it names
        ("recompute=some", "plan.recompute"),
    ],
)
def test_malformed_plan_names_the_field(text, field):
    with pytest.raises(InputError) as err:
        parse_plan(text)
    assert err.value.field == field


@pytest.mark.parametrize("text, message", [
    # pydantic's "Value error, " prefix leaked into these, after the whole plan text
    ("tp=8,vpp=2", "plan.vpp=2: needs pp > 1"),
    ("tp=8,recompute=selective,recompute_modules=foo",
     "plan.recompute_modules='foo': unknown module; known: core_attn, layernorm, mlp, moe, moe_act, shared_experts, mla_up_proj"),
    # a rule raised as an InputError already names its field: once, not plan.plan.layout
    ("tp=8,layout=abc", "plan.layout='abc': unknown letters 'abc'; use E (embedding), t (decoder), m (MTP), L (loss), | between stages"),
    ("tp=8,pp=2,layout=Et|tL,first=1", "plan='tp=8,pp=2,layout=Et|tL,first=1': layout and first/last stage layers are two ways to say "
                                       "the same thing: give one"),
])
def test_plan_rule_messages(text, message):
    with pytest.raises(InputError) as err:
        parse_plan(text)
    assert str(err.value) == message


@pytest.mark.parametrize("text, message", [
    # an empty plan cost the defaults tp=1,pp=1 and an empty item was skipped, without a word:
    # a value dropped between commas is more likely a typo than a wish for a default
    ("", "plan='': is empty; give at least one key=value (e.g. tp=8)"),
    ("tp=8,,pp=4", "plan='tp=8,,pp=4': has an empty item (two commas in a row, or one at an end); "
                   "give key=value items separated by single commas"),
    ("tp=8,pp=4,", "plan='tp=8,pp=4,': has an empty item (two commas in a row, or one at an end); "
                   "give key=value items separated by single commas"),
    ("pp=16,layout=Et*3|(tt|)*29,,m|L", "plan='pp=16,layout=Et*3|(tt|)*29,,m|L': has an empty item (two commas in a row, "
                                        "or one at an end); give key=value items separated by single commas"),
])
def test_empty_plan_or_item_is_refused(text, message):
    with pytest.raises(InputError) as err:
        parse_plan(text)
    assert str(err.value) == message


def test_product_must_match_gpus():
    with pytest.raises(InputError, match=r"tp\(8\) \* cp\(1\) \* pp\(4\) \* dp\(4\) = 128 != GPUs\(64\)"):
        parse_plan("tp=8,pp=4,dp=4").data_parallel(64)


@pytest.mark.parametrize(
    "plan, seq, batch, message",
    [
        ("tp=3", 4096, 64, "must divide num_attention_heads"),
        ("tp=2,cp=2", 4098, 64, "must divide by 2\\*cp"),
        ("tp=1,pp=2,layout=Et*3|t*3L", 4096, 64, "holds 6 decoder layers, the model has num_layers=32"),
        ("tp=1,pp=8,vpp=5", 4096, 64, "pp\\*vpp=40 virtual stages exceed num_layers=32"),
        ("tp=1,ep=2", 4096, 64, "needs a MoE model"),
        ("tp=2,pp=2,vpp=2", 4096, 6, "micro-batches"),
        ("tp=1,mbs=3", 4096, 64, "must divide by dp"),
        # Llama-3 8B has 32 query and 8 KV heads: tp 8 leaves one KV head per rank, which an
        # all-to-all over cp 2 cannot split (Transformer Engine's a2a CP asserts it); tp 2 leaves 4,
        # not divisible by cp 8; hybrid on 8-GPU nodes with tp 4 runs its a2a over 2 ranks only
        ("tp=8,cp=2,cp_algo=ulysses", 4096, 64, "ulysses CP splits each TP rank's heads .* num_kv_heads=8 over tp=8"),
        ("tp=2,cp=8,cp_algo=ulysses", 4096, 64, "ulysses CP splits each TP rank's heads"),
    ],
)
def test_structural_rules(plan, seq, batch, message):
    cluster = load_cluster("dgx-h100")
    if plan == "tp=3":
        cluster = cluster.with_gpus(3)
    if "ulysses" in plan:  # tp x cp = 16: two nodes
        cluster = cluster.with_gpus(16)
    broken = plan_violations(load_model("llama3-8b"), cluster, TrainingSpec(seq_len=seq, global_batch_size=batch), parse_plan(plan))
    assert any(__import__("re").search(message, rule) for _, _, rule in broken), broken


def test_hybrid_cp_splits_heads_only_over_its_node_part():
    # tp 4 x cp 4 hybrid on 8-GPU nodes: a2a over 2 ranks (4 x 2 fill a node), ring over 2:
    # 8 / 4 = 2 KV heads per rank split over 2 -- buildable; plain Ulysses over 4 is not
    cluster, training = load_cluster("dgx-h100").with_gpus(16), TrainingSpec(seq_len=4096, global_batch_size=64)
    model = load_model("llama3-8b")
    assert plan_violations(model, cluster, training, parse_plan("tp=4,cp=4,cp_algo=hybrid")) == []
    assert plan_violations(model, cluster, training, parse_plan("tp=4,cp=4,cp_algo=ulysses"))


@pytest.mark.parametrize("model, plan, field, message", [
    ("mixtral-8x7b", "tp=2,pp=1,ep=1,mbs=1,ep_overlap=on", "plan.ep_overlap", "needs a MoE model and ep > 1"),
    ("mixtral-8x7b", "tp=1,pp=1,ep=8,mbs=1,dispatcher=allgather,ep_overlap=on", "plan.ep_overlap", "needs the alltoall or deepep dispatcher"),
    ("mixtral-8x7b", "tp=2,pp=1,ep=1,mbs=1,dispatcher=deepep", "plan.dispatcher", "needs a MoE model and ep > 1"),
    ("llama3-8b", "tp=1,pp=1,mbs=1,dispatcher=deepep", "plan.dispatcher", "needs a MoE model and ep > 1"),
])
def test_a_given_plan_breaks_the_ep_rules_search_refuses_for_fix(model, plan, field, message):
    # estimate costed ep_overlap with ep=1 (ep_comm 0.297 -> 0.095 s on Mixtral-8x22B) where
    # `search --fix ep=1,ep_overlap=on` refuses it: one rule set for both
    cluster, training = load_cluster("dgx-h100"), TrainingSpec(seq_len=4096, global_batch_size=64)
    broken = plan_violations(load_model(model), cluster, training, parse_plan(plan))
    assert [(f, rule) for f, _, rule in broken if message in rule] and {f for f, _, _ in broken} == {field}, broken
