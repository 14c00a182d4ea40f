"""Sweep plots (PNG, matplotlib Agg): best tokens/s per GPU vs GPU count per model, memory vs
step time of the top plans, and where the best plan's step goes. Input: the sweep's case
records (plain dicts, see solvers/sweep.py), so this module needs no solver."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

PNG_METADATA = {"Software": None}  # no version stamp: the same sweep writes the same bytes
PLOT_FILES = ("throughput_vs_gpus.png", "memory_vs_step.png", "time_breakdown.png")


def _ok(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("status") == "ok"]


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata=PNG_METADATA)
    plt.close(fig)
    return path


def throughput_vs_gpus(records: list[dict[str, Any]], path: Path) -> Path:
    """One line per model (and cluster, sequence length, batch when the sweep varies them)."""
    lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
    vary = {k: len({r[k] for r in records}) > 1 for k in ("cluster", "seq_len", "global_batch")}
    for r in _ok(records):
        label = r["model"]
        label += f" {r['cluster']}" if vary["cluster"] else ""
        label += f" s{r['seq_len']}" if vary["seq_len"] else ""
        label += f" b{r['global_batch']}" if vary["global_batch"] else ""
        lines[label].append((r["gpus"], r["tokens_per_second_per_gpu"]))
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label in sorted(lines):
        points = sorted(lines[label])
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_yscale("log")  # models differ by 10x or more; log keeps each line's trend visible
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylabel("best tokens/s per GPU (predicted, log)")
    ax.set_title("Best plan throughput per GPU vs GPU count")
    ax.grid(True, which="both", alpha=0.3)
    gpus = sorted({r["gpus"] for r in records})
    ax.set_xticks(gpus, [str(g) for g in gpus])
    if lines:
        ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def memory_vs_step(records: list[dict[str, Any]], path: Path) -> Path:
    """The top plans of each case: one panel per model, colour by GPU count, HBM as a dashed line."""
    by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in _ok(records):
        by_model[r["model"]].append(r)
    models = sorted(by_model) or ["(no case found a plan)"]
    cols = min(3, len(models))
    rows = (len(models) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    gpus = sorted({r["gpus"] for r in records})
    colours = {g: plt.cm.viridis(i / max(1, len(gpus) - 1)) for i, g in enumerate(gpus)}
    for ax, model in zip(axes.flat, models):
        shown = set()
        for r in by_model.get(model, []):
            xs = [p["step_seconds"] for p in r["top"]]
            ys = [p["memory_gb"] for p in r["top"]]
            label = f"{r['gpus']} GPUs" if r["gpus"] not in shown else None
            shown.add(r["gpus"])
            ax.scatter(xs, ys, s=18, color=colours[r["gpus"]], label=label, alpha=0.8)
            ax.scatter(xs[:1], ys[:1], s=70, facecolors="none", edgecolors="black")
            ax.axhline(r["hbm_gb"], color="red", linestyle="--", linewidth=0.8)
        ax.set_title(model, fontsize=10)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, max([r["hbm_gb"] for r in by_model.get(model, [])] + [1]) * 1.1)
        ax.set_xlabel("step time, s (log)")
        ax.set_ylabel("memory per GPU, GB")
        ax.grid(True, alpha=0.3)
        if shown:
            ax.legend(fontsize=7, loc="lower left")
    for ax in list(axes.flat)[len(models):]:
        ax.set_visible(False)
    fig.suptitle("Top plans: memory vs step time (circled: best; dashed red: HBM)", fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


def time_breakdown(records: list[dict[str, Any]], path: Path) -> Path:
    """The best plan of each case: fraction of the step per time component, stacked."""
    ok = _ok(records)
    keys = sorted({k for r in ok for k, v in r["time_breakdown"].items() if v > 0},
                  key=lambda k: -sum(r["time_breakdown"].get(k, 0) / r["step_seconds"] for r in ok))
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.32 * max(1, len(ok))))
    labels = [r["case"] for r in ok]
    left = [0.0] * len(ok)
    cmap = plt.get_cmap("tab20")
    for i, key in enumerate(keys):
        widths = [r["time_breakdown"].get(key, 0.0) / r["step_seconds"] for r in ok]
        ax.barh(range(len(ok)), widths, left=left, color=cmap(i % 20), label=key)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(ok)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("fraction of the step (predicted)")
    ax.set_title("Where the best plan's step goes")
    if keys:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def sweep_plots(records: list[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """Write the three sweep plots under out_dir/plots/; returns their paths."""
    plots = Path(out_dir) / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    makers = (throughput_vs_gpus, memory_vs_step, time_breakdown)
    return [make(records, plots / name) for make, name in zip(makers, PLOT_FILES)]
