"""Locating and reading profile files (the only file I/O the specs do)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from autopar.errors import InputError

# profiles/ sits at the project's root, next to the autopar package (design card layout).
PROFILES_DIR = Path(os.environ.get("AUTOPAR_PROFILES", Path(__file__).resolve().parents[2] / "profiles"))


def read_mapping(path: Path, field: str) -> dict[str, Any]:
    """Read a YAML or JSON file holding one mapping; errors name the CLI field."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(field, str(path), f"cannot read file ({exc.strerror})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(field, str(path), f"not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(field, str(path), "file must hold a mapping of keys to values")
    return data


def preset_files(kind: str) -> dict[str, Path]:
    """Preset name -> file for profiles/<kind>/ (file stem is the preset name)."""
    folder = PROFILES_DIR / kind
    if not folder.is_dir():
        return {}
    return {
        p.stem: p
        for p in sorted(folder.iterdir())
        if p.suffix in (".yaml", ".yml", ".json") and not p.stem.isupper()
    }


def looks_like_path(name: str) -> bool:
    return os.sep in name or name.endswith((".json", ".yaml", ".yml"))
