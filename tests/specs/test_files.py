"""Strict input reading (autopar/specs/_files.py) and the StrictModel base (_base.py): text
must be UTF-8, keys unique, numbers finite, and a boolean is never a number."""

from __future__ import annotations

from pathlib import Path

import pytest

from autopar.errors import InputError
from autopar.specs import TrainingSpec, parse_plan
from autopar.specs._files import read_mapping
from autopar.specs.hardware import cluster_from_mapping
from autopar.specs.model import model_from_mapping

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, content, message", [
    ("d.yaml", b"a: 1\nb: 2\na: 3\n", "key 'a' given twice (line 3, first on line 1); each key may appear once"),
    ("d.json", b'{"a": {"x": 1, "x": 2}}', "key 'x' given twice; each key may appear once"),
    ("n.json", b'{"a": NaN}', "not valid JSON: non-finite number NaN"),
    ("e.json", b'{"a": [1, 1e400]}', "a.1 is not a finite number (NaN and infinities are refused)"),
    ("i.yaml", b"a: {b: .inf}\n", "a.b is not a finite number"),
    ("u.yaml", b"a: 1\n\xff\n", "not UTF-8 text (byte 0xff at offset 5)"),
    ("l.yaml", b"- 1\n- 2\n", "file must hold a mapping of keys to values"),
    ("bad.yaml", b"a: [1\n", "not valid YAML: line 2, column 1: expected ',' or ']', but got '<stream end>'"),
    ("deep.json", b"[" * 100_000, "not valid JSON"),
])
def test_strict_reading(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        read_mapping(path, "model")
    assert str(err.value).startswith(f"model='{path}': ") and message in str(err.value)


def test_not_regular_files(tmp_path):
    for path, rule in ((tmp_path, "is a directory, not a file"), (Path("/dev/zero"), "is not a regular file"),
                       (tmp_path / "none.yaml", "cannot read file (No such file or directory)")):
        with pytest.raises(InputError, match=rule.replace("(", r"\(").replace(")", r"\)")):
            read_mapping(path, "cluster")


def test_a_bom_is_allowed(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert read_mapping(path, "x") == {"a": 1}


def test_booleans_are_not_numbers():
    # issue 12: `num_hidden_layers: true` was read as a one-layer model
    cfg = {"num_hidden_layers": True, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 100}
    with pytest.raises(InputError, match=r"model.num_hidden_layers=True: must be a number, not the boolean true"):
        model_from_mapping(cfg, "m")
    with pytest.raises(ValueError, match="not the boolean"):
        TrainingSpec(seq_len=True, global_batch_size=8)
    with pytest.raises(ValueError, match="not the boolean"):
        parse_plan("tp=8", mbs=True)
    assert parse_plan("tp=2,sp=on").sp is True  # a real boolean field keeps booleans


def test_infinite_bandwidth_is_refused():
    import yaml

    data = yaml.safe_load((ROOT / "profiles/clusters/dgx-h100.yaml").read_text())
    data["intra_node"]["bandwidth_gb_per_s"] = float("inf")
    with pytest.raises(InputError, match="cluster.intra_node.bandwidth_gb_per_s=inf: Input should be a finite number"):
        cluster_from_mapping(data)
