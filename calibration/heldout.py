"""Small logs predict large ones: fit the collective model on the <= 2-node logs of a cluster
(and the 8-GPU node logs of its GPU), predict the cluster's larger logs, compare bus bandwidth
size by size. `autopar calibrate report` writes the table to results/calibration/heldout.*.

Criterion (issue 10): |predicted / measured busbw - 1| <= 15% at sizes >= 64 MiB and <= 30% at
1-64 MiB, on every held-out log. A size's measured time is the faster printed one
(calibration/nccl_physfit.py: a stall only lengthens a time).
"""

from __future__ import annotations

from dataclasses import dataclass

from autopar.cost.comm import busbw_factor
from autopar.specs import load_cluster
from autopar.specs.costparams import CommCalibration, load_cost_params
from calibration.nccl_log import read_log
from calibration.nccl_physfit import MIB, Run, fit, points, predict, with_values
from calibration.nccl_points import read_points
from calibration.shipped import NCCL, _relative

LARGE_BYTES = 64 * MIB
TOLERANCE_LARGE, TOLERANCE_MID = 0.15, 0.30
H100_NODE = [("h100x8_allreduce_aws-batch-p5_partial.txt", None), ("h100x8_allreduce_nvls_nccl-tests-issue290.txt", None),
             ("hopper_ring_vs_nvls_points.yaml", None)]


@dataclass(frozen=True)
class Case:
    name: str
    cluster: str
    fit_logs: tuple[tuple[str, str | None], ...]   # (file, forced algorithm)
    held_out: tuple[str, ...]


CASES = (
    Case("nccl-tests#309 gj-aion: 8x H100 + 8x 400G IB nodes, default NCCL settings", "dgx-h100",
         (*H100_NODE, ("h100x16_2node_allreduce_ib400_nccl-tests-issue309d.txt", None)),
         ("h100x32_4node_allreduce_ib400_nccl-tests-issue309g.txt", "h100x64_8node_allreduce_ib400_nccl-tests-issue309f.txt")),
    Case("nccl-tests#309 gj-aion: same nodes, NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2", "dgx-h100",
         (*H100_NODE, ("h100x16_2node_allreduce_ringforced_ib400_nccl-tests-issue309e.txt", "ring")),
         ("h100x64_8node_allreduce_mincta24_ib400_nccl-tests-issue309h.txt",)),
    Case("nccl-tests#309 qoofyk: Dell XE9680 8x H100 + 8x 400G IB (4-node run on VMware VMs), default NCCL", "dgx-h100",
         (*H100_NODE, ("h100x16_2node_allreduce_ib400_nccl-tests-issue309a.txt", None)),
         ("h100x32_4node_allreduce_ib400_nccl-tests-issue309b.txt",)),
)


def _runs(files, cluster_name: str) -> list[Run]:
    base = load_cluster(cluster_name)
    out = []
    for name, algo in files:
        path = _relative(NCCL / name)
        logs = read_points(path) if name.endswith(".yaml") else [read_log(path)]
        for log in logs:
            cluster = base.with_gpus(log.num_ranks) if log.num_ranks > base.gpus_per_node else base
            out.append(Run(log, cluster, algo or log.algorithm))
    return out


def evaluate(case: Case) -> dict:
    params = load_cost_params()
    calibration: CommCalibration = fit(_runs(case.fit_logs, case.cluster), params)
    fitted = with_values(params, {k: v for k, v in calibration.model_dump().items()
                                  if k in CommCalibration.model_fields and isinstance(v, float) and k not in ("median_error", "max_error")})
    logs = []
    for pt_run in _runs([(h, None) for h in case.held_out], case.cluster):
        log = pt_run.log
        factor = busbw_factor(log.collective, log.num_ranks)
        rows = []
        for p in points([pt_run]):
            if p.size_bytes < MIB:
                continue
            t = predict(p, fitted)
            rows.append({"size_bytes": p.size_bytes, "measured_busbw_gb_per_s": p.size_bytes * factor / p.seconds / 1e9,
                         "predicted_busbw_gb_per_s": p.size_bytes * factor / t / 1e9, "error": p.seconds / t - 1.0})
        large = [abs(r["error"]) for r in rows if r["size_bytes"] >= LARGE_BYTES]
        mid = [abs(r["error"]) for r in rows if r["size_bytes"] < LARGE_BYTES]
        logs.append({"log": log.path, "ranks": log.num_ranks, "nodes": log.num_nodes, "rows": rows,
                     "max_error_ge_64mib": max(large), "max_error_1_64mib": max(mid) if mid else None,
                     "passes": max(large) <= TOLERANCE_LARGE and (not mid or max(mid) <= TOLERANCE_MID)})
    return {"case": case.name, "fit_logs": [f"{n}@{a}" if a else n for n, a in case.fit_logs],
            "calibration": calibration.model_dump(mode="json", exclude_none=True), "held_out": logs}


def report() -> tuple[list[dict], str]:
    results = [evaluate(case) for case in CASES]
    lines = ["Held-out prediction: fit on <= 2-node logs (+ 8x H100 node logs), predict the cluster's larger logs.",
             "error = predicted / measured bus bandwidth - 1 (faster printed time per size); target 15% at >= 64 MiB, 30% at 1-64 MiB.", ""]
    for r in results:
        lines.append(f"## {r['case']}")
        lines.append("fit on: " + ", ".join(r["fit_logs"]))
        cal = r["calibration"]
        fitted = [k for k in cal if k not in ("not_identified", "num_observations", "median_error", "max_error", "sources")]
        lines.append("fitted: " + ", ".join(f"{k}={cal[k]:.4g}" for k in fitted))
        for k, why in cal.get("not_identified", {}).items():
            lines.append(f"  not identified: {k}: {why}")
        for h in r["held_out"]:
            mid = "-" if h["max_error_1_64mib"] is None else f"{100 * h['max_error_1_64mib']:.1f}%"
            lines.append(f"held out {h['log'].rsplit('/', 1)[-1]} ({h['ranks']} ranks, {h['nodes']} nodes): max |error| "
                         f">= 64 MiB {100 * h['max_error_ge_64mib']:.1f}%, 1-64 MiB {mid} -> {'PASS' if h['passes'] else 'FAIL'}")
            for row in h["rows"]:
                lines.append(f"    {int(row['size_bytes']):>12d} B  measured {row['measured_busbw_gb_per_s']:7.1f}  predicted "
                             f"{row['predicted_busbw_gb_per_s']:7.1f} GB/s  {100 * row['error']:+6.1f}%")
        lines.append("")
    return results, "\n".join(lines)
