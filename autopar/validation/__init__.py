"""Check the cost model against published training runs (tests/data/*_runs.json format): each
row becomes model, cluster, training and plan (autopar.validation.rows), is predicted
(autopar.validation.predict) and summarised (autopar.validation.report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from autopar.errors import InputError
from autopar.specs.costparams import CostParams
from autopar.validation.predict import RowResult, measured_tokens_per_gpu, predict_row, source_flops_per_token
from autopar.validation.report import rank_agreement, render, summarize
from autopar.validation.rows import DEFAULTS_DOC, row_cluster, row_inputs, row_model, row_training

__all__ = ["DEFAULTS_DOC", "RowResult", "families_table", "load_rows", "measured_tokens_per_gpu", "predict_row", "rank_agreement", "render",
           "row_cluster", "row_inputs", "row_model", "row_training", "source_flops_per_token", "summarize", "validate_runs"]


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    from autopar.specs._files import parse_text, read_text

    path = Path(path)  # strictly: UTF-8, no duplicate keys, no NaN/inf, regular files only
    data = parse_text(read_text(path, "runs"), ".json", "runs", str(path))
    rows = data.get("rows", data.get("runs")) if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InputError("runs", str(path), "must be a JSON list of run objects (or {\"rows\": [...]})")
    # a column a row leaves out or null is derived where the row allows it (a model preset, tp x pp x
    # cp x dp, tokens_per_batch; rows.REQUIRED_COLUMNS), else that row is skipped with the rule
    return rows


def families_table(reports: dict[str, dict[str, Any]], holdout: tuple[str, ...] = ()) -> dict[str, Any]:
    """The validated error per family over every file's modelled rows (profiles/validation/families.json).
    Reports named in `holdout` (runs no coefficient was fitted to) are kept apart: each family
    carries their error under 'holdout', and a family only they cover has num_rows 0."""
    def modelled(names) -> list[RowResult]:
        rows = [RowResult.model_validate(r) for name in names for r in reports[name]["rows"]]
        return [r for r in rows if r.error is not None and not r.not_modelled]

    table = summarize(modelled([n for n in reports if n not in holdout]))["by_family"]
    held = summarize(modelled([n for n in reports if n in holdout]))["by_family"] if holdout else {}
    for family, stats in held.items():
        table.setdefault(family, {"mape": None, "num_rows": 0, "median_abs_error": None, "mean_signed_error": None})
        table[family]["holdout"] = {k: stats[k] for k in ("mape", "num_rows", "mean_signed_error")}
    source = "autopar validate " + " ".join(sorted(n for n in reports if n not in holdout))
    if holdout:
        source += " (held out: " + " ".join(sorted(holdout)) + ")"
    return {"source": source, "families": dict(sorted(table.items()))}


def validate_runs(path: str | Path, params: CostParams | None = None,
                  progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    rows = load_rows(path)
    results = []
    for i, row in enumerate(rows):
        results.append(predict_row(row, params))
        if progress:
            progress(i + 1, len(rows))
    return {"rows": [r.model_dump(mode="json") for r in results], "summary": summarize(results, rows)}
