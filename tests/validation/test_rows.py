"""Rows of the three runs files become autopar inputs: every row is read (issue 9: 0 refused),
FSDP columns in all their spellings, layouts the rows describe in words, open choices."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autopar.cost.comm import Group, fabric
from autopar.cost.flops import total_params
from autopar.specs import load_model
from autopar.specs.hardware import load_gpu
from autopar.validation import predict_row
from autopar.validation.report import rank_agreement, render, summarize
from autopar.validation.predict import RowResult, params_for_cluster
from autopar.validation.rows import normalize_row, row_inputs, row_model

DATA = Path(__file__).resolve().parents[1] / "data"
BASE = {"id": "x", "source_group": "g", "model_name": "Llama 3 8B", "num_layers": 32, "hidden_size": 4096,
        "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336, "seq_len": 8192, "num_gpus": 64,
        "global_batch_size": 64, "gpu_normalized": "H100-80GB", "tp": 1, "pp": 1, "tokens_per_sec_per_gpu": 5000.0}


@pytest.mark.parametrize("name", ["dev_runs", "moe_runs", "fsdp_runs"])
def test_every_row_is_read(name, validated):
    rows = json.loads((DATA / f"{name}.json").read_text())
    report = validated(name)
    assert [r["id"] for r in report["rows"]] == [r["id"] for r in rows]
    assert [(r["id"], r["skipped"]) for r in report["rows"] if r["skipped"]] == []


@pytest.mark.parametrize("fsdp, zero, shard", [
    (0, 1, None),                                     # NeMo pages: FSDP column 0 = off (crashed validate before)
    (1, 3, None),                                     # NeMo pages: 1 = Megatron-FSDP on over the DP group
    ("FSDP2 full shard (64-way)", 3, None),           # 64-way = all of dp: no HSDP
    ("FSDP2 16-way x TP 8", 3, None),                 # 64 GPUs / tp 8 = dp 8 -> 16 > 8: not a sub-group
    ("FSDP2 8-way", 3, 8),                            # 8 of 64 ranks: HSDP shard group
    ("0.0", 1, None), ("none", 1, None), ("Disabled", 1, None), ("off", 1, None),  # off in words and text numbers
    ("true", 3, None),
    # plain data parallelism written out (a fuzz of validate's row parsing read these as FSDP on)
    ("DDP", 1, None), ("N", 1, None), ("No (DDP + distributed optimizer)", 1, None), ("n/a", 1, None),
])
def test_fsdp_column_spellings(fsdp, zero, shard):
    fields = row_inputs({**BASE, "fsdp": fsdp, "tp": 8 if "TP 8" in str(fsdp) else 1}).plan_fields
    assert fields["zero"] == zero and fields.get("zero_shard_size") == shard


@pytest.mark.parametrize("value, zero", [(False, 0), ("false", 0), ("no", 0), ("0", 0), (True, 1), ("True", 1), ("on", 1),
                                         # a flag word with a note after it, y/n, check marks (they were refused)
                                         ("True (--use-distributed-optimizer)", 1), ("yes (Megatron distributed optimizer)", 1),
                                         ("Y", 1), ("\u2713", 1), ("N", 0), ("no (plain DDP)", 0)])
def test_distributed_optimizer_flag_spellings(value, zero):
    # a text "false" is off (it read as on: any non-empty string is truthy)
    row = {k: v for k, v in BASE.items()}
    assert row_inputs({**row, "distributed_optimizer": value}).plan_fields["zero"] == zero


def test_distributed_optimizer_text_that_is_no_flag_is_refused_by_name():
    res = predict_row({**BASE, "distributed_optimizer": "sometimes"})
    assert res.skipped and "distributed_optimizer='sometimes': must be true or false" in res.skipped


def test_accounted_embedding_and_loss_become_a_layout():
    # ModelZoo Qwen3-235B: 94 layers on pp 32 x vpp 3, "PP layout accounts for embedding and loss as
    # stages (94 layers -> 96 virtual stages)": 96 virtual stages of one unit each
    row = {**BASE, "num_layers": 94, "pp": 32, "vpp": 3, "num_gpus": 256, "extra_layout": "EDP=1; PP layout accounts for embedding and loss as stages (94 layers -> 96 virtual stages)"}
    layout = row_inputs(row).plan_fields["layout"]
    assert layout == "E|(t|)*94,L"


def test_unpublished_recompute_resolves_to_the_fastest_that_fits():
    res = predict_row({**BASE, "recompute": None})
    assert "recompute" in res.resolved and set(res.resolved) <= {"recompute", "recompute_num_layers"} and res.feasible


def test_unused_columns_are_listed():
    res = predict_row({**BASE, "interconnect": "IB", "aggregate_pflops": None, "other_metrics": {"steps": 100}})
    assert res.unused == ["other_metrics.steps"]


def test_kendall_tau_by_hand():
    # one group, three layouts: measured 1 < 2 < 3, predicted 1 < 3 > 2: pairs (a,b) right, (a,c)
    # right, (b,c) wrong -> tau = (2 - 1) / 3, two thirds ordered right
    raw = [dict(BASE, id=i) for i in "abc"]
    res = [RowResult(id=i, source_group="g", model_name="m", num_gpus=64, measured_tokens_per_second_per_gpu=m,
                     predicted_tokens_per_second_per_gpu=p, error=p / m - 1) for i, m, p in (("a", 1, 1), ("b", 2, 3), ("c", 3, 2))]
    pooled = rank_agreement(raw, res)["pooled"]
    assert pooled["pairs"] == 3 and pooled["kendall_tau"] == pytest.approx(1 / 3) and pooled["ordered_right"] == pytest.approx(2 / 3)
    # tau-a: a pair predicted equal (d: measured 4, predicted 3 like b) counts 0, not -1. Pairs:
    # (a,b) (a,c) (a,d) (c,d) right, (b,c) wrong, (b,d) tied -> (4 - 1) / 6, four sixths right
    raw.append(dict(BASE, id="d"))
    res.append(RowResult(id="d", source_group="g", model_name="m", num_gpus=64, measured_tokens_per_second_per_gpu=4,
                         predicted_tokens_per_second_per_gpu=3, error=3 / 4 - 1))
    pooled = rank_agreement(raw, res)["pooled"]
    assert (pooled["pairs"], pooled["tied"]) == (6, 1)
    assert pooled["kendall_tau"] == pytest.approx(3 / 6) and pooled["ordered_right"] == pytest.approx(4 / 6)


def test_summary_splits_a_family_by_gpu():
    # one family, two parts the model misses in opposite directions (the held-out dense FP8 rows:
    # GB300 too slow, GB200 about right): the family's MAPE pools them, the GPU table does not.
    # Errors -0.20, -0.10 on GB300 and +0.05 on GB200: family MAPE (0.20 + 0.10 + 0.05) / 3,
    # mean signed -0.25 / 3; GB300 MAPE 0.15, signed -0.15; GB200 0.05 both
    res = [RowResult(id=i, source_group="g", model_name="m", num_gpus=64, family="dense/megatron-style/fp8/blackwell", gpu=gpu,
                     plan="tp=1", measured_tokens_per_second_per_gpu=100.0, predicted_tokens_per_second_per_gpu=100.0 * (1 + e), error=e)
           for i, gpu, e in (("a", "GB300", -0.20), ("b", "GB300", -0.10), ("c", "GB200", 0.05))]
    s = summarize(res)
    fam = s["by_family"]["dense/megatron-style/fp8/blackwell"]
    assert fam["mape"] == pytest.approx(0.35 / 3) and fam["mean_signed_error"] == pytest.approx(-0.25 / 3)
    assert set(s["by_gpu"]) == {"GB200", "GB300"}
    assert s["by_gpu"]["GB300"]["mape"] == pytest.approx(0.15) and s["by_gpu"]["GB300"]["mean_signed_error"] == pytest.approx(-0.15)
    assert s["by_gpu"]["GB300"]["num_rows"] == 2 and s["by_gpu"]["GB200"]["mape"] == pytest.approx(0.05)
    text = render({"rows": [r.model_dump() for r in res], "summary": s})
    assert "by GPU:" in text and re.search(r"GB300\s+MAPE\s+15\.0%\s+\(2 rows\)", text)


def test_report_names_the_gpu_profile_a_row_resolves_to(validated):
    # torchao's MX-format table ran on B200s power-limited to 750 W (profiles/gpus/b200-750w.yaml):
    # the report groups such a row under its own profile, not under B200
    res = next(r for r in validated("fsdp_runs")["rows"] if r["id"] == "new-torchao-b200-l3-8b-none")
    assert res["gpu"] == "B200-750W" and res["error"] is not None


def test_same_layout_pairs_are_left_out_of_the_ranking():
    # issue 9: tau over rows that differ in layout. a and b resolve to one plan and one prediction
    # (the same layout in two software releases, measured 1 and 2); c is another layout (measured 3,
    # predicted 2). Pairs (a,c) and (b,c) are ranked, both right -> tau 1 over 2 pairs; (a,b) is
    # left out and counted as one same-layout pair, not as a tie
    raw = [dict(BASE, id=i) for i in "abc"]
    res = [RowResult(id=i, source_group="g", model_name="m", num_gpus=64, plan=plan, measured_tokens_per_second_per_gpu=m,
                     predicted_tokens_per_second_per_gpu=p, error=p / m - 1)
           for i, plan, m, p in (("a", "tp=2", 1, 1), ("b", "tp=2", 2, 1), ("c", "tp=4", 3, 2))]
    ra = rank_agreement(raw, res)
    assert (ra["pooled"]["pairs"], ra["pooled"]["tied"], ra["pooled"]["same_layout"]) == (2, 0, 1)
    assert ra["pooled"]["kendall_tau"] == pytest.approx(1.0) and ra["groups"][0]["same_layout"] == 1
    # the same plan predicted apart (another stack, FP8 recipe or routing the model takes) is a
    # choice a user makes and stays ranked: b predicted 1.5 -> (a,b) right, (a,c) right, (b,c) right
    res[1] = res[1].model_copy(update={"predicted_tokens_per_second_per_gpu": 1.5})
    ra_apart = rank_agreement(raw, res)
    assert (ra_apart["pooled"]["pairs"], ra_apart["pooled"]["same_layout"], ra_apart["pooled"]["kendall_tau"]) == (3, 0, 1.0)
    res[1] = res[1].model_copy(update={"predicted_tokens_per_second_per_gpu": 1})
    # a group of one layout only keeps its rows listed, with no tau
    ra = rank_agreement(raw[:2], res[:2])
    assert ra["pooled"]["pairs"] == 0 and ra["pooled"]["kendall_tau"] is None and ra["groups"][0]["kendall_tau"] is None


def test_rows_written_as_text_join_their_layout_group():
    # the same run written "64" / "8,192" and 64 / 8192 is one group of layout variants: one pair,
    # measured 1 < 2 and predicted 1 < 3, ordered right (tau 1); apart they would form no pair
    raw = [dict(BASE, id="a"), dict(BASE, id="b", num_gpus="64", seq_len="8,192", global_batch_size=None, tokens_per_batch=64 * 8192)]
    res = [RowResult(id=i, source_group="g", model_name="m", num_gpus=64, measured_tokens_per_second_per_gpu=m,
                     predicted_tokens_per_second_per_gpu=p, error=p / m - 1) for i, m, p in (("a", 1, 1), ("b", 2, 3))]
    pooled = rank_agreement(raw, res)["pooled"]
    assert (pooled["pairs"], pooled["kendall_tau"]) == (1, 1.0)


def test_torchtitan_selective_layer_is_every_other_block_whole():
    # torchtitan activation_checkpoint.selective_ac_option default "2": checkpoint every other layer
    # -> full recompute of 16 of Llama 3 8B's 32 layers (pp 1), per-op SAC for 'selective (op)'
    layer = row_inputs({**BASE, "software": "torchtitan", "recompute": "selective (layer)"}).plan_fields
    assert (layer["recompute"].value, layer["recompute_num_layers"]) == ("full", 16)
    op = row_inputs({**BASE, "software": "torchtitan", "recompute": "selective (op)"}).plan_fields
    assert op["recompute"].value == "selective" and "recompute_num_layers" not in op


DEEPSEEK_V3_ROW = {**BASE, "model_name": "DeepSeek-V3", "num_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
                   "num_kv_heads": 128, "ffn_hidden_size": 18432, "vocab_size": 129280, "seq_len": 4096,
                   "moe_num_experts": 256, "moe_top_k": 8, "moe_ffn_hidden_size": 2048, "moe_shared_expert_ffn_size": 2048}


def test_row_takes_the_architecture_of_its_model_preset():
    """The runs files carry no MLA, dense-prefix or MTP columns. A DeepSeek-V3 row with the dims
    the NeMo / ModelZoo pages state gets them from profiles/models/deepseek-v3.json (its HF
    config: q_lora 1536, kv_lora 512, first_k_dense_replace 3, one MTP layer), so the row's model
    is the preset's 682,636,338,176 parameters; before, it was an MHA model with 56-wide heads
    (7168 / 128) and MoE in all 61 layers."""
    model = row_model(DEEPSEEK_V3_ROW)
    preset = load_model("deepseek-v3")
    assert model.mla == preset.mla and model.moe_first_k_dense_layers == 3 and model.mtp_num_layers == 1
    assert total_params(model) == total_params(preset) == 682_636_338_176
    # a row's stated head width still wins over the preset's
    assert row_model({**BASE, "dims_source": "kv_channels 96"}).head_dim == 96


def test_preset_architecture_needs_the_preset_dims():
    """A reduced-depth proxy of a named model (16 of 61 layers) or an upcycled variant with other
    experts is not the preset: it keeps the row's own dims and gets none of the preset's fields."""
    proxy = row_model({**DEEPSEEK_V3_ROW, "num_layers": 16})
    assert proxy.mla is None and proxy.moe_first_k_dense_layers == 0
    assert row_model({**DEEPSEEK_V3_ROW, "moe_num_experts": 64}).mla is None


def test_hybrid_mamba_models_are_reported_not_modelled():
    """Nemotron-H mixes Mamba-2 layers into the stack (NeMo Nemotron-H configs,
    hybrid_override_pattern); the model spec has no state-space mixer, so a row naming it is
    'not modelled' with that fact, not predicted as a pure transformer."""
    reason = row_inputs({**BASE, "model_name": "Nemotron-H 56B"}).not_modelled
    assert reason is not None and "Mamba" in reason
    assert row_inputs(BASE).not_modelled is None


# ---- columns written as text, and a batch given as tokens: runs files from other sources ----

def test_numbers_written_as_text_predict_as_numbers():
    """A row whose numeric columns are strings ("1,024", "8192") predicts exactly as the numeric
    row: the same plan, the same tokens/s (no tolerance: the same inputs reach the cost model)."""
    text = {**BASE, "num_gpus": "64", "seq_len": "8,192", "global_batch_size": "64", "tp": "1",
            "tokens_per_sec_per_gpu": "5,000.0", "micro_batch_size": "1", "recompute": "full"}
    plain, written = predict_row({**BASE, "micro_batch_size": 1, "recompute": "full"}), predict_row(text)
    assert written.skipped is None and written.num_gpus == 64
    assert written.plan == plain.plan
    assert written.predicted_tokens_per_second_per_gpu == plain.predicted_tokens_per_second_per_gpu
    assert written.measured_tokens_per_second_per_gpu == 5000.0


def test_a_value_that_is_not_a_number_names_column_and_value():
    res = predict_row({**BASE, "tp": "eight"})
    assert res.skipped == "InputError: tp='eight': must be a number"
    res = predict_row({**BASE, "pp": "2.5"})
    assert res.skipped == "InputError: pp='2.5': must be a whole number"


@pytest.mark.parametrize("written, stage", [("ZeRO-3", 3), ("zero stage 2", 2), ("1", 1)])
def test_zero_stage_written_as_text(written, stage):
    inputs = row_inputs(normalize_row({**BASE, "zero_stage": written})[0])
    assert inputs.plan_fields["zero"] == stage


def test_global_batch_derived_from_tokens_per_batch():
    """Without global_batch_size, tokens_per_batch / seq_len gives it (64 x 8192 = 524,288 tokens
    -> 64 sequences), the report says so, and the prediction is the one of the row that states it."""
    row = {k: v for k, v in BASE.items() if k != "global_batch_size"}
    res = predict_row({**row, "tokens_per_batch": 64 * 8192})
    assert res.skipped is None and res.resolved["global_batch_size"] == "tokens_per_batch / seq_len"
    assert res.predicted_tokens_per_second_per_gpu == predict_row(BASE).predicted_tokens_per_second_per_gpu
    # or micro-batch x data-parallel ranks x accumulation steps: 1 x 64 x 1
    res = predict_row({**row, "global_batch_size": None, "micro_batch_size": 1, "dp": 64, "grad_accum_steps": 1})
    assert res.resolved["global_batch_size"] == "micro_batch_size x dp x grad_accum_steps"
    assert res.predicted_tokens_per_second_per_gpu == predict_row({**BASE, "micro_batch_size": 1}).predicted_tokens_per_second_per_gpu
    assert predict_row(row).skipped.startswith("InputError: global_batch_size=None: required")


def test_a_missing_tp_or_pp_comes_from_the_degrees_stated():
    """Narayanan et al. 2021 Table 1 row 5 style: 16-way model parallel with pp 2 -> tp 8; or
    dp 16 on 64 GPUs with pp 2 -> tp 2. The prediction is the one of the row that states it
    (same inputs reach the cost model), and the report says what was derived."""
    stated = {**BASE, "tp": 2, "pp": 2, "micro_batch_size": 1, "recompute": "full"}
    want = predict_row(stated).predicted_tokens_per_second_per_gpu
    from_dp = predict_row({**stated, "tp": None, "dp": 16})
    assert from_dp.resolved["tp"] == "num_gpus / (dp x cp x pp)"
    assert from_dp.predicted_tokens_per_second_per_gpu == want
    from_mp = predict_row({**stated, "pp": None, "model_parallel_size": 4})
    assert from_mp.resolved["pp"] == "model_parallel_size / tp"
    assert from_mp.predicted_tokens_per_second_per_gpu == want
    # nothing to derive it from: the default (1) stays, and nothing is reported as derived
    assert "tp" not in predict_row({**stated, "tp": None}).resolved
    assert normalize_row({**stated, "tp": None, "dp": 5})[0]["tp"] is None  # 64 / (5 x 2) is not whole


def test_kv_heads_come_from_the_preset_only_for_its_own_query_heads():
    """A row naming MPT-30B with 56 query heads and no KV heads (the preset has 64 MHA heads):
    read as multi-head attention over the row's 56 heads, not the preset's 64 KV heads (which
    do not divide 56). With the preset's 64 heads the preset's KV heads are taken."""
    row = {**BASE, "model_name": "MPT-30b", "num_layers": 48, "hidden_size": 7168, "num_attention_heads": 56,
           "num_kv_heads": None, "ffn_hidden_size": 28672}
    assert row_model(row).kv_heads == 56
    assert row_model({**row, "num_attention_heads": 64}).kv_heads == load_model("mpt-30b").kv_heads == 64


@pytest.mark.parametrize("written", ["38.2%", " 38.2 % ", 38.2, "38.2"])
def test_mfu_written_as_a_percentage_is_read_as_a_fraction(written):
    """MFU is a fraction of peak, so '38.2%' or 38.2 means 0.382: the measured tokens/s is the
    one of the row that writes 0.382 (0.382 x 989.5 TFLOP/s / the model's FLOPs per token)."""
    row = {k: v for k, v in BASE.items() if k != "tokens_per_sec_per_gpu"}
    row |= {"peak_tflops_used_by_source": 989.5, "micro_batch_size": 1, "recompute": "full"}
    want = predict_row({**row, "mfu": 0.382}).measured_tokens_per_second_per_gpu
    res = predict_row({**row, "mfu": written})
    assert res.skipped is None and res.measured_tokens_per_second_per_gpu == pytest.approx(want, rel=1e-12)
    assert res.resolved["mfu"].startswith("percent")


def test_batch_from_micro_batches_needs_no_dp_column():
    """mbs 1 x (64 GPUs / tp 2 / pp 2 = 16 ranks) x 4 steps = 64 sequences, as BASE states."""
    row = {k: v for k, v in BASE.items() if k != "global_batch_size"} | {"tp": 2, "pp": 2, "micro_batch_size": 1, "grad_accum_steps": 4}
    assert normalize_row(row)[0]["global_batch_size"] == 64


def test_a800_is_an_a100_with_less_nvlink():
    """A800 SXM4 (profiles/gpus/a800.yaml: the A100's die, HBM and clocks, NVLink 400 GB/s
    bidirectional): an A800 row runs on the DGX A100 preset narrowed to 200 GB/s per direction,
    so a TP 8 layout predicts slower than on the A100 (300 GB/s), and TP 1 FSDP within 2% of it
    (only its intra-node share of the gradient traffic moves)."""
    row = {**BASE, "model_name": "Llama 2 13B", "num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40,
           "num_kv_heads": 40, "ffn_hidden_size": 13824, "seq_len": 4096, "tp": 8, "global_batch_size": 256,
           "micro_batch_size": 1, "recompute": "none", "gpu_normalized": "A100-80GB"}
    a800 = row_inputs({**row, "gpu_normalized": "A800 SXM4 80GB"}).cluster
    assert (a800.gpu.name, a800.intra_node.bandwidth_gb_per_s) == ("A800", 200)
    tp8 = [predict_row({**row, "gpu_normalized": g}).predicted_tokens_per_second_per_gpu for g in ("A100-80GB", "A800")]
    assert tp8[1] < tp8[0]
    fsdp = [predict_row({**row, "tp": 1, "zero_stage": 3, "gpu_normalized": g}).predicted_tokens_per_second_per_gpu
            for g in ("A100-80GB", "A800")]
    assert fsdp[1] == pytest.approx(fsdp[0], rel=0.02)


@pytest.mark.parametrize("spelling", ["H800 SXM", "h800_sxm5", "NVIDIA H800"])
def test_gpu_names_match_whatever_the_separators(spelling):
    assert load_gpu(spelling).name == "H800"


@pytest.mark.parametrize("stated, part, nvlink_gb_per_s", [
    ("A800-SXM4-80GB", "A800", 200),           # profiles/gpus/a800.yaml: 400 GB/s bidirectional
    ("NVIDIA H800 80GB HBM3", "H800", 200),    # profiles/gpus/h800.yaml, on the hgx-h800 preset
    ("8x NVIDIA H20 96GB", "H20", 450),        # profiles/gpus/h20.yaml: full NVLink4
])
def test_a_part_named_in_gpu_type_outranks_the_nearest_label(stated, part, nvlink_gb_per_s):
    """A runs file labels its rows with the nearest GPU of a fixed list (fsdp_runs.json: 'gpu_normalized
    H100-80GB is the nearest allowed label'); the part gpu_type names is the one that ran."""
    cluster = row_inputs({**BASE, "gpu_type": stated, "gpu_normalized": "A100-80GB"}).cluster
    assert (cluster.gpu.name, cluster.intra_node.bandwidth_gb_per_s) == (part, nvlink_gb_per_s)


def test_a_pcie_card_runs_its_node_on_pcie():
    """H100 PCIe (profiles/gpus/h100-pcie.yaml, NVIDIA datasheet: 114 SMs, BF16 756 dense, 2.0 TB/s,
    PCIe Gen5 64 GB/s per direction, no node-wide NVLink): the node's links become PCIe at 64 GB/s
    without the NVLink calibration, so a ring in the node runs at 64 x 0.80 (pcie_efficiency) =
    51.2 GB/s of bus bandwidth. TP 8 then pays its activations' all-reduces over PCIe and predicts
    slower than the SXM part by more than the peaks' ratio 756 / 989.4 = 0.764."""
    row = {**BASE, "model_name": "Llama 2 13B", "num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40,
           "num_kv_heads": 40, "ffn_hidden_size": 13824, "seq_len": 4096, "tp": 8, "global_batch_size": 256,
           "micro_batch_size": 1, "recompute": "none", "gpu_normalized": "H100-80GB"}
    pcie = row_inputs({**row, "gpu_type": "H100 PCIe 80GB"}).cluster
    assert (pcie.gpu.name, pcie.intra_node.kind.value, pcie.intra_node.bandwidth_gb_per_s, pcie.calibration) == ("H100-PCIe", "pcie", 64, None)
    node = Group(size=8, per_node=8, nodes=1)
    assert fabric(pcie, node, params_for_cluster(pcie, None)).intra_busbw == pytest.approx(51.2e9)
    sxm, card = (predict_row({**row, "gpu_type": g}).predicted_tokens_per_second_per_gpu for g in ("H100 SXM", "H100 PCIe"))
    # by hand, per GPU and step (dp 8, 32 micro-batches of 4,096 tokens): compute 6 x 13e9 x 131,072
    # / 8 = 1.28e15 FLOP, ~1.7 s on SXM and ~2.3 s at 756; SP's 8 collectives per layer per
    # micro-batch move 7/8 x 4,096 x 5,120 x 2 B = 36.7 MB each, 294 MB x 40 layers x 32 = 376 GB:
    # ~1.0 s at 366 GB/s (NVLink ring), ~7.3 s at 51.2 -> (1.7 + 1.0) / (2.3 + 7.3) = 0.28,
    # well under 0.8 x the peaks' ratio
    assert card / sxm < 0.764 * 0.8


def test_gh200_runs_on_quad_nodes():
    """GH200 (profiles/gpus/gh200.yaml: H100 compute, 96 GB HBM3 at 4 TB/s) on the quad-GH200 preset
    (cscs-docs Alps: four superchips and four NICs per node, no NVSwitch; NCCL issue 1272: 24.2 GB/s
    sendrecv per GPU over Slingshot = one 200 Gb/s NIC per GPU)."""
    cluster = row_inputs({**BASE, "gpu_type": "NVIDIA GH200 480GB", "gpu_normalized": "H100-80GB"}).cluster
    assert (cluster.name, cluster.gpu.name, cluster.gpus_per_node, cluster.nic_gb_per_s_per_gpu, cluster.intra_node.sharp) == \
        ("quad-gh200", "GH200", 4, 25, False)
    assert cluster.gpu.hbm_bytes == pytest.approx(94.5 * 2**30)
    assert row_inputs({**BASE, "gpu_type": "GH200 144GB HBM3e"}).cluster.gpu.hbm_bytes == pytest.approx(141 * 2**30)
    assert row_inputs({**BASE, "gpu_type": "Grace Hopper, 144GB HBM3e"}).cluster.gpu.name == "GH200-144GB"


def test_v100_rows_run_on_a_dgx2_in_fp16_without_flash_attention():
    """V100 (profiles/clusters/dgx-2.yaml, Megatron-LM 2019 sec. 5: 16 V100 per DGX-2H on NVSwitch,
    100 GB/s per server over 8 InfiniBand adapters = 6.25 GB/s per GPU). Volta has no bf16 and no
    FlashAttention (Dao-AILab/flash-attention: Turing and newer), so a row that leaves them out ran
    fp16 with unfused attention; a row on 8-GPU nodes (DGX-1) narrows the node."""
    row = {**BASE, "gpu_type": "Tesla V100 SXM3 32GB (DGX-2H)", "gpu_normalized": "V100", "num_gpus": 512,
           "tp": 8, "seq_len": 1024, "global_batch_size": 512, "recompute": "full"}
    inputs = row_inputs(row)
    assert (inputs.cluster.name, inputs.cluster.gpus_per_node, inputs.cluster.nic_gb_per_s_per_gpu) == ("dgx-2", 16, 6.25)
    # Megatron-LM 2019 sec. 5.1: 39 TFLOP/s sustained on one DGX-2H V100 'is 30% of peak' -> 130
    assert (inputs.cluster.gpu.name, inputs.cluster.gpu.peak_tflops.fp16) == ("V100-SXM3", 130)
    assert (inputs.training.precision.value, inputs.training.flash_attention) == ("fp16", False)
    # a precision the reader does not know ('mixed') is the part's default too, not bf16
    assert row_inputs({**row, "precision_normalized": "mixed"}).training.precision.value == "fp16"
    assert predict_row(row).skipped is None
    assert row_inputs({**row, "gpu_type": "V100 16GB", "gpus_per_node": 8}).cluster.gpus_per_node == 8
    assert row_inputs({**row, "gpu_type": "V100 16GB"}).cluster.gpu.hbm_bytes == pytest.approx(15.78 * 2**30)


@pytest.mark.parametrize("fields, compiled", [
    ({"notes": "FSDP=256; num_gpus=256 used. torch.compile enabled. global_batch_size = ..."}, True),  # torchtitan mxfp8 doc rows
    ({"software_version": "torchtitan Aug 2024 (train_configs/llama3_405b.toml: compile on, TP 8)"}, True),
    ({"notes": "seq_len 8192 and compile from llama3_405b.toml at this commit"}, True),
    ({"notes": "FSDP2 1D. torch.compile off and bf16 params / fp32 reduce"}, False),  # torchtitan A100 rows
    ({"notes": "run without torch.compile", "software_version": "compile on in the toml"}, False),  # off wins
    ({"notes": "median tokens/s"}, False),
    ({"variant": "fsdp_torch.compile"}, True),
    ({"notes": "torch.compile enabled", "other_metrics": {"torch_compile": False}}, False),  # the flag column wins
])
def test_torchtitan_compile_read_from_the_row(fields, compiled):
    """torch.compile is a named stack mechanism (fused element-wise kernels, async TP): a row
    that states it in its notes or software version runs the compiled stack."""
    from autopar.specs.training import Stack
    from autopar.validation.rows import row_stack
    row = {"software": "torchtitan", "id": "r", **fields}
    assert row_stack(row) == (Stack.torchtitan_compile if compiled else Stack.torchtitan)


@pytest.mark.parametrize("software, stack", [
    ("HF Transformers Trainer + Accelerate + PyTorch FSDP (FSDP1) + PEFT LoRA", "pytorch-fsdp"),
    ("metaseq (fairscale FSDP)", "pytorch-fsdp"),
    ("PyTorch FSDP", "pytorch-fsdp"),
    ("fms-fsdp", "pytorch-fsdp"),
    ("MosaicML Composer + PyTorch FSDP", "llm-foundry"),       # Composer is its own stack
    ("NeMo 2.0 / Megatron-Core (Megatron-FSDP)", "megatron"),  # Megatron's own FSDP, Megatron kernels
    ("HF Accelerate + DeepSpeed ZeRO-3", "deepspeed"),
    ("Meta internal 4D parallelism (PyTorch; FSDP+TP+PP+CP; NCCLX)", "megatron"),  # no named FSDP trainer
])
def test_pytorch_fsdp_trainers_run_the_pytorch_fsdp_stack(software, stack):
    """A Hugging Face / Accelerate / fairscale FSDP row runs eager HF kernels under FSDP1
    (profiles/stacks/pytorch-fsdp.yaml), not Megatron's fused ones."""
    from autopar.validation.rows import row_stack
    assert row_stack({"software": software, "id": "r"}).value == stack


# Rows from other tables leave columns out or write them differently: what a row does not state
# comes from what it does, and what nothing supplies is named in the skip, never a KeyError.
BARE = {k: v for k, v in BASE.items() if k not in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size")}


@pytest.mark.parametrize("name, preset", [
    ("Llama 3 8B", "llama3-8b"), ("Llama 3.1 8B", "llama3-8b"), ("Meta-Llama-3.1-405B", "llama3-405b"),
    ("Llama-2 70B", "llama2-70b"), ("Mixtral 8x7B", "mixtral-8x7b"), ("DeepSeek-V3", "deepseek-v3"), ("GPT 1.7B", None),
])
def test_model_name_finds_its_preset(name, preset):
    from autopar.validation.rows import preset_key_for_name
    assert preset_key_for_name(name) == preset


def test_missing_shape_comes_from_the_named_preset():
    # LLaMA 3 8B (Llama 3 paper Table 3): 32 layers, width 4096, 32 heads, 8 KV heads, FFN 14336
    row, derived = normalize_row({**BARE, "model_name": "Llama 3.1 8B"})
    assert (row["num_layers"], row["hidden_size"], row["num_attention_heads"], row["num_kv_heads"], row["ffn_hidden_size"]) == (32, 4096, 32, 8, 14336)
    assert derived["hidden_size"] == "model preset llama3-8b"
    # the prediction equals the one of the row that states the shape
    assert predict_row({**BARE, "model_name": "Llama 3.1 8B"}).predicted_tokens_per_second_per_gpu == pytest.approx(
        predict_row({**BASE, "model_name": "Llama 3.1 8B"}).predicted_tokens_per_second_per_gpu, rel=1e-9)


def test_missing_shape_without_a_preset_is_named():
    res = predict_row({**BARE, "model_name": "GPT 1.7B"})
    assert res.skipped.startswith("InputError: num_layers=None: required (or a model_name that names a model preset")


def test_expert_count_from_the_preset_when_ep_is_stated():
    # Mixtral 8x7B: 8 experts, top-2 (Jiang et al. 2024); the row states EP 8 and no experts
    row = {**BASE, "model_name": "Mixtral 8x7B", "num_layers": 32, "num_attention_heads": 32, "ffn_hidden_size": 14336, "ep": 8}
    out, derived = normalize_row(row)
    assert (out["moe_num_experts"], out["moe_top_k"]) == (8, 2) and derived["moe_num_experts"] == "model preset mixtral-8x7b"


@pytest.mark.parametrize("columns, gpus, how", [
    ({"tp": 8, "pp": 4, "dp": 2, "cp": 2}, 128, "tp x pp x cp x dp"),                       # 8 x 4 x 2 x 2
    ({"tokens_per_sec_total": 320000.0, "tokens_per_sec_per_gpu": 5000.0}, 64, "tokens_per_sec_total / tokens_per_sec_per_gpu"),  # 320000 / 5000
])
def test_missing_num_gpus_is_derived(columns, gpus, how):
    row = {k: v for k, v in BASE.items() if k != "num_gpus"} | columns
    out, derived = normalize_row(row)
    assert out["num_gpus"] == gpus and derived["num_gpus"] == how


def test_blank_cells_are_columns_not_given():
    # "" / "n/a" / "-" in a numeric or stage column: not given (was: zero_stage='' refused the row)
    out, _ = normalize_row({**BASE, "zero_stage": "", "micro_batch_size": "n/a", "vpp": "-"})
    assert out["zero_stage"] is None and out["micro_batch_size"] is None and out["vpp"] is None
    assert predict_row({**BASE, "zero_stage": "", "micro_batch_size": "n/a"}).skipped is None


def test_seq_len_from_tokens_per_batch():
    out, derived = normalize_row({**{k: v for k, v in BASE.items() if k != "seq_len"}, "tokens_per_batch": 524288})
    assert out["seq_len"] == 8192 and derived["seq_len"] == "tokens_per_batch / global_batch_size"  # 524288 / 64


@pytest.mark.parametrize("label, gpu_type, part", [
    ("H100 (80GB)", None, "H100"), ("DGX-B200", None, "B200"), (None, "H100-SXM (DGX H100, Eos)", "H100"),
    ("GB200 NVL72 rack", None, "GB200"), ("A100 SXM4 40 GB", None, "A100-40GB"),
])
def test_gpu_named_in_free_text(label, gpu_type, part):
    from autopar.validation.rows import row_cluster
    row = {**BASE, "gpu_normalized": label, "gpu_type": gpu_type}
    assert row_cluster(normalize_row(row)[0]).gpu.name == part


@pytest.mark.parametrize("written, precision", [
    ("FP8 (Transformer Engine)", "fp8"), ("fp8-hybrid", "fp8"), ("MXFP8", "fp8"), ("BF16 mixed precision", "bf16"),
    ("fp16 (apex AMP)", "fp16"), ("NVFP4", "fp4"), ("mixed", "bf16"),   # an unknown word: the part's default
    ("bf16 (no FP8)", "bf16"), ("BF16, FP8 off", "bf16"), ("bf16 without fp8", "bf16"), ("non-FP8 baseline (bf16)", "bf16"),
])
def test_precision_read_from_text_without_precision_normalized(written, precision):
    assert row_inputs({**BASE, "precision": written}).training.precision.value == precision


@pytest.mark.parametrize("written, recompute", [
    ("activation checkpointing", "full"), ("gradient checkpointing", "full"), ("AC=full", "full"), ("yes", "full"),
    ("selective", "selective"), ("SAC", "selective"), ("off", "none"), ("partial (20 layers)", None),
    # a negation is read before the words it negates (llm-foundry's tables: 'trained without
    # activation checkpointing'), so these are none, not full
    ("none (trained without activation checkpointing)", "none"), ("no gradient checkpointing", "none"),
    ("without recompute", "none"),
])
def test_recompute_spellings(written, recompute):
    fields = row_inputs({**BASE, "recompute": written}).plan_fields
    assert (fields.get("recompute").value if fields.get("recompute") else None) == recompute


@pytest.mark.parametrize("written, stage", [
    ("os", 1), ("P_os+g", 2), ("os+g+p", 3), ("FSDP", 3), ("distributed optimizer", 1), ("none", 0), ("ZeRO stage 2", 2),
])
def test_zero_stage_words(written, stage):
    # ZeRO paper (Rajbhandari et al. 2020) sec. 5: P_os = stage 1, P_os+g = 2, P_os+g+p = 3
    assert normalize_row({**BASE, "zero_stage": written})[0]["zero_stage"] == stage


def test_zero_stage_nonsense_is_named():
    res = predict_row({**BASE, "zero_stage": "maybe"})
    assert res.skipped.startswith("InputError: zero_stage='maybe': must name a ZeRO stage 0-3")


@pytest.mark.parametrize("written, shard, reshard", [
    ("FULL_SHARD", None, None), ("HYBRID_SHARD", 8, None), ("SHARD_GRAD_OP", None, False), ("_HYBRID_SHARD_ZERO2", 8, False),
])
def test_pytorch_fsdp_sharding_strategies(written, shard, reshard):
    # torch.distributed.fsdp.ShardingStrategy: HYBRID_SHARD shards within a node (8 GPUs here) and
    # replicates across; SHARD_GRAD_OP keeps the gathered weights from forward to backward
    fields = row_inputs({**BASE, "fsdp": written}).plan_fields
    assert fields["zero"] == 3 and fields.get("zero_shard_size") == shard and fields.get("reshard") == reshard


@pytest.mark.parametrize("precision, notes, gathered", [
    ("float8 (torchao Float8Linear, tensorwise dynamic, FSDP float8 all-gather) + bf16", "", True),  # torchtitan 405B rows
    ("float8 tensorwise (f8 all-gather) + torch.compile", "", True),                                 # torchao B200 table
    ("fp8 (blockwise FP8 recipe)", "PR=fp8 (blockwise FP8, e4m3, fp8-param-gather)", True),          # ModelZoo Mixtral notes
    ("float8 (torchao Float8Linear) + bf16 + torch.compile", "", False),                               # not stated: bf16 gathers
    ("bf16", "all-gather overlapped", False),
])
def test_fp8_weight_gathers_as_the_row_states(precision, notes, gathered):
    training = row_inputs({**BASE, "precision": precision, "notes": notes, "fsdp": 1}).training
    assert training.fp8_param_gather is gathered


def test_unknown_precision_normalized_is_listed_and_the_text_column_read():
    # a spelling the reader does not know is not silently bf16: the free-text precision column
    # decides, and the report lists precision_normalized among the columns it did not read
    row = {**BASE, "precision_normalized": "mixed", "precision": "FP8 (Transformer Engine) + BF16"}
    inputs = row_inputs(row)
    assert inputs.training.precision.value == "fp8"
    assert "precision_normalized" in inputs.unused
    # a known one, or one naming a known format ('bf16 mixed'), is read and not listed
    for known in ("fp8_current_scaling", "BF16 mixed"):
        assert "precision_normalized" not in row_inputs({**row, "precision_normalized": known}).unused
    assert row_inputs({**row, "precision_normalized": "BF16 mixed"}).training.precision.value == "bf16"


# Spellings a fuzz of row text found misread (rows from other sources write the same fact other
# ways); each is the rule autopar.validation.rows states, not a per-row exception.
@pytest.mark.parametrize("written, recompute", [
    ("activation checkpointing: off", "none"), ("No AC", "none"), ("AC off", "none"), (False, "none"),
    ("gradient_checkpointing=False", "none"), (True, "full"), ("gradient_checkpointing: true", "full"),
    ("selective activation checkpointing (op)", "selective"), ("activation checkpointing (selective per-op)", "selective"),
    # Megatron-LM arguments.py: --checkpoint-activations is the older full-layer flag,
    # --recompute-activations sets recompute_granularity 'selective'
    ("--checkpoint-activations", "full"), ("--recompute-activations", "selective"),
    ("--recompute-granularity full --recompute-method uniform", "full"), ("full (20 layers)", "full"),
    ("partial (20 layers)", None), (7, None), ("10", None),   # a count of layers is no flag: left open
])
def test_recompute_spellings_from_other_trainers(written, recompute):
    fields = row_inputs({**BASE, "recompute": written}).plan_fields
    assert (fields.get("recompute").value if fields.get("recompute") else None) == recompute


@pytest.mark.parametrize("software, stack", [
    ("Torch Titan", "torchtitan"), ("MosaicML LLM Foundry", "llm-foundry"), ("MosaicML", "llm-foundry"),
    ("torch FSDP", "pytorch-fsdp"), ("PyTorch (FSDP)", "pytorch-fsdp"), ("Megatron-LM", "megatron"),
])
def test_stack_spellings(software, stack):
    from autopar.validation.rows import row_stack
    assert row_stack({"software": software, "id": "r"}).value == stack


def test_torch_compile_written_false_is_off():
    from autopar.validation.rows import row_stack
    for written, stack in (("False", "torchtitan"), ("no", "torchtitan"), ("True", "torchtitan-compile"), (1, "torchtitan-compile")):
        assert row_stack({"software": "torchtitan", "id": "r", "other_metrics": {"torch_compile": written}}).value == stack


@pytest.mark.parametrize("text, gb_per_s_per_gpu", [
    ("GCP A3 Mega (a3-megagpu-8g), GPUDirect-TCPXO", 25.0), ("a3-highgpu-8g", 12.5), ("A3 Ultra (H200)", 50.0),
    ("Google Cloud A4 (B200)", 50.0), ("GCP A4X", None),  # an NVL72 tray of 4 GPUs, not a NIC node of 8
])
def test_google_cloud_machine_types(text, gb_per_s_per_gpu):
    """profiles/validation/networks.yaml, from Google Cloud's 'Networking and GPU machines': A3 High
    four 200 Gb/s GPU NICs (800 / 8 bits / 8 GPUs = 12.5 GB/s), A3 Mega 1,600 Gb/s (25), A3 Ultra
    and A4 eight 400 Gb/s CX7 (50); before, a GCP row fell back to its cluster preset's NICs."""
    from autopar.validation.network import stated_network
    stated = stated_network({"interconnect": text}, 8)
    assert (stated.nic_gb_per_s_per_gpu if stated else None) == gb_per_s_per_gpu


@pytest.mark.parametrize("column, written, value", [
    ("tokens_per_sec_per_gpu", "~3700", 3700.0), ("tokens_per_sec_per_gpu", "3700 tok/s", 3700.0),
    ("tokens_per_sec_per_gpu", "3.7K tokens/s", 3700.0),          # a throughput's K is decimal
    ("seq_len", "4K", 4096), ("num_gpus", "16K GPUs", 16384),     # a count's K is binary (Llama 3 paper: 16K GPUs = 16,384)
    ("num_gpus", "64 GPUs", 64), ("step_time_s", "850 ms", 0.85), ("step_time_s", "1.2 s", 1.2),
    ("micro_batch_size", "N.A.", None), ("micro_batch_size", "TBD", None), ("cp", "None", 1), ("micro_batch_size", "None", None),
])
def test_numbers_as_tables_write_them(column, written, value):
    out, _ = normalize_row({**BASE, column: written})
    assert out[column] == (pytest.approx(value) if isinstance(value, float) else value)


def test_a_number_with_a_foreign_word_is_still_refused():
    assert predict_row({**BASE, "tp": "eight"}).skipped == "InputError: tp='eight': must be a number"


@pytest.mark.parametrize("written, sp", [("False", False), ("no", False), ("True", True), ("n/a", True), (None, True)])
def test_sequence_parallel_written_as_text(written, sp):
    # tp 8: sequence parallel is the Megatron default where the row gives no yes/no
    assert row_inputs({**BASE, "tp": 8, "sequence_parallel": written}).plan_fields["sp"] is sp


def test_async_tp_written_false_is_off():
    row = {**BASE, "software": "torchtitan", "tp": 8}
    assert row_inputs({**row, "other_metrics": {"async_tp": "False"}}).plan_fields["tp_overlap"] is False
    assert row_inputs({**row, "other_metrics": {"async_tp": "true"}}).plan_fields["tp_overlap"] is True
    assert row_inputs({**row, "extra_layout": "async_tp on"}).plan_fields["tp_overlap"] is True


MIXTRAL = {**BASE, "model_name": "Mixtral 8x7B", "vocab_size": 32000, "moe_num_experts": 8, "moe_top_k": 2, "ep": 8}


@pytest.mark.parametrize("written, dispatcher", [
    ("deep_ep", "deepep"), ("Hybrid-EP", "deepep"), ("flex (DeepEP)", "deepep"), ("all-gather", "allgather"),
    ("alltoall", "alltoall"), (None, "alltoall"),
])
def test_dispatcher_spellings(written, dispatcher):
    assert row_inputs({**MIXTRAL, "moe_dispatcher": written}).plan_fields["dispatcher"].value == dispatcher


@pytest.mark.parametrize("layout, overlapped", [
    ("a2a overlap", True), ("--overlap-moe-expert-parallel-comm", True), ("EP A2A overlap", True),
    ("a2a overlap (a2a_overlap=0)", False), ("dropless", False),
])
def test_ep_overlap_spellings(layout, overlapped):
    assert row_inputs({**MIXTRAL, "extra_layout": layout}).plan_fields["ep_overlap"] is overlapped


@pytest.mark.parametrize("layout, routing", [
    ("force-balanced routing", "balanced"), ("--moe-router-force-load-balancing", "balanced"),
    ("uniform routing", "balanced"), ("ideal routing (balanced)", "balanced"), ("ideal (balanced) routing", "balanced"),
    ("aux-loss-free load balancing", "learned"), ("unbalanced routing measured", "learned"),
])
def test_forced_balance_spellings(layout, routing):
    assert row_inputs({**MIXTRAL, "extra_layout": layout}).training.moe_routing.value == routing


@pytest.mark.parametrize("name, preset", [
    ("meta-llama/Llama-2-7b-hf", "llama2-7b"), ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"), ("Qwen3-235B", "qwen3-235b-a22b"),
    ("Qwen/Qwen3-30B-A3B-Base", "qwen3-30b-a3b"), ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama3-70b"),
    ("DeepSeek-V3", "deepseek-v3"), ("Qwen3-7B", None),
])
def test_hugging_face_names_find_their_preset(name, preset):
    from autopar.validation.rows import preset_key_for_name
    assert preset_key_for_name(name) == preset


@pytest.mark.parametrize("gpu_type, label, part", [
    ("H100 96GB", "H100-80GB", "H100-96GB-500W"), ("NVIDIA H100 NVL 94GB", "H100-80GB", "H100-NVL"),  # its own part, not the 96 GB SXM
    ("B200 (power-capped 750 W)", "B200", "B200-750W"), ("B200 power capped", "B200", "B200-750W"),
    ("A100-SXM4-40GB", "A100-80GB", "A100-40GB"), (None, "H100-PCIe", "H100-PCIe"), ("A100 80GB", "A100-80GB", "A100-80GB"),
])
def test_parts_written_other_ways(gpu_type, label, part):
    from autopar.validation.rows import row_cluster
    cluster = row_cluster(normalize_row({**BASE, "gpu_type": gpu_type, "gpu_normalized": label})[0])
    assert cluster.gpu.name == part


@pytest.mark.parametrize("task, frozen", [("LoRA fine-tuning", True), ("QLoRA", True), ("PEFT adapters", True),
                                          ("pretraining", False), ("full fine-tuning", False)])
def test_lora_tasks_freeze_the_base_weights(task, frozen):
    assert row_inputs({**BASE, "task": task}).training.frozen_weights is frozen


def test_hsdp_shards_within_a_node():
    fields = row_inputs({**BASE, "fsdp": "HSDP"}).plan_fields
    assert fields["zero"] == 3 and fields["zero_shard_size"] == 8  # 8 GPUs per node of 64


@pytest.mark.parametrize("version, old", [("Megatron-LM (April 2021)", True), ("2021-04", True), ("Megatron-LM v2.0", False),
                                          ("Megatron-Core 0.12 (2025-04)", False)])
def test_pre_2022_software_runs_without_later_kernels(version, old):
    from autopar.validation.rows import is_2021
    assert is_2021({**BASE, "software_version": version}) is old


def test_an_mfu_without_its_peak_is_taken_against_the_parts_bf16_peak():
    # PaLM App. B: MFU against the accelerator's bf16 matmul peak; H100 SXM dense bf16 is 989.4 TFLOP/s
    # (profiles/gpus). The same row with that peak stated reads the same throughput.
    row = {k: v for k, v in BASE.items() if k != "tokens_per_sec_per_gpu"} | {"mfu": 0.40}
    stated, derived = predict_row({**row, "peak_tflops_used_by_source": 989.4}), predict_row(row)
    assert derived.skipped is None and "bf16 peak: none stated" in derived.metric
    assert derived.measured_tokens_per_second_per_gpu == pytest.approx(stated.measured_tokens_per_second_per_gpu, rel=1e-12)


# Round two of the spelling fuzz (the same facts as other tables write them)
@pytest.mark.parametrize("text, gb_per_s_per_gpu", [
    ("400Gb/s x 8 per node", 50.0), ("Quantum-2 NDR 400Gb/s, 8 per node", 50.0), ("400 Gb/s NDR (x8 per node)", 50.0),
    ("8 NICs x 400 Gb/s", 50.0), ("8*400Gbps", 50.0),
    ("8x NDR", 50.0), ("4x HDR200 per node", 12.5),   # IBTA: NDR 400, HDR 200 Gb/s a port; 8 x 400 / 8 bits / 8 GPUs
    ("400 Gbps per node", 6.25), ("InfiniBand 400 Gb/s", None), ("InfiniBand NDR", None),  # no scope, no count: not read
])
def test_nic_counts_written_after_the_rate(text, gb_per_s_per_gpu):
    from autopar.validation.network import _from_words
    stated = _from_words(text, 8)
    assert (stated.nic_gb_per_s_per_gpu if stated else None) == gb_per_s_per_gpu


@pytest.mark.parametrize("column, written, value", [
    ("num_gpus", "64 (8 nodes)", 64), ("tp", "TP=2", 2), ("tp", "2-way", 2), ("pp", "PP4", 4), ("micro_batch_size", "MBS=2", 2),
    ("step_time_s", "850ms", 0.85), ("step_time_s", "850 msec", 0.85), ("step_time_s", "0.85s", 0.85), ("memory_gb", "70GB", 70.0),
    ("tflops_per_gpu", "0.4 PFLOPS", 400.0), ("cp", "off", 1), ("cp", "no CP", 1), ("vpp", "no interleaving", 1),
    ("num_gpus", "8 nodes", 64), ("num_gpus", "4 nodes x 4 GPUs", 16), ("num_gpus", "8 nodes (64 GPUs)", 64),
    ("tokens_per_sec_per_gpu", "29.6K tok/s/node", 3700.0),   # 29,600 / 8 GPUs per node
    # memory in another unit than the column's GB (was read as 80,000 GB)
    ("memory_gb", "80000 MB", 80.0), ("memory_gb", "73728 MiB", 72.0), ("memory_gb", "0.08 TB", 80.0), ("memory_gb", "76.5 GiB", 76.5),
])
def test_numbers_with_notes_labels_and_units(column, written, value):
    out, _ = normalize_row({**BASE, column: written})
    assert out[column] == (pytest.approx(value) if isinstance(value, float) else value)


@pytest.mark.parametrize("column, written, value", [
    ("tokens_per_sec_per_gpu", "3700-3800", 3750.0), ("tokens_per_sec_per_gpu", "3700\u20133800", 3750.0),
    ("tokens_per_sec_per_gpu", "3.7k-3.8k tok/s", 3750.0),   # was read as 3.7: the unit swallowed '-3.8k'
    ("tokens_per_sec_per_gpu", "3.7-3.8K tokens/s", 3750.0),  # the multiplier written once holds for both ends
    ("tokens_per_sec_per_gpu", "3700 to 3800", 3750.0), ("tokens_per_sec_per_gpu", "3,700 \u00b1 50", 3700.0),
    ("tokens_per_sec_per_gpu", "3700 +/- 2% tok/s", 3700.0), ("step_time_s", "850-950 ms", 0.9),
    ("mfu", "38-40%", 0.39), ("mfu", "38% \u00b1 1%", 0.38),
])
def test_a_measured_range_is_its_midpoint_and_a_spread_its_central_value(column, written, value):
    out, derived = normalize_row({**BASE, column: written})
    assert out[column] == pytest.approx(value)
    assert re.search(r"the range's midpoint|its central value", derived[column])


@pytest.mark.parametrize("column, written", [
    ("tokens_per_sec_per_gpu", "3800-3700"),   # low end above the high end: not a range
    ("tokens_per_sec_per_gpu", ">3700"), ("tp", "4-8"),   # a bound; a layout degree is one value
])
def test_what_is_not_one_measured_value_is_refused_naming_the_column(column, written):
    assert predict_row({**BASE, column: written}).skipped.startswith(f"InputError: {column}=")


def test_global_batch_written_in_tokens():
    # Llama 2/3, OPT and BLOOM state the batch in tokens: 4M tokens = 4 x 1024^2 / 8192 = 512 sequences
    out, derived = normalize_row({**BASE, "global_batch_size": "4M tokens"})
    assert out["global_batch_size"] == 512 and derived["global_batch_size"] == "tokens_per_batch / seq_len"


@pytest.mark.parametrize("written, precision", [
    ("bf16 (not FP8)", "bf16"), ("BF16 (FP8 not used)", "bf16"), ("BF16 baseline (vs FP8)", "bf16"), ("bf16, no TE FP8", "bf16"),
    ("bf16 [fp8: no]", "bf16"), ("BF16 (FP8 N/A)", "bf16"), ("bf16 (no fp8/fp4)", "bf16"), ("16-mixed", "fp16"),
    ("FP8 hybrid", "fp8"), ("FP8 + BF16", "fp8"),
])
def test_precision_negations_and_lightning_names(written, precision):
    assert row_inputs({**BASE, "precision": written}).training.precision.value == precision


@pytest.mark.parametrize("software, stack", [
    ("FSDP (PyTorch)", "pytorch-fsdp"), ("PyTorch 2.1 FSDP", "pytorch-fsdp"), ("torch.distributed FSDP", "pytorch-fsdp"),
    ("FSDP2", "pytorch-fsdp"), ("PyTorch Lightning + FSDP", "pytorch-fsdp"), ("torchtune", "pytorch-fsdp"),
    ("torch-titan", "torchtitan"), ("Meta internal 4D parallelism (PyTorch; FSDP+TP+PP+CP; NCCLX)", "megatron"),
])
def test_more_stack_spellings(software, stack):
    from autopar.validation.rows import row_stack
    assert row_stack({"software": software, "id": "r"}).value == stack


@pytest.mark.parametrize("written, recompute", [
    ("recompute_granularity=full", "full"), ("recompute_granularity: selective", "selective"), ("act ckpt", "full"),
    ("grad ckpt", "full"), ("activation recomputation", "full"), ("uniform", "full"), ("checkpointing: full", "full"),
    ("w/o AC", "none"), ("not used", "none"), ("grad ckpt off", "none"),
])
def test_recompute_config_words(written, recompute):
    assert row_inputs({**BASE, "recompute": written}).plan_fields["recompute"].value == recompute


@pytest.mark.parametrize("layout, routing", [
    ("not force-balanced", "learned"), ("force_balance=False", "learned"), ("--moe-router-force-load-balancing false", "learned"),
    ("forced load balancing: off", "learned"), ("--moe-router-force-load-balancing", "balanced"),
])
def test_forced_balance_denied(layout, routing):
    assert row_inputs({**MIXTRAL, "extra_layout": layout}).training.moe_routing.value == routing


@pytest.mark.parametrize("layout, factor", [
    ("--moe-expert-capacity-factor 1.0", 1.0), ("capacity_factor: 1.25", 1.25), ("CF=1", 1.0),
    ("token drop, capacity factor 2", 2.0), ("dropless", None),
])
def test_capacity_factor_spellings(layout, factor):
    assert row_inputs({**MIXTRAL, "extra_layout": layout}).training.moe_capacity_factor == factor


@pytest.mark.parametrize("name", ["Yi-1.5-9B", "InternLM2-7B", "DBRX", "Granite-8B", "Phi-3-medium", "GLM-4-9B"])
def test_swiglu_families_are_gated(name):
    # each ships a gated MLP (SwiGLU/GeGLU: gate, up and down projections) in its HF config
    assert row_model(normalize_row({**BASE, "model_name": name})[0]).gated_mlp is True


@pytest.mark.parametrize("written, sp", [("SP off", False), ("without SP", False), ("not used", False), ("on", True)])
def test_sequence_parallel_in_the_negative(written, sp):
    assert row_inputs({**BASE, "tp": 8, "sequence_parallel": written}).plan_fields["sp"] is sp


@pytest.mark.parametrize("label, part", [("8xH100", "H100"), ("H100s", "H100"), ("Hopper", "H100"), ("p5.48xlarge", "H100"),
                                         ("8xA100 80GB", "A100-80GB"), ("A100-40G SXM", "A100-40GB"), ("p4d.24xlarge", "A100-40GB")])
def test_gpu_labels_other_ways(label, part):
    from autopar.validation.rows import row_cluster
    assert row_cluster(normalize_row({**BASE, "gpu_normalized": label})[0]).gpu.name == part


@pytest.mark.parametrize("layout, vpp, schedule", [
    ("1F1B (non-interleaved)", 1, "1f1b"), ("interleaved disabled", 1, "1f1b"), ("interleaved 1F1B, vpp=5", 5, "interleaved"),
    ("virtual pipeline 4", 4, "interleaved"), ("interleaved schedule (2 chunks per stage)", 2, "interleaved"),
    ("interleaved", 2, "interleaved"),
])
def test_interleaving_in_words(layout, vpp, schedule):
    fields = row_inputs({**BASE, "pp": 4, "num_gpus": 64, "extra_layout": layout}).plan_fields
    assert fields["vpp"] == vpp and getattr(fields.get("schedule"), "value", "1f1b") == schedule


@pytest.mark.parametrize("layout, pp_schedule, vpp, schedule", [
    ("", "GPipe", 1, "gpipe"), ("PP 4 with the GPipe schedule", None, 1, "gpipe"),
    ("", "ZBVZeroBubble", 1, "zero-bubble"), ("zero bubble (ZB-H1)", None, 1, "zero-bubble"),
    ("", "InterleavedZeroBubble", 2, "interleaved"),  # its virtual stages are expressible, its filled bubble is not
    ("", "1F1B", 1, "1f1b"),
])
def test_pipeline_schedules_by_name(layout, pp_schedule, vpp, schedule):
    """torchtitan's pipeline_parallel_schedule names (GPipe, 1F1B, Interleaved1F1B,
    InterleavedZeroBubble, ZBVZeroBubble) and the zero-bubble schedules of Qi et al. 2023 (ZB-H1,
    ZB-H2) become the plan's schedule; before, every one but interleaving was read as 1F1B."""
    row = {**BASE, "pp": 4, "num_gpus": 64, "extra_layout": layout, "other_metrics": {"pp_schedule": pp_schedule}}
    fields = row_inputs(row).plan_fields
    assert fields["vpp"] == vpp and getattr(fields.get("schedule"), "value", "1f1b") == schedule


def test_gpipe_holds_every_micro_batch():
    """GPipe runs all forwards before any backward, so the first stage holds all m micro-batches'
    activations where 1F1B holds pp (seed 000 'Конвейерный параллелизм'): with 16 micro-batches
    on pp 4 the GPipe row needs more memory than the 1F1B row, with the same bubble, so the
    same predicted speed where both fit."""
    row = {**BASE, "pp": 4, "num_gpus": 64, "global_batch_size": 256, "micro_batch_size": 1, "recompute": "full"}
    gpipe = predict_row({**row, "other_metrics": {"pp_schedule": "GPipe"}})
    one_f_one_b = predict_row({**row, "other_metrics": {"pp_schedule": "1F1B"}})
    assert "schedule=gpipe" in gpipe.plan and "schedule=1f1b" in one_f_one_b.plan
    # by hand: dp 16 leaves 16 micro-batches per rank; the first stage keeps 16 instead of 4 sets of
    # its 8 layers' checkpointed inputs (full recompute), 12 x 8 x 8192 x 4096 x 2 B = 6.4 GB more
    assert gpipe.predicted_memory_gb > one_f_one_b.predicted_memory_gb + 6.0
    assert gpipe.predicted_tokens_per_second_per_gpu == pytest.approx(one_f_one_b.predicted_tokens_per_second_per_gpu, rel=0.02)


@pytest.mark.parametrize("name, vocab", [
    ("gpt-oss-20b", 201088), ("Qwen2.5-7B", 151936), ("DeepSeek-R1 distill", 129280), ("DeepSeek-V2-Lite", 102400),
    ("Gemma-3-27B", 262208), ("Gemma 2 9B", 256000), ("Llama-3.1-Nemotron-70B", 128256), ("Nemotron-4 15B", 256000),
    ("Falcon-40B", 65024), ("BLOOM-176B", 250880), ("OPT-175B", 50272), ("Yi-34B", 64000), ("GPT-NeoX-20B", 50432),
    ("GPT 175B", 50257), ("Optimus 7B", 50257),
    # Mistral's three tokenizers (HF config.json vocab_size): Tekken, v3, v1
    ("Mistral-NeMo-12B", 131072), ("Mistral-Small-24B-Base-2501", 131072), ("Ministral-8B", 131072),
    ("Mistral-Large-2 123B", 32768), ("Mistral-7B-v0.3", 32768), ("Mistral-7B-v0.1", 32000), ("Mistral 7B", 32000),
])
def test_family_vocabulary_beyond_llama(name, vocab):
    """HF config.json vocab_size of each family's checkpoints (rows.py FAMILY_VOCAB); before, every
    name outside Nemotron/Llama/Mistral/MPT fell back to GPT-2's 50,257, so a Qwen or gpt-oss row
    without a vocab_size lost 2/3 of its logits layer."""
    from autopar.validation.rows import _family_vocab
    assert _family_vocab(name) == vocab


def test_h100_nvl_is_its_own_part():
    """'H100 NVL' was read as the SXM part. profiles/gpus/h100-nvl.yaml (NVIDIA datasheet: BF16
    1,671 sparse = 836 dense, 3.9 TB/s, PCIe Gen5, NVLink bridge to one other card only;
    nvidia-smi 95,830 MiB): the node runs on PCIe, and a row that does not fit 80 GB fits 94."""
    cluster = row_inputs({**BASE, "gpu_type": "NVIDIA H100 NVL", "gpu_normalized": "H100-80GB"}).cluster
    assert (cluster.gpu.name, cluster.intra_node.kind.value, cluster.intra_node.bandwidth_gb_per_s) == ("H100-NVL", "pcie", 64)
    assert cluster.gpu.peak_flops_per_second("bf16") == pytest.approx(836e12)
    assert cluster.gpu.hbm_bytes / 2**30 == pytest.approx(93.58)
    assert row_inputs({**BASE, "gpu_type": "H100 SXM 96GB HBM2e"}).cluster.gpu.name == "H100-96GB-500W"


@pytest.mark.parametrize("written", ["yes", "True", "ZeRO", "enabled"])
def test_zero_used_without_its_stage_is_an_open_choice(written):
    """A zero_stage cell that says ZeRO ran without saying which stage was refused with an
    InputError; it is now a choice the row leaves open, resolved like recompute to the fastest
    stage that fits (the run did run). Llama 3 8B at seq 8192, mbs 1, no recompute, dp 64 on 80 GB:
    stage 1 keeps every bf16 gradient and needs ~100 GB (does not fit); stage 2 shards them
    (~67 GB, the same step: one micro-batch, the same reduce-scatter); stage 3 also gathers the
    weights, slower. So stage 2."""
    row = {**BASE, "zero_stage": written, "micro_batch_size": 1, "recompute": "none"}
    normalized, derived = normalize_row(row)
    assert "zero" in row_inputs(normalized).open_choices and "zero_stage" in derived
    result = predict_row(row)
    assert result.skipped is None and result.resolved["zero"] == "2" and "zero=2" in result.plan
    assert not predict_row({**row, "zero_stage": 1}).feasible
    stated = predict_row({**row, "zero_stage": 2})
    assert result.predicted_tokens_per_second_per_gpu == pytest.approx(stated.predicted_tokens_per_second_per_gpu)


@pytest.mark.parametrize("written, stage", [
    ("DP=32, ZeRO-1", 1), ("distributed optimizer (Megatron-Core 0.10)", 1), ("None (DDP)", 0), ("no ZeRO", 0),
    ("--use-distributed-optimizer", 1), ("stage=2", 2),
])
def test_zero_stage_in_context(written, stage):
    assert normalize_row({**BASE, "zero_stage": written})[0]["zero_stage"] == stage


@pytest.mark.parametrize("written, zero, shard, reshard", [
    ("DDP (no FSDP)", 1, None, None), ("without FSDP", 1, None, None), ("dp_shard=8, dp_replicate=8", 3, 8, None),
    ("FSDP2 reshard_after_forward=False", 3, None, False),
])
def test_fsdp_cells_in_context(written, zero, shard, reshard):
    fields = row_inputs({**BASE, "fsdp": written}).plan_fields
    assert (fields["zero"], fields.get("zero_shard_size"), fields.get("reshard")) == (zero, shard, reshard)


@pytest.mark.parametrize("dispatcher, layout, expected, overlap", [
    ("alltoall (no DeepEP)", "", "alltoall", False), ("AG", "", "allgather", False),
    ("deepep", "no A2A overlap", "deepep", False), ("deepep", "a2a_overlap=false", "deepep", False),
    ("deepep", "overlap_moe_expert_parallel_comm=True", "deepep", True),
])
def test_moe_choices_in_the_negative(dispatcher, layout, expected, overlap):
    fields = row_inputs({**MIXTRAL, "moe_dispatcher": dispatcher, "extra_layout": layout}).plan_fields
    assert (fields["dispatcher"].value, fields["ep_overlap"]) == (expected, overlap)


@pytest.mark.parametrize("layout, algo", [("CP via DeepSpeed-Ulysses", "ulysses"), ("cp_comm_type=a2a+p2p", "hybrid"), ("ring attention", None)])
def test_context_parallel_algorithm_in_words(layout, algo):
    fields = row_inputs({**BASE, "cp": 2, "extra_layout": layout}).plan_fields
    assert getattr(fields.get("cp_algo"), "value", None) == algo


@pytest.mark.parametrize("name, vocab", [("CodeLlama-34B", 32000), ("LLaMA-33B", 32000), ("Llama 3.1 8B", 128256)])
def test_family_vocabulary_of_llama_names(name, vocab):
    from autopar.validation.rows import _family_vocab
    assert _family_vocab(name) == vocab


@pytest.mark.parametrize("name, preset", [("Mixtral 8\u00d722B", "mixtral-8x22b"), ("Mixtral-8x22B (141B)", "mixtral-8x22b"),
                                          ("Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"), ("DeepSeek-R1", "deepseek-v3"),
                                          ("Nemotron-340B", "nemotron4-340b")])
def test_more_model_names(name, preset):
    from autopar.validation.rows import preset_key_for_name
    assert preset_key_for_name(name) == preset


def test_a_description_ending_in_off_keeps_fsdp_on():
    # 'reshard off' turns off resharding, not FSDP: FSDP stays on with the gathered weights kept
    assert row_inputs({**BASE, "fsdp": "FSDP2, reshard off"}).plan_fields["zero"] == 3
    assert row_inputs({**BASE, "fsdp": "FSDP off"}).plan_fields["zero"] == 1


@pytest.mark.parametrize("version, date, fused", [
    ("NeMo 26.02.01 container", (2026, 2), False), ("nemo:24.07", (2024, 7), False), ("NeMo 26.08 container", (2026, 8), True),
    ("Megatron-Core 0.16 (2026-03)", (2026, 3), False), ("NeMo 2.0", None, True),  # a framework version, not a YY.MM container
])
def test_container_versions_date_the_software(version, date, fused):
    """NVIDIA's containers are versioned YY.MM (rows.py CONTAINER_DATE); a Megatron row from before
    2026-08 clamps gpt-oss's GLU in eager kernels (TrainingSpec.fused_clamped_glu,
    tests/cost/test_clamped_glu.py)."""
    from autopar.validation.rows import software_date
    row = {**BASE, "software": "Megatron-Bridge (NeMo)", "software_version": version}
    assert software_date(row) == date
    assert row_inputs(row).training.fused_clamped_glu is fused
