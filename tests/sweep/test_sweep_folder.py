"""solvers.sweep_folder: --resume refuses a folder whose model, cluster or calibration file
changed since it was started, and resumes a folder from before the fingerprints with a note."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autopar.cli import main
from autopar.specs.costparams import load_calibration_profile
from solvers.sweep_folder import CASES_FILE, INPUTS, SPEC_FILE, UNCHECKED

ROOT = Path(__file__).resolve().parents[2]
SUMMARIES = ("summary.csv", "summary.md", "summary.json")
# a Qwen2-style HF config.json, small enough for seconds per case
HF_CONFIG = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu", hidden_size=2048, intermediate_size=5504,
                 num_hidden_layers=24, max_window_layers=24, num_attention_heads=16, num_key_value_heads=2, vocab_size=152064,
                 max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=1e6, tie_word_embeddings=False, torch_dtype="bfloat16")
# 16 nodes of 8 H100 on RoCE, costed with a copy of the shipped H100 calibration profile
CLUSTER = dict(name="my-h100-roce", description="16 nodes of 8x H100 SXM, 8x400G RoCE", gpu="H100", gpus_per_node=8, num_nodes=16,
               intra_node=dict(kind="nvlink", bandwidth_gb_per_s=450, latency_us=1.0, sharp=True), nic_gb_per_s_per_gpu=50,
               tiers=[dict(name="leaf", num_nodes=16, latency_us=8.0, oversubscription=1.0)], sharp=False, calibration="cal.yaml")
# names relative to the working directory: a copy of the folder and its files elsewhere is the same sweep
SWEEP = dict(name="inputs", models=["model.json"], clusters=["cluster.yaml"], gpus=[16, 32], seq_lens=[2048], global_batches=[64], top_k=2)
FIRST = "model.json/cluster.yaml/16gpu/s2048/b64"


def _run(*args: str):
    return CliRunner().invoke(main, ["sweep", "sweep.yaml", *args, "--quiet", "--no-plots"], catch_exceptions=False)


def _write_inputs(folder: Path) -> None:
    (folder / "model.json").write_text(json.dumps(HF_CONFIG, indent=1))
    (folder / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER, sort_keys=False))
    shutil.copy(ROOT / "calibration/fitted/h100-ib.yaml", folder / "cal.yaml")
    (folder / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))


@pytest.fixture(autouse=True)
def _fresh_profiles():
    """load_calibration_profile caches by path: a test's edited cal.yaml is read anew."""
    load_calibration_profile.cache_clear()
    yield
    load_calibration_profile.cache_clear()


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """The sweep run to the end; its folder's cases.jsonl and sweep.json are copied by the tests."""
    tmp = tmp_path_factory.mktemp("whole")
    _write_inputs(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        load_calibration_profile.cache_clear()
        res = _run("--out", "out")
    assert res.exit_code == 0, res.output
    return tmp / "out"


def _stopped_after_one_case(whole: Path, tmp_path: Path, monkeypatch, state: dict | None = None) -> Path:
    """tmp_path holding the inputs and a copy of `whole` stopped after its first case; the cwd."""
    _write_inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / CASES_FILE).write_text((whole / CASES_FILE).read_text().splitlines(keepends=True)[0])
    (out / SPEC_FILE).write_text(json.dumps(state if state is not None else json.loads((whole / SPEC_FILE).read_text())))
    monkeypatch.chdir(tmp_path)
    return out


def _tokens(out: Path, case: str) -> float:
    return next(r for r in json.loads((out / "summary.json").read_text())["cases"] if r["case"] == case)["tokens_per_second_per_gpu"]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("file, old, new, input_name, tokens_now", [
    # 2 nodes: the data-parallel gradient reduction crosses the 10x slower NIC
    ("cluster.yaml", "nic_gb_per_s_per_gpu: 50", "nic_gb_per_s_per_gpu: 5", "cluster cluster.yaml", 40_590),
    # half the layers: a different model under the same name, about 1.6x the tokens/s
    ("model.json", '"num_hidden_layers": 24', '"num_hidden_layers": 12', "model model.json", 85_235),
    # the fitted network efficiency the cluster's calibration profile gives its inter-node collectives
    ("cal.yaml", "network_efficiency: 0.85131", "network_efficiency: 0.5", "calibration cal.yaml", 51_596),
])
def test_resume_refuses_an_input_changed_since_the_folder_was_started(whole, tmp_path, monkeypatch, file, old, new, input_name, tokens_now):
    """The reviewer's case: a sweep stopped after one case, a file it names edited, --resume. It
    kept the first case from the old file (52,475 tokens/s per GPU) beside cases of the new one
    (a fresh run gives tokens_now for that case), under one name in one summary, and exited 0."""
    out = _stopped_after_one_case(whole, tmp_path, monkeypatch)
    kept = (out / CASES_FILE).read_text()
    _edit(tmp_path / file, old, new)
    res = _run("--out", "out", "--resume")
    assert res.exit_code == 1
    assert res.output == (f"Error: resume='out': {input_name} changed since the folder was started (fingerprints in sweep.json); its "
                          "finished cases ran with the old one, so its summary would mix old and new under one name: choose another "
                          "--out, or delete out/cases.jsonl to run every case again\n")
    assert (out / CASES_FILE).read_text() == kept and not (out / "summary.json").exists()
    # why it matters: the kept row is not what the edited input gives
    assert _tokens(whole, FIRST) == pytest.approx(52_475, rel=1e-4)
    assert _run("--out", "fresh").exit_code == 0
    assert _tokens(tmp_path / "fresh", FIRST) == pytest.approx(tokens_now, rel=1e-4)


def test_resume_with_the_same_inputs_elsewhere_and_a_changed_description(whole, tmp_path, monkeypatch):
    # fingerprints are of the resolved specs, prose left out: copies of the files in another
    # folder, and a cluster description edited, change no case
    out = _stopped_after_one_case(whole, tmp_path, monkeypatch)
    _edit(tmp_path / "cluster.yaml", "8x400G RoCE", "8x 400 Gb/s RoCE v2")
    res = _run("--out", "out", "--resume")
    assert res.exit_code == 0, res.output
    assert "note:" not in res.output
    for name in SUMMARIES:
        assert (out / name).read_text() == (whole / name).read_text(), name


def test_two_changed_inputs_are_both_named(whole, tmp_path, monkeypatch):
    _stopped_after_one_case(whole, tmp_path, monkeypatch)
    _edit(tmp_path / "cluster.yaml", "nic_gb_per_s_per_gpu: 50", "nic_gb_per_s_per_gpu: 5")
    _edit(tmp_path / "model.json", '"num_hidden_layers": 24', '"num_hidden_layers": 12')
    res = _run("--out", "out", "--resume")
    assert res.exit_code == 1 and len(res.output.splitlines()) == 1
    assert res.output.startswith("Error: resume='out': model model.json, cluster cluster.yaml changed since the folder was started")
    assert "ran with the old ones," in res.output


def test_a_preset_is_fingerprinted_as_resolved(whole):
    # presets ship with the package: their resolved spec, and the calibration profile a preset
    # cluster names, are what a resumed folder is checked against
    from solvers.sweep import SweepSpec
    from solvers.sweep_folder import input_fingerprints

    spec = SweepSpec(name="p", models=["gpt2-xl"], clusters=["dgx-h100"], gpus=[8], seq_lens=[2048], global_batches=[64])
    prints = input_fingerprints(spec)
    assert sorted(prints) == ["calibration calibration/fitted/h100-ib.yaml", "cluster dgx-h100", "model gpt2-xl"]
    assert all(len(v) == 16 and int(v, 16) >= 0 for v in prints.values())
    assert input_fingerprints(spec) == prints  # the same inputs, the same fingerprints


def test_a_folder_from_before_the_fingerprints_resumes_with_a_note(whole, tmp_path, monkeypatch):
    """Backward compatible: an older autopar's sweep.json has no inputs. It resumes; a note says
    the finished cases could not be checked; the fingerprints are recorded from then on, so a
    later change is refused, and the note stays as long as the folder holds those cases."""
    state = {k: v for k, v in json.loads((whole / SPEC_FILE).read_text()).items() if k != INPUTS}
    out = _stopped_after_one_case(whole, tmp_path, monkeypatch, state)
    res = CliRunner().invoke(main, ["sweep", "sweep.yaml", "--out", "out", "--resume", "--quiet", "--no-plots"])
    assert res.exit_code == 0, res.output
    note = ("note: resume: out was started by an older autopar that recorded no fingerprints of its models and clusters: the cases it "
            "finished before they were recorded could not be checked against the files as they are now (inputs_unchecked in sweep.json)")
    assert res.stderr.splitlines()[0] == note
    for name in SUMMARIES:
        assert (out / name).read_text() == (whole / name).read_text(), name
    recorded = json.loads((out / SPEC_FILE).read_text())
    assert recorded[INPUTS] == json.loads((whole / SPEC_FILE).read_text())[INPUTS] and recorded[UNCHECKED] is True

    res = CliRunner().invoke(main, ["sweep", "sweep.yaml", "--out", "out", "--resume", "--quiet", "--no-plots"])
    assert res.exit_code == 0 and res.stderr.splitlines()[0] == note
    _edit(tmp_path / "model.json", '"num_hidden_layers": 24', '"num_hidden_layers": 12')
    res = _run("--out", "out", "--resume")
    assert res.exit_code == 1 and res.output.startswith("Error: resume='out': model model.json changed since the folder was started")


def test_a_folder_without_sweep_json_resumes_with_the_note(whole, tmp_path, monkeypatch):
    # the oldest folders held cases.jsonl alone; they were, and are, taken over by the sweep resumed
    out = _stopped_after_one_case(whole, tmp_path, monkeypatch)
    (out / SPEC_FILE).unlink()
    res = CliRunner().invoke(main, ["sweep", "sweep.yaml", "--out", "out", "--resume", "--quiet", "--no-plots"])
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("note: resume: out was started by an older autopar")
    assert json.loads((out / SPEC_FILE).read_text())[UNCHECKED] is True


def test_sweep_json_is_replaced_whole_or_not_at_all(whole, tmp_path, monkeypatch):
    # resuming an older folder rewrites its sweep.json; a write that fails (a full disk) leaves
    # the old file as it was and no temporary file, and is one line naming the folder
    state = {k: v for k, v in json.loads((whole / SPEC_FILE).read_text()).items() if k != INPUTS}
    out = _stopped_after_one_case(whole, tmp_path, monkeypatch, state)
    before = (out / SPEC_FILE).read_text()

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("solvers.sweep_folder.os.replace", full_disk)
    res = _run("--out", "out", "--resume")
    assert res.exit_code == 1
    assert res.output == "Error: out='out': cannot write (No space left on device)\n"
    assert (out / SPEC_FILE).read_text() == before and sorted(p.name for p in out.iterdir()) == [CASES_FILE, SPEC_FILE]
    assert sorted(json.loads((whole / SPEC_FILE).read_text())[INPUTS]) == ["calibration cal.yaml", "cluster cluster.yaml", "model model.json"]
