"""Plan quality on the two expert layouts of the seeds (issue 9 item 5): the published layout
predicted against the published throughput, autopar's best plan for the same job, and the gap
between them in numbers (which step terms differ). Regenerated into results/plan_quality/."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autopar.cost import estimate
from autopar.space import SpaceOptions
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.costparams import params_for_cluster
from autopar.specs.estimate import Estimate
from solvers.planner import PLACEMENT_PINS
from solvers.search import SearchRequest, run_search


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    cluster: str
    gpus: int
    seq_len: int
    global_batch: int
    precision: str
    layouts: tuple[str, ...]  # the published layout with the choices the source leaves open
    measured: str  # what the source publishes
    measured_mfu: float | None = None
    measured_tokens_per_gpu: float | None = None
    tolerance: float = 0.15
    notes: str = ""


CASES = (
    Case("llama3-405b-16k", "llama3-405b", "dgx-h100-superpod", 16384, 8192, 2048, "bf16",
         tuple(f"tp=8,pp=16,dp=128,vpp={v},mbs=1,zero=1,recompute={r}" for v in (1, 2, 4, 8) for r in ("none", "full")),
         "41% BF16 MFU (Dubey et al. 2024, Table 4: TP8 CP1 PP16 DP128, 16M tokens, 400 TFLOP/s per GPU)",
         measured_mfu=0.41,
         notes="Uneven stages 7 + 14 x 8 + 7 (section 3.3.2), interleaved; vpp and recompute are not published: "
               "each is tried and the fastest that fits is the prediction."),
    Case("deepseek-v3-2048", "deepseek-v3", "hgx-h800", 2048, 4096, 15360, "fp8",
         ("tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=none,dispatcher=deepep,ep_overlap=on,schedule=zero-bubble",
          "tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,dispatcher=deepep,ep_overlap=on,schedule=zero-bubble",
          "tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,recompute_modules=layernorm+mla_up_proj+moe_act,"
          "dispatcher=deepep,ep_overlap=on,schedule=zero-bubble",
          "tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=full,dispatcher=deepep,ep_overlap=on,schedule=zero-bubble",
          "tp=1,pp=16,vpp=2,ep=64,zero=1,mbs=1,recompute=selective,recompute_modules=layernorm+mla_up_proj+moe_act,"
          "dispatcher=deepep,ep_overlap=on,schedule=dualpipev"),
         "2.788M H800 GPU-hours for 14.8T tokens (DeepSeek-V3 report, Table 1) = 1,474.6 tokens/s per GPU",
         measured_tokens_per_gpu=14.8e12 / (2.788e6 * 3600), tolerance=0.25,
         notes="EP64 PP16 DP2 (expert data parallel) ZeRO-1, FP8, DeepEP with node-limited routing (4 nodes), "
               "DualPipe (modelled as a zero-bubble schedule with EP overlap, and as DualPipeV, its cut-in-half form: "
               "PP + 1 chunks in flight, without DualPipe's second copy of the weights); batch 15,360 x 4,096 at steady state. "
               "Recompute as published (sec. 3.2.3: RMSNorm, MLA up-projection, SwiGLU output) is tried with the "
               "other recompute choices."),
)


def _inputs(case: Case):
    model, cluster = load_model(case.model), load_cluster(case.cluster).with_gpus(case.gpus)
    training = TrainingSpec(seq_len=case.seq_len, global_batch_size=case.global_batch, precision=case.precision)
    return model, cluster, training, params_for_cluster(cluster)


def published(case: Case) -> tuple[Estimate, list[Estimate]]:
    """The published layout's prediction (the fastest of its open choices that fits, else the
    one with the least memory) and every variant tried."""
    model, cluster, training, params = _inputs(case)
    tried = [estimate(model, cluster, training, parse_plan(p), params) for p in case.layouts]
    fitting = [e for e in tried if e.feasible]
    best = min(fitting, key=lambda e: e.step_seconds) if fitting else min(tried, key=lambda e: e.memory_bytes_per_gpu)
    return best, tried


def searched(case: Case) -> Estimate:
    """autopar's best plan for the same job (every dimension free)."""
    model, cluster, training, params = _inputs(case)
    # placement details pinned as autopar plan does (solvers.planner.PLACEMENT_PINS): they
    # multiply the DeepSeek-V3 space by five without changing its best plan
    out = run_search(SearchRequest(model, cluster, training, top_k=1, options=SpaceOptions(fixed=dict(PLACEMENT_PINS)), params=params))
    return out.results.plans[0].estimate


def gap(best: Estimate, ref: Estimate) -> list[tuple[str, float]]:
    """Step terms that differ most between the reference layout and the best plan, in seconds
    (positive: the reference spends more)."""
    keys = set(best.time_breakdown) | set(ref.time_breakdown)
    diffs = [(k, ref.time_breakdown.get(k, 0.0) - best.time_breakdown.get(k, 0.0)) for k in keys]
    return sorted((d for d in diffs if abs(d[1]) > 1e-3 * ref.step_seconds), key=lambda d: -abs(d[1]))


def evaluate_case(case: Case) -> dict[str, Any]:
    ref, tried = published(case)
    best = searched(case)
    if case.measured_mfu is not None:
        error = ref.mfu / case.measured_mfu - 1
        measured = f"MFU {100 * case.measured_mfu:.1f}%"
    else:
        error = ref.tokens_per_second_per_gpu / case.measured_tokens_per_gpu - 1
        measured = f"{case.measured_tokens_per_gpu:,.0f} tokens/s/GPU"
    return {"case": case, "reference": ref, "tried": tried, "best": best, "error": error, "measured": measured,
            "within": abs(error) <= case.tolerance, "gap": gap(best, ref)}


def markdown(results: list[dict[str, Any]]) -> str:
    lines = ["# Plan quality on the seeds' expert layouts", "",
             "Regenerate: `python -m solvers.quality > results/plan_quality/README.md`", ""]
    for r in results:
        c, ref, best = r["case"], r["reference"], r["best"]
        lines += [f"## {c.name}: {c.model} on {c.gpus:,} x {c.cluster}, seq {c.seq_len}, batch {c.global_batch}, {c.precision}", "",
                  f"Published: {c.measured}. {c.notes}", "",
                  "| layout tried | fits | step s | tokens/s/GPU | MFU |", "| --- | --- | ---: | ---: | ---: |"]
        for e in r["tried"]:
            lines.append(f"| `{e.plan}` | {'yes' if e.feasible else f'no ({e.memory_bytes_per_gpu / 1e9:.0f} GB)'} | "
                         f"{e.step_seconds:.2f} | {e.tokens_per_second_per_gpu:,.0f} | {100 * e.mfu:.1f}% |")
        verdict = "within" if r["within"] else "outside"
        lines += ["", f"Prediction for the published layout: {ref.tokens_per_second_per_gpu:,.0f} tokens/s/GPU, MFU {100 * ref.mfu:.1f}% "
                      f"against the published {r['measured']}: {100 * r['error']:+.1f}% ({verdict} the {100 * c.tolerance:.0f}% target).", "",
                  f"autopar's best plan: `{best.plan}`: {best.tokens_per_second_per_gpu:,.0f} tokens/s/GPU, MFU {100 * best.mfu:.1f}%, "
                  f"step {best.step_seconds:.2f} s vs {ref.step_seconds:.2f} s ({100 * (ref.step_seconds / best.step_seconds - 1):+.1f}% "
                  "for the published layout). Where the difference is (seconds per step, published minus best):", ""]
        lines += [f"- {k}: {d:+.3f} s" for k, d in r["gap"][:6]]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    print(markdown([evaluate_case(c) for c in CASES]), end="")


if __name__ == "__main__":
    main()
