"""Locating and reading input files (the only file I/O the specs do).

Reading is strict, because a silently wrong input costs GPU-hours: text must be UTF-8, a key
given twice in one mapping is refused (JSON and YAML both keep the last one silently),
non-finite numbers (NaN, Infinity, 1e400) are refused, and only regular files of sane size
are read (a FIFO or /dev/zero would block or never end)."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from autopar.errors import InputError

# profiles/ sits at the project's root, next to the autopar package (design card layout).
PROFILES_DIR = Path(os.environ.get("AUTOPAR_PROFILES", Path(__file__).resolve().parents[2] / "profiles"))

# Inputs are hand-written configs and autopar's own results (the largest, a results file of a
# 1,000-plan search, is ~5 MB); anything far larger is not one of them.
MAX_INPUT_BYTES = 256 * 2**20


def read_text(path: str | Path, field: str) -> str:
    """A regular file's text, decoded as UTF-8 (a leading BOM is dropped); errors name the field."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise InputError(field, str(path), f"cannot read file ({exc.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(field, str(path), "is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(field, str(path), "is not a regular file (a pipe or device is not read)")
    if info.st_size > MAX_INPUT_BYTES:
        raise InputError(field, str(path), f"file is {info.st_size:,} bytes; inputs are at most {MAX_INPUT_BYTES:,}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(field, str(path), f"cannot read file ({exc.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(field, str(path), f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, f"unhashable key {key!r}", key_node.start_mark) from None
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1, seen[key])
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int, first_line: int | None):
        self.key, self.line, self.first_line = key, line, first_line
        where = f" (line {line}, first on line {first_line})" if first_line else ""
        super().__init__(f"key {key!r} given twice{where}")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key, 0, None)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def parse_text(text: str, suffix: str, field: str, where: str, non_finite: bool = False) -> Any:
    """JSON (suffix .json) or YAML text -> data; duplicate keys refused, and non-finite numbers
    unless `non_finite` (a HuggingFace config.json written by Python's json may hold Infinity in
    keys autopar does not read, e.g. Nemotron-H's time_step_limit; the caller checks what it uses)."""
    kind = "JSON" if suffix == ".json" else "YAML"
    try:
        if kind == "JSON":
            data = json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=None if non_finite else _no_constant)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)
    except _DuplicateKey as exc:
        raise InputError(field, where, f"{exc}; each key may appear once") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(field, where, f"not valid {kind}: {_first_line(exc)}") from None
    except (ValueError, RecursionError) as exc:  # parse_constant; absurdly deep nesting
        raise InputError(field, where, f"not valid {kind}: {_first_line(exc)}") from None
    if not non_finite:
        refuse_non_finite(data, field, where)
    return data


def refuse_non_finite(data: Any, field: str, where: str) -> None:
    """InputError naming the first NaN or infinity in `data`."""
    bad = _non_finite(data)
    if bad is not None:
        raise InputError(field, where, f"{bad or 'top level'} is not a finite number (NaN and infinities are refused)")


def _first_line(exc: Exception) -> str:
    """The parser's complaint with its line and column, on one line."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return " ".join(str(exc).split())[:200]


def _non_finite(data: Any, path: str = "") -> str | None:
    """The dotted path of the first NaN or infinite float in nested data, else None."""
    if isinstance(data, float) and not math.isfinite(data):
        return path
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, list):
        items = enumerate(data)
    else:
        return None
    for key, value in items:
        found = _non_finite(value, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def read_data(path: str | Path, field: str, non_finite: bool = False) -> Any:
    """A JSON or YAML file's data (any shape), read strictly (parse_text)."""
    path = Path(path)
    return parse_text(read_text(path, field), path.suffix.lower(), field, str(path), non_finite)


def read_mapping(path: Path, field: str, non_finite: bool = False) -> dict[str, Any]:
    """Read a YAML or JSON file holding one mapping; errors name the CLI field."""
    data = read_data(path, field, non_finite)
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
