"""Results files: written atomically with the permissions the umask gives (issue 12: they were
0600 whatever the umask, so teammates could not read them); validate exits 1 when it predicted
nothing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.cli.common import write_atomic

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)

    old = os.umask(0o022)
    yield set_mask
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_atomic_write_respects_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    path = tmp_path / "sub" / "r.json"
    write_atomic(path, "{}\n")
    assert stat.S_IMODE(path.stat().st_mode) == mode and path.read_text() == "{}\n"
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary file left


def test_search_results_are_readable_by_the_group(tmp_path, umask):
    umask(0o022)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["search", "--model", "gpt2-xl", "--cluster", "dgx-h100", "--seq-len", "1024", "--global-batch", "8",
                                    "--top", "1", "--out", str(out)])
    assert res.exit_code == 0 and stat.S_IMODE(out.stat().st_mode) == 0o644


def test_validate_exits_1_when_no_row_is_predicted(tmp_path):
    row = json.loads((ROOT / "tests/data/dev_runs.json").read_text())[0]
    runs = tmp_path / "runs.json"
    # neither column names a known GPU (a label that is no preset is read for the GPU gpu_type names)
    runs.write_text(json.dumps([{**row, "gpu_normalized": "NoSuchGPU", "gpu_type": "NoSuchGPU"}]))
    res = CliRunner().invoke(main, ["validate", str(runs), "--quiet"])
    assert res.exit_code == 1
    assert res.stderr.strip().startswith(f"Error: runs='{runs}': no row predicted (1 rows, all skipped; first: ")
    assert "skipped:" in res.stdout  # the table is printed first


def test_validate_names_a_text_where_a_count_belongs(tmp_path):
    # issue 12: a string where a runs file expects a number was a traceback
    row = json.loads((ROOT / "tests/data/dev_runs.json").read_text())[0]
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([row, {**row, "num_gpus": "32"}]))
    res = CliRunner().invoke(main, ["validate", str(runs), "--quiet"])
    assert res.exit_code == 1 and res.stderr.strip() == "Error: runs[1].num_gpus='32': must be a positive whole number"


def test_validate_derives_a_null_or_absent_count_as_the_library_does(tmp_path):
    # the CLI refused a null global_batch_size (and an absent num_layers) that the row layer derives
    # (tokens_per_batch / seq_len; the model preset) and validate_runs predicts
    row = json.loads((ROOT / "tests/data/dev_runs.json").read_text())[21]  # NeMo 24.07 GPT3-175B: a model preset
    assert row["tokens_per_batch"] == row["global_batch_size"] * row["seq_len"] and row["model_name"] == "GPT3-175B"
    shorter = {k: v for k, v in row.items() if k != "num_layers"}
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([row, {**row, "id": "nullbatch", "global_batch_size": None}, {**shorter, "id": "nolayers"}]))
    res = CliRunner().invoke(main, ["validate", str(runs), "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["rows"]
    assert [r["skipped"] for r in rows] == [None, None, None]
    assert rows[1]["predicted_tokens_per_second_per_gpu"] == rows[0]["predicted_tokens_per_second_per_gpu"]
    assert rows[1]["resolved"]["global_batch_size"] == "tokens_per_batch / seq_len"
