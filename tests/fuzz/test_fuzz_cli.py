"""Fuzz (issue 12): bad inputs over every command and every file reader. Each example must end
with exit code 1, exactly one line on stderr that starts with `Error: `, no traceback and no
`internal=` (an unexpected exception the CLI caught), within a time limit (no hang).

Every input is bad by construction: one option gets a value its rule refuses, or one file
gets one defect (cut JSON, a duplicated key, a non-UTF-8 byte, a non-finite number, a field of
the wrong type or out of range, a wrong top level). Hypothesis is derandomized, so the run is
the same every time; COUNTS records how many inputs each command got (>= 300 in all)."""

from __future__ import annotations

import copy
import json
import signal
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autopar.cli import main

ROOT = Path(__file__).resolve().parents[2]
COUNTS: Counter[str] = Counter()
HANG_SECONDS = 60
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])

SMALL = ["--model", "gpt2-xl", "--cluster", "dgx-h100", "--gpus", "8", "--seq-len", "1024", "--global-batch", "8"]
GARBAGE = st.text(alphabet="abcxyz!@#$%^&*()[]{}<>?|~`'\"\\ \t\u00e9\u4e2d\u2603\x00", min_size=1, max_size=40).filter(
    lambda t: any(c.isalpha() or c in "!@#$%^&*()[]{}<>?|~`'\"\\\x00\u2603" for c in t))
BAD_COUNTS = ["0", "-1", "-8", "x", "", "nan", "inf", "-inf", "1e400", "1.5", "0x10", "true", "8 8", "99999999999999999999999"]
BAD_VALUES = [True, False, 0, -1, "x", [], {}, None, 1.5]


class Hang(Exception):
    pass


@contextmanager
def _time_limit(seconds: int):
    def on_alarm(signum, frame):
        raise Hang(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_fails_in_one_line(args: list[str], command: str) -> None:
    COUNTS[command] += 1
    with _time_limit(HANG_SECONDS):
        res = CliRunner().invoke(main, [str(a) for a in args])
    err = res.stderr.strip().splitlines()
    where = f"autopar {' '.join(map(str, args))}\nstdout: {res.stdout[-500:]}\nstderr: {res.stderr[-2000:]}"
    assert res.exit_code == 1, where
    assert len(err) == 1 and err[0].startswith("Error: "), where
    assert "Traceback" not in res.output and "internal=" not in err[0], where


# ---- bad files, one defect each ------------------------------------------------------------

def _set(data, path: str, value):
    data = copy.deepcopy(data)
    node, keys = data, path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


@st.composite
def bad_file(draw, data, fields: dict[str, list], kind: str, top_level_ok=(dict,)) -> bytes:
    """One defect in a valid JSON or YAML document `data`; `fields` maps a dotted path to bad
    values of that field."""
    dump = (lambda d: json.dumps(d, indent=1)) if kind == "json" else (lambda d: yaml.safe_dump(d, sort_keys=False))
    text = dump(data)
    defect = draw(st.sampled_from(["field", "field", "field", "cut", "duplicate", "utf8", "nonfinite", "top", "empty", "deep"]))
    if defect == "field":
        path = draw(st.sampled_from(sorted(fields)))
        return dump(_set(data, path, draw(st.sampled_from(fields[path])))).encode()
    if defect == "cut" and kind == "json":
        return text[: draw(st.integers(1, len(text) - 1))].encode()
    if defect in ("cut", "duplicate"):
        first = next(iter(data))
        extra = json.dumps({first: data[first]})[1:-1] if kind == "json" else yaml.safe_dump({first: data[first]}).strip()
        return (text.replace("{", "{" + extra + ",", 1) if kind == "json" else text + "\n" + extra + "\n").encode()
    if defect == "utf8":
        raw = text.encode()
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\x80abc", b"\xed\xa0\x80"])) + raw[at:]
    if defect == "nonfinite":
        path = draw(st.sampled_from(sorted(fields)))
        token = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400"] if kind == "json" else [".nan", ".inf", "-.inf", "1.0e400"]))
        marked = dump(_set(data, path, "@@NONFINITE@@"))
        return marked.replace('"@@NONFINITE@@"', token).replace("'@@NONFINITE@@'", token).replace("@@NONFINITE@@", token).encode()
    if defect == "top":
        tops = ["[1, 2]", '"text"', "42", "null", "true"] if dict in top_level_ok else ["42", '"text"', "null", "{}", "true"]
        return draw(st.sampled_from(tops)).encode()
    if defect == "empty":
        return draw(st.sampled_from([b"", b"   \n", b"\n\n#"]))
    return ("[" * 50_000 if kind == "json" else "- " * 5_000 + "x").encode()


def _write(folder: Path, name: str, content: bytes) -> str:
    path = folder / name
    path.write_bytes(content)
    return str(path)


def _preset(kind: str, name: str) -> dict:
    path = next((ROOT / "profiles" / kind).glob(f"{name}.*"))
    return json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())


MODEL = _preset("models", "llama3-8b")
MODEL_FIELDS = {k: BAD_VALUES for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")}
CLUSTER = {k: v for k, v in _preset("clusters", "dgx-h100").items() if k not in ("calibration", "sources")}
CLUSTER_FIELDS = {
    "gpus_per_node": BAD_VALUES, "num_nodes": BAD_VALUES, "intra_node.bandwidth_gb_per_s": [True, 0, -1, "x", [], None],
    "gpu": ["NoSuchGPU", 1, [], True, None], "tiers.0.num_nodes": BAD_VALUES, "nic_gb_per_s_per_gpu": [True, -1, "x", None],
}


def bad_paths(folder: Path, devices: bool = True) -> list[str]:
    """Paths that are not readable input files. /dev/zero never ends: readers that do not use
    autopar.specs._files.read_text (calibration logs) would read until memory runs out."""
    (folder / "adir").mkdir(exist_ok=True)
    paths = [str(folder / "missing.json"), str(folder / "adir"), str(folder / "missing.yaml")]
    return paths + (["/dev/null", "/dev/zero"] if devices else [])


# ---- commands ------------------------------------------------------------------------------

SEARCH_BAD_OPTIONS = {
    "--gpus": ["0", "-8", "12", "x", "1e3", "nan", "1048577", "99999999999999999999999", "32768"],
    "--seq-len": ["0", "-1", "x", "nan", "16777217", "99999999999"],
    "--global-batch": ["0", "-4", "x", "4294967297"],
    "--global-batch-tokens": ["nan", "inf", "-inf", "1e400", "-5", "0", "1.5", "abc", "16Q", "", "7", "99T"],
    "--precision": ["fp3", "", "BF16"],
    "--top": ["0", "-1", "1001", "x"],
    "--fix": ["tp=8,tp=4", "warp=2", "tp=0", "tp=x", "tp", "pp=2,vpp=x", "sp=maybe", "zero=4", "recompute=half", "tp=3", "=", "tp=nan",
              "tp=1e400", "tp=true", "mbs=0", "order=dp-first", "cp_algo=torus", "schedule=none"],
    "--max-gbs-tokens": ["1", "nan", "x", "0"],
    "--solver": ["gurobi"], "--objective": ["speed"], "--framework": ["jax"], "--emit": ["jax"],
    "--per-stage-cores": ["0", "-1", "x"], "--per-stage-seconds": ["0", "-1", "nan", "inf", "x"],
    "--reference": ["tp=3", "x=1", "tp=0,pp=0", "pp=2,first=40"],
    "--colour": ["red"],
}


@st.composite
def bad_search_args(draw, folder: Path, command: str = "search") -> list[str]:
    option = draw(st.sampled_from(sorted(SEARCH_BAD_OPTIONS) + ["--model", "--cluster", "garbage", "--out"]))
    base = dict(zip(SMALL[::2], SMALL[1::2]))
    if option == "--model":
        base["--model"] = draw(st.sampled_from(["nope", "", "/", *bad_paths(folder)] + [
            _write(folder, "m.json", draw(bad_file(MODEL, MODEL_FIELDS, "json")))]))
    elif option == "--cluster":
        base["--cluster"] = draw(st.sampled_from(["nope", *bad_paths(folder)] + [
            _write(folder, "c.yaml", draw(bad_file(CLUSTER, CLUSTER_FIELDS, "yaml")))]))
        base.pop("--gpus")
    elif option == "garbage":
        return [command, *[x for kv in base.items() for x in kv], "--fix", f"tp={draw(GARBAGE)}"]
    elif option == "--out":
        (folder / "afile").write_text("x")
        base["--out"] = draw(st.sampled_from([str(folder / "afile" / "r.json"), str(folder / "adir"), "/proc/no/such/r.json"]))
        (folder / "adir").mkdir(exist_ok=True)
    else:
        base[option] = draw(st.sampled_from(SEARCH_BAD_OPTIONS[option]))
    if command == "estimate" and option in ("--top", "--fix", "--max-gbs-tokens", "--solver", "--objective", "--framework", "--emit",
                                            "--per-stage-cores", "--per-stage-seconds", "--reference", "--out"):
        base["--plan"] = draw(st.sampled_from(["tp=3", "tp=8,tp=8", "foo=1", "vpp=2", "pp=2,first=40", "sp=maybe", "tp=nan", "zero=9"]))
    else:
        base.setdefault("--plan", "tp=8") if command == "estimate" else None
    return [command, *[x for kv in base.items() for x in kv]]


@FUZZ
@given(data=st.data())
def test_search(data):
    with tempfile.TemporaryDirectory() as tmp:
        check_fails_in_one_line(data.draw(bad_search_args(Path(tmp))), "search")


@FUZZ
@given(data=st.data())
def test_estimate(data):
    with tempfile.TemporaryDirectory() as tmp:
        check_fails_in_one_line(data.draw(bad_search_args(Path(tmp), "estimate")), "estimate")


@pytest.fixture(scope="module")
def results_data(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("results") / "r.json"
    res = CliRunner().invoke(main, ["search", *SMALL, "--top", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


RESULTS_FIELDS = {
    "plans.0.plan.tp": [True, 0, -1, "x", 3, None, []], "inputs.model.num_layers": BAD_VALUES, "inputs.cluster.num_nodes": BAD_VALUES,
    "inputs.training.seq_len": BAD_VALUES, "plans": [[], "x", None, {}], "autopar_version": [1, None, []], "search.num_feasible": ["x", None],
    "inputs.cluster.gpu.hbm_gib": [True, 0, -1, "x", None], "surprise": [1],
}


@FUZZ
@given(data=st.data())
def test_emit(data, results_data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        how = data.draw(st.sampled_from(["file", "file", "file", "path", "rank", "format", "both", "neither", "out"]))
        good = _write(folder, "good.json", json.dumps(results_data).encode())
        args = ["emit", "--format", "megatron", good]
        if how == "file":
            args[-1] = _write(folder, "r.json", data.draw(bad_file(results_data, RESULTS_FIELDS, "json")))
        elif how == "path":
            args[-1] = data.draw(st.sampled_from(bad_paths(folder)))
        elif how == "rank":
            args += ["--rank", data.draw(st.sampled_from(["0", "-1", "3", "x", "99999999999999999999"]))]
        elif how == "format":
            args[2] = data.draw(st.sampled_from(["jax", "", "Megatron"]))
        elif how == "both":
            args += ["--model", "gpt2-xl", "--plan", "tp=8"]
        elif how == "neither":
            args = ["emit", "--format", "megatron", *data.draw(st.sampled_from([[], ["--model", "gpt2-xl"], ["--plan", "tp=8", "--cluster", "x"]]))]
        else:
            (folder / "afile").write_text("x")
            args += ["--out", str(folder / "afile" / "sub")]
        check_fails_in_one_line(args, "emit")


RUN_ROW = json.loads((ROOT / "tests/data/dev_runs.json").read_text())[0]
RUN_FIELDS = {k: [True, 0, -1, "x", None, [], 1.5] for k in ("num_layers", "hidden_size", "num_gpus", "seq_len", "global_batch_size")}
RUN_FIELDS["gpu_normalized"] = ["NoSuchGPU", 1, None]
RUN_FIELDS["tokens_per_sec_per_gpu"] = ["x", [], {}]


@FUZZ
@given(data=st.data())
def test_validate(data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        row = {k: v for k, v in RUN_ROW.items() if k in RUN_FIELDS or k in ("id", "source_group", "model_name", "gpus_per_node", "tp", "pp",
                                                                          "num_attention_heads", "ffn_hidden_size", "vocab_size")}
        how = data.draw(st.sampled_from(["file", "file", "file", "path", "out"]))
        if how == "file":
            content = data.draw(bad_file({"rows": [row]}, {f"rows.0.{k}": v for k, v in RUN_FIELDS.items()}, "json"))
            args = ["validate", _write(folder, "runs.json", content)]
        elif how == "path":
            args = ["validate", data.draw(st.sampled_from(bad_paths(folder)))]
        else:
            (folder / "afile").write_text("x")
            args = ["validate", _write(folder, "runs.json", json.dumps([{**row, "num_gpus": "x"}]).encode()), "--out", str(folder / "afile" / "r.json")]
        check_fails_in_one_line(args + ["--quiet"], "validate")


SWEEP = dict(name="fuzz", models=["gpt2-xl"], clusters=["dgx-h100"], gpus=[8], seq_lens=[1024], global_batches=[8], top_k=1)
SWEEP_FIELDS = {
    "gpus": [[0], [True], ["x"], "x", [], [-8], [12], [2**40]], "models": [[], ["nope"], [1], "x"], "clusters": [["nope"], []],
    "seq_lens": [[-1], [0], [True], [2**30]], "global_batches": [[0], ["x"]], "precision": ["fp3", 1, True], "solver": ["gurobi", 1],
    "top_k": [0, True, -1, 1001], "objective": ["speed"], "threshold": [-1, "x"], "fixed": [{"warp": 2}, {"tp": 3}, {"tp": "x"}, "x"],
    "name": [1, "", None], "colour": ["red"],
}


@FUZZ
@given(data=st.data())
def test_sweep(data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        good = _write(folder, "sweep.yaml", yaml.safe_dump(SWEEP).encode())
        how = data.draw(st.sampled_from(["file", "file", "file", "path", "baseline", "override", "workers", "out"]))
        args = ["sweep", good, "--out", str(folder / "out"), "--quiet", "--no-plots"]
        if how == "file":
            args[1] = _write(folder, "bad.yaml", data.draw(bad_file(SWEEP, SWEEP_FIELDS, "yaml")))
        elif how == "path":
            args[1] = data.draw(st.sampled_from(bad_paths(folder)))
        elif how == "baseline":
            content = data.draw(st.sampled_from([b"x", b"{}", b"[]", b'{"cases": 1}', b'{"cases": [1]}', b'{"cases": [{"case": 1}]}',
                                                 b'{"cases": [{"case": "a", "status": "ok"}]}', b'\xff{}', b'{"cases": [], "cases": []}']))
            args += ["--baseline", _write(folder, "base.json", content)]
        elif how == "override":
            content = data.draw(st.sampled_from([b"comm.no_such: 1\n", b"comm.network_efficiency: x\n", b"comm.network_efficiency: .nan\n",
                                                 b"gemm: 1\n", b"- 1\n", b"a: 1\na: 2\n", b"\xff: 1\n", b"comm: {network_efficiency: true}\n"]))
            args += ["--cost-override", _write(folder, "o.yaml", content)]
        elif how == "workers":
            args += ["--workers", data.draw(st.sampled_from(["0", "-1", "x", "257"]))]
        else:
            (folder / "afile").write_text("x")
            args[3] = str(folder / "afile" / "out")
        check_fails_in_one_line(args, "sweep")


@FUZZ
@given(data=st.data())
def test_tune(data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        good = ["tune", *SMALL, "--trial-cmd", "echo {plan_file}", "--trials", "1", "--out", str(folder / "t")]
        option, values = data.draw(st.sampled_from([
            ("--trial-cmd", ["true", "", "echo plan"]), ("--trials", ["0", "-1", "x", "100001"]), ("--timeout", ["nan", "-1", "0", "x", "inf"]),
            ("--study", ["../x", "", "a/b", ".", "..", "x" * 200]), ("--storage", ["redis://x", "sqlite:////no/such/dir/t.db", "x"]),
            ("--top", ["0", "x"]), ("--emit", ["jax"]), ("--seq-len", ["0", "nan"]), ("--fix", ["tp=3", "warp=1"]),
        ]))
        args = [*good, option, data.draw(st.sampled_from(values))]
        if option == "--trial-cmd":  # replaces the good command
            args = [*good[:good.index("--trial-cmd")], "--trial-cmd", data.draw(st.sampled_from(values)), *good[good.index("--trials"):]]
        check_fails_in_one_line(args, "tune")


@FUZZ
@given(data=st.data())
def test_comm(data):
    option, values = data.draw(st.sampled_from([
        ("--bytes", ["nan", "inf", "-1", "0", "x", "1e400", "10T"]), ("--gpus", ["0", "-8", "x", "99999999999999"]), ("--nodes", ["0", "-1", "x"]),
        ("--op", ["broadcast_all", ""]), ("--sizes", ["x", "1M", "16G:1M", "nan:1G"]), ("--cluster", ["nope", "/dev/null"]),
    ]))
    base = {"--cluster": "dgx-h100", "--op": "all_reduce", "--bytes": "1M"}
    if option == "--sizes":
        base.pop("--bytes")
    base[option] = data.draw(st.sampled_from(values))
    check_fails_in_one_line(["comm", *[x for kv in base.items() for x in kv]], "comm")


@FUZZ
@given(data=st.data())
def test_calibrate(data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sub = data.draw(st.sampled_from(["nccl", "gemm", "report"]))
        content = data.draw(st.sampled_from([b"", b"\xff\xfe garbage", b"# nothing here\n", b"size count type\n1 2 3\n", b"a,b,c\n1,2,x\n"]))
        bad = data.draw(st.sampled_from([_write(folder, "log.txt", content), *bad_paths(folder, devices=False)]))
        if sub == "report":
            args = ["calibrate", "report", "--runs", bad]
        else:
            args = ["calibrate", sub, bad, "--out", str(folder / "p.yaml")]
        check_fails_in_one_line(args, f"calibrate {sub}")


PLAN_BAD_OPTIONS = {
    "--tokens": ["nan", "inf", "0", "-1", "x", "1e400", ""], "--seq-len": ["0", "-1", "x", "16777217"],
    "--gpus": ["0", "x", "8:4", "nan", "1e12", "8,x", "-8"], "--batch-tokens": ["nan", "x", "0", "-4M", "1e400"],
    "--batches": ["0", "-1", "x"], "--deadline": ["x", "-1d", "0d", "nanw"], "--budget": ["x", "-5M", "$", "nan"],
    "--mtbf-hours-per-gpu": ["nan", "-1", "0", "x", "inf"], "--workers": ["0", "-1", "x"], "--ramp": ["x", "4M@", "@1T", "nan@1T"],
    "--precision": ["fp3"], "--objective": ["speed"], "--fix": ["tp=3,tp=3", "warp=1", "tp=x"], "--model": ["nope", "/dev/zero"],
}


@FUZZ
@given(data=st.data())
def test_plan(data):
    option = data.draw(st.sampled_from(sorted(PLAN_BAD_OPTIONS)))
    base = {"--model": "gpt2-xl", "--cluster": "dgx-h100", "--tokens": "1B", "--seq-len": "1024", "--gpus": "8"}
    base[option] = data.draw(st.sampled_from(PLAN_BAD_OPTIONS[option]))
    check_fails_in_one_line(["plan", *[x for kv in base.items() for x in kv]], "plan")


def test_zz_counts():
    """The closing count per command (printed with -s; issue 12 asks for >= 300 in all)."""
    print("\nfuzz inputs per command:", dict(sorted(COUNTS.items())), "total", sum(COUNTS.values()))
    if len(COUNTS) >= 11:
        assert sum(COUNTS.values()) >= 300
