"""Summaries of a validation run: MAPE per file, source group, family, stack and GPU part
(modelled rows, and a second figure over all rows), and rank agreement (Kendall tau) within groups of runs that share
model, GPU, GPU count and batch but differ in layout -- the search's job is ranking."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from autopar.specs.hardware import GB, gb_gib
from autopar.validation.predict import RowResult
from autopar.validation.rows import DEFAULTS_DOC, normalize_row


def _mape(rows: list[RowResult]) -> dict[str, Any]:
    errors = [abs(r.error) for r in rows if r.error is not None]
    return {"mape": statistics.fmean(errors) if errors else None, "num_rows": len(errors),
            "median_abs_error": statistics.median(errors) if errors else None,
            "mean_signed_error": statistics.fmean(r.error for r in rows if r.error is not None) if errors else None}


def _by(rows: list[RowResult], key) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[RowResult]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return {k: _mape(v) for k, v in sorted(groups.items())}


def rank_key(row: dict[str, Any]) -> tuple:
    """Runs that differ only in layout: same model, GPU type, GPU count, batch, sequence, precision."""
    return (str(row.get("model_name")), str(row.get("gpu_type")), row.get("num_gpus"), row.get("global_batch_size"),
            row.get("seq_len"), str(row.get("precision_normalized")))


def rank_agreement(raw: list[dict[str, Any]], results: list[RowResult]) -> dict[str, Any]:
    """Kendall tau-a over the pairs that differ in layout and in measurement, per group of layout
    variants and pooled: (concordant - discordant) / pairs, a pair the model predicts equal
    counting 0; and the share of pairs the model orders as measured (a tie is not ordered right).
    Two rows that resolve to the same plan and that the model predicts equal differ in nothing the
    search chooses or the model takes (one layout run in two containers or software releases): no
    ranking question, so their pair is left out and counted apart (same_layout), with the group's
    rows listed. Rows of one plan that the model tells apart (another stack, FP8 recipe, routing)
    stay ranked: those are choices a user makes."""
    groups: dict[tuple, list[RowResult]] = {}
    for row, res in zip(raw, results):
        if res.error is not None and not res.not_modelled:  # predicted: the row normalizes
            groups.setdefault(rank_key(normalize_row(row)[0]), []).append(res)
    out_groups, right, wrong, tied, same = [], 0, 0, 0, 0
    for key, members in groups.items():
        c = d = ties = alike = 0
        for a, b in itertools.combinations(members, 2):
            if a.plan is not None and a.plan == b.plan and a.predicted_tokens_per_second_per_gpu == b.predicted_tokens_per_second_per_gpu:
                alike += 1
                continue
            measured = a.measured_tokens_per_second_per_gpu - b.measured_tokens_per_second_per_gpu
            predicted = a.predicted_tokens_per_second_per_gpu - b.predicted_tokens_per_second_per_gpu
            if measured == 0:
                continue
            if predicted == 0:
                ties += 1
            elif measured * predicted > 0:
                c += 1
            else:
                d += 1
        n = c + d + ties
        if n or alike:
            out_groups.append({"group": " | ".join(str(k) for k in key), "rows": [m.id for m in members],
                               "pairs": n, "tied": ties, "same_layout": alike, "kendall_tau": (c - d) / n if n else None,
                               "ordered_right": c / n if n else None})
            right, wrong, tied, same = right + c, wrong + d, tied + ties, same + alike
    n = right + wrong + tied
    pooled = {"pairs": n, "tied": tied, "same_layout": same, "kendall_tau": (right - wrong) / n if n else None,
              "ordered_right": right / n if n else None}
    return {"pooled": pooled, "groups": out_groups}


def summarize(results: list[RowResult], raw: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    done = [r for r in results if r.error is not None]
    modelled = [r for r in done if not r.not_modelled]
    overall = _mape(modelled)
    out = {
        "overall_mape": overall["mape"],
        "median_abs_error": overall["median_abs_error"],
        "mean_signed_error": overall["mean_signed_error"],
        "all_rows_mape": _mape(done)["mape"],
        "by_group": _by(modelled, lambda r: r.source_group),
        "by_family": _by(modelled, lambda r: r.family or "unknown"),
        "by_stack": _by(modelled, lambda r: r.stack or "unknown"),
        # a family pools GPUs of one generation (B200, B300, GB200 and GB300 are 'blackwell'):
        # its error can hide a part the model misses one way and another it misses the other
        "by_gpu": _by(modelled, lambda r: r.gpu or "unknown"),
        "num_rows": len(results),
        "num_predicted": len(done),
        "num_skipped": len(results) - len(done),
        "not_modelled": [{"id": r.id, "reason": r.not_modelled, "error": r.error} for r in done if r.not_modelled],
        "num_resolved": sum(1 for r in done if r.resolved),
        # the run ran, yet the model puts its stated layout above the GPU's memory: the row's
        # layout (a batch or recompute as published) or the memory model is off
        "over_memory": [{"id": r.id, "predicted_memory_gb": r.predicted_memory_gb, "gpu_memory_gb": r.gpu_memory_gb}
                        for r in done if r.feasible is False],
        "defaults": DEFAULTS_DOC,
    }
    if raw is not None:
        out["rank_agreement"] = rank_agreement(raw, results)
    return out


# the summary's tables by row attribute: (title, summarize key)
SUMMARY_TABLES = (("source group", "by_group"), ("family", "by_family"), ("stack", "by_stack"), ("GPU", "by_gpu"))


def render(report: dict[str, Any]) -> str:
    """The text table `autopar validate` prints."""
    lines = [f"{'id':<44} {'plan':<58} {'measured':>9} {'predicted':>9} {'error':>7}"]
    for r in report["rows"]:
        if r["skipped"]:
            lines.append(f"{r['id']:<44} skipped: {r['skipped']}")
            continue
        flag = " (not modelled)" if r["not_modelled"] else ""
        lines.append(f"{r['id'][:44]:<44} {r['plan'][:58]:<58} {r['measured_tokens_per_second_per_gpu']:9.0f} "
                     f"{r['predicted_tokens_per_second_per_gpu']:9.0f} {100 * r['error']:+6.1f}%{flag}")
    s = report["summary"]
    lines += ["", "tokens/s per GPU; error = (predicted - measured) / measured"]
    for title, key in SUMMARY_TABLES:
        lines.append(f"by {title}:")
        for name, g in s[key].items():
            lines.append(f"  {name:<42} MAPE {100 * g['mape']:5.1f}%  ({g['num_rows']} rows)")
    if s["overall_mape"] is not None:
        lines.append(f"  {'overall':<42} MAPE {100 * s['overall_mape']:5.1f}%  ({s['num_predicted'] - len(s['not_modelled'])} modelled, "
                     f"{s['num_skipped']} skipped); all rows {100 * s['all_rows_mape']:.1f}%")
    for nm in s["not_modelled"]:
        lines.append(f"  not modelled: {nm['id']}: {nm['reason']}")
    for om in s.get("over_memory", []):
        lines.append(f"  over memory: {om['id']} ran, but the model puts its layout at {om['predicted_memory_gb']:.1f} GB per GPU, "
                     f"HBM is {gb_gib(om['gpu_memory_gb'] * GB)}: the published layout or the memory model is off")
    ra = s.get("rank_agreement")
    if ra and ra["pooled"]["pairs"]:
        p = ra["pooled"]
        lines.append(f"  rank agreement: Kendall tau {p['kendall_tau']:.2f}, {100 * p['ordered_right']:.0f}% of {p['pairs']} pairs "
                     f"ordered right, {p['tied']} predicted equal ({len(ra['groups'])} groups of layout variants)")
    if ra and ra["pooled"].get("same_layout"):
        lines.append(f"  rank agreement leaves out {ra['pooled']['same_layout']} pairs of rows with the same layout "
                     "and the same prediction (one plan in two containers or software releases: no ranking question)")
    return "\n".join(lines)
