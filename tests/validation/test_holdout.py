"""Held-out published runs (tests/data/holdout_runs.json): predicted and reported like the
development files, their error per family shipped apart (profiles/validation/families.json
'holdout') so that an estimate says how far the model generalises, not only how well it fits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.report import trust_line
from autopar.specs import trust
from autopar.validation import families_table, load_rows, predict_row

DATA = Path(__file__).resolve().parents[1] / "data"
HOLDOUT = DATA / "holdout_runs.json"


def test_holdout_rows_are_new_and_sourced():
    rows = load_rows(HOLDOUT)
    # 16 fms-fsdp README, 3 DeepSpeed Azure blog, 36 Megatron-Bridge MoE rows and 76 dense LLaMA rows of
    # the same pages (every pre-training row with a Precision column, 25.11-26.06: H100 10, B200 4,
    # GB200 31, GB300 31), and the 17 'With CP' rows of NeMo's long-sequence page (H100 9, B200 8)
    assert len(rows) == 148
    dev_ids = {r["id"] for f in ("dev", "moe", "fsdp") for r in load_rows(DATA / f"{f}_runs.json")}
    assert len({r["id"] for r in rows}) == len(rows) and not dev_ids & {r["id"] for r in rows}
    assert all(r["source"] and r["source_location"] and r["table_or_section"] for r in rows)


def test_zero_offload_row_is_reported_not_modelled():
    # DeepSpeed's 1T recipe (run-1t.sh OFFLOAD_DEVICE=cpu, --cpu-optimizer) runs the optimizer on
    # the host: a physical fact the model does not take, so the row is listed, not judged
    row = next(r for r in load_rows(HOLDOUT) if r["id"] == "holdout-dsazure-1t-1024gpu-mbs8-s1024")
    res = predict_row(row)
    assert res.error is not None and res.not_modelled == "CPU offload of activations or optimizer states is not modelled"
    none = next(r for r in load_rows(HOLDOUT) if r["id"] == "holdout-dsazure-175b-256gpu-mbs32-s512")
    assert "offload: none" in none["variant"] and predict_row(none).not_modelled is None


def _report(rows):
    return {"rows": [predict_row(r).model_dump(mode="json") for r in rows]}


def test_families_table_keeps_holdout_apart():
    dev = [r for r in load_rows(DATA / "fsdp_runs.json") if r["id"].startswith("new-tt-a100-l38b")][:2]
    held = [r for r in load_rows(HOLDOUT) if r["id"] in ("holdout-fmsfsdp-feb24-a100-llama2-7b", "holdout-fmsfsdp-feb24-a100-llama2-13b")]
    reports = {"dev": _report(dev), "held": _report(held)}
    errors = {name: [r["error"] for r in rep["rows"]] for name, rep in reports.items()}
    table = families_table(reports, holdout=("held",))
    fam = table["families"]["dense/fsdp/bf16/ampere"]  # torchtitan A100 and fms-fsdp A100 rows share it
    assert fam["num_rows"] == 2 and fam["mape"] == pytest.approx(sum(map(abs, errors["dev"])) / 2)
    assert fam["holdout"]["num_rows"] == 2
    assert fam["holdout"]["mape"] == pytest.approx(sum(map(abs, errors["held"])) / 2)
    assert fam["holdout"]["mean_signed_error"] == pytest.approx(sum(errors["held"]) / 2)
    assert table["source"] == "autopar validate dev (held out: held)"
    # without a holdout every file pools, as before
    pooled = families_table(reports)["families"]["dense/fsdp/bf16/ampere"]
    assert pooled["num_rows"] == 4 and "holdout" not in pooled


def test_family_error_carries_both_figures(monkeypatch):
    table = {"moe/megatron-style/fp8/blackwell": {"mape": 0.061, "num_rows": 8, "holdout": {"mape": 0.289, "num_rows": 23, "mean_signed_error": 0.25}},
             "moe/fsdp/fp8/hopper": {"mape": None, "num_rows": 0, "holdout": {"mape": 0.4, "num_rows": 2, "mean_signed_error": -0.1}}}
    monkeypatch.setattr(trust, "_table", lambda: table)
    both = trust.family_error("moe/megatron-style/fp8/blackwell")
    assert (both.mape, both.num_rows, both.holdout_mape, both.holdout_rows) == (0.061, 8, 0.289, 23) and both.warning is None
    assert trust_line(both) == ("moe/megatron-style/fp8/blackwell: mean error 6.1% over 8 published runs; "
                                "28.9% over 23 held-out runs (+25.0% signed: optimistic)")
    only_held = trust.family_error("moe/fsdp/fp8/hopper")
    assert only_held.mape is None and only_held.holdout_rows == 2 and only_held.warning is None
    assert trust_line(only_held) == "moe/fsdp/fp8/hopper: 40.0% over 2 held-out runs (-10.0% signed: pessimistic)"
    assert trust.family_error("dense/fsdp/fp4/blackwell").warning.startswith("no published runs validate")
    table["moe/fsdp/fp8/hopper"]["holdout"]["mean_signed_error"] = 0.0
    assert trust_line(trust.family_error("moe/fsdp/fp8/hopper")).endswith("(+0.0% signed: unbiased)")


def test_shipped_families_carry_the_holdout():
    # profiles/validation/families.json is regenerated with the held-out file (python -m autopar.cli.reports)
    table = json.loads(trust.FAMILIES_FILE.read_text())
    assert table["source"].endswith("(held out: holdout_runs)")
    held = {f: v["holdout"]["num_rows"] for f, v in table["families"].items() if "holdout" in v}
    # 148 rows less the two ZeRO-Offload rows reported as not modelled; the MXFP8 MoE rows on Blackwell,
    # counted by hand in the Megatron-Bridge tables: 26.08 all 12, 26.06 7 (its 2 H100 rows are FP8
    # on Hopper), 26.02.01 3 (B200 DeepSeek-V3, B200 Qwen3-30B, B300 Qwen3-235B), 25.11 1 (B200 FP8-MX)
    assert sum(held.values()) == 146 and held["moe/megatron-style/fp8/blackwell"] == 23
    # the long-sequence page's FP8 rows: DGX-H100 LLAMA2-7B 4K-1M (9) join the 9 Megatron-Bridge
    # FP8 H100 dense rows; DGX-B200 LLAMA3-8B 8K-1M (8) join the 38 on Blackwell
    assert held["dense/megatron-style/fp8/hopper"] == 18 and held["dense/megatron-style/fp8/blackwell"] == 46
    # the dense NVFP4 rows: GB200 and GB300 in each of 26.02, 26.02.01, 26.04, 26.04.01 (LLaMA-3 70B and
    # LLaMA-3.1 405B: 16) and 26.06 (405B only: 2)
    assert held["dense/megatron-style/fp4/blackwell"] == 18


def test_cli_holdout_option(tmp_path):
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps([r for r in load_rows(DATA / "fsdp_runs.json") if r["id"].startswith("new-tt-a100-l38b")][:1]))
    held = tmp_path / "held.json"
    held.write_text(json.dumps({"rows": [r for r in load_rows(HOLDOUT) if r["id"] == "holdout-fmsfsdp-feb24-a100-llama2-7b"]}))
    fams = tmp_path / "families.json"
    r = CliRunner().invoke(main, ["validate", str(dev), "--holdout", str(held), "--families", str(fams), "--report-dir", str(tmp_path / "rep"), "--quiet"])
    assert r.exit_code == 0, r.output
    fam = json.loads(fams.read_text())["families"]["dense/fsdp/bf16/ampere"]
    assert fam["num_rows"] == 1 and fam["holdout"]["num_rows"] == 1
    assert "| held (held out) |" in (tmp_path / "rep" / "summary.md").read_text()
    assert "== dev\n" in r.output and "== held (held out)\n" in r.output
    clash = tmp_path / "sub"
    clash.mkdir()
    (clash / "dev.json").write_text(dev.read_text())
    r = CliRunner().invoke(main, ["validate", str(dev), "--holdout", str(clash / "dev.json"), "--quiet"])
    assert r.exit_code == 1 and "share a file name" in r.output and len(r.output.strip().splitlines()) == 1
