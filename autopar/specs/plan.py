"""Plan: one parallel decomposition and its options, plus the text form used on the CLI:
tp=8,pp=16,dp=128,cp=1,ep=1,etp=1,vpp=1,mbs=1,zero=1,recompute=selective,sp=on,schedule=1f1b,cp_algo=ring
"""

from __future__ import annotations

import re
from dataclasses import replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, ValidationError, model_validator

from autopar.errors import InputError
from autopar.specs._base import StrictModel
from autopar.specs.layout import PipelineLayout, balanced_layout, first_last_layout, parse_layout, v_layout

if TYPE_CHECKING:
    from autopar.specs.model import ModelSpec


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022)."""

    none = "none"
    """Store every activation."""
    selective = "selective"
    """Recompute the attention core only (scores, softmax); keeps 34 s b h per layer."""
    full = "full"
    """Store only each layer's input; recompute the whole forward in backward."""


class RecomputeModule(str, Enum):
    """A submodule that selective recompute recomputes (Megatron-Core TransformerConfig
    recompute_modules; --recompute-modules). Output-discarding checkpoints: layernorm, moe_act, mla_up_proj;
    normal checkpoints (only the module's input kept): core_attn, mlp, moe, shared_experts."""

    core_attn = "core_attn"
    """The attention core (scores, softmax, context; the fused kernel's forward runs again)."""
    layernorm = "layernorm"
    """input_layernorm and pre_mlp_layernorm: their outputs are not stored."""
    mlp = "mlp"
    """The dense MLP of non-MoE layers."""
    moe = "moe"
    """The whole MoE layer: router, dispatch and combine (their AllToAll runs again), experts, shared experts."""
    moe_act = "moe_act"
    """The experts' activation function: its output is not stored."""
    shared_experts = "shared_experts"
    """The shared experts of a MoE layer."""
    mla_up_proj = "mla_up_proj"
    """Multi-latent attention's up-projections and RoPE: Q, K and V are not stored, only the
    latents they are rebuilt from (output-discarding; Megatron-Core MLA qkv_up_checkpoint, a
    CheckpointWithoutOutput; DeepSeek-V3 report sec. 3.2.3 'Recomputation of RMSNorm and MLA
    Up-Projection'). Needs an MLA model."""


RECOMPUTE_MODULE_ALIASES = {"norm": "layernorm", "act": "moe_act", "mla_up": "mla_up_proj", "shared_expert": "shared_experts", "attn": "core_attn",
                            "core_attention": "core_attn"}


def module_names(names: Any, aliases: dict[str, str] = RECOMPUTE_MODULE_ALIASES) -> list[str]:
    """Module names as written ('layernorm+moe', 'norm, act' or a list of names or enums),
    lower-cased with the aliases of published tables resolved; unknown names are kept."""
    items = re.split(r"[+,\s]+", names) if isinstance(names, str) else [getattr(n, "value", n) for n in names]
    return [aliases.get(n, n) for n in (str(i).strip().lower() for i in items) if n]


class OffloadModule(str, Enum):
    """A submodule whose saved input Megatron-Core copies to host memory during forward and back
    before its backward (--fine-grained-activation-offloading --offload-modules; Megatron-LM
    docs/user-guide/features/fine_grained_activation_offloading.md). The copies run on a side
    stream over the GPU's host link, overlapped with compute."""

    attn_norm = "attn_norm"
    """input_layernorm's input (the layer input)."""
    qkv_linear = "qkv_linear"
    """The QKV projection's input (input_layernorm's output)."""
    core_attn = "core_attn"
    """The attention core's inputs: Q, K and V."""
    attn_proj = "attn_proj"
    """The output projection's input (the attention output)."""
    mlp_norm = "mlp_norm"
    """pre_mlp_layernorm's input (the residual after attention)."""
    expert_fc1 = "expert_fc1"
    """The routed token copies, the experts' grouped fc1 input."""
    moe_act = "moe_act"
    """The experts' activation-function input (the fc1 output)."""
    layer_input = "layer_input"
    """With full recompute: the checkpointed layer input, the only tensor a recomputed layer keeps."""


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
    dualpipev = "dualpipev"
    """DualPipeV (DeepSeek's DualPipe cut in half; deepseek-ai/DualPipe dualpipev.py, torchtitan
    ScheduleDualPipeV): two model chunks per rank placed in a V (rank r runs virtual stages r and
    2 pp - 1 - r, so rank 0 holds the embedding and the loss), each forward chunk overlapped with
    another micro-batch's backward chunk. Bubble (PP/2 - 1)(F&B + B - 3W) over PP = 2 pp chunks,
    PP + 1 chunks' activations per rank (DualPipe README table); vpp = 2, micro-batches >= 2 pp."""

    @property
    def v_shaped(self) -> bool:
        """Places two model chunks per rank in a V (rank 0 holds the first and the last stage)."""
        return self is Schedule.dualpipev


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


class GradSync(str, Enum):
    """When sharded gradients are reduced (ZeRO-2/3, FSDP)."""

    microbatch = "microbatch"
    """Reduce-scatter after every micro-batch's backward; gradients stay sharded (DeepSpeed
    ZeRO-2/3, FSDP2 without pipeline parallelism)."""
    step = "step"
    """Accumulate unsharded gradients over the micro-batches, reduce once per step (Megatron
    DDP and distributed optimizer; FSDP2 under torch.distributed.pipelining)."""


class Dispatcher(str, Enum):
    """MoE token dispatcher (Megatron --moe-token-dispatcher-type)."""

    alltoall = "alltoall"
    """AllToAll of the routed tokens to the experts' EP ranks and back."""
    allgather = "allgather"
    """AllGather of every token to every EP rank, ReduceScatter of the outputs."""
    deepep = "deepep"
    """DeepEP (Megatron 'flex'): node-deduplicated AllToAll, each token crosses the network once per
    destination node and is forwarded over NVLink (DeepSeek-V3 report section 3.2.2)."""


_ALIASES = {
    "modules": "recompute_modules",
    "first": "first_stage_layers",
    "last": "last_stage_layers",
    "recompute_layers": "recompute_num_layers",
    "shard": "zero_shard_size",
    "recompute_stages": "stage_recompute_layers",
    "offload": "offload_modules",
    "offload_layers": "offload_num_layers",
}
_BOOL_KEYS = ("sp", "tp_overlap", "reshard", "ep_overlap")
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
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        None, description="With selective recompute: the submodules recomputed (Megatron --recompute-modules); "
        "null = the stack's selective recompute (Megatron: core_attn; torchtitan: per-op SAC)")
    sp: bool | None = Field(None, description="Sequence parallel; null = on when tp > 1")
    tp_overlap: bool | None = Field(None, description="Overlap TP/SP collectives with GEMMs (Megatron --tp-comm-overlap, needs sp); null = on with sp")
    schedule: Schedule | None = Field(None, description="Pipeline schedule; null = interleaved when vpp > 1, else 1f1b")
    cp_algo: CpAlgo = Field(CpAlgo.ring, description="ring | ulysses | hybrid")
    order: RankOrder = Field(RankOrder.tp_cp_ep_dp_pp, description="Rank order, fastest-varying first")
    first_stage_layers: int | None = Field(None, ge=0, description="Layers on the first stage (Megatron --decoder-first-pipeline-num-layers)")
    last_stage_layers: int | None = Field(None, ge=0, description="Layers on the last stage (--decoder-last-pipeline-num-layers)")
    layout: str | None = Field(None, description="Layers of every virtual pipeline stage, Megatron --pipeline-model-parallel-layout form "
                               "(E embedding, t decoder, m MTP, L loss, | between stages; pp*vpp stages); sets vpp; null = balanced")
    stage_recompute_layers: tuple[int, ...] | None = Field(None, description="With full recompute: recomputed layers of each pipeline stage (one count per stage); null = recompute_num_layers on every stage")
    reshard: bool | None = Field(None, description="ZeRO-3/FSDP: free gathered weights after forward and gather them again for backward "
                                 "(FSDP2 reshard_after_forward); null = on without pipeline parallelism, off with it (torchtitan)")
    grad_sync: GradSync | None = Field(None, description="ZeRO-2/3: reduce-scatter gradients every micro-batch or once per step; "
                                       "null = microbatch without pipeline parallelism, step with it")
    dispatcher: Dispatcher = Field(Dispatcher.alltoall, description="MoE token dispatcher: alltoall | allgather | deepep")
    ep_overlap: bool = Field(False, description="Overlap the EP AllToAll of one micro-batch with another's compute "
                             "(Megatron --overlap-moe-expert-parallel-comm, DualPipe)")
    offload_modules: tuple[OffloadModule, ...] | None = Field(
        None, description="Submodules whose saved inputs go to host memory between forward and backward "
        "(Megatron --fine-grained-activation-offloading --offload-modules); null = none")
    offload_num_layers: int | None = Field(
        None, gt=0, description="Layer-level activation offloading: the saved activations of this many layers go to host memory "
        "between forward and backward (Megatron --cpu-offloading --cpu-offloading-num-layers, weights stay); needs pp=1 and "
        "recompute=none (Megatron-Core's rule); null = none")

    @model_validator(mode="before")
    @classmethod
    def _vpp_from_layout(cls, data: Any) -> Any:
        """A layout string fixes vpp = stages / pp (Megatron derives it the same way)."""
        if isinstance(data, dict) and data.get("layout"):
            pp = int(data.get("pp") or 1)
            layout = parse_layout(str(data["layout"]), pp)
            if data.get("vpp") not in (None, layout.vpp) and int(data["vpp"]) != layout.vpp:
                raise ValueError(f"layout has {layout.num_virtual_stages} stages = pp({pp}) x vpp({layout.vpp}), but vpp={data['vpp']}")
            data = {**data, "vpp": layout.vpp, "layout": layout.text()}
        return data

    @model_validator(mode="before")
    @classmethod
    def _modules(cls, data: Any) -> Any:
        """recompute_modules and offload_modules: 'layernorm+moe' (text form) or a list; aliases
        of published tables (norm, act) resolved for recompute; deduplicated in the enum's order."""
        for key, enum, aliases in (("recompute_modules", RecomputeModule, RECOMPUTE_MODULE_ALIASES), ("offload_modules", OffloadModule, {})):
            if isinstance(data, dict) and data.get(key) is not None:
                names = module_names(data[key], aliases)
                known = [m.value for m in enum]
                bad = [n for n in names if n not in known]
                if bad:
                    raise ValueError(f"{key}={bad[0]!r}: unknown module; known: {', '.join(known)}")
                data = {**data, key: tuple(m for m in enum if m.value in names)}
        return data

    @model_validator(mode="after")
    def _check(self) -> "Plan":
        if self.vpp > 1 and self.pp == 1:
            raise ValueError(f"vpp={self.vpp} needs pp > 1")
        if self.schedule == Schedule.interleaved and self.vpp == 1:
            raise ValueError("schedule=interleaved needs vpp > 1")
        if self.schedule == Schedule.dualpipev and self.vpp != 2:
            raise ValueError(f"schedule=dualpipev runs two model chunks per rank (a V): needs vpp=2, got vpp={self.vpp}")
        if self.vpp > 1 and self.schedule not in (None, Schedule.interleaved, Schedule.dualpipev):
            raise ValueError(f"vpp={self.vpp} needs schedule=interleaved (or dualpipev with vpp=2), got {self.schedule.value}")
        if self.sp and self.tp == 1:
            raise ValueError("sp=on needs tp > 1 (Megatron turns it off at tp=1)")
        if self.tp_overlap and not self.sequence_parallel:
            raise ValueError("tp_overlap=on needs sequence parallel (Megatron: --tp-comm-overlap requires --sequence-parallel)")
        if self.layout and (self.first_stage_layers is not None or self.last_stage_layers is not None):
            raise ValueError("layout and first/last stage layers are two ways to say the same thing: give one")
        if self.stage_recompute_layers is not None:
            if len(self.stage_recompute_layers) != self.pp or min(self.stage_recompute_layers) < 0:
                raise ValueError(f"stage_recompute_layers needs pp={self.pp} counts >= 0, got "
                                 f"{len(self.stage_recompute_layers)} ({'/'.join(map(str, self.stage_recompute_layers))})")
            if self.recompute != Recompute.full or self.recompute_num_layers is not None:
                raise ValueError("stage_recompute_layers needs recompute=full and no recompute_num_layers")
        if self.recompute_modules is not None:
            if self.recompute != Recompute.selective:
                raise ValueError(f"recompute_modules needs recompute=selective, got recompute={self.recompute.value}")
            if not self.recompute_modules:
                raise ValueError("recompute_modules needs at least one module (or null for the stack's selective recompute)")
        if self.offload_modules is not None:
            if not self.offload_modules:
                raise ValueError("offload_modules needs at least one module (or null for no offloading)")
            if OffloadModule.layer_input in self.offload_modules and self.recompute != Recompute.full:
                raise ValueError(f"offload_modules=layer_input needs recompute=full (it offloads the checkpointed layer input), "
                                 f"got recompute={self.recompute.value}")
        if self.offload_num_layers is not None:
            # Megatron-Core TransformerConfig.__post_init__: 'Currently there is no support for Pipeline
            # parallelism with CPU offloading'; 'CPU offloading does not work when activation recomputation
            # is enabled'; the fine-grained offloading docs: layer-level and module-level offloading exclude each other
            if self.pp > 1 or self.recompute != Recompute.none or self.offload_modules is not None:
                raise ValueError(f"offload_num_layers (layer-level CPU offloading) needs pp=1, recompute=none and no offload_modules, "
                                 f"got pp={self.pp}, recompute={self.recompute.value}, offload_modules={self.offload_modules is not None}")
        if self.reshard is not None and self.zero != 3:
            raise ValueError(f"reshard applies to zero=3 (FSDP), got zero={self.zero}")
        if self.grad_sync == GradSync.microbatch and self.zero < 2:
            raise ValueError(f"grad_sync=microbatch needs sharded gradients (zero >= 2), got zero={self.zero}")
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

    @property
    def reshard_after_forward(self) -> bool:
        return self.pp == 1 if self.reshard is None else self.reshard

    @property
    def gradient_sync(self) -> GradSync:
        if self.grad_sync is not None:
            return self.grad_sync
        return GradSync.microbatch if self.zero >= 2 and self.pp == 1 else GradSync.step

    def data_parallel(self, num_gpus: int) -> int:
        """dp, derived from the GPU count when not given; checks the product."""
        model_parallel = self.tp * self.cp * self.pp
        if num_gpus % model_parallel:
            raise InputError("plan", self.text(), f"tp({self.tp}) * cp({self.cp}) * pp({self.pp}) = {model_parallel} does not divide the GPU count {num_gpus}")
        dp = num_gpus // model_parallel
        if self.dp is not None and self.dp != dp:
            raise InputError("plan", self.text(), f"tp({self.tp}) * cp({self.cp}) * pp({self.pp}) * dp({self.dp}) = {model_parallel * self.dp} != GPUs({num_gpus})")
        return dp

    def pipeline_layout(self, num_layers: int, mtp_layers: int = 0, mtp_units: int = 2) -> PipelineLayout:
        """Layers of every virtual stage: the explicit layout; or first/last counts with the rest
        split evenly over the middle stages; or the balanced split (autopar.specs.layout)."""
        return resolve_layout(num_layers, self.pp, self.vpp, self.first_stage_layers, self.last_stage_layers, self.layout, mtp_layers,
                              mtp_units, v_shape=self.pipeline_schedule.v_shaped)

    def model_layout(self, model: ModelSpec) -> PipelineLayout:
        """pipeline_layout for this model's layers and MTP modules."""
        return self.pipeline_layout(model.num_layers, model.mtp_num_layers, model.mtp_layout_units)

    def layers_per_stage(self, num_layers: int) -> list[int]:
        """Decoder layers on each pipeline rank (all its virtual stages) of a model without MTP
        modules (model_layout counts them)."""
        return self.pipeline_layout(num_layers).rank_decoders()

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
        for key in ("first_stage_layers", "last_stage_layers", "recompute_num_layers", "zero_shard_size", "layout", "offload_num_layers"):
            value = getattr(self, key)
            if value is not None:
                parts.append(f"{key}={value}")
        if self.stage_recompute_layers is not None:
            parts.append("stage_recompute_layers=" + "/".join(str(n) for n in self.stage_recompute_layers))
        if self.recompute_modules is not None:
            parts.append("recompute_modules=" + "+".join(m.value for m in self.recompute_modules))
        if self.reshard is not None:
            parts.append(f"reshard={'on' if self.reshard else 'off'}")
        if self.grad_sync is not None:
            parts.append(f"grad_sync={self.grad_sync.value}")
        if self.dispatcher != Dispatcher.alltoall:
            parts.append(f"dispatcher={self.dispatcher.value}")
        if self.ep_overlap:
            parts.append("ep_overlap=on")
        if self.offload_modules is not None:
            parts.append("offload_modules=" + "+".join(m.value for m in self.offload_modules))
        return ",".join(parts)


def resolve_layout(num_layers: int, pp: int, vpp: int = 1, first: int | None = None, last: int | None = None,
                   layout: str | None = None, mtp_layers: int = 0, mtp_units: int = 2, v_shape: bool = False) -> PipelineLayout:
    """The pipeline layout a plan's fields describe (see Plan.pipeline_layout); v_shape places
    the virtual stages in a V (schedule=dualpipev) instead of round-robin."""
    if pp > num_layers + 2 + mtp_layers:
        raise InputError("plan.pp", pp, f"more pipeline stages than num_layers={num_layers} (+ embedding and loss)")
    if layout:
        return replace(parse_layout(layout, pp), v_shape=v_shape)
    if first is not None or last is not None:
        return replace(first_last_layout(num_layers, pp, vpp, first, last, mtp_layers), v_shape=v_shape)
    if v_shape:
        return v_layout(num_layers, pp, mtp_layers, mtp_units)
    return balanced_layout(num_layers, pp, vpp, mtp_layers, mtp_units)


def stage_layout(num_layers: int, pp: int, first: int | None = None, last: int | None = None) -> list[int]:
    """Decoder layers per pipeline rank with vpp = 1 (see resolve_layout)."""
    return resolve_layout(num_layers, pp, 1, first, last).rank_decoders()


def _plan_items(text: str) -> list[str]:
    """'key=value' items; a layout string may hold commas (cosmetic in Megatron's form), so a
    piece without '=' after a layout item continues it. An empty plan, or an empty item
    ('tp=8,,pp=4', a trailing comma), is refused: a dropped value is more likely a typo than a
    wish for the defaults, and a plan given empty would cost tp=1,pp=1 without a word."""
    if not text.strip():
        raise InputError("plan", text, "is empty; give at least one key=value (e.g. tp=8)")
    items: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            raise InputError("plan", text, "has an empty item (two commas in a row, or one at an end); give key=value items separated by single commas")
        if "=" not in piece and items and items[-1].split("=", 1)[0].strip() == "layout":
            items[-1] += "," + piece
        else:
            items.append(piece)
    return items


def parse_plan(text: str, **overrides: Any) -> Plan:
    """Parse 'tp=8,pp=16,...' into a Plan; errors name the key and the rule."""
    fields: dict[str, Any] = {}
    for item in _plan_items(text):
        if "=" not in item:
            raise InputError("plan", item, "expected key=value (e.g. tp=8)")
        key, value = (s.strip() for s in item.split("=", 1))
        key = _ALIASES.get(key, key)
        if key not in Plan.model_fields:
            raise InputError("plan", key, f"unknown key; known: {', '.join(Plan.model_fields)}")
        if key in fields:
            raise InputError("plan", key, "given twice")
        if key in _BOOL_KEYS:
            if value.lower() not in _BOOL:
                raise InputError(f"plan.{key}", value, "must be on or off")
            fields[key] = _BOOL[value.lower()]
        elif key == "stage_recompute_layers":
            if not re.fullmatch(r"\d+(/\d+)*", value):
                raise InputError(f"plan.{key}", value, "must be one count per pipeline stage, separated by / (e.g. 2/4/4/1)")
            fields[key] = tuple(int(v) for v in value.split("/"))
        else:
            fields[key] = value
    fields.update(overrides)
    try:
        return Plan.model_validate(fields)
    except ValidationError as exc:  # a cross-field rule ('vpp=2 needs pp > 1') is reported at the field it names
        raise InputError.from_validation(exc, "plan", value=text) from None
