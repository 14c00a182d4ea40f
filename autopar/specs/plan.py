"""Plan: one parallel decomposition and its options, plus the text form used on the CLI:
tp=8,pp=16,dp=128,cp=1,ep=1,etp=1,vpp=1,mbs=1,zero=1,recompute=selective,sp=on,schedule=1f1b,cp_algo=ring
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, model_validator

from autopar.errors import InputError
from autopar.specs._base import StrictModel


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022)."""

    none = "none"
    """Store every activation."""
    selective = "selective"
    """Recompute the attention core only (scores, softmax); keeps 34 s b h per layer."""
    full = "full"
    """Store only each layer's input; recompute the whole forward in backward."""


class Schedule(str, Enum):
    """Pipeline schedule (seed 000 'Конвейерный параллелизм')."""

    gpipe = "gpipe"
    """All forwards, then all backwards: holds every micro-batch's activations."""
    one_f_one_b = "1f1b"
    """PipeDream-flush 1F1B: stage i holds pp - i micro-batches."""
    interleaved = "interleaved"
    """Megatron interleaved 1F1B with vpp model chunks per stage: bubble / vpp."""
    zero_bubble = "zero-bubble"
    """ZB-H2 (Qi et al. 2023): splits weight-gradient work to fill the bubble; about twice 1F1B's in-flight activations."""


class CpAlgo(str, Enum):
    """Context-parallel attention algorithm."""

    ring = "ring"
    """Ring attention: K/V chunks passed around the CP ring (cp - 1) times, overlapped with compute."""
    ulysses = "ulysses"
    """DeepSpeed-Ulysses: AllToAll from sequence to head sharding; needs heads % cp == 0."""
    hybrid = "hybrid"
    """Ulysses inside the node, ring across nodes."""


class RankOrder(str, Enum):
    """Which dimension varies fastest over consecutive ranks (Megatron --order)."""

    tp_cp_ep_dp_pp = "tp-cp-ep-dp-pp"
    """Megatron default: DP groups are nearer than PP groups."""
    tp_cp_ep_pp_dp = "tp-cp-ep-pp-dp"
    """PP groups nearer than DP groups (Megatron --use-tp-pp-dp-mapping)."""


_ALIASES = {
    "first": "first_stage_layers",
    "last": "last_stage_layers",
    "recompute_layers": "recompute_num_layers",
    "shard": "zero_shard_size",
}
_BOOL = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


class Plan(StrictModel):
    """A parallel plan. Degrees multiply to the GPU count: tp * cp * pp * dp = N."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: int = Field(1, gt=0, description="Tensor-parallel degree (Megatron column/row split)")
    pp: int = Field(1, gt=0, description="Pipeline-parallel stages")
    dp: int | None = Field(None, gt=0, description="Data-parallel degree; null = derived as N / (tp cp pp)")
    cp: int = Field(1, gt=0, description="Context-parallel degree (sequence split for attention)")
    ep: int = Field(1, gt=0, description="Expert-parallel degree; borrows dp*cp ranks, so it divides dp*cp")
    etp: int | None = Field(None, gt=0, description="Expert tensor parallel; null = tp (Megatron default)")
    vpp: int = Field(1, gt=0, description="Virtual pipeline chunks per stage (interleaved schedule)")
    mbs: int = Field(1, gt=0, description="Micro-batch size, sequences")
    zero: int = Field(1, ge=0, le=3, description="ZeRO stage: 0 none, 1 optimizer (Megatron distributed optimizer), 2 +grads, 3 +weights (FSDP)")
    zero_shard_size: int | None = Field(None, gt=0, description="ZeRO/FSDP shard group (HSDP); null = all dp*cp ranks")
    recompute: Recompute = Field(Recompute.none, description="none | selective | full")
    recompute_num_layers: int | None = Field(None, gt=0, description="With full recompute: layers per stage recomputed; null = all")
    sp: bool | None = Field(None, description="Sequence parallel; null = on when tp > 1")
    tp_overlap: bool | None = Field(None, description="Overlap TP/SP collectives with GEMMs (Megatron --tp-comm-overlap, needs sp); null = on with sp")
    schedule: Schedule | None = Field(None, description="Pipeline schedule; null = interleaved when vpp > 1, else 1f1b")
    cp_algo: CpAlgo = Field(CpAlgo.ring, description="ring | ulysses | hybrid")
    order: RankOrder = Field(RankOrder.tp_cp_ep_dp_pp, description="Rank order, fastest-varying first")
    first_stage_layers: int | None = Field(None, ge=0, description="Layers on the first stage (Megatron --decoder-first-pipeline-num-layers)")
    last_stage_layers: int | None = Field(None, ge=0, description="Layers on the last stage (--decoder-last-pipeline-num-layers)")

    @model_validator(mode="after")
    def _check(self) -> "Plan":
        if self.vpp > 1 and self.pp == 1:
            raise ValueError(f"vpp={self.vpp} needs pp > 1")
        if self.schedule == Schedule.interleaved and self.vpp == 1:
            raise ValueError("schedule=interleaved needs vpp > 1")
        if self.vpp > 1 and self.schedule not in (None, Schedule.interleaved):
            raise ValueError(f"vpp={self.vpp} needs schedule=interleaved, got {self.schedule.value}")
        if self.sp and self.tp == 1:
            raise ValueError("sp=on needs tp > 1 (Megatron turns it off at tp=1)")
        if self.tp_overlap and not self.sequence_parallel:
            raise ValueError("tp_overlap=on needs sequence parallel (Megatron: --tp-comm-overlap requires --sequence-parallel)")
        return self

    # ---- resolved values -------------------------------------------------------------
    @property
    def sequence_parallel(self) -> bool:
        return self.tp > 1 if self.sp is None else self.sp

    @property
    def tp_comm_overlap(self) -> bool:
        return self.sequence_parallel if self.tp_overlap is None else self.tp_overlap

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def pipeline_schedule(self) -> Schedule:
        if self.schedule is not None:
            return self.schedule
        return Schedule.interleaved if self.vpp > 1 else Schedule.one_f_one_b

    def data_parallel(self, num_gpus: int) -> int:
        """dp, derived from the GPU count when not given; checks the product."""
        model_parallel = self.tp * self.cp * self.pp
        if num_gpus % model_parallel:
            raise InputError("plan", self.text(), f"tp({self.tp}) * cp({self.cp}) * pp({self.pp}) = {model_parallel} does not divide the GPU count {num_gpus}")
        dp = num_gpus // model_parallel
        if self.dp is not None and self.dp != dp:
            raise InputError("plan", self.text(), f"tp({self.tp}) * cp({self.cp}) * pp({self.pp}) * dp({self.dp}) = {model_parallel * self.dp} != GPUs({num_gpus})")
        return dp

    def layers_per_stage(self, num_layers: int) -> list[int]:
        """Decoder layers on each pipeline stage.

        Explicit first/last counts split the rest evenly over the middle stages. Otherwise an
        even split when pp divides L; else the balanced uneven split that counts embedding and
        logits as one layer each on the end stages (LLaMA-3 405B: 126 layers on 16 stages ran
        7 + 14 x 8 + 7), remaining layers spread one each from the middle outwards.
        """
        return stage_layout(num_layers, self.pp, self.first_stage_layers, self.last_stage_layers)

    def text(self) -> str:
        """The canonical text form (non-default and structural keys)."""
        parts = [f"tp={self.tp}", f"pp={self.pp}"]
        if self.dp is not None:
            parts.append(f"dp={self.dp}")
        parts += [f"cp={self.cp}", f"ep={self.ep}"]
        if self.etp is not None:
            parts.append(f"etp={self.etp}")
        parts += [f"vpp={self.vpp}", f"mbs={self.mbs}", f"zero={self.zero}", f"recompute={self.recompute.value}"]
        parts.append(f"sp={'on' if self.sequence_parallel else 'off'}")
        if self.tp > 1 and self.tp_comm_overlap != self.sequence_parallel:
            parts.append(f"tp_overlap={'on' if self.tp_comm_overlap else 'off'}")
        parts.append(f"schedule={self.pipeline_schedule.value}")
        if self.cp > 1:
            parts.append(f"cp_algo={self.cp_algo.value}")
        if self.order != RankOrder.tp_cp_ep_dp_pp:
            parts.append(f"order={self.order.value}")
        for key in ("first_stage_layers", "last_stage_layers", "recompute_num_layers", "zero_shard_size"):
            value = getattr(self, key)
            if value is not None:
                parts.append(f"{key}={value}")
        return ",".join(parts)


def stage_layout(num_layers: int, pp: int, first: int | None = None, last: int | None = None) -> list[int]:
    """Decoder layers per pipeline stage (see Plan.layers_per_stage)."""
    if pp == 1:
        return [num_layers]
    if first is not None or last is not None:
        return _explicit_layout(num_layers, pp, first, last)
    if num_layers % pp == 0:
        return [num_layers // pp] * pp
    if num_layers < pp:
        raise InputError("plan.pp", pp, f"more pipeline stages than layers ({num_layers})")
    total = num_layers + 2  # embedding + logits weigh about one layer each
    base, extra = divmod(total, pp)
    order = _middle_out(pp)
    stages = [0] * pp
    for rank, slot in enumerate(order):
        stages[slot] = base + (1 if rank < extra else 0)
    stages[0] -= 1
    stages[-1] -= 1
    if min(stages) <= 0:
        raise InputError("plan.pp", pp, f"cannot split {num_layers} layers over {pp} stages")
    return stages


def _middle_out(n: int) -> list[int]:
    """Stage indices from the middle outwards, so extra layers land away from the ends."""
    mid = (n - 1) / 2
    return sorted(range(n), key=lambda i: (abs(i - mid), i))


def _explicit_layout(num_layers: int, pp: int, first: int | None, last: int | None) -> list[int]:
    fixed = [x for x in (first, last) if x is not None]
    rest = num_layers - sum(fixed)
    middle = pp - len(fixed)
    if rest < 0 or (middle == 0 and rest != 0) or (middle > 0 and rest % middle):
        raise InputError("plan.first_stage_layers", first, f"first/last stage layers leave {rest} layers that do not split evenly over {middle} middle stages")
    each = rest // middle if middle else 0
    stages = [each] * pp
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    return stages


def parse_plan(text: str, **overrides: Any) -> Plan:
    """Parse 'tp=8,pp=16,...' into a Plan; errors name the key and the rule."""
    fields: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in item:
            raise InputError("plan", item, "expected key=value (e.g. tp=8)")
        key, value = (s.strip() for s in item.split("=", 1))
        key = _ALIASES.get(key, key)
        if key not in Plan.model_fields:
            raise InputError("plan", key, f"unknown key; known: {', '.join(Plan.model_fields)}")
        if key in fields:
            raise InputError("plan", key, "given twice")
        if key in ("sp", "tp_overlap"):
            if value.lower() not in _BOOL:
                raise InputError(f"plan.{key}", value, "must be on or off")
            fields[key] = _BOOL[value.lower()]
        else:
            fields[key] = value
    fields.update(overrides)
    try:
        return Plan.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        return_field = f"plan.{loc}" if loc else "plan"
        raise InputError(return_field, err.get("input") if loc else text, err["msg"]) from None
