"""Benchmark (not a unit test): per-stage pipeline plans (solvers.stages) inside `autopar search`.

For each case the search runs twice after a warm-up run, end to end (enumeration, exhaustive ranking, estimates):
without per-stage solves, and with them (the CLI default: the top cores, 5 s budget). It
reports the best balanced plan (balanced layout, one recompute setting for all stages), the
best plan with per-stage solves, every solved core against its own balanced plan, and the wall
times. Memory-tight cores show what per-stage recompute and layers buy. Writes
results/bench/stages.json and stages.md.

    .venv/bin/python tests/bench/bench_stages.py
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from autopar.cost import estimate
from autopar.space import SpaceOptions
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.costparams import params_for_cluster
from autopar.specs.plan import Recompute
from solvers import SearchRequest, run_search
from solvers.stage_search import PerStageOptions
from solvers.stages import core_of, solve_core

OUT = Path(__file__).resolve().parents[2] / "results" / "bench"
TOKENS_16M = 16 * 2**20
# name, model, cluster, GPUs, seq, global batch (sequences), --fix
CASES = [
    ("llama3-405b-16384xH100", "llama3-405b", "dgx-h100-superpod", 16384, 8192, TOKENS_16M // 8192, {}),
    ("llama3-70b-256xH100", "llama3-70b", "dgx-h100-superpod", 256, 8192, TOKENS_16M // 8192, {}),
    ("llama3-70b-1024xH100", "llama3-70b", "dgx-h100-superpod", 1024, 8192, TOKENS_16M // 8192, {}),
    ("gpt3-175b-1024xA100", "gpt3-175b", "dgx-a100", 1024, 2048, 1536, {}),
    # DeepSeek-V3's own batch (4096 x 15360 tokens); cp pinned to 1 as in its training (6.6M plans otherwise)
    ("deepseek-v3-2048xH800", "deepseek-v3", "hgx-h800", 2048, 4096, 15360, {"cp": 1}),
]
# memory-tight cores: name, model, cluster, GPUs, seq, batch, plan (balanced, no recompute)
TIGHT = [
    ("llama3-405b seed layout TP8 PP16 DP128 (seed 001 'Примеры')", "llama3-405b", "dgx-h100-superpod", 16384, 8192, 2048,
     "tp=8,pp=16,dp=128,mbs=1,zero=1,recompute=none"),
    ("deepseek-v3 seed layout EP64 PP16 ZeRO-1 (seed 001 'Примеры')", "deepseek-v3", "hgx-h800", 2048, 4096, 15360,
     "tp=1,pp=16,dp=128,ep=64,mbs=1,zero=1,recompute=none"),
]


def _inputs(model, cluster, gpus, seq, batch):
    c = load_cluster(cluster).with_gpus(gpus)
    return load_model(model), c, TrainingSpec(seq_len=seq, global_batch_size=batch), params_for_cluster(c)


def run_case(name, model, cluster, gpus, seq, batch, fixed) -> dict:
    m, c, t, p = _inputs(model, cluster, gpus, seq, batch)
    runs = {}
    run_search(SearchRequest(m, c, t, top_k=10, params=p, options=SpaceOptions(fixed=fixed)))  # warm the caches
    for key, per_stage in (("balanced", None), ("per_stage", PerStageOptions())):
        start = time.perf_counter()
        out = run_search(SearchRequest(m, c, t, top_k=10, params=p, options=SpaceOptions(fixed=fixed), per_stage=per_stage))
        runs[key] = (out, time.perf_counter() - start)
    plain, with_stages = runs["balanced"][0].results, runs["per_stage"][0].results
    info = with_stages.search.per_stage
    best_b, best_s = plain.plans[0].estimate, with_stages.plans[0].estimate
    return {
        "case": name, "fixed": fixed, "num_plans": plain.search.num_evaluated, "num_feasible": plain.search.num_feasible,
        "search_seconds_without_per_stage": runs["balanced"][1], "search_seconds_with_per_stage": runs["per_stage"][1],
        "per_stage_seconds": info.seconds, "cores_skipped": info.cores_skipped,
        "best_balanced": {"plan": best_b.plan, "step_seconds": best_b.step_seconds},
        "best_with_per_stage": {"plan": best_s.plan, "step_seconds": best_s.step_seconds,
                                "stages": [[s.layers, s.recompute_layers] for s in best_s.stages]},
        "step_change": best_s.step_seconds / best_b.step_seconds - 1,
        "solves": [s.model_dump() for s in info.solves],
    }


def run_tight(name, model, cluster, gpus, seq, batch, text) -> dict:
    """The balanced plan without recompute, with every uniform recompute count, and per stage."""
    m, c, t, p = _inputs(model, cluster, gpus, seq, batch)
    plan = parse_plan(text)
    none = estimate(m, c, t, plan, p)
    most = max(plan.layers_per_stage(m.num_layers))
    uniform = []
    for k in range(1, most + 1):
        e = estimate(m, c, t, plan.model_copy(update={"recompute": Recompute.full, "recompute_num_layers": None if k == most else k}), p)
        uniform.append({"recompute_num_layers": k, "fits": e.feasible, "step_seconds": e.step_seconds,
                        "memory_gb": e.memory_bytes_per_gpu / 1e9, "recomputed_layers": sum(s.recompute_layers for s in e.stages)})
    start = time.perf_counter()
    sol = solve_core(m, c, t, p, core_of(plan))
    seconds = time.perf_counter() - start
    fitting = [u for u in uniform if u["fits"]]
    return {
        "case": name, "plan": text, "no_recompute": {"fits": none.feasible, "step_seconds": none.step_seconds, "memory_gb": none.memory_bytes_per_gpu / 1e9},
        "uniform": uniform, "best_uniform": min(fitting, key=lambda u: u["step_seconds"]) if fitting else None,
        "per_stage": {"status": sol.status, "plan": sol.plan.text() if sol.plan else None, "step_seconds": sol.step_seconds,
                      "layers": sol.layers, "recomputed": sol.recomputed, "solve_seconds": seconds, "agreement": sol.agreement,
                      "memory_gb": sol.estimate.memory_bytes_per_gpu / 1e9 if sol.estimate else None},
    }


def markdown(report: dict) -> str:
    lines = ["# Per-stage pipeline plans (CP-SAT) vs balanced plans", "",
             f"`python tests/bench/bench_stages.py` on {report['machine']} (2 shared cores); seconds are wall time.", "",
             "| case | plans | best balanced step s | best with per-stage s | change | search s (no per-stage / with) | per-stage s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["cases"]:
        lines.append(f"| {r['case']} | {r['num_plans']:,} | {r['best_balanced']['step_seconds']:.3f} | {r['best_with_per_stage']['step_seconds']:.3f} | "
                     f"{100 * r['step_change']:+.1f}% | {r['search_seconds_without_per_stage']:.1f} / {r['search_seconds_with_per_stage']:.1f} | {r['per_stage_seconds']:.1f} |")
    lines += ["", "Solved cores (each against the enumeration's best plan of the same core):", ""]
    for r in report["cases"]:
        lines.append(f"## {r['case']}")
        lines.append("")
        lines.append("| status | s | balanced step s | fits | per-stage step s | change | per-stage plan |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for s in r["solves"]:
            step = f"{s['step_seconds']:.3f}" if s["step_seconds"] else "-"
            gain = f"{100 * (s['step_seconds'] / s['balanced_step_seconds'] - 1):+.1f}%" if s["step_seconds"] and s["balanced_fits"] else "-"
            lines.append(f"| {s['status']} | {s['seconds']:.2f} | {s['balanced_step_seconds']:.3f} | {s['balanced_fits']} | {step} | {gain} | {s['plan'] or s['reason']} |")
        lines.append("")
    lines += ["## Memory-tight cores", ""]
    for r in report["tight"]:
        ps, best = r["per_stage"], r["best_uniform"]
        lines.append(f"### {r['case']}: `{r['plan']}`")
        lines.append("")
        lines.append(f"- no recompute: {'fits' if r['no_recompute']['fits'] else 'does not fit'} ({r['no_recompute']['memory_gb']:.1f} GB, {r['no_recompute']['step_seconds']:.3f} s)")
        fits = [u["recompute_num_layers"] for u in r["uniform"] if u["fits"]]
        lines.append(f"- one recompute count k on every stage (k = 1..{len(r['uniform'])}): fits for k in {fits or 'none'}"
                     + (f"; fastest k = {best['recompute_num_layers']}: {best['step_seconds']:.3f} s, {best['recomputed_layers']} layers recomputed" if best else ""))
        lines.append(f"- per stage ({ps['status']}, {ps['solve_seconds']:.2f} s): {ps['step_seconds']:.3f} s, layers {ps['layers']}, recomputed {ps['recomputed']}, "
                     f"{ps['memory_gb']:.1f} GB: `{ps['plan']}`" if ps["plan"] else f"- per stage: {ps['status']}")
        if best and ps["plan"]:
            lines.append(f"- per-stage vs fastest uniform count: {100 * (ps['step_seconds'] / best['step_seconds'] - 1):+.1f}%")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    report = {"machine": f"python {platform.python_version()}, {platform.processor() or platform.machine()}",
              "cases": [run_case(*c) for c in CASES], "tight": [run_tight(*c) for c in TIGHT]}
    OUT.mkdir(parents=True, exist_ok=True)
    for path, text in ((OUT / "stages.json", json.dumps(report, indent=2) + "\n"), (OUT / "stages.md", markdown(report) + "\n")):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    print(markdown(report))


if __name__ == "__main__":
    main()
