"""PlanTable: many plans as columns of numpy arrays, so the cost model and the search
evaluate them together; Plan <-> row conversion."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from autopar.errors import InputError
from autopar.specs.layout import PipelineLayout, check_layout
from autopar.specs.plan import CpAlgo, Dispatcher, GradSync, OffloadModule, Plan, RankOrder, Recompute, RecomputeModule, Schedule, resolve_layout

if TYPE_CHECKING:
    from autopar.specs.model import ModelSpec

RECOMPUTE = list(Recompute)
SCHEDULE = list(Schedule)
V_SHAPED = [i for i, s in enumerate(SCHEDULE) if s.v_shaped]
CP_ALGO = list(CpAlgo)
ORDER = list(RankOrder)
GRAD_SYNC = list(GradSync)
DISPATCHER = list(Dispatcher)
ALLTOALL, ALLGATHER, DEEPEP = (DISPATCHER.index(d) for d in (Dispatcher.alltoall, Dispatcher.allgather, Dispatcher.deepep))
RECOMPUTE_MODULES = list(RecomputeModule)
OFFLOAD_MODULES = list(OffloadModule)
NONE = -1  # sentinel for optional integer columns


def v_shaped(schedule_codes: np.ndarray) -> np.ndarray:
    """Rows whose schedule places two chunks per rank in a V (Schedule.v_shaped)."""
    return np.isin(schedule_codes, V_SHAPED)


_INTERNED: list[object] = []  # layout strings and per-stage tuples, coded as integers in columns
_CODES: dict[object, int] = {}


def intern(value: object) -> int:
    """An integer code for a hashable value (a layout string, a per-stage tuple), NONE for None.
    Codes live for the process; they are never written out."""
    if value is None:
        return NONE
    code = _CODES.get(value)
    if code is None:
        code = _CODES[value] = len(_INTERNED)
        _INTERNED.append(value)
    return code


def interned(code: int) -> object:
    """The value of an interned code (None for NONE)."""
    return None if code == NONE else _INTERNED[int(code)]


@dataclass
class PlanTable:
    """Columns (one entry per plan). Enums are stored as indices into the lists above;
    optional integers use NONE (-1)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    vpp: np.ndarray
    mbs: np.ndarray
    zero: np.ndarray
    shard: np.ndarray
    recompute: np.ndarray
    recompute_layers: np.ndarray
    sp: np.ndarray
    tp_overlap: np.ndarray
    schedule: np.ndarray
    cp_algo: np.ndarray
    order: np.ndarray
    first: np.ndarray
    last: np.ndarray
    layout: np.ndarray  # interned layout string or NONE (balanced / first-last)
    rc_stages: np.ndarray  # interned per-stage recompute counts or NONE
    reshard: np.ndarray  # 1: ZeRO-3 gathers weights again for backward
    grad_sync: np.ndarray  # index into GRAD_SYNC
    dispatcher: np.ndarray  # index into DISPATCHER
    ep_overlap: np.ndarray
    rc_modules: np.ndarray  # bit i set: RECOMPUTE_MODULES[i] recomputed; NONE: the stack's selective recompute
    offload: np.ndarray  # bit i set: OFFLOAD_MODULES[i]'s saved input goes to host memory; NONE: no offloading
    offload_layers: np.ndarray  # layer-level offloading: layers whose saved activations go to host memory; NONE: none

    def __len__(self) -> int:
        return len(self.tp)

    @classmethod
    def from_plans(cls, plans: Iterable[Plan], num_gpus: int) -> "PlanTable":
        plans = list(plans)
        none = lambda v: NONE if v is None else v  # noqa: E731
        cols = {
            "tp": [p.tp for p in plans], "pp": [p.pp for p in plans], "dp": [p.data_parallel(num_gpus) for p in plans],
            "cp": [p.cp for p in plans], "ep": [p.ep for p in plans], "etp": [p.expert_tp for p in plans],
            "vpp": [p.vpp for p in plans], "mbs": [p.mbs for p in plans], "zero": [p.zero for p in plans],
            "shard": [none(p.zero_shard_size) for p in plans],
            "recompute": [RECOMPUTE.index(p.recompute) for p in plans],
            "recompute_layers": [none(p.recompute_num_layers) for p in plans],
            "sp": [int(p.sequence_parallel) for p in plans], "tp_overlap": [int(p.tp_comm_overlap) for p in plans],
            "schedule": [SCHEDULE.index(p.pipeline_schedule) for p in plans],
            "cp_algo": [CP_ALGO.index(p.cp_algo) for p in plans], "order": [ORDER.index(p.order) for p in plans],
            "first": [none(p.first_stage_layers) for p in plans], "last": [none(p.last_stage_layers) for p in plans],
            "layout": [intern(p.layout) for p in plans], "rc_stages": [intern(p.stage_recompute_layers) for p in plans],
            "reshard": [int(p.reshard_after_forward) for p in plans], "grad_sync": [GRAD_SYNC.index(p.gradient_sync) for p in plans],
            "dispatcher": [DISPATCHER.index(p.dispatcher) for p in plans], "ep_overlap": [int(p.ep_overlap) for p in plans],
            "rc_modules": [modules_code(p.recompute_modules) for p in plans],
            "offload": [modules_code(p.offload_modules, OFFLOAD_MODULES) for p in plans],
            "offload_layers": [none(p.offload_num_layers) for p in plans],
        }
        return cls(**{k: np.asarray(v, dtype=np.int64) for k, v in cols.items()})

    def plan(self, i: int) -> Plan:
        """Row i as a Plan (dp included)."""
        opt = lambda v: None if v == NONE else int(v)  # noqa: E731
        return Plan(
            tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]), cp=int(self.cp[i]), ep=int(self.ep[i]),
            etp=None if self.etp[i] == self.tp[i] else int(self.etp[i]), vpp=int(self.vpp[i]), mbs=int(self.mbs[i]), zero=int(self.zero[i]),
            zero_shard_size=opt(self.shard[i]), recompute=RECOMPUTE[self.recompute[i]],
            recompute_num_layers=opt(self.recompute_layers[i]), sp=bool(self.sp[i]) if self.tp[i] > 1 else None,
            tp_overlap=bool(self.tp_overlap[i]) if self.sp[i] else None, schedule=SCHEDULE[self.schedule[i]],
            cp_algo=CP_ALGO[self.cp_algo[i]], order=ORDER[self.order[i]],
            first_stage_layers=opt(self.first[i]), last_stage_layers=opt(self.last[i]),
            layout=interned(self.layout[i]), stage_recompute_layers=interned(self.rc_stages[i]),
            reshard=bool(self.reshard[i]) if self.zero[i] == 3 else None,
            grad_sync=GRAD_SYNC[self.grad_sync[i]] if self.zero[i] >= 2 else None,
            dispatcher=DISPATCHER[self.dispatcher[i]], ep_overlap=bool(self.ep_overlap[i]),
            recompute_modules=modules_of(int(self.rc_modules[i])),
            offload_modules=modules_of(int(self.offload[i]), OFFLOAD_MODULES), offload_num_layers=opt(self.offload_layers[i]),
        )

    def take(self, index: np.ndarray) -> "PlanTable":
        return PlanTable(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def columns(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def modules_code(modules: tuple | None, names: list = RECOMPUTE_MODULES) -> int:
    """Bit mask of modules (bit i: names[i]: RECOMPUTE_MODULES or OFFLOAD_MODULES); NONE for null."""
    return NONE if modules is None else sum(1 << names.index(m) for m in modules)


def modules_of(code: int, names: list = RECOMPUTE_MODULES) -> tuple | None:
    return None if code == NONE else tuple(m for i, m in enumerate(names) if code >> i & 1)


def has_module(column: np.ndarray, module: RecomputeModule | OffloadModule) -> np.ndarray:
    """Per plan: whether a modules column (modules_code) holds `module`."""
    names = OFFLOAD_MODULES if isinstance(module, OffloadModule) else RECOMPUTE_MODULES
    return (column != NONE) & ((column >> names.index(module)) & 1 == 1)


def selective_modules(tab: PlanTable, per_op: bool) -> np.ndarray:
    """The modules each plan's selective recompute runs (modules_code; NONE when the plan is not
    selective, or leaves it to a per-op SAC stack): the plan's recompute_modules, else Megatron's
    default ["core_attn"]."""
    default = NONE if per_op else modules_code((RecomputeModule.core_attn,))
    return np.where(tab.recompute != RECOMPUTE.index(Recompute.selective), NONE, np.where(tab.rc_modules != NONE, tab.rc_modules, default))


def layout_groups(tab: PlanTable, model: ModelSpec) -> list[tuple[np.ndarray, "PipelineLayout | str"]]:
    """Rows of the table grouped by pipeline layout: (rows, layout), or (rows, the rule the
    layout breaks) when the plan fields describe no legal layout for the model."""
    num_layers, mtp_layers = model.num_layers, model.mtp_num_layers
    v_shape = v_shaped(tab.schedule)
    cols = (tab.pp, tab.vpp, tab.first, tab.last, tab.layout, v_shape)
    firsts, group_of = row_groups(*cols)
    order = np.argsort(group_of, kind="stable")
    bounds = np.searchsorted(group_of[order], np.arange(len(firsts) + 1))
    out = []
    for g, r in enumerate(firsts.tolist()):
        pp, vpp, first, last, code, v = (int(c[r]) for c in cols)
        rows = order[bounds[g]:bounds[g + 1]]
        try:
            layout = resolve_layout(num_layers, pp, vpp, None if first == NONE else first, None if last == NONE else last,
                                    interned(code), mtp_layers, model.mtp_layout_units, v_shape=bool(v))
            broken = check_layout(layout, num_layers, mtp_layers)
        except InputError as exc:
            broken = exc.rule
        out.append((rows, broken or layout))
    return out


def row_groups(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first row of each distinct row, group of every row) over equal-length
    columns. One integer key per row from per-column codes: 1-D uniques sort fast, row-wise
    (axis=0) uniques do not."""
    key = np.zeros(len(columns[0]), dtype=np.int64)
    span = 1
    for a in columns:
        distinct, codes = _codes(np.asarray(a).ravel())
        if span * distinct >= 2**62:  # re-code before the mixed-radix key could overflow
            key = np.unique(key, return_inverse=True)[1].ravel().astype(np.int64)
            span = int(key.max()) + 1
        key = key * distinct + codes
        span *= distinct
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _codes(a: np.ndarray) -> tuple[int, np.ndarray]:
    """(number of distinct values, each element's rank among them), as np.unique's
    return_inverse gives. Integer columns over a short range (the plan table's: degrees, codes,
    flags) rank through a lookup table in one pass instead of a sort."""
    if a.dtype.kind in "iub" and a.size:
        lo, hi = int(a.min()), int(a.max())
        if hi - lo <= max(1024, 4 * a.size):
            offset = (a - lo).astype(np.intp)
            present = np.zeros(hi - lo + 1, dtype=bool)
            present[offset] = True
            rank = np.cumsum(present, dtype=np.int64) - 1
            return int(rank[-1]) + 1, rank[offset]
    values, codes = np.unique(a, return_inverse=True)
    return len(values), codes.ravel().astype(np.int64)


def vmap(fn: Callable[..., float], *columns: np.ndarray) -> np.ndarray:
    """Apply a scalar function to each row of the columns, calling it once per distinct row.

    The cost model's primitives (a GEMM's time, a collective's time, a group's placement) are
    scalar functions of a few arguments that take few distinct values across a plan space;
    this keeps one implementation of each while the search evaluates millions of rows.
    """
    arrays = np.broadcast_arrays(*[np.asarray(c, dtype=np.float64) for c in columns])
    shape = arrays[0].shape
    first, inverse = row_groups(*[a.ravel() for a in arrays])
    rows = [[float(a.flat[i]) for a in arrays] for i in first.tolist()]
    values = np.fromiter((fn(*row) for row in rows), dtype=np.float64, count=len(rows))
    return values[inverse].reshape(shape)
