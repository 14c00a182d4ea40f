"""Sweeps: a grid of search cases (models x clusters x GPU counts x sequence lengths x batches),
run in worker processes; each finished case is appended to cases.jsonl as one line, so an
interrupted sweep resumes where it stopped. The summary is built from the records in case
order, never completion order, so a resumed sweep writes the same summary as an uninterrupted
one. `compare` checks a summary against a baseline (how CI catches cost-model changes). The
--out folder's files (cases.jsonl, sweep.json) are solvers.sweep_folder's."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

from autopar.errors import AutoparError, InputError, NoCandidate, short_value
from autopar.limits import MAX_GPUS, MAX_SEQ_LEN, MAX_TOKENS_PER_STEP, MAX_TOP_K
from autopar.space import FIXABLE
from autopar.specs import Precision, TrainingSpec, load_cluster, load_model
from autopar.specs.training import Stack
from autopar.specs._base import StrictModel
from autopar.specs._files import read_data, read_mapping
from autopar.specs.costparams import CostParams, load_cost_params, params_for_cluster
from solvers.base import Objective
from solvers.search import SearchRequest, run_search
from solvers.stage_search import search_defaults
from solvers.sweep_folder import CASES_FILE, append_record, check_same_sweep, read_records
from solvers.workers import run_in_workers

MAX_WORKERS = 256
TOP_PLANS_KEPT = 10  # plans per case kept for the memory-vs-step plot


class SweepSpec(StrictModel):
    """A sweep file (profiles/sweeps/*.yaml): every combination of the lists is one case."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Sweep name (used in the summary title)")
    description: str = Field("", description="What the sweep covers")
    models: list[str] = Field(min_length=1, description="Model presets or files")
    clusters: list[str] = Field(min_length=1, description="Cluster presets or files")
    gpus: list[int] = Field(min_length=1, description="GPU counts (whole nodes of each cluster)")
    seq_lens: list[int] = Field(min_length=1, description="Sequence lengths, tokens")
    global_batches: list[int] = Field(min_length=1, description="Global batch sizes, sequences")
    precision: Precision = Field(Precision.bf16, description="GEMM precision of every case: bf16 | fp16 | fp8 | fp4")
    stack: Stack = Field(Stack.megatron, description="Training software costed in every case (profiles/stacks/): "
                         + " | ".join(s.value for s in Stack))
    fixed: dict[str, Any] = Field(default_factory=dict, description="Plan dimensions pinned in every case (like search --fix)")
    objective: Objective = Field(Objective.throughput, description="throughput | cost")
    solver: Literal["auto", "exhaustive", "cpsat"] = Field("auto", description="auto | exhaustive | cpsat")
    top_k: int = Field(5, gt=0, le=MAX_TOP_K, description="Plans ranked per case")
    threshold: float = Field(0.005, ge=0, description="Baseline check: largest allowed relative change of a case's best tokens/s per GPU")
    extrapolate_fabric: bool = Field(False, description="Allow GPU counts beyond the cluster file's fabric (its top tier repeats)")
    memory_headroom: str | float = Field(
        0.0, description="HBM per GPU kept free of every case's plan, as search --memory-headroom: a size (8GB, 6GiB, 8e9 bytes) "
        "or a percentage of HBM (10%); 0 = each cluster file's memory_headroom_gb")
    per_stage: bool = Field(True, description="Per-stage layers and recompute of the top cores, as `autopar search` solves them by "
                            "default (its --per-stage-cores and --per-stage-seconds); false ranks balanced plans only, faster")

    @field_validator("models", "clusters", "gpus", "seq_lens", "global_batches")
    @classmethod
    def _distinct(cls, values: list, info) -> list:
        """A repeated entry would run its cases twice under one case id."""
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed more than once")
        return values

    @field_validator("fixed")
    @classmethod
    def _fixable(cls, fixed: dict[str, Any]) -> dict[str, Any]:
        """Each value read as search --fix reads it (YAML gives 'on' as True, and '2' stays text
        otherwise); an error names the key and its value ("tp='x': ..."), which
        InputError.from_validation reports at sweep.fixed.tp rather than at the file."""
        from autopar.fix import parse_fix

        unknown = sorted(set(fixed) - set(FIXABLE))
        if unknown:
            raise ValueError(f"{unknown[0]}={fixed[unknown[0]]!r}: unknown dimension; can fix: {', '.join(FIXABLE)}")
        try:
            return parse_fix(",".join(f"{k}={({True: 'on', False: 'off'}.get(v, v) if isinstance(v, bool) else v)}" for k, v in fixed.items()))
        except InputError as exc:  # fix.tp='x': ... -> tp='x': ...
            raise ValueError(f"{exc.field.removeprefix('fix.')}={short_value(exc.value)}: {exc.rule}") from None

    @field_validator("gpus", "seq_lens", "global_batches")
    @classmethod
    def _positive(cls, values: list[int], info) -> list[int]:
        limit = {"gpus": MAX_GPUS, "seq_lens": MAX_SEQ_LEN, "global_batches": MAX_TOKENS_PER_STEP}[info.field_name]
        for v in values:
            if not 0 < v <= limit:
                raise ValueError(f"{v} must be a positive integer at most {limit:,}")
        return values


def load_sweep(path: str | Path) -> SweepSpec:
    """The sweep file, with every model, cluster and GPU count resolved once, so that a typo
    fails here in one line instead of as an error in every case."""
    data = read_mapping(Path(path), "sweep")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise InputError.from_validation(exc, "sweep", value=str(path)) from None
    for name in spec.models:
        load_model(name)
    for name in spec.clusters:
        cluster = case_cluster(load_cluster(name), spec)
        for gpus in spec.gpus:
            cluster.with_gpus(gpus, beyond_fabric=spec.extrapolate_fabric)
    return spec


def case_cluster(cluster, spec: SweepSpec):
    """The cluster with the sweep's memory_headroom (none given: the file's own); a bad value is
    an InputError naming sweep.memory_headroom."""
    from autopar.cli.common import parse_memory_headroom

    headroom = parse_memory_headroom(spec.memory_headroom, cluster, "sweep.memory_headroom")
    return cluster.with_memory_headroom(headroom) if headroom else cluster


def case_id(model: str, cluster: str, gpus: int, seq_len: int, global_batch: int) -> str:
    return f"{model}/{cluster}/{gpus}gpu/s{seq_len}/b{global_batch}"


def cases(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every case of the grid in a fixed order (the summary's order)."""
    grid = itertools.product(spec.models, spec.clusters, spec.gpus, spec.seq_lens, spec.global_batches)
    return [dict(case=case_id(*c), model=c[0], cluster=c[1], gpus=c[2], seq_len=c[3], global_batch=c[4]) for c in grid]


def apply_overrides(params: CostParams, overrides: dict[str, Any]) -> CostParams:
    """params with dotted-key coefficients replaced ({'comm.network_efficiency': 0.5})."""
    if not overrides:
        return params
    data = params.model_dump()
    for key, value in overrides.items():
        node = data
        parts = str(key).split(".")
        for part in parts[:-1]:
            if not isinstance(node, dict) or part not in node:
                raise InputError(f"cost-override.{key}", value, "unknown coefficient (dotted path into profiles/cost/defaults.yaml)")
            node = node[part]
        if not isinstance(node, dict) or parts[-1] not in node:
            raise InputError(f"cost-override.{key}", value, "unknown coefficient (dotted path into profiles/cost/defaults.yaml)")
        node[parts[-1]] = value
    try:
        return CostParams.model_validate(data)
    except ValidationError as exc:  # cost-override.comm.network_efficiency=5: Input should be ...
        raise InputError.from_validation(exc, "cost-override") from None


def load_overrides(path: str | Path | None) -> dict[str, Any]:
    return dict(read_mapping(Path(path), "cost-override")) if path else {}


def run_case(case: dict[str, Any], spec_data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """One search; returns the case's record (status ok | no_plan | error). Runs in a worker."""
    from autopar.space import SpaceOptions

    spec = SweepSpec.model_validate(spec_data)
    started = time.perf_counter()
    record = dict(case)
    try:
        model = load_model(case["model"])
        cluster = case_cluster(load_cluster(case["cluster"]), spec).with_gpus(case["gpus"], beyond_fabric=spec.extrapolate_fabric)
        training = TrainingSpec(seq_len=case["seq_len"], global_batch_size=case["global_batch"], precision=spec.precision,
                                stack=spec.stack)
        params = apply_overrides(params_for_cluster(cluster), overrides)
        fixed = dict(spec.fixed)
        # search's per-stage step with search's defaults: a case's best plan is the one `autopar search` gives
        stages = search_defaults(fixed) if spec.per_stage else None
        request = SearchRequest(model, cluster, training, spec.objective, spec.top_k, spec.solver, SpaceOptions(fixed=fixed), params,
                                per_stage=stages)
        output = run_search(request)
    except AutoparError as exc:
        record.update(status="no_plan" if type(exc).__name__ == "NoFeasiblePlan" or isinstance(exc, NoCandidate) else "error", message=str(exc))
    except ValidationError as exc:
        record.update(status="error", message=str(InputError.from_validation(exc, "case")))  # field=value: rule, no 'Value error, '
    else:
        record.update(status="ok", message="", **_best(output))
    record["seconds"] = round(time.perf_counter() - started, 3)
    return record


def _best(output) -> dict[str, Any]:
    plans = output.results.plans
    best = plans[0].estimate
    return dict(
        solver=output.results.search.solver, num_feasible=output.results.search.num_feasible,
        best_plan=best.plan, step_seconds=best.step_seconds, tokens_per_second_per_gpu=best.tokens_per_second_per_gpu,
        mfu=best.mfu, memory_gb=best.memory_bytes_per_gpu / 1e9, hbm_gb=(best.memory_capacity_bytes + best.memory_headroom_bytes) / 1e9,
        bottleneck=best.bottleneck.value, time_breakdown=best.time_breakdown,
        top=[dict(plan=p.estimate.plan, step_seconds=p.estimate.step_seconds, memory_gb=p.estimate.memory_bytes_per_gpu / 1e9)
             for p in plans[:TOP_PLANS_KEPT]],
    )


def run_sweep(spec: SweepSpec, out_dir: str | Path, workers: int = 1, resume: bool = False,
              overrides: dict[str, Any] | None = None, progress: Callable[[int, int, str], None] | None = None,
              note: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Run every case not yet in cases.jsonl; returns all records in case order. An interrupt
    (Ctrl-C, SIGTERM) stops the workers at once; every finished case is already on disk. `note`
    gets a line worth telling the user (a resumed folder whose inputs could not be checked)."""
    out = Path(out_dir)
    if isinstance(workers, bool) or not 0 < workers <= MAX_WORKERS:
        raise InputError("workers", workers, f"must be a positive integer at most {MAX_WORKERS}")
    if (out / CASES_FILE).exists() and not resume:
        raise InputError("out", str(out), f"already holds {CASES_FILE}; pass --resume to continue it or choose an empty directory")
    overrides = dict(overrides or {})
    apply_overrides(load_cost_params(), overrides)  # bad keys fail here, not as error records
    try:
        out.mkdir(parents=True, exist_ok=True)
        check_same_sweep(out, spec, overrides, fresh=not (out / CASES_FILE).exists(), note=note)
    except OSError as exc:
        raise InputError("out", str(out), f"cannot write ({exc.strerror})") from None
    all_cases = cases(spec)
    done = read_records(out)
    todo = [c for c in all_cases if c["case"] not in done]
    spec_data = spec.model_dump(mode="json")
    total, finished = len(all_cases), len(all_cases) - len(todo)
    if progress:
        progress(finished, total, "")

    def record_done(record: dict[str, Any]) -> None:
        nonlocal finished
        append_record(out, record)
        done[record["case"]] = record
        finished += 1
        if progress:
            progress(finished, total, record["case"])

    if workers == 1 or len(todo) <= 1:
        for case in todo:
            record_done(run_case(case, spec_data, overrides))
    else:
        run_in_workers(run_case, [(c, spec_data, overrides) for c in todo], min(workers, len(todo)),
                       lambda _, record: record_done(record))
    return [done[c["case"]] for c in all_cases]


# ---- baseline comparison -------------------------------------------------------------------

SUMMARY_FIELDS = ("case", "model", "cluster", "gpus", "seq_len", "global_batch", "status", "best_plan", "step_seconds",
                  "tokens_per_second_per_gpu", "mfu", "memory_gb", "bottleneck")


def summary_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The deterministic part of each record (no wall times), floats rounded for stable files."""
    rows = []
    for r in records:
        row = {k: r.get(k) for k in SUMMARY_FIELDS}
        for k in ("step_seconds", "tokens_per_second_per_gpu", "mfu", "memory_gb"):
            if row[k] is not None:
                row[k] = float(f"{row[k]:.6g}")
        if r["status"] != "ok":
            row["best_plan"] = r.get("message", "")
        rows.append(row)
    return rows


def compare(rows: list[dict[str, Any]], baseline: list[dict[str, Any]], threshold: float) -> list[str]:
    """Differences that fail the baseline check: a case added or missing, a status or best
    plan that changed, or best tokens/s per GPU moved by more than `threshold` (relative)."""
    diffs = []
    now = {r["case"]: r for r in rows}
    then = {r["case"]: r for r in baseline}
    for case in then:
        if case not in now:
            diffs.append(f"{case}: in the baseline, missing now")
    for case, row in now.items():
        old = then.get(case)
        if old is None:
            diffs.append(f"{case}: new case, not in the baseline")
            continue
        if row["status"] != old["status"]:
            diffs.append(f"{case}: status {old['status']} -> {row['status']} ({row['best_plan']})")
            continue
        if row["status"] != "ok":
            continue
        if row["best_plan"] != old["best_plan"]:
            diffs.append(f"{case}: best plan changed\n    was {old['best_plan']}\n    now {row['best_plan']}")
        a, b = old["tokens_per_second_per_gpu"], row["tokens_per_second_per_gpu"]
        change = b / a - 1 if a else float("inf")
        if abs(change) > threshold:
            diffs.append(f"{case}: best tokens/s per GPU {a:,.1f} -> {b:,.1f} ({100 * change:+.2f}%, threshold {100 * threshold:.2f}%)")
    return diffs


# ---- summary files -------------------------------------------------------------------------


def summary_markdown(spec: SweepSpec, rows: list[dict[str, Any]]) -> str:
    lines = [f"# Sweep {spec.name}", ""]
    if spec.description:
        lines += [spec.description, ""]
    ok = sum(r["status"] == "ok" for r in rows)
    lines += [f"{len(rows)} cases, {ok} with a plan that fits. Predicted by the cost model; tokens/s per GPU of the best plan.", ""]
    lines.append("| model | cluster | GPUs | seq | batch | tokens/s/GPU | MFU | step s | mem GB | bottleneck | best plan |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        if r["status"] == "ok":
            nums = f"{r['tokens_per_second_per_gpu']:,.0f} | {100 * r['mfu']:.1f}% | {r['step_seconds']:.3f} | {r['memory_gb']:.1f} | {r['bottleneck']}"
            plan = f"`{r['best_plan']}`"
        else:
            nums, plan = "- | - | - | - | " + r["status"], r["best_plan"].replace("|", "/")
        lines.append(f"| {r['model']} | {r['cluster']} | {r['gpus']} | {r['seq_len']} | {r['global_batch']} | {nums} | {plan} |")
    return "\n".join(lines) + "\n"


def summary_csv(rows: list[dict[str, Any]]) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(SUMMARY_FIELDS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def summary_json(spec: SweepSpec, rows: list[dict[str, Any]]) -> str:
    """summary.json: what --baseline reads (copy it to results/NAME/baseline.json)."""
    return json.dumps({"sweep": spec.name, "threshold": spec.threshold, "cases": rows}, indent=2) + "\n"


def load_baseline(path: str | Path) -> list[dict[str, Any]]:
    """The cases of a summary.json, each checked to have the fields compare() reads."""
    data = read_data(path, "baseline")
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise InputError("baseline", str(path), "must be a summary.json written by autopar sweep (a mapping with 'cases')")
    for i, row in enumerate(data["cases"]):
        if not isinstance(row, dict) or not isinstance(row.get("case"), str) or not isinstance(row.get("status"), str):
            raise InputError(f"baseline.cases[{i}]", row, "must be a mapping with text 'case' and 'status' (a summary.json row)")
        value = row.get("tokens_per_second_per_gpu")
        if row["status"] == "ok" and (isinstance(value, bool) or not isinstance(value, (int, float)) or not isinstance(row.get("best_plan"), str)):
            raise InputError(f"baseline.cases[{i}].tokens_per_second_per_gpu", value, "an ok case needs a number here and a best_plan text")
    return data["cases"]
