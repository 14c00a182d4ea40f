"""The plan space: the legal values of every plan dimension for a model, cluster and
training spec, enumerated once as a PlanTable and shared by every solver (docs/design.md 'The
plan space'). Cross-dimension rules come from autopar.cost.rules (one implementation)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import ValidationError

from autopar.cost.memory import cheap_checkpoints
from autopar.cost.rules import OVERLAP_DISPATCHERS_RULE, legal_mask
from autopar.cost.table import ALLTOALL, CP_ALGO, DEEPEP, DISPATCHER, GRAD_SYNC, NONE, ORDER, RECOMPUTE, SCHEDULE, PlanTable, modules_code
from autopar.errors import InputError, NoCandidate
from autopar.fix import FIXABLE
from autopar.specs.hardware import ClusterSpec
from autopar.specs.model import ModelSpec
from autopar.specs.plan import CpAlgo, Dispatcher, GradSync, Plan, RankOrder, Recompute, RecomputeModule, Schedule, stage_layout
from autopar.specs.stack import load_stack
from autopar.specs.training import TrainingSpec

MAX_MICRO_BATCH = 16  # larger micro-batches only add activation memory once GEMMs saturate
MAX_VPP = 16  # virtual stages per rank the search offers (published layouts use 2-8; any vpp can be given)


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending, built from its prime factorisation: trial division up to
    sqrt(n) and then work proportional to the number of divisors (trying every integer up to n
    never returned for n = 10^12)."""
    if n < 1:
        return []
    factors: list[tuple[int, int]] = []
    rest, p = n, 2
    while p * p <= rest:
        if rest % p == 0:
            k = 0
            while rest % p == 0:
                rest //= p
                k += 1
            factors.append((p, k))
        p += 1 if p == 2 else 2
    if rest > 1:
        factors.append((rest, 1))
    out = [1]
    for prime, power in factors:
        out = [d * prime**e for d in out for e in range(power + 1)]
    return sorted(out)


@dataclass(frozen=True)
class SpaceOptions:
    """What the search may vary. `fixed` pins dimensions (CLI --fix)."""

    fixed: dict[str, object] = field(default_factory=dict)
    allow_tp_across_nodes: bool = False
    stage_layouts: bool = False  # also vary the layers of the first and last pipeline stage
    max_micro_batch: int = MAX_MICRO_BATCH
    max_vpp: int = MAX_VPP


def _fixed_plan_fields(fixed: dict[str, object]) -> dict[str, object]:
    """Validate --fix values through the Plan schema so errors name the field and rule."""
    unknown = set(fixed) - set(FIXABLE)
    if unknown:
        raise InputError("fix", ",".join(sorted(unknown)), f"unknown dimension; can fix: {', '.join(FIXABLE)}")
    fields = {k: v for k, v in fixed.items() if k != "vpp" or v != 1}
    try:
        Plan.model_validate({k: v for k, v in fields.items() if k not in ("schedule", "vpp")})
    except ValidationError as exc:  # a rule between two fixed values: named as the --fix value it is about
        raise InputError.from_validation(exc, "fix") from None
    return fixed


def _plain(value: object) -> object:
    return value.value if hasattr(value, "value") else value


def check_fixed(model: ModelSpec, fixed: dict[str, object]) -> None:
    """--fix values that no candidate can take, refused by field, value and the rule they break
    (otherwise the space comes out empty and the error can only list every fixed value)."""
    ep, vpp, pp = fixed.get("ep"), fixed.get("vpp"), fixed.get("pp")
    schedule, dispatcher = _plain(fixed.get("schedule")), _plain(fixed.get("dispatcher"))
    if not model.is_moe:
        if ep is not None and ep > 1:
            raise NoCandidate("fix.ep", ep, f"expert parallelism needs a MoE model ({model.name} has no experts)")
        if fixed.get("etp") is not None:  # a dense plan's etp is its tp: fixing it would only pin tp
            raise NoCandidate("fix.etp", fixed["etp"], f"expert tensor parallelism needs a MoE model ({model.name} has no experts; "
                              "fix tp to set the tensor-parallel degree)")
        if dispatcher not in (None, Dispatcher.alltoall.value):
            raise NoCandidate("fix.dispatcher", dispatcher, f"dispatches tokens to experts: {model.name} has no experts")
        if fixed.get("ep_overlap"):
            raise NoCandidate("fix.ep_overlap", "on", f"overlaps expert-parallel communication: {model.name} has no experts")
    elif ep is not None:
        if model.num_experts % ep:
            raise NoCandidate("fix.ep", ep, f"expert parallelism splits the experts: must divide num_experts={model.num_experts} ({model.name})")
        if ep == 1 and dispatcher not in (None, Dispatcher.alltoall.value):
            raise NoCandidate("fix.dispatcher", dispatcher, "dispatches tokens across expert-parallel ranks: needs ep > 1, not ep=1")
        if ep == 1 and fixed.get("ep_overlap"):
            raise NoCandidate("fix.ep_overlap", "on", "overlaps expert-parallel communication: needs ep > 1, not ep=1")
    if model.is_moe and dispatcher == Dispatcher.allgather.value and fixed.get("ep_overlap"):
        raise NoCandidate("fix.ep_overlap", "on", OVERLAP_DISPATCHERS_RULE + ", not allgather")
    if schedule == Schedule.gpipe.value:
        raise NoCandidate("fix.schedule", schedule, "GPipe has 1F1B's bubble and holds every micro-batch's activations, so the search "
                         "offers 1f1b, zero-bubble, interleaved and dualpipev; cost a GPipe plan with `autopar estimate --plan`")
    if vpp is not None and vpp > 1:
        if pp == 1:
            raise NoCandidate("fix.vpp", vpp, "virtual pipeline stages need pipeline parallelism: pp > 1, not pp=1")
        if schedule not in (None, Schedule.interleaved.value, Schedule.dualpipev.value):
            raise NoCandidate("fix.vpp", vpp, f"virtual pipeline stages need the interleaved schedule, not {schedule}")
    if schedule == Schedule.dualpipev.value and vpp is not None and vpp != 2:
        raise NoCandidate("fix.schedule", schedule, f"runs two model chunks per rank (a V): needs vpp=2, not vpp={vpp}")
    if schedule == Schedule.interleaved.value and vpp == 1:
        raise NoCandidate("fix.schedule", schedule, "interleaves virtual pipeline stages: needs vpp > 1, not vpp=1")
    if pp == 1 and schedule not in (None, Schedule.one_f_one_b.value):
        raise NoCandidate("fix.schedule", schedule, "schedules a pipeline: needs pp > 1, not pp=1")


def fixed_degrees(fixed: dict[str, object]) -> dict[str, object]:
    """The fixed values among the degrees whose product is the GPU count (tp * cp * pp * dp)."""
    return {k: fixed[k] for k in ("tp", "cp", "pp", "dp") if k in fixed}


def check_fixed_gpus(fixed: dict[str, object], num_gpus: int) -> None:
    """--fix degrees whose product no plan on num_gpus GPUs can have (tp * cp * pp * dp = GPUs):
    for one search an input error; for one GPU count of a sweep or a plan, no plan (NoCandidate)."""
    degrees = fixed_degrees(fixed)
    product = int(np.prod(list(degrees.values()))) if degrees else 1
    if degrees and (num_gpus % product or ("dp" in degrees and len(degrees) == 4 and product != num_gpus)):
        text = " * ".join(f"{k}({v})" for k, v in degrees.items())
        raise NoCandidate("fix", ",".join(f"{k}={v}" for k, v in fixed.items()), f"{text} = {product} is incompatible with GPUs({num_gpus})")


def _allowed(name: str, values: list, fixed: dict[str, object]) -> list:
    if name not in fixed:
        return values
    want = fixed[name]
    if isinstance(want, (Recompute, Schedule, CpAlgo, RankOrder)):
        want = want.value
    return [v for v in values if (v.value if hasattr(v, "value") else v) == want]


def enumerate_space(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, options: SpaceOptions | None = None) -> PlanTable:
    """Every legal plan for the cluster's GPU count (product tp*cp*pp*dp = N by construction).
    Each (tp, cp, pp) block is filtered before the blocks are joined: only legal rows are copied
    (the DeepSeek-V3 2,048-GPU candidates, joined whole, took 26 s of a 31 s enumeration here)."""
    legal = []
    for block in _blocks(model, cluster, training, options):
        tab = PlanTable(**block)
        legal.append(tab.take(np.flatnonzero(legal_mask(model, cluster, training, tab))).columns())
    return _join(legal)


def candidate_space(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, options: SpaceOptions | None = None) -> PlanTable:
    """The cartesian product of each dimension's candidate values, before the cross-dimension rules."""
    return _join(list(_blocks(model, cluster, training, options)))


def offered_values(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, options: SpaceOptions, name: str) -> list[str]:
    """The values of dimension `name` among the candidates, as --fix spells them (a block at a
    time: DeepSeek-V3's 19M candidates on 2,048 GPUs, never joined, take 2 s)."""
    codes: set[int] = set()
    for block in _blocks(model, cluster, training, options):
        codes.update(np.unique(block[name]).tolist())
    coded = {"recompute": RECOMPUTE, "schedule": SCHEDULE, "cp_algo": CP_ALGO, "order": ORDER, "dispatcher": DISPATCHER}
    if name in coded:
        return [coded[name][c].value for c in sorted(codes)]
    if name in ("sp", "ep_overlap"):
        return [("off", "on")[c] for c in sorted(codes)]
    return [str(c) for c in sorted(codes)]


def _join(blocks: list[dict[str, np.ndarray]]) -> PlanTable:
    if not blocks:
        return PlanTable(**{k: np.zeros(0, dtype=np.int64) for k in PlanTable.__dataclass_fields__})
    return PlanTable(**{k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]})


def _blocks(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, options: SpaceOptions | None):
    """The candidate columns of each (tp, cp, pp), in enumeration order."""
    opts = options or SpaceOptions()
    fixed = _fixed_plan_fields(dict(opts.fixed))
    check_fixed(model, fixed)
    n = cluster.num_gpus
    gpn = cluster.gpus_per_node
    tps = [t for t in divisors(n) if opts.allow_tp_across_nodes or t <= gpn]
    for tp in _allowed("tp", tps, fixed):
        for cp in _allowed("cp", divisors(n // tp), fixed):
            for pp in _allowed("pp", [p for p in divisors(n // (tp * cp)) if p <= model.num_layers], fixed):
                dp = n // (tp * cp * pp)
                if "dp" in fixed and fixed["dp"] != dp:
                    continue
                block = _block(model, training, opts, fixed, tp, cp, pp, dp, gpn)
                if block is not None:
                    yield block


def end_stage_layouts(num_layers: int, pp: int, spread: int = 2) -> list[tuple[int, int]]:
    """Explicit (first, last) stage layer counts near the balanced split, the middle stages
    splitting the rest evenly and carrying at least as many layers as the end stages (which
    also hold the embedding and the logits; Megatron --decoder-first/last-pipeline-num-layers)."""
    if pp < 2:
        return []
    out = []
    middle_stages = pp - 2
    even = num_layers / pp
    for first in range(max(1, int(even) - spread), int(even) + 2):
        for last in range(max(1, int(even) - spread), int(even) + 2):
            rest = num_layers - first - last
            if middle_stages == 0:
                if rest == 0:
                    out.append((first, last))
                continue
            if rest <= 0 or rest % middle_stages:
                continue
            middle = rest // middle_stages
            if middle >= max(first, last) and middle - min(first, last) <= spread:
                out.append((first, last))
    balanced = stage_layout(num_layers, pp)
    return [fl for fl in out if [fl[0], fl[1]] != [balanced[0], balanced[-1]] or len(set(balanced[1:-1])) > 1]


def virtual_stage_options(model: ModelSpec, pp: int, max_vpp: int = MAX_VPP) -> list[int]:
    """vpp > 1 values the search offers: those that cut some rank's share of the balanced split
    (embedding and loss counted as a layer each when pp does not divide the layers) into equal
    chunks, up to max_vpp. Other values are legal and can be fixed (--fix vpp=N)."""
    total = model.num_layers + 2 + model.mtp_num_layers
    shares = {model.num_layers // pp} if model.num_layers % pp == 0 and not model.mtp_num_layers else {total // pp, -(-total // pp)}
    most = min(max_vpp, total // pp)
    return [v for v in range(2, most + 1) if any(n % v == 0 for n in shares)]


def ep_comm_options(ep: int, gpus_per_node: int, fixed: dict[str, object]) -> list[tuple[int, int]]:
    """(dispatcher, ep_overlap) pairs offered for an EP degree. An EP group larger than a node
    crosses the network: there DeepEP's node-deduplicated dispatch with the AllToAll overlapped
    by another micro-batch's compute (DeepSeek-V3 report sec. 3.2: DualPipe + DeepEP; Megatron
    --moe-token-dispatcher-type flex --overlap-moe-expert-parallel-comm) is offered beside the
    plain AllToAll. Within a node DeepEP moves the same bytes over NVLink as the AllToAll, and the
    allgather dispatcher (every token to every EP rank) only pays off for small EP: those, and any
    other pair a framework runs, are given with --fix dispatcher=...,ep_overlap=on (the overlap
    only with alltoall or deepep: OVERLAP_DISPATCHERS_RULE). Offering every pair would
    multiply a 6M-plan DeepSeek-V3 space by six."""
    if ep == 1:
        pairs = [(ALLTOALL, 0)]
    elif "dispatcher" in fixed or "ep_overlap" in fixed:
        pairs = [(d, o) for d in range(len(DISPATCHER)) for o in (0, 1) if not o or d in (ALLTOALL, DEEPEP)]
    else:
        pairs = [(ALLTOALL, 0)] + ([(DEEPEP, 1)] if ep > gpus_per_node else [])
    if "dispatcher" in fixed:
        want = Dispatcher(fixed["dispatcher"])
        pairs = [(d, o) for d, o in pairs if DISPATCHER[d] == want]
    if "ep_overlap" in fixed:
        pairs = [(d, o) for d, o in pairs if o == int(bool(fixed["ep_overlap"]))]
    return pairs


def selective_modules(model, training) -> int:
    """The modules (modules_code) the search's selective recompute names: every output-discarding
    checkpoint the model has (autopar.cost.memory.cheap_checkpoints: a norm that is a module of
    its own, the experts' activation, MLA's up-projection), as Megatron-Bridge's recipes run them
    (DeepSeek-V3 ["moe_act", "layernorm", "mla_up_proj"], DeepSeek-V3 report sec. 3.2.3; GPT-OSS
    ["layernorm", "moe_act"]), with core_attn under unfused attention (Megatron's default
    module). NONE for a dense model without MLA under a fused attention kernel (nothing cheap to
    drop), or on a stack whose selective recompute is per-op SAC (it names no modules)."""
    if load_stack(training.stack).selective_recompute == "per_op":
        return NONE
    names = list(cheap_checkpoints(model))
    if not training.flash_attention:  # unfused attention: the score tensors too (Megatron's default)
        names.append(RecomputeModule.core_attn)
    return modules_code(tuple(names)) if names else NONE


def _block(model, training, opts, fixed, tp, cp, pp, dp, gpus_per_node: int) -> dict[str, np.ndarray] | None:
    """The cartesian product of the remaining dimensions for one (tp, cp, pp), as columns."""
    per_replica = training.global_batch_size // dp if training.global_batch_size % dp == 0 else 1
    mbs = _allowed("mbs", [b for b in divisors(per_replica) if b <= opts.max_micro_batch], fixed)
    eps = [e for e in divisors(model.num_experts) if (dp * cp * tp) % e == 0] if model.is_moe else [1]
    etps = sorted({tp, 1}) if model.is_moe else [tp]
    vpps = [1] + (virtual_stage_options(model, pp, opts.max_vpp) if pp > 1 else [])
    # (vpp, schedule) pairs: interleaving needs vpp > 1, DualPipeV's V exactly 2 chunks per rank;
    # ZB-H2 and 1F1B run with vpp = 1
    pipes = [(v, SCHEDULE.index(s)) for v in _allowed("vpp", vpps, fixed)
             for s in _allowed("schedule", ([Schedule.interleaved] + ([Schedule.dualpipev] if v == 2 else [])) if v > 1 else
                               ([Schedule.one_f_one_b, Schedule.zero_bubble] if pp > 1 else [Schedule.one_f_one_b]), fixed)]
    # with pp > 1 gradients are reduced once per step (torch.distributed.pipelining, Megatron),
    # so ZeRO-2 keeps unsharded gradients like ZeRO-1: offer it only without pipelining
    zeros = [0, 1, 2, 3] if pp == 1 else [0, 1, 3]
    # selective recompute: Megatron's default (core_attn) saves next to nothing under a fused
    # attention kernel, so the search names the model's output-discarding checkpoints instead
    # (selective_modules), and offers no selective row where it has none
    selective = selective_modules(model, training)
    recomputes = [RECOMPUTE.index(r) for r in _allowed("recompute", list(Recompute), fixed)
                  if not (training.flash_attention and r == Recompute.selective and selective == NONE)]
    algos = [CP_ALGO.index(a) for a in _allowed("cp_algo", [a for a in CpAlgo if cp > 1 or a == CpAlgo.ring], fixed)]
    orders = [ORDER.index(o) for o in _allowed("order", list(RankOrder) if pp > 1 and dp > 1 else [RankOrder.tp_cp_ep_dp_pp], fixed)]
    layouts = [(NONE, NONE)] + (end_stage_layouts(model.num_layers, pp) if opts.stage_layouts else [])
    # (ep, dispatcher, ep_overlap) triples: the EP communication options depend on the EP degree
    ep_comm = [(e, d, o) for e in _allowed("ep", eps, fixed) for d, o in ep_comm_options(e, gpus_per_node, fixed)]
    dims = [range(len(ep_comm)), _allowed("etp", etps, fixed), range(len(pipes)), mbs, _allowed("zero", zeros, fixed),
            recomputes, _allowed("sp", [1, 0] if tp > 1 else [0], fixed), algos, orders, range(len(layouts))]
    if any(len(d) == 0 for d in dims):
        return None
    grid = [g.ravel() for g in np.meshgrid(*[np.asarray(list(d), dtype=np.int64) for d in dims], indexing="ij")]
    epc, etp, pipe, b, zero, rc, sp, algo, order, lay = grid
    pipes_arr, layouts_arr = np.asarray(pipes, dtype=np.int64), np.asarray(layouts, dtype=np.int64)
    ep_comm_arr = np.asarray(ep_comm, dtype=np.int64)
    ep = ep_comm_arr[epc, 0]
    n = len(ep)
    full = lambda v: np.full(n, v, dtype=np.int64)  # noqa: E731
    microbatch_sync = (zero >= 2) & (pp == 1)
    return {
        "tp": full(tp), "pp": full(pp), "dp": full(dp), "cp": full(cp), "ep": ep, "etp": etp, "vpp": pipes_arr[pipe, 0],
        "mbs": b, "zero": zero, "shard": full(NONE), "recompute": rc, "recompute_layers": full(NONE), "sp": sp,
        "tp_overlap": sp, "schedule": pipes_arr[pipe, 1], "cp_algo": algo, "order": order,
        "first": layouts_arr[lay, 0], "last": layouts_arr[lay, 1], "layout": full(NONE), "rc_stages": full(NONE),
        "reshard": full(int(pp == 1)), "grad_sync": np.where(microbatch_sync, GRAD_SYNC.index(GradSync.microbatch), GRAD_SYNC.index(GradSync.step)),
        "dispatcher": ep_comm_arr[epc, 1], "ep_overlap": ep_comm_arr[epc, 2], "offload": full(NONE), "offload_layers": full(NONE),
        "rc_modules": np.where(rc == RECOMPUTE.index(Recompute.selective), selective, NONE),
    }
