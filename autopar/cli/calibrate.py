"""`autopar calibrate nccl|gemm`: fit collective curves and GEMM efficiency, write a profile."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import click

from autopar.cli import main
from autopar.cli.common import COLLECTIVES, write_atomic
from autopar.errors import InputError, Missing

OPS = list(COLLECTIVES)  # the fitting code (numpy, scipy) loads when a command runs, not for --help


def _command() -> str:
    return "autopar " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv and "autopar" in sys.argv[0] else ""


@main.group()
def calibrate() -> None:
    """Fit cost-model coefficients from measurements and write a calibration profile (YAML).

    Writing into an existing profile replaces only that command's section (collectives or
    gemm), so one profile can hold both."""


def _read_all(paths: tuple[str, ...], ranks: int | None, nodes: int | None, op: str | None):
    from autopar.cost.comm import Collective
    from calibration.nccl_log import NcclLog, read_log
    from calibration.nccl_points import is_points_file, read_points
    from calibration.nccl_profile import split_forced

    logs: list[NcclLog] = []
    forced: dict[str, tuple[str | None, str | None]] = {}
    for spec in paths:
        path, algo, proto = split_forced(spec)
        if is_points_file(path):
            logs.extend(read_points(path))
            continue
        log = read_log(path, ranks, nodes, Collective(op) if op else None)
        for warning in log.warnings:
            click.echo(f"warning: {Path(path).name}: {warning}", err=True)
        logs.append(log)
        forced[log.path] = (algo, proto)
    return logs, forced


def _nccl_table(profile) -> str:
    lines = [f"{'log':<58} {'collective':<14} {'ranks':>5} {'nodes':>5} {'sizes':>5} {'peak':>7} {'B':>7} {'med err':>8} {'max err':>8}",
             f"{'':<58} {'':<14} {'':>5} {'':>5} {'':>5} {'GB/s':>7} {'GB/s':>7} {'>=1MiB':>8} {'':>8}"]
    for f in profile.log_fits:
        med = "-" if f.median_error is None else f"{100 * f.median_error:.1f}%"
        lines.append(f"{Path(f.log).name[:58]:<58} {f.collective:<14} {f.num_ranks:>5} {f.num_nodes:>5} {f.num_sizes:>5} "
                     f"{f.peak_busbw_gb_per_s:>7.1f} {f.busbw_gb_per_s:>7.1f} {med:>8} {100 * f.max_error:>7.1f}%")
    cal = profile.collectives
    lines += ["", "collective model parameters fitted (autopar/cost/nccl.py):"]
    for name, value in cal.model_dump(exclude_none=True).items():
        if isinstance(value, float) and name not in ("median_error", "max_error"):
            lines.append(f"  {name} = {value:.4g}")
    for name, why in cal.not_identified.items():
        lines.append(f"  not identified: {name}: {why}")
    if cal.median_error is not None:
        lines.append(f"model error over {cal.num_observations} printed sizes: median {100 * cal.median_error:.1f}%, "
                     f"max {100 * cal.max_error:.1f}% (sizes >= 1 MiB)")
    return "\n".join(lines)


# Writing into an existing profile keeps its other section (gemm or collectives): both must come
# from one kind of GPU (autopar.specs.costparams.check_profile_gpu, which skips a GPU no preset knows)
MEASURED_ON = "these measurements ran on"


@calibrate.command("nccl")
@click.argument("logs", nargs=-1, required=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Profile YAML to write (or update)")
@click.option("--ranks", type=click.IntRange(min=2), default=None, help="Ranks of the runs, when the logs lack a device list")
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Nodes of the runs, when the logs lack a device list")
@click.option("--op", type=click.Choice(OPS), default=None, help="Collective, when the logs lack the program name")
@click.option("--gpu", default=None, help="GPU preset of the runs (for NVLS detection), when the logs lack device lines")
@click.option("--cluster", "cluster_name", default=None, help="Cluster preset or YAML the logs ran on (default: the preset of their GPU)")
@click.option("--nccl-version", default=None, help="NCCL release the runs used (e.g. 2.26), when the logs do not print it; "
              "its tuning model picks the algorithms")
@click.option("--name", default=None, help="Profile name (default: the output file's stem)")
def nccl(logs, out, ranks, nodes, op, gpu, cluster_name, nccl_version, name):
    """Fit the collective model's physical parameters (link bandwidths, latencies, NVLS / tree /
    SHARP gains, saturation) to nccl-tests logs and name what they could not tell. LOGS:
    console output files, or `kind: nccl-points` YAML tables; LOG@ALGO[/PROTO] marks a run
    made with NCCL_ALGO / NCCL_PROTO set (e.g. ring2node.txt@ring)."""
    from autopar.specs import load_cluster
    from autopar.specs.costparams import check_profile_gpu
    from calibration.profile import dump_profile, existing_profile, nccl_profile

    parsed, forced = _read_all(logs, ranks, nodes, op)
    base = existing_profile(out)
    cluster = load_cluster(cluster_name) if cluster_name else None
    if nccl_version is not None and not re.match(r"^\d+\.\d+", nccl_version):
        raise InputError("nccl-version", nccl_version, "a release such as 2.26 or 2.28.3")
    profile = nccl_profile(name or Path(out).stem, parsed, gpu, _command(), base, forced, cluster, nccl_version)
    check_profile_gpu(base, profile.gpu, "out", out, MEASURED_ON)
    write_atomic(out, dump_profile(profile))
    click.echo(_nccl_table(profile))
    click.echo(f"wrote {out}")


@calibrate.command("gemm")
@click.argument("csvs", nargs=-1)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Profile YAML to write (or update)")
@click.option("--run", "run_bench", is_flag=True, help="Time matmuls here first (torch on CUDA when present, numpy on the CPU otherwise)")
@click.option("--csv-out", type=click.Path(dir_okay=False), default=None, help="Where --run writes its CSV (default: next to --out)")
@click.option("--quick", is_flag=True, help="With --run: a small grid (seconds on a CPU)")
@click.option("--gpu", default=None, help="GPU preset the efficiencies are relative to (default: the CSV's device)")
@click.option("--name", default=None, help="Profile name (default: the output file's stem)")
def gemm(csvs, out, run_bench, csv_out, quick, gpu, name):
    """Fit efficiency(M, N, K, dtype) = E[dtype] x tile quantization x F / (F + half) (x an
    unaligned-dimension factor) from GEMM timings (CSV) and report the fit error."""
    from autopar.specs.costparams import check_profile_gpu
    from calibration.gemm_bench import run_benchmark
    from calibration.gemm_data import read_samples
    from calibration.gemm_fit import fit_gemm, gemm_table
    from calibration.profile import dump_profile, existing_profile, gemm_profile

    paths = list(csvs)
    if run_bench:
        target = csv_out or str(Path(out).with_suffix("")) + "_gemm_bench.csv"
        device = run_benchmark(target, quick=quick, echo=lambda text: click.echo(text, err=True))
        click.echo(f"wrote {target} ({device})")
        paths.append(target)
    if not paths:
        raise InputError("csvs", Missing(), "give GEMM timing CSV files (columns gpu,dtype,m,n,k,batch,seconds) or --run to time "
                         "matmuls here")
    samples = read_samples(paths)
    fit, report = fit_gemm(samples, gpu, paths)
    base = existing_profile(out)
    check_profile_gpu(base, fit.gpu, "out", out, MEASURED_ON)
    profile = gemm_profile(name or Path(out).stem, fit, _command(), base)
    write_atomic(out, dump_profile(profile))
    click.echo(gemm_table(fit, report))
    click.echo(f"wrote {out}")


# GPU of a validation row's cluster preset -> shipped profile applied to it (proposal for
# `autopar validate`: the fitted profile of the row's node and fabric; the dev set's A100
# clusters (Selene, llm-foundry) have 8x 200 Gb/s per node like the OCI RoCE nodes)
PROFILE_FOR_GPU = {
    "multi-node (h100-ib, a100-roce)": {"H100": "h100-ib", "A100-80GB": "a100-roce", "A100-40GB": "a100-roce"},
    "node only (h100-nvlink, a100-nvlink)": {"H100": "h100-nvlink", "A100-80GB": "a100-nvlink", "A100-40GB": "a100-nvlink"},
}


def validation_before_after(runs: str) -> dict:
    """Dev-set summary with the default coefficients and with the shipped profiles per GPU."""
    from autopar.specs.costparams import load_calibration_profile, load_cost_params, with_calibration
    from autopar.validation import load_rows, predict_row, row_cluster, summarize
    from calibration.shipped import FITTED

    rows = load_rows(runs)
    base = load_cost_params()
    out = {"default": summarize([predict_row(r, base) for r in rows])}
    for label, table in PROFILE_FOR_GPU.items():
        results = []
        for r in rows:
            name = table.get(row_cluster(r).gpu.name)
            params = with_calibration(base, load_calibration_profile(str(FITTED / f"{name}.yaml"))) if name else base
            results.append(predict_row(r, params))
        out[label] = summarize(results)
    for summary in out.values():
        summary.pop("defaults", None)
    return out


@calibrate.command("report")
@click.option("--runs", type=click.Path(dir_okay=False), default=None, help="Validation runs (default: tests/data/dev_runs.json)")
def report(runs):
    """Rebuild results/calibration/: every sample log's fit and error, the seed's rules of thumb,
    the H100 GEMM fit, and validate MAPE with and without the shipped profiles."""
    from calibration.report import write_reports
    from calibration.shipped import ROOT

    runs = runs or str(ROOT.parent / "tests" / "data" / "dev_runs.json")
    for line in write_reports(validation_before_after(runs)):
        click.echo(line)
