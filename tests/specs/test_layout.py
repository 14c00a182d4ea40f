"""Pipeline layouts: Megatron's layout strings, the balanced default for any vpp, first/last
counts, and the layouts published runs used (issue 9: 61 layers on 4 x 4, 94 on 8 x 3, 126 on
16 x 8 must all be expressible)."""

from __future__ import annotations

import pytest

from autopar.cost.rules import plan_violations
from autopar.errors import InputError
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.layout import balanced_layout, first_last_layout, megatron_layout, parse_layout


def test_megatron_docs_example_deepseek_v3_pp16_vpp2():
    # Megatron-LM docs (--pipeline-model-parallel-layout): DeepSeek-V3, 61 layers + 1 MTP on
    # PP16 VPP2 as "Et*3|(tt|)*29,m|L": rank 0 holds E + 3 + 2 decoders, ranks 1-13 hold 4,
    # rank 14 holds 2 + the MTP layer, rank 15 holds 2 + the loss
    lay = parse_layout("Et*3|(tt|)*29,m|L", 16)
    assert lay.vpp == 2 and lay.num_virtual_stages == 32
    assert lay.rank_decoders() == [5] + [4] * 13 + [2, 2]
    assert lay.rank_mtp() == [0] * 14 + [1, 0]
    assert sum(lay.decoders) == 61
    assert parse_layout(lay.text(), 16) == lay


@pytest.mark.parametrize("layers, pp, vpp, ranks", [
    (126, 16, 1, [7] + [8] * 14 + [7]),   # LLaMA-3 405B (Dubey et al. 2024 section 3.3.2)
    (126, 16, 8, [7] + [8] * 14 + [7]),   # same ranks with interleaving: E and L alone in their chunks
    (126, 8, 8, [15] + [16] * 6 + [15]),  # 128 units over 8 ranks
    (94, 8, 3, [11] + [12] * 6 + [11]),   # Qwen3-235B: 96 units over 8 ranks, 4 per chunk
    (80, 4, 5, [20] * 4),                 # even split, 4 layers per chunk
    (80, 8, 3, [10] * 8),                 # pp divides the layers: chunks 4, 3, 3
])
def test_balanced_layout_keeps_rank_totals_for_any_vpp(layers, pp, vpp, ranks):
    lay = balanced_layout(layers, pp, vpp)
    assert lay.rank_decoders() == ranks
    assert sum(lay.decoders) == layers and lay.vpp == vpp
    assert max(lay.decoders) - min(d for j, d in enumerate(lay.decoders) if 0 < j < len(lay.decoders) - 1) <= 1


def test_405b_interleaved_chunks_hold_one_layer():
    # 128 units (126 layers + embedding + loss) over 128 virtual stages: one each, the first
    # stage only the embedding and the last only the loss
    lay = balanced_layout(126, 16, 8)
    assert lay.decoders[0] == 0 and lay.decoders[-1] == 0 and set(lay.decoders[1:-1]) == {1}
    assert lay.text() == "E|(t|)*126,L"


def test_deepseek_v3_balanced_with_mtp_on_4x4():
    # 61 layers + 1 MTP (2 units: block + its output layer) + E + L = 65 units over 4 ranks
    lay = balanced_layout(61, 4, 4, mtp_layers=1)
    assert lay.rank_decoders() == [15, 17, 16, 13] and lay.rank_mtp() == [0, 0, 0, 1]
    assert sum(lay.decoders) == 61


def test_hybrid_mtp_module_weighs_its_blocks():
    # Nemotron 3 Super: 88 one-block layers and an MTP module of two blocks ('*E') plus its output
    # layer, 3 units (ModelSpec.mtp_layout_units); 88 + E + L + 3 = 93 over 4 ranks: 23 each and the
    # extra unit in the middle (rank 1) -> 23, 24, 23, 23, less E on rank 0 and L + 3 on rank 3
    super_, dsv3 = load_model("nemotron-3-super-120b-a12b"), load_model("deepseek-v3")
    assert (super_.mtp_layout_units, dsv3.mtp_layout_units) == (3, 2)
    lay = balanced_layout(88, 4, 1, mtp_layers=1, mtp_units=super_.mtp_layout_units)
    assert lay.rank_decoders() == [22, 24, 23, 19] and lay.rank_mtp() == [0, 0, 0, 1]
    # as a transformer layer (2 units) it would leave the last rank one block heavier: 22, 23, 23, 20
    assert balanced_layout(88, 4, 1, mtp_layers=1).rank_decoders() == [22, 23, 23, 20]


def test_first_last_and_account_flags():
    assert first_last_layout(30, 4, 1, 5, 5).rank_decoders() == [5, 10, 10, 5]
    # Megatron --account-for-embedding/loss-in-pipeline-split: 126 + 2 = 128 over 16 x 2 virtual
    # stages of 4: the first loses one to the embedding, the last one to the loss
    lay = megatron_layout(126, 16, 2, account_for_embedding=True, account_for_loss=True)
    assert lay.decoders[0] == 3 and lay.decoders[-1] == 3 and lay.rank_decoders() == [7] + [8] * 14 + [7]
    with pytest.raises(InputError, match="must divide by pp\\*vpp"):
        megatron_layout(126, 16, 2)


@pytest.mark.parametrize("text, rule", [
    ("t*4|tL", "E \\(embedding\\) must appear once"),
    ("Et*4|t", "L \\(loss\\) must appear once"),
    ("Et*4|x|L", "unknown letters 'x'"),
    ("Et*3|(tt|*2|L", "parentheses"),
    ("Et|t|tL", "multiple of pp=2"),
    ("Em|tL", "decoder layers \\(t\\) must come before MTP"),
])
def test_bad_layout_strings_name_the_rule(text, rule):
    with pytest.raises(InputError, match=rule) as err:
        parse_layout(text, 2)
    assert err.value.field == "plan.layout"


def test_plan_text_with_layout_round_trips_and_sets_vpp():
    p = parse_plan("tp=8,pp=16,layout=Et*3|(tt|)*29,m|L,mbs=1")
    assert p.vpp == 2 and p.mbs == 1
    assert parse_plan(p.text()).layout == p.layout
    with pytest.raises(InputError, match="vpp"):
        parse_plan("pp=16,vpp=4,layout=Et*3|(tt|)*29,m|L")


@pytest.mark.parametrize("model, gpus, plan", [
    ("llama3-405b", 16384, "tp=8,pp=16,vpp=8"),  # issue 9: refused before ("vpp=8 must divide ...")
    ("llama3-405b", 16384, "tp=8,pp=8,vpp=8"),
    ("llama3-405b", 16384, "tp=8,pp=16,vpp=3"),  # any vpp: chunks of 2 and 3 layers
    ("llama3-405b", 1024, "tp=8,pp=16,zero=3"),  # FSDP with pipeline parallelism (torchtitan)
])
def test_layouts_frameworks_ran_are_legal(model, gpus, plan):
    cluster = load_cluster("dgx-h100-superpod").with_gpus(gpus)
    training = TrainingSpec(seq_len=8192, global_batch_size=2048)
    assert plan_violations(load_model(model), cluster, training, parse_plan(plan)) == []


def test_layout_against_the_model():
    cluster = load_cluster("dgx-h100").with_gpus(16)
    broken = plan_violations(load_model("llama3-8b"), cluster, TrainingSpec(seq_len=4096, global_batch_size=64),
                             parse_plan("tp=8,pp=2,layout=Et*15|t*16L"))
    assert broken and broken[0][0] == "plan.layout" and "holds 31 decoder layers" in broken[0][2]
