"""Model shapes beyond every released model by orders of magnitude are refused at load, naming
the field (autopar/limits.py), instead of costing a plan space for hours."""

from __future__ import annotations

import pytest

from autopar.errors import InputError
from autopar.specs import load_model
from autopar.specs._files import preset_files

BASE = {"name": "x", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 8, "ffn_hidden_size": 4096, "vocab_size": 32000}


@pytest.mark.parametrize("field, value, limit", [
    ("hidden_size", 10**15, 2**20), ("num_layers", 10**6, 2**14), ("vocab_size", 10**9, 2**24), ("num_attention_heads", 10**5, 2**14),
])
def test_absurd_shape_names_field_and_limit(tmp_path, field, value, limit):
    path = tmp_path / "m.yaml"
    path.write_text("\n".join(f"{k}: {v}" for k, v in {**BASE, field: value}.items()))
    with pytest.raises(InputError, match=rf"{field}={value}.*less than or equal to {limit}"):
        load_model(str(path))


def test_every_preset_is_within_the_limits():
    for name in preset_files("models"):
        assert load_model(name).hidden_size <= 2**20
