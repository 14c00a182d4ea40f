"""`autopar plan`: from a token budget to GPUs, batch, layout, days, dollars and megawatt-hours.

Grid: GPU counts x global batches (bounded by the critical batch), one layout search per point
(solvers.search.run_search, the candidate table enumerated once per GPU count and shared by its
batches), each point priced over the whole run (solvers.plan_points), then the Pareto front,
the chosen point and the reasons a larger cluster would not help (solvers.plan_choice)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autopar.cost.flops import embedding_params, model_flops_per_token
from autopar.cost.roofline import critical_batch_size, deepseek_optimal_batch_tokens, dp_compute_bound_batch_tokens, scaled_learning_rate
from autopar.errors import InputError, NoCandidate
from autopar.report import human_count
from autopar.space import SpaceOptions, candidate_space
from autopar.specs.costparams import params_for_cluster
from autopar.specs.estimate import Estimate
from autopar.specs.hardware import GB, ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import Plan
from autopar.specs.training import Precision, TrainingSpec
from solvers.base import Objective, check_cost_objective, check_priced
from solvers.plan_choice import Constraints, check_budget, choose, explain, mark_pareto
from solvers.plan_points import FleetInputs, PlanPoint, PointContext, price_point
from solvers.workers import run_in_workers
from solvers.search import NoFeasiblePlan, SearchRequest, run_search
from solvers.stage_search import search_defaults

TOP_K = 20  # layouts kept per point: the first that also runs every ramp-up batch is priced
# The grid pins two placement details to Megatron-LM's defaults: they multiply the space (the
# DeepSeek-V3 point on 2,048 H800 has 4.6M plans, 0.9M with the pins) but not the answer this
# planner gives -- the best layouts of the LLaMA-3 405B / 16,384 H100 and DeepSeek-V3 / 2,048
# H800 points are the same plans with and without them (measured; tests/plan/test_planner.py
# checks a smaller case). `autopar search` at the chosen point ranks them; --full-space lifts the pins.
PLACEMENT_PINS = {"order": "tp-cp-ep-dp-pp", "cp_algo": "ring"}


@dataclass
class PlanRequest:
    model: ModelSpec
    cluster: ClusterSpec  # resized to each GPU count
    seq_len: int
    precision: Precision
    tokens: float
    gpu_counts: list[int]
    batch_tokens: list[int] = field(default_factory=list)  # explicit batches; empty: the grid below the critical batch
    # one: for a layout that runs both, a larger batch is never slower in the step model (step =
    # m t_max + fill + fixed, autopar.cost.compose: the bubble and the per-step collectives amortise
    # over more micro-batches), and the grid's 2^k / 3 x 2^k batches divide over power-of-two DP
    # degrees, so the largest grid batch is each count's candidate; more show the trade
    batches_per_count: int = 1
    critical_batch_tokens: float | None = None  # override of the scaling law
    gradient_noise: tuple[float, float] | None = None  # measured (tr Sigma, |G|^2) per example: B* = tr / |G|^2
    fleet: FleetInputs | None = None
    constraints: Constraints = field(default_factory=Constraints)
    learning_rate: tuple[float, int, str] | None = None  # (lr0, batch0 tokens, optimizer adam|sgd)
    options: SpaceOptions = field(default_factory=SpaceOptions)
    workers: int = 1
    full_space: bool = False  # False: PLACEMENT_PINS unless --fix names them
    extrapolate_fabric: bool = False  # allow counts beyond the cluster file's fabric (its top tier repeated)
    per_stage: bool = True  # search's per-stage step (its defaults, stage_search.search_defaults) at every point; False: balanced plans only
    ramp_text: tuple[str, ...] = ()  # fleet.ramp's steps as the user wrote them (4M@2.87T), echoed by its errors; empty: shown as numbers
    batch_tokens_text: tuple[str, ...] = ()  # batch_tokens as the user wrote them (1K), in their order, echoed by their errors
    critical_batch_tokens_text: str | None = None  # --critical-batch-tokens as written (4K), echoed by its error


def planning_options(options: SpaceOptions, full_space: bool) -> SpaceOptions:
    if full_space:
        return options
    return replace(options, fixed={**PLACEMENT_PINS, **options.fixed})


class PlanReport(BaseModel):
    """The answer of `autopar plan` (`--json`)."""

    model_config = ConfigDict(extra="forbid")

    points: list[PlanPoint] = Field(description="Every GPU count x batch searched, in (gpus, batch) order")
    chosen: int | None = Field(description="Index of the point that best meets the constraints")
    critical_batch_tokens: float = Field(description="Upper bound on the global batch, tokens")
    critical_batch_source: str = Field(description="Where the bound comes from")
    objective: str = Field(description="What the chosen point minimises: time, cost or energy")
    cost_unit: Literal["usd", "gpu_hours"] | None = Field(None, description=(
        "What the cost objective ranked the points by: usd (cost_usd), or gpu_hours when the cluster has no "
        "price_usd_per_gpu_hour (only the default objective under --deadline runs so; --objective cost and "
        "--budget refuse it); null when the objective is time or energy"))
    tokens: float = Field(description="Training tokens")
    learning_rate_rule: str | None = Field(None, description="Which LR scaling rule the points' learning_rate follows")
    explanation: list[str] = Field(default_factory=list, description="Why a larger cluster would not help, in numbers")
    seconds: float = Field(0.0, description="Planning wall time, seconds")


def nonembedding_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """DeepSeek LLM's M: training FLOPs per token without the embedding and the logits GEMM,
    causal attention included (their 6 n_layer d l_seq term)."""
    return model_flops_per_token(model, seq_len, causal=True) - 6 * embedding_params(model)


def critical_batch(req: PlanRequest) -> tuple[float, str]:
    if req.critical_batch_tokens is not None:
        return req.critical_batch_tokens, "--critical-batch-tokens"
    if req.gradient_noise is not None:
        examples = critical_batch_size(*req.gradient_noise)
        return examples * req.seq_len, (f"gradient noise scale B* = tr(Sigma) / |G|^2 = {req.gradient_noise[0]:g} / {req.gradient_noise[1]:g} "
                                        f"= {examples:,.0f} sequences (seed 000 'Критический размер батча')")
    m = nonembedding_flops_per_token(req.model, req.seq_len)
    c = m * req.tokens
    return deepseek_optimal_batch_tokens(c), (f"DeepSeek LLM (arXiv 2401.02954) sec. 3.1 B_opt = 0.2920 C^0.3271 with C = M D = "
                                             f"{m:.3g} FLOPs/token x {human_count(req.tokens)} tokens = {c:.3g} FLOPs")


def batch_grid(cap_tokens: float, seq_len: int, count: int) -> list[int]:
    """The `count` largest batches of 2^k or 3 x 2^k sequences at or below the cap, in tokens, largest
    first (3 x 2^k keeps the grid within 25% of any cap and divisible by the power-of-two DP degrees)."""
    cap_sequences = int(cap_tokens // seq_len)
    if cap_sequences < 1:
        raise InputError("critical-batch-tokens", cap_tokens, f"is below one sequence of seq-len={seq_len}")
    values = {m << k for m in (1, 3) for k in range(cap_sequences.bit_length() + 1) if (m << k) <= cap_sequences}
    return [v * seq_len for v in sorted(values, reverse=True)[:count]]


def _cap_below_one_sequence(req: PlanRequest, cap: float) -> None:
    """A critical batch below one sequence, named by the option it came from (critical_batch):
    --critical-batch-tokens, --gradient-noise, or --tokens through DeepSeek LLM's B_opt(C)."""
    rule = f"is below one sequence of seq-len={req.seq_len}"
    if req.critical_batch_tokens is not None:
        raise InputError("critical-batch-tokens", req.critical_batch_tokens_text or f"{cap:,.0f}", f"{cap:,.0f} tokens {rule}")
    if req.gradient_noise is not None:
        raise InputError("gradient-noise", "/".join(f"{v:g}" for v in req.gradient_noise),
                         f"critical batch B* = tr(Sigma) / |G|^2 = {cap / req.seq_len:.3g} sequences {rule}")
    raise InputError("tokens", human_count(req.tokens), f"DeepSeek LLM's B_opt = 0.2920 C^0.3271 for C = M x tokens = {cap:,.0f} tokens "
                     f"{rule}; give --batch-tokens or --critical-batch-tokens")


def _search_count(model: ModelSpec, cluster: ClusterSpec, seq_len: int, precision: Precision, batches: list[int],
                  options: SpaceOptions, per_stage: bool = True) -> list[tuple[int, list[tuple[Plan, Estimate]] | str]]:
    """Every batch of one GPU count; the candidate table is enumerated once, at a batch every other
    batch divides (lcm), so each search keeps exactly the rows it would have enumerated."""
    params = params_for_cluster(cluster)
    lcm_sequences = math.lcm(*(b // seq_len for b in batches))
    template = TrainingSpec(seq_len=seq_len, global_batch_size=lcm_sequences, precision=precision)
    candidates = candidate_space(model, cluster, template, options)
    out: list[tuple[int, list[tuple[Plan, Estimate]] | str]] = []
    for batch in batches:
        training = TrainingSpec(seq_len=seq_len, global_batch_size=batch // seq_len, precision=precision)
        # exhaustive, the oracle: on these spaces it is also the faster solver (DeepSeek-V3 on 2,048
        # H800, 1.7M plans: 37 s against 355 s for CP-SAT on this machine). The per-stage step of
        # `autopar search` runs on every point, with search's defaults: without it a point's layout
        # was a balanced one that search beats (Qwen3-Next 80B on 256 H100 at 4M tokens: 1.81 s
        # per step against search's 1.618 s, the run's days and dollars 12% high). Every point, not
        # only each count's chosen one: the choice between counts and batches compares the refined
        # step times, and each point's row is what search says there. Its cost is bounded: at most
        # DEFAULT_CORES solves, each stopped at a fixed amount of CP-SAT's deterministic work;
        # measured 0.5-2.3 s (LLaMA-3 8B and 70B, Qwen3-Next 80B on 8 to 1,024 H100), against
        # 0.2-7 s for the ranking, so a small pinned space now plans 3-4x slower.
        # --no-per-stage turns it off, as it does for search.
        request = SearchRequest(model, cluster, training, Objective.throughput, TOP_K, "exhaustive", options, params,
                                per_stage=search_defaults(options.fixed) if per_stage else None, candidates=candidates)
        try:
            ranked = run_search(request).results.plans
            out.append((batch, [(rp.plan, rp.estimate) for rp in ranked]))
        except (NoFeasiblePlan, NoCandidate) as exc:  # this count has no plan; the others may
            out.append((batch, str(exc)))
    return out


def _search_all(req: PlanRequest, clusters: list[ClusterSpec], batches: list[int]) -> list[list]:
    options = planning_options(req.options, req.full_space)
    args = [(req.model, c, req.seq_len, req.precision, batches, options, req.per_stage) for c in clusters]
    if req.workers <= 1 or len(args) <= 1:
        return [_search_count(*a) for a in args]
    # largest counts first: their spaces are the biggest, so the pool ends together
    order = sorted(range(len(args)), key=lambda i: -clusters[i].num_gpus)
    results = run_in_workers(_search_count, [args[i] for i in order], min(req.workers, len(args)))
    by_index = dict(zip(order, results))
    return [by_index[i] for i in range(len(args))]


def run_plan(req: PlanRequest) -> PlanReport:
    start = time.perf_counter()
    if not (req.tokens > 0 and math.isfinite(req.tokens)):
        raise InputError("tokens", req.tokens, "must be a positive, finite number of tokens")
    c = req.constraints
    # before any search: --objective cost without a price ranked by GPU-hours unasked (plan_choice.money),
    # and --budget without a price was refused only after every count had been searched
    if c.objective == "cost":
        check_cost_objective(req.cluster, "the cost objective picks the cheapest point", "--objective time or energy")
    elif c.objective is None and c.deadline_days is not None:  # plan_choice.choose's default: cost, in GPU-hours without a price
        check_priced(req.cluster, "the cost objective (the default under --deadline) picks the cheapest point", "--objective time or energy")
    check_budget(req.cluster, c.budget_usd)
    cap, source = critical_batch(req)
    if req.tokens < req.seq_len:  # before the cap below, which would blame the critical batch for it
        raise InputError("tokens", human_count(req.tokens), f"{req.tokens:,.0f} tokens are fewer than one sequence of "
                         f"seq-len={req.seq_len}: the run holds no optimizer step")
    if cap > req.tokens:  # a batch cannot exceed the run: the whole budget is one step at most
        cap, source = req.tokens, f"{source}, capped at the run's {req.tokens:,.0f} tokens"
    if not req.batch_tokens and cap < req.seq_len:
        _cap_below_one_sequence(req, cap)
    batches = sorted(set(req.batch_tokens), reverse=True) if req.batch_tokens else batch_grid(cap, req.seq_len, req.batches_per_count)
    typed = dict(zip(req.batch_tokens, req.batch_tokens_text))
    for b in batches:
        # the batch the user typed (1K, not 1024), its token count beside the rule
        shown, count = typed.get(b, f"{b:,}"), f"{b:,} tokens" if b in typed else "it"
        if b > req.tokens:
            raise InputError("batch-tokens", shown, f"{count} exceeds the whole run of --tokens {req.tokens:,.0f}: not one optimizer step")
        if b % req.seq_len:
            raise InputError("batch-tokens", shown, f"{count} must be a multiple of seq-len={req.seq_len}")
        if b > cap:
            raise InputError("batch-tokens", shown, f"{count} exceeds the critical batch {cap:,.0f} tokens ({source})")
    for i, (b, until) in enumerate(req.fleet.ramp if req.fleet else ()):
        # the step the user typed (2.87T, not 2,870,000,000,000), its numbers beside the rule
        shown = req.ramp_text[i] if i < len(req.ramp_text) else f"{b:,}@{until:,.0f}"
        if until >= req.tokens:
            raise InputError("ramp", shown, f"a ramp step must end before the run's --tokens {req.tokens:,.0f} "
                             f"(this one ends at {until:,.0f})")
        if b > cap:
            raise InputError("ramp", shown, f"batch {b:,} tokens exceeds the critical batch {cap:,.0f} tokens ({source})")
    # as search: a count the fabric does not describe needs --extrapolate-fabric
    clusters = [req.cluster.with_gpus(n, beyond_fabric=req.extrapolate_fabric) for n in sorted(set(req.gpu_counts))]
    fleet = req.fleet or FleetInputs(req.cluster.mtbf_hours_per_gpu, None, req.cluster.restart_seconds)
    points = []
    for cluster, results in zip(clusters, _search_all(req, clusters, batches)):
        for batch, ranked in sorted(results, key=lambda r: r[0]):
            points.append(_point(req, cluster, batch, ranked, fleet))
    if not any(p.wall_days is not None for p in points):
        raise NoFeasiblePlan(f"no GPU count of {[c.num_gpus for c in clusters]} has a plan; at {points[-1].gpus:,} GPUs: "
                             f"{points[-1].note}")
    _relative_efficiency(points)
    rule = _learning_rates(req, points, cap)
    mark_pareto(points)
    chosen, objective = choose(points, req.constraints)
    # plan_choice.money: GPU-hours where a point has no cost (no price; a price of 0 is refused above)
    cost_unit = ("usd" if req.cluster.price_usd_per_gpu_hour else "gpu_hours") if objective == "cost" else None
    report = PlanReport(points=points, chosen=chosen, critical_batch_tokens=cap, critical_batch_source=source, objective=objective,
                        cost_unit=cost_unit, tokens=req.tokens, learning_rate_rule=rule)
    report.explanation = explain(points, chosen, cap)
    report.seconds = time.perf_counter() - start
    return report


def _point(req: PlanRequest, cluster: ClusterSpec, batch: int, ranked, fleet: FleetInputs) -> PlanPoint:
    training = TrainingSpec(seq_len=req.seq_len, global_batch_size=batch // req.seq_len, precision=req.precision)
    if isinstance(ranked, str):
        point = PlanPoint(gpus=cluster.num_gpus, global_batch_tokens=batch, plan=None, step_seconds=None, mfu=None, goodput=None,
                          checkpoint_interval_seconds=None, wall_days=None, gpu_hours=None, cost_usd=None, energy_mwh=None, note=ranked)
    else:
        ctx = PointContext(req.model, cluster, training, params_for_cluster(cluster), req.tokens, fleet)
        point = price_point(ctx, ranked)
        if point.plan is None and fleet.ramp:  # no layout runs every ramp batch: search each one
            ramp = _search_count(req.model, cluster, req.seq_len, req.precision, sorted({b for b, _ in fleet.ramp}),
                                 planning_options(req.options, req.full_space), req.per_stage)
            point = price_point(ctx, ranked, {b: r[0][1] for b, r in ramp if not isinstance(r, str)})
    point.compute_bound_batch_tokens = dp_compute_bound_batch_tokens(
        cluster.gpu.peak_flops_per_second(req.precision.gemm_dtype), scale_out_bytes_per_second(cluster), cluster.num_gpus)
    return point


def scale_out_bytes_per_second(cluster: ClusterSpec) -> float:
    """W of seed 001's B/X > C/W: the NVLink rate inside one node, the node's egress across nodes
    (8 x 400 Gb/s = 400 GB/s for DGX H100)."""
    if cluster.num_nodes == 1:
        return cluster.intra_node.bandwidth_gb_per_s * GB
    return cluster.nic_gb_per_s_per_gpu * cluster.gpus_per_node * GB


def _relative_efficiency(points: list[PlanPoint]) -> None:
    """Per-GPU throughput against the smallest GPU count that has a plan at the same batch
    (seed 000 eta_scaling = T_1 / (N T_N), with the smallest count in place of one GPU)."""
    reference: dict[int, PlanPoint] = {}
    for p in sorted(points, key=lambda p: p.gpus):
        if p.tokens_per_second is None:
            continue
        ref = reference.setdefault(p.global_batch_tokens, p)
        p.scaling_efficiency = (p.tokens_per_second / p.gpus) / (ref.tokens_per_second / ref.gpus)


def _learning_rates(req: PlanRequest, points: list[PlanPoint], cap: float) -> str | None:
    """Seed 000 'Правила масштабирования скорости обучения': the linear rule (Goyal et al. 2017)
    holds for SGD below the critical batch; Adam-type optimizers, and any batch above B*, take the
    square-root rule."""
    if req.learning_rate is None:
        return None
    lr0, batch0, optimizer = req.learning_rate
    linear = optimizer == "sgd"
    for p in points:
        rule = "linear" if linear and p.global_batch_tokens <= cap else "sqrt"
        p.learning_rate = scaled_learning_rate(lr0, batch0, p.global_batch_tokens, rule)
    if linear:
        return f"linear rule (SGD, Goyal et al. 2017) from lr0={lr0:g} at {batch0:,} tokens; square root above the critical batch"
    return f"square-root rule (Adam) from lr0={lr0:g} at {batch0:,} tokens"
