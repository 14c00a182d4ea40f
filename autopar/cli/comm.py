"""`autopar comm`: the cost model's time of one collective on a cluster, shaped like an
nccl-tests row so a user can hold it against their own run (same function as the cost model:
autopar.cost.comm.collective_seconds)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from autopar.cli import main
from autopar.cli.common import COLLECTIVE_ALIASES, COLLECTIVES, NCCL_ALGORITHMS, NCCL_PROTOCOLS, dump_json, parse_count
from autopar.errors import InputError, Missing

if TYPE_CHECKING:  # the cost model loads when the command runs, not for --help
    from autopar.cost.comm import Collective

OPS = sorted((*COLLECTIVES, *COLLECTIVE_ALIASES))


def _size(text: str, field: str, gpu) -> int:
    """A message size in bytes, at most the GPU's memory: nccl-tests' size is the buffer each rank
    holds in HBM, so a larger one is a typo (10T for 10G), not a collective anyone can run."""
    size = parse_count(text, field, binary=True, size_bytes=True)
    if size > gpu.hbm_bytes:
        raise InputError(field, text, f"{size:,} bytes exceed one {gpu.name}'s {gpu.hbm_bytes:,.0f} bytes of HBM "
                         f"({gpu.hbm_gib:g} GiB), where each rank's buffer lives")
    return size


def _sizes(text: str, gpu) -> list[int]:
    """'1M:16G' -> 1 MiB, 2 MiB, ..., 16 GiB (factor 2, like nccl-tests -f 2)."""
    lo_text, sep, hi_text = text.partition(":")
    if not sep:
        raise InputError("sizes", text, "must be MIN:MAX, e.g. 1M:16G")
    lo, hi = _size(lo_text, "sizes", gpu), _size(hi_text, "sizes", gpu)
    if hi < lo:
        raise InputError("sizes", text, "MAX must not be below MIN")
    out = [lo]
    while out[-1] * 2 <= hi:
        out.append(out[-1] * 2)
    return out


def predict(op: Collective, size_bytes: int, group, cluster, params, algorithm: str | None = None,
            protocol: str | None = None) -> dict:
    from autopar.cost.comm import busbw_factor, collective_choice

    try:
        choice = collective_choice(op, size_bytes, group, cluster, params, algorithm, protocol)
    except ValueError as exc:
        raise InputError("algo", "/".join(x for x in (algorithm, protocol) if x), str(exc)) from None
    algbw = size_bytes / choice.seconds
    return {"size_bytes": size_bytes, "seconds": choice.seconds, "algbw_bytes_per_second": algbw,
            "busbw_bytes_per_second": algbw * busbw_factor(op, group.size), "tier": group.tier,
            "algorithm": choice.algorithm, "protocol": choice.protocol}


def _table(rows: list[dict], title: str) -> str:
    lines = [f"# {title}", f"# {'size':>12} {'time':>10} {'algbw':>8} {'busbw':>8}  {'algorithm':<14} protocol",
             f"# {'(B)':>12} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}"]
    for r in rows:
        lines.append(f"  {r['size_bytes']:>12d} {r['seconds'] * 1e6:>10.2f} {r['algbw_bytes_per_second'] / 1e9:>8.2f} "
                     f"{r['busbw_bytes_per_second'] / 1e9:>8.2f}  {r['algorithm']:<14} {r['protocol']}")
    return "\n".join(lines)


@main.command()
@click.option("--cluster", "cluster_name", required=True, help="Cluster preset or YAML file")
@click.option("--gpus", type=click.IntRange(min=2), default=None, help="Ranks in the group (default: one node)")
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Whole nodes in the group (alternative to --gpus)")
@click.option("--op", required=True, type=click.Choice(OPS), help="Collective")
@click.option("--bytes", "size_text", default=None, help="Message size as nccl-tests prints it (K/M/G are powers of two, like -b/-e; 1GiB, 1073741824); "
              "at most the GPU's memory")
@click.option("--sizes", "sizes_text", default=None, help="MIN:MAX, doubling (e.g. 1M:16G): an nccl-tests-like table")
@click.option("--calibration", "calibration_path", default=None, help="Calibration profile (default: the one the cluster file names, if any)")
@click.option("--algo", "algorithm", type=click.Choice(NCCL_ALGORITHMS), default=None, help="Force an NCCL algorithm (as NCCL_ALGO)")
@click.option("--proto", "protocol", type=click.Choice(NCCL_PROTOCOLS), default=None, help="Force an NCCL protocol (as NCCL_PROTO)")
@click.option("--extrapolate-fabric", is_flag=True, help="Allow more GPUs than the cluster file's fabric describes (its top tier is assumed to repeat)")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (a list with --sizes)")
def comm(cluster_name, gpus, nodes, op, size_text, sizes_text, calibration_path, algorithm, protocol, extrapolate_fabric, as_json):
    """Predicted time, algbw and busbw of one collective over a group placed on the cluster, and the
    NCCL algorithm and protocol it runs: NCCL's own pick, the smallest of its tuning model's estimates.

    NCCL estimates with its own latency and bandwidth tables on the nominal link rates, so its pick
    need not have the smallest predicted time (the prediction adds saturation and a calibration's
    measured rates); --algo and --proto cost another choice, as NCCL_ALGO and NCCL_PROTO force it."""
    from autopar.cost.comm import Collective, place_group
    from autopar.specs import load_cluster
    from autopar.specs.costparams import check_profile_gpu, check_profile_node, load_calibration_profile, load_cost_params, params_for_cluster, with_calibration

    collective = Collective(COLLECTIVE_ALIASES.get(op, op))
    if size_text is None and sizes_text is None:
        raise InputError("bytes", Missing(), "give --bytes SIZE or --sizes MIN:MAX")
    if size_text is not None and sizes_text is not None:
        raise InputError("sizes", sizes_text, f"give one of --bytes ({size_text}) or --sizes, not both")
    if gpus is not None and nodes is not None:
        raise InputError("gpus", gpus, "give --gpus or --nodes, not both")
    cluster = load_cluster(cluster_name)
    num = gpus if gpus is not None else (nodes or 1) * cluster.gpus_per_node
    if num < 2:
        raise InputError("gpus", num, "a collective needs at least 2 ranks")
    if num > cluster.gpus_per_node:  # the rule of every command (ClusterSpec.check_fabric), named as the user gave the group
        cluster.check_fabric(num, extrapolate_fabric, *(("nodes", nodes) if nodes is not None else ("gpus", num)))
        cluster = cluster.with_gpus(num)
    group = place_group(num, 1, cluster.gpus_per_node)
    if calibration_path:
        profile = load_calibration_profile(calibration_path)
        check_profile_gpu(profile, cluster.gpu, "calibration", calibration_path, f"cluster {cluster.name} runs")
        check_profile_node(profile, cluster, "calibration", calibration_path)
        params = with_calibration(load_cost_params(), profile)
    else:
        params = params_for_cluster(cluster)
    sizes = _sizes(sizes_text, cluster.gpu) if sizes_text else [_size(size_text, "bytes", cluster.gpu)]
    rows = [predict(collective, s, group, cluster, params, algorithm, protocol) for s in sizes]
    if as_json:
        click.echo(dump_json(rows if sizes_text else rows[0]), nl=False)
        return
    source = calibration_path or cluster.calibration or "default coefficients"
    title = f"{collective.value} over {group.size} x {cluster.gpu.name} on {group.nodes} node(s) of {cluster.name} ({group.tier}); {source}"
    click.echo(_table(rows, title))
