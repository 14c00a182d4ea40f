"""Pipeline layouts: the decoder (and MTP) layers of every virtual pipeline stage.

The form is Megatron-LM's --pipeline-model-parallel-layout (megatron/core/transformer/
pipeline_parallel_layer_layout.py): virtual stage j runs on pipeline rank j % pp as that
rank's model chunk j // pp, so pp x vpp virtual stages are listed in order. Letters:
E embedding (first stage), t decoder layer, m MTP layer, L loss / output layer (last stage);
'|' ends a stage, 'x*n' and '(...)*n' repeat, commas are cosmetic. Example: DeepSeek-V3's 61
layers + 1 MTP on pp 16 x vpp 2: "Et*3|(tt|)*29,m|L".

Any split with pp x vpp virtual stages is legal (embedding and loss may be stages of their
own); real runs use 61 layers on 4 x 4, 94 on 8 x 3, 126 on 16 x 8.

V-shaped schedules (DualPipeV, torchtitan's "v" stage style) place the 2 pp virtual stages of
the same list in a V: stage j runs on rank j for j < pp and on rank 2 pp - 1 - j after, so rank
0 holds the first and the last stage (embedding and loss).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from autopar.errors import InputError

_REPEAT_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")
_REPEAT_CHAR = re.compile(r"(.)\*(\d+)")
MAX_LAYOUT_CHARS = 100_000  # expanded layouts longer than this are refused (a typo like t*99999999)


@dataclass(frozen=True)
class PipelineLayout:
    """Decoder and MTP layers per virtual stage (length pp x vpp, virtual-stage order)."""

    pp: int
    decoders: tuple[int, ...]
    mtp: tuple[int, ...]
    v_shape: bool = False  # two stages per rank in a V (schedule=dualpipev), else round-robin

    @property
    def vpp(self) -> int:
        return len(self.decoders) // self.pp

    @property
    def num_virtual_stages(self) -> int:
        return len(self.decoders)

    def rank_stages(self, rank: int) -> list[int]:
        """Virtual stages of one pipeline rank, chunk order."""
        if self.v_shape:
            return [rank, self.num_virtual_stages - 1 - rank]
        return list(range(rank, self.num_virtual_stages, self.pp))

    @property
    def last_rank(self) -> int:
        """The rank that runs the last virtual stage (the loss and the output layer)."""
        return 0 if self.v_shape else self.pp - 1

    def rank_decoders(self) -> list[int]:
        """Decoder layers held by each pipeline rank (all its chunks)."""
        return [sum(self.decoders[j] for j in self.rank_stages(r)) for r in range(self.pp)]

    def rank_mtp(self) -> list[int]:
        return [sum(self.mtp[j] for j in self.rank_stages(r)) for r in range(self.pp)]

    def rank_layer_indices(self) -> list[list[int]]:
        """0-based decoder layer indices each rank holds."""
        starts = [sum(self.decoders[:j]) for j in range(self.num_virtual_stages)]
        return [[i for j in self.rank_stages(r) for i in range(starts[j], starts[j] + self.decoders[j])] for r in range(self.pp)]

    def text(self) -> str:
        """Megatron layout string, runs of equal stages folded: 'Et*3|(tt|)*29,m|L'."""
        last = self.num_virtual_stages - 1
        stages = []
        for j, (d, k) in enumerate(zip(self.decoders, self.mtp)):
            body = ("E" if j == 0 else "") + ("t" * d if d <= 2 else f"t*{d}") + "m" * k + ("L" if j == last else "")
            stages.append(body)
        out, j = [], 0
        while j < len(stages):
            n = 1
            while j + n < len(stages) and stages[j + n] == stages[j]:
                n += 1
            if n > 1:
                out.append(f"({stages[j]}|)*{n},")
            else:
                out.append(stages[j] + ("|" if j < last else ""))
            j += n
        return "".join(out).rstrip(",")


def expand_layout(text: str) -> list[str]:
    """The stages of a layout string as letters ('Et*3|t' -> ['Ettt', 't'])."""
    s = text.replace(",", "").replace(" ", "")
    for _ in range(8):  # nested groups: expand the innermost first, a few levels deep
        expanded = _REPEAT_GROUP.sub(lambda mt: mt.group(1) * int(mt.group(2)), s)
        if expanded == s:
            break
        s = expanded
        if len(s) > MAX_LAYOUT_CHARS:
            break
    if "(" in s or ")" in s:
        raise InputError("plan.layout", text, "unbalanced or unrepeated parentheses (write '(tt|)*3')")
    if sum(int(n) for n in re.findall(r"\*(\d+)", s)) > MAX_LAYOUT_CHARS or len(s) > MAX_LAYOUT_CHARS:
        raise InputError("plan.layout", text, f"expands to more than {MAX_LAYOUT_CHARS} characters")
    s = _REPEAT_CHAR.sub(lambda mt: mt.group(1) * int(mt.group(2)), s)
    bad = sorted(set(s) - set("EtmL|"))
    if bad:
        raise InputError("plan.layout", text, f"unknown letters {''.join(bad)!r}; use E (embedding), t (decoder), m (MTP), L (loss), | between stages")
    return s.split("|")


def parse_layout(text: str, pp: int) -> PipelineLayout:
    """A layout string for pp pipeline ranks; checks its syntax (counts are checked against
    the model by check_layout)."""
    stages = expand_layout(text)
    if len(stages) % pp:
        raise InputError("plan.layout", text, f"{len(stages)} stages must be a multiple of pp={pp}")
    flat = "".join(stages)
    if flat.count("E") != 1 or not stages[0].startswith("E"):
        raise InputError("plan.layout", text, "E (embedding) must appear once, at the start of the first stage")
    if flat.count("L") != 1 or not stages[-1].endswith("L"):
        raise InputError("plan.layout", text, "L (loss) must appear once, at the end of the last stage")
    first_mtp = flat.find("m")
    if first_mtp >= 0 and "t" in flat[first_mtp:]:
        raise InputError("plan.layout", text, "decoder layers (t) must come before MTP layers (m)")
    return PipelineLayout(pp, tuple(s.count("t") for s in stages), tuple(s.count("m") for s in stages))


def check_layout(layout: PipelineLayout, num_layers: int, mtp_layers: int) -> str | None:
    """The rule a layout breaks for a model, or None."""
    if sum(layout.decoders) != num_layers:
        return f"holds {sum(layout.decoders)} decoder layers, the model has num_layers={num_layers}"
    if sum(layout.mtp) != mtp_layers:
        return f"holds {sum(layout.mtp)} MTP layers, the model has mtp_num_layers={mtp_layers}"
    return None


def _spread(units: int, stages: int) -> list[int]:
    """units split over stages, the remainder one each from the middle outwards (so the end
    stages, which also hold the embedding and the logits, get the fewer)."""
    base, extra = divmod(units, stages)
    mid = (stages - 1) / 2
    order = sorted(range(stages), key=lambda i: (abs(i - mid), i))
    out = [base] * stages
    for slot in order[:extra]:
        out[slot] += 1
    return out


@lru_cache(maxsize=4096)
def balanced_layout(num_layers: int, pp: int, vpp: int = 1, mtp_layers: int = 0, mtp_units: int = 2) -> PipelineLayout:
    """The default split over pp x vpp virtual stages: the same layers per rank for every vpp,
    each rank's layers over its vpp chunks as evenly as possible. Ranks split evenly when pp
    divides the layers (and the model has no MTP); otherwise embedding and loss count as one
    layer each and an MTP layer as mtp_units (its blocks and its own output layer: 2 for a
    transformer layer, ModelSpec.mtp_layout_units): the units are
    spread over the ranks from the middle outwards, and the first rank's first chunk and the
    last rank's last chunk give back the embedding's and the loss's units. LLaMA-3 405B's 126
    layers on 16 stages run as 7 + 14 x 8 + 7 (Dubey et al. 2024, section 3.3.2), with any vpp."""
    stages = pp * vpp
    if mtp_layers == 0 and num_layers % pp == 0:
        per_rank = [_chunks(num_layers // pp, vpp)] * pp
        return PipelineLayout(pp, tuple(per_rank[j % pp][j // pp] for j in range(stages)), (0,) * stages)
    overhead = [0] * pp  # units on a rank that are not decoder layers
    overhead[0] += 1
    overhead[-1] += 1 + mtp_units * mtp_layers
    units = _spread(num_layers + 2 + mtp_units * mtp_layers, pp)
    decoders = [u - o for u, o in zip(units, overhead)]
    for r in range(pp - 1, 0, -1):  # a rank short of its overhead takes layers from the rank before
        if decoders[r] < 0:
            decoders[r - 1] += decoders[r]
            decoders[r] = 0
    if min(decoders) < 0:
        raise InputError("plan.pp", pp, f"cannot split {num_layers} layers over pp*vpp={stages} virtual stages")
    per_rank = []
    for r in range(pp):
        chunks = _chunks(decoders[r] + overhead[r], vpp)
        chunks[0] -= 1 if r == 0 else 0
        chunks[-1] -= overhead[r] - (1 if r == 0 else 0)
        for c in range(vpp - 1, 0, -1):  # the loss and MTP deficit moves to the rank's earlier chunks
            if chunks[c] < 0:
                chunks[c - 1] += chunks[c]
                chunks[c] = 0
        per_rank.append(chunks)
    mtp = [0] * stages
    mtp[-1] = mtp_layers
    return PipelineLayout(pp, tuple(per_rank[j % pp][j // pp] for j in range(stages)), tuple(mtp))


@lru_cache(maxsize=1024)
def v_layout(num_layers: int, pp: int, mtp_layers: int = 0, mtp_units: int = 2) -> PipelineLayout:
    """The default split of a V-shaped pipeline (two chunks per rank, rank r running virtual
    stages r and 2 pp - 1 - r): balanced_layout's rule with rank 0 carrying both the embedding
    and the loss (and MTP) units, each rank's layers halved over its two chunks, the embedding
    taken from the first chunk of rank 0 and the loss from its second."""
    if mtp_layers == 0 and num_layers % pp == 0:
        per_rank = [_chunks(num_layers // pp, 2)] * pp
    else:
        overhead = [0] * pp
        overhead[0] = 2 + mtp_units * mtp_layers
        units = _spread(num_layers + overhead[0], pp)
        decoders = [u - o for u, o in zip(units, overhead)]
        for r in range(1, pp):  # rank 0 short of its overhead takes layers from the next rank
            if decoders[r - 1] < 0:
                decoders[r] += decoders[r - 1]
                decoders[r - 1] = 0
        if min(decoders) < 0:
            raise InputError("plan.pp", pp, f"cannot split {num_layers} layers over a V of 2*pp={2 * pp} virtual stages")
        per_rank = [_chunks(d, 2) for d in decoders]
        chunks = _chunks(decoders[0] + overhead[0], 2)
        chunks[0] -= 1
        chunks[1] -= overhead[0] - 1
        if chunks[1] < 0:
            chunks[0] += chunks[1]
            chunks[1] = 0
        per_rank[0] = chunks
    stages = 2 * pp
    decoders_v = tuple(per_rank[j][0] if j < pp else per_rank[stages - 1 - j][1] for j in range(stages))
    mtp = [0] * stages
    mtp[-1] = mtp_layers
    return PipelineLayout(pp, decoders_v, tuple(mtp), v_shape=True)


def _chunks(layers: int, vpp: int) -> list[int]:
    """A rank's layers split into vpp chunks as evenly as possible (larger chunks first)."""
    base, extra = divmod(layers, vpp)
    return [base + (1 if c < extra else 0) for c in range(vpp)]


@lru_cache(maxsize=4096)
def first_last_layout(num_layers: int, pp: int, vpp: int, first: int | None, last: int | None, mtp_layers: int = 0) -> PipelineLayout:
    """Explicit first/last rank layer counts (Megatron --decoder-first/last-pipeline-num-layers);
    the middle ranks split the rest evenly, each rank's layers split into vpp chunks."""
    fixed = [x for x in (first, last) if x is not None]
    rest = num_layers - sum(fixed)
    middle = pp - len(fixed)
    if pp == 1 or rest < 0 or (middle == 0 and rest != 0) or (middle > 0 and rest % middle):
        raise InputError("plan.first_stage_layers", first, f"first/last stage layers leave {rest} layers that do not split evenly over {middle} middle stages")
    ranks = [rest // middle if middle else 0] * pp
    if first is not None:
        ranks[0] = first
    if last is not None:
        ranks[-1] = last
    per_rank = [_chunks(n, vpp) for n in ranks]
    decoders = tuple(per_rank[j % pp][j // pp] for j in range(pp * vpp))
    mtp = [0] * (pp * vpp)
    mtp[-1] = mtp_layers
    return PipelineLayout(pp, decoders, tuple(mtp))


def megatron_layout(num_layers: int, pp: int, vpp: int = 1, first: int | None = None, last: int | None = None,
                    account_for_embedding: bool = False, account_for_loss: bool = False, mtp_layers: int = 0) -> PipelineLayout:
    """The layout Megatron builds from its flags (--decoder-first/last-pipeline-num-layers,
    --account-for-embedding/loss-in-pipeline-split): the embedding and loss, when accounted,
    take one layer's slot on the first and last virtual stage of an even split."""
    if first is not None or last is not None:
        return first_last_layout(num_layers, pp, vpp, first, last, mtp_layers)
    stages = pp * vpp
    units = num_layers + int(account_for_embedding) + int(account_for_loss)
    if units % stages:
        raise InputError("plan.pp", pp, f"num_layers={num_layers} (+ embedding/loss when accounted) = {units} must divide by pp*vpp={stages}")
    each = [units // stages] * stages
    each[0] -= int(account_for_embedding)
    each[-1] -= int(account_for_loss)
    mtp = [0] * stages
    mtp[-1] = mtp_layers
    return PipelineLayout(pp, tuple(each), tuple(mtp))
