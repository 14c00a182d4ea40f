"""Benchmark (not a unit test): a search with every dimension free. Cases: LLaMA-3 405B on
16,384 H100 (DGX SuperPOD), seq 8192, 16M tokens per step; DeepSeek-V3 on 2,048 H800, seq 4096,
15,360 sequences, FP8 (the largest preset space: 9.4M plans). Reports the size of the space, how
many plans fit, and the wall time of each solver on this machine, in one run. Prints the JSON;
--out writes it (results/bench/search_*.json hold recorded runs: a benchmark never rewrites a
tracked file unless asked to).

    .venv/bin/python tests/bench/bench_search.py [--case llama3-405b-16k] [--repeat 3] [--out results/bench/search_llama3_405b_16k.json]
    .venv/bin/python tests/bench/bench_search.py --case deepseek-v3-2048 --repeat 1 --out results/bench/search_deepseek_v3_2048.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from autopar.cost.context import Batch
from autopar.space import enumerate_space
from autopar.specs import TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import params_for_cluster
from solvers import cpsat, exhaustive
from solvers.base import Objective

TOP_K = 10
# name -> (model, cluster, GPUs, seq, global batch (sequences), precision)
CASES = {
    "llama3-405b-16k": ("llama3-405b", "dgx-h100-superpod", 16384, 8192, 2048, "bf16"),
    "deepseek-v3-2048": ("deepseek-v3", "hgx-h800", 2048, 4096, 15360, "fp8"),
}


def best_of(fn, repeat):
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return min(times), value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=sorted(CASES), default="llama3-405b-16k")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="Also write the JSON report here")
    args = ap.parse_args()
    name, cluster_name, gpus, seq, gbs, precision = CASES[args.case]
    model = load_model(name)
    cluster = load_cluster(cluster_name).with_gpus(gpus)
    training = TrainingSpec(seq_len=seq, global_batch_size=gbs, precision=precision)
    params = params_for_cluster(cluster)  # the preset names its fitted calibration profile
    t_space, space = best_of(lambda: enumerate_space(model, cluster, training), args.repeat)
    batch = Batch(model, cluster, training, params, space)
    t_exh, oracle = best_of(lambda: exhaustive.solve(batch, Objective.throughput, TOP_K), args.repeat)
    t_tables, tables = best_of(lambda: cpsat.build_tables(batch), args.repeat)

    pairs = cpsat.candidate_pairs(tables, TOP_K)  # what solvers.cpsat.solve gives the model for the top TOP_K

    def cpsat_solve():
        model_, var = cpsat.build_model(tables, pairs)
        solver, status = cpsat.solve_model(model_)
        return solver, status, var

    t_solve, (solver, status, var) = best_of(cpsat_solve, args.repeat)
    best_cp = solver.objective_value * cpsat.STEP_QUANTUM_SECONDS
    report = {
        "case": f"{name}, {cluster_name} x {gpus} {cluster.gpu.name}, seq {seq}, {gbs} x {seq} tokens, {precision}, all dimensions free",
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
        "repeat": args.repeat, "timing": "best of repeats, seconds",
        "num_plans": len(space), "num_feasible": oracle.num_feasible,
        "enumerate_space_seconds": t_space,
        "exhaustive_seconds": t_exh,
        "cpsat_tables_seconds": t_tables,
        "cpsat_solve_seconds": t_solve,
        "cpsat_status": solver.status_name(status),
        "cpsat_pairs": len(tables.pair_rows),
        "cpsat_model_pairs": len(pairs),
        "best_step_seconds_exhaustive": float(oracle.objective[0]),
        "best_step_seconds_cpsat": best_cp,
        "best_plan": space.plan(int(oracle.rows[0])).text(),
        "search_seconds_exhaustive_total": t_space + t_exh,
        "search_seconds_cpsat_total": t_space + t_tables + t_solve,
        "ratio_exhaustive_over_cpsat": (t_space + t_exh) / (t_space + t_tables + t_solve),
    }
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    print(text, end="")


if __name__ == "__main__":
    main()
