"""The scale-out network a published run states (its `interconnect` column), as NIC bandwidth
per GPU: a rate in words ("400 Gbps per node", "8x 200 Gb/s HDR per node", "InfiniBand 8x50 GB/s
per node", "400 Gb/s per GPU") or a cloud instance named in profiles/validation/networks.yaml
(AWS p4d: 400 Gb/s per 8-GPU node, a quarter of a DGX A100's). Without it a row runs on its
GPU's cluster preset (rows.CLUSTER_FOR_GPU), whose NICs may be several times faster than the
run's. A rate without a scope ("InfiniBand 400 Gb/s") is not read: per GPU and per node differ
eightfold, and the preset's rate stands."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from autopar.limits import MAX_NIC_GB_PER_S_PER_GPU
from autopar.specs._files import PROFILES_DIR

NETWORKS_FILE = PROFILES_DIR / "validation" / "networks.yaml"
MAX_NIC_NODE_GPUS = 16  # the largest node whose GPUs share one host's NICs (DGX-2); above it the NVLink domain spans hosts
# one rate: an optional NIC count ("8x"), the number and its unit (bits or bytes per second)
_RATE = re.compile(r"(?:(\d+)\s*(?:nics?|hcas?|ports?|adapters?)?\s*[x×*]\s*)?(\d+(?:\.\d+)?)\s*(gbps|gbit/s|gb/s|tbps|tb/s)", re.I)
# a count of NICs written after the rate: '400Gb/s x 8 per node', 'NDR 400Gb/s, 8 per node', '(x8 per node)'
_COUNT_AFTER = re.compile(r"^[^,;()\d]{0,30}?(?:[x×*]\s*(\d+)\b|,\s*(\d+)\s+per\b|\(\s*x\s*(\d+))", re.I)
# an InfiniBand generation named without its rate is one port of that rate (InfiniBand Trade
# Association roadmap: EDR 100, HDR 200, NDR 400, XDR 800 Gb/s per 4x port): '8x NDR', '4x HDR200'
_IB_GENERATION = re.compile(r"\b(edr|hdr|ndr|xdr)(?:\s*(?:100|200|400|800))?\b", re.I)
_IB_RATE_GBIT = {"edr": 100, "hdr": 200, "ndr": 400, "xdr": 800}
_PER_GPU = re.compile(r"per[ -](?:gpu|accelerator)|/gpu\b|each gpu", re.I)
_PER_NODE = re.compile(r"per[ -](?:node|host|server|vm|instance|machine)|node[ -](?:to[ -])?node|/node\b", re.I)
# parts of the column about the links inside a node, whose rates are not the scale-out network's
_INSIDE_NODE = re.compile(r"nvlink|nvswitch|intra[ -]node|pcie|xgmi|infinity fabric", re.I)
_SCALE_OUT = re.compile(r"infiniband|\bib\b|roce|rdma|efa|ethernet|inter[ -]node|network|nic|hca|connectx|node[ -](?:to[ -])?node|per node", re.I)


@dataclass(frozen=True)
class StatedNetwork:
    nic_gb_per_s_per_gpu: float  # bytes: 400 Gb/s per 8-GPU node is 6.25
    how: str  # what was read, for the report


def _gb_per_s(number: str, unit: str) -> float:
    """GB/s (bytes) of a rate as written: Gb/s and Gbps are bits, GB/s bytes, Tb/s terabits."""
    value = float(number)
    if unit.lower() in ("tbps", "tb/s"):
        return value * 1000 / 8
    return value if unit == "GB/s" else value / 8


def _from_words(text: str, gpus_per_node: int) -> StatedNetwork | None:
    if not _RATE.search(text):
        text = _IB_GENERATION.sub(lambda m: f"{_IB_RATE_GBIT[m[1].lower()]} Gb/s", text)
    for part in re.split(r"[;|]", text):
        if _INSIDE_NODE.search(part) and not _SCALE_OUT.search(part):
            continue
        matches = list(_RATE.finditer(part))
        for i, match in enumerate(matches):
            # a rate written after an in-node link's name, and no network's since the last rate, is
            # that link's ("NVLink 600 GB/s intra-node, HDR InfiniBand 200 Gb/s per GPU")
            before = part[matches[i - 1].end() if i else 0:match.start()]
            if _INSIDE_NODE.search(before) and not _SCALE_OUT.search(before):
                continue
            # the scope written nearest after the rate, before the next rate: "8x 200 Gb/s per VM
            # (one per GPU)" is per node
            scope = part[match.end():matches[i + 1].start() if i + 1 < len(matches) else len(part)]
            after = None if match[1] else _COUNT_AFTER.search(scope)
            written_count = match[1] or (after and next(g for g in after.groups() if g))
            count, rate = int(written_count or 1), _gb_per_s(match[2], match[3])
            per_gpu, per_node = _PER_GPU.search(scope), _PER_NODE.search(scope)
            if per_gpu and not (per_node and per_node.start() < per_gpu.start()):
                return StatedNetwork(count * rate, f"{match[0].strip()} per GPU")
            # 'N x rate' counts a node's NICs; in an NVL72 rack (gpus_per_node: its NVLink domain)
            # a "node" may be a 4-GPU compute tray or the rack, so only a rate per GPU is read there
            if (per_node or written_count) and gpus_per_node <= MAX_NIC_NODE_GPUS:
                return StatedNetwork(count * rate / gpus_per_node, f"{match[0].strip()} per node of {gpus_per_node} GPUs")
    return None


@lru_cache(maxsize=1)
def _instances() -> tuple[tuple[re.Pattern, str, float], ...]:
    data = yaml.safe_load(NETWORKS_FILE.read_text())
    return tuple((re.compile(e["pattern"], re.I), e["name"], float(e["gbit_per_s_per_node"])) for e in data["instances"])


def stated_network(row: dict[str, Any], gpus_per_node: int) -> StatedNetwork | None:
    """The NIC bandwidth per GPU the row's interconnect column states, else None (the preset's);
    a rate outside what a NIC carries (0, or above MAX_NIC_GB_PER_S_PER_GPU) is not taken."""
    text = str(row.get("interconnect") or "")
    stated = _from_words(text, gpus_per_node) if text else None
    for pattern, name, gbit in _instances() if text and stated is None and gpus_per_node <= MAX_NIC_NODE_GPUS else ():
        if pattern.search(text):
            stated = StatedNetwork(gbit / 8 / gpus_per_node, f"{name}: {gbit:g} Gb/s per node of {gpus_per_node} GPUs "
                                   f"(profiles/validation/networks.yaml)")
            break
    return stated if stated is not None and 0 < stated.nic_gb_per_s_per_gpu <= MAX_NIC_GB_PER_S_PER_GPU else None
