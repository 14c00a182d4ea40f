"""GPU and cluster specs, loaded from profiles/gpus and profiles/clusters (human units in
files, converted once here: GB = 1e9 bytes, GiB = 2**30 bytes, TB = 1e12, Gb = 1e9 bits,
us = 1e-6 s)."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, SerializerFunctionWrapHandler, ValidationError, model_serializer, model_validator

from autopar.errors import InputError, ProfileNotFound
from autopar.limits import MAX_GPUS, MAX_NIC_GB_PER_S_PER_GPU
from autopar.specs._base import StrictModel
from autopar.specs._files import looks_like_path, preset_files, read_mapping

GB = 1e9
GiB = 2**30
TB = 1e12
TFLOP = 1e12
US = 1e-6


def gb_gib(num_bytes: float) -> str:
    """A memory size for people: decimal GB (the unit of every report) and GiB (nvidia-smi's, the labels')."""
    return f"{num_bytes / GB:.1f} GB ({num_bytes / GiB:.1f} GiB)"


def usable_hbm_text(usable_bytes: float, headroom_bytes: float) -> str:
    """HBM less a memory headroom, for people: "76.9 GB usable (85.5 GB HBM less 8.6 GB headroom)"."""
    return (f"{usable_bytes / GB:.1f} GB usable ({(usable_bytes + headroom_bytes) / GB:.1f} GB HBM less "
            f"{headroom_bytes / GB:.1f} GB headroom)")


class _Strict(StrictModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# 100,000 TFLOP/s: 10x the densest 2025 part's FP4 peak (B300, 15 PFLOP/s dense); a larger
# number is FLOP/s typed where TFLOP/s go
MAX_TFLOPS = 100_000.0


class PeakTflops(_Strict):
    """Dense (no sparsity) peak TFLOP/s per GPU by dtype; null where the GPU lacks it."""

    fp32: float | None = Field(None, gt=0, le=MAX_TFLOPS, description="Non-tensor-core FP32, TFLOP/s")
    tf32: float | None = Field(None, gt=0, le=MAX_TFLOPS, description="TF32 tensor core, TFLOP/s")
    bf16: float | None = Field(None, gt=0, le=MAX_TFLOPS, description="BF16 tensor core, TFLOP/s")
    fp16: float | None = Field(None, gt=0, le=MAX_TFLOPS, description="FP16 tensor core, TFLOP/s")
    fp8: float | None = Field(None, gt=0, le=MAX_TFLOPS, description="FP8 tensor core, TFLOP/s (Hopper+)")
    fp4: float | None = Field(None, gt=0, le=MAX_TFLOPS, description="FP4 tensor core, TFLOP/s (Blackwell+)")


class GpuSpec(_Strict):
    """One accelerator: compute peaks, memory, links (profiles/gpus/*.yaml)."""

    name: str = Field(description="Canonical name, e.g. H100")
    aliases: list[str] = Field(default_factory=list, description="Other spellings (H100-80GB, ...)")
    architecture: Literal["volta", "ampere", "ada", "hopper", "blackwell"] = Field(description="volta | ampere | ada | hopper | blackwell")
    compute_capability: float = Field(gt=0, description="CUDA compute capability, e.g. 9.0")
    peak_tflops: PeakTflops = Field(description="Dense peaks by dtype, TFLOP/s")
    hbm_gib: float = Field(
        gt=0, description="HBM capacity as the driver reports it (nvidia-smi memory.total, MiB / 1024), GiB (2**30 bytes). "
        "NVIDIA's capacity labels count binary units: an '80 GB' H100 holds 81,559 MiB = 85.5e9 bytes")
    hbm_tb_per_s: float = Field(gt=0, description="HBM bandwidth, TB/s")
    nvlink_gb_per_s: float | None = Field(None, gt=0, description="NVLink per GPU per direction, GB/s; null on PCIe-only parts")
    pcie_gb_per_s: float | None = Field(None, gt=0, description="PCIe per direction, GB/s")
    tdp_watts: float | None = Field(None, gt=0, description="Board power, W")
    num_sms: int | None = Field(None, gt=0, description="Streaming multiprocessors; communication kernels that run beside compute take some of them")
    mamf_tflops: PeakTflops | None = Field(
        None, description="Maximum achievable matmul TFLOP/s measured on this part by a brute-force shape search (MAMF); "
        "null = the architecture's default fraction of the peak (profiles/cost/defaults.yaml gemm.max_efficiency)")
    sources: dict[str, str] = Field(default_factory=dict, description="Where each number comes from")
    idle_watts: float | None = Field(
        None, gt=0,
        description="Board power while the GPU waits (exposed communication, pipeline bubble, restart), W; null = unknown (energy then counts waiting at tdp_watts)",
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_hbm_gb(cls, data: Any) -> Any:
        """Files and results written before hbm_gib stated hbm_gb in 1e9 bytes: keep their bytes exactly."""
        if isinstance(data, dict) and "hbm_gb" in data:
            data = dict(data)
            legacy = data.pop("hbm_gb")
            if "hbm_gib" in data:
                raise ValueError(f"hbm_gb={legacy!r} and hbm_gib={data['hbm_gib']!r}: give one capacity (hbm_gib, GiB as nvidia-smi reports)")
            if isinstance(legacy, (int, float)) and not isinstance(legacy, bool):
                legacy = legacy * GB / GiB
            data["hbm_gib"] = legacy
        return data

    @model_validator(mode="after")
    def _mamf_below_peak(self) -> "GpuSpec":
        """A measured matmul rate above the dense peak is a unit or dtype slip (GEMM efficiency > 1)."""
        if self.mamf_tflops is not None:
            for dtype, measured in self.mamf_tflops.model_dump().items():
                peak = getattr(self.peak_tflops, dtype, None)
                if measured is not None and peak is not None and measured > peak:
                    raise ValueError(f"mamf_tflops.{dtype}={measured} exceeds peak_tflops.{dtype}={peak}: "
                                     "a measured matmul rate cannot pass the dense peak")
        return self

    @property
    def hbm_bytes(self) -> float:
        """Capacity in bytes (hbm_gib x 2**30)."""
        return self.hbm_gib * GiB

    @property
    def hbm_bytes_per_second(self) -> float:
        return self.hbm_tb_per_s * TB

    def peak_flops_per_second(self, dtype: str) -> float:
        """Dense tensor peak for a dtype; raises InputError when the GPU lacks it."""
        tflops = getattr(self.peak_tflops, dtype, None)
        if tflops is None:
            have = [k for k, v in self.peak_tflops.model_dump().items() if v]
            raise InputError("precision", dtype, f"{self.name} has no {dtype} tensor cores (has {', '.join(have)})")
        return tflops * TFLOP

    def supports(self, dtype: str) -> bool:
        return getattr(self.peak_tflops, dtype, None) is not None

    @property
    def half_dtype(self) -> str:
        """The 16-bit tensor-core type attention and other half-precision kernels run in: bf16,
        or fp16 on a part without bf16 (Volta)."""
        return "bf16" if self.supports("bf16") else "fp16"


class LinkKind(str, Enum):
    """Interconnect inside a node."""

    nvlink = "nvlink"
    """NVLink/NVSwitch all-to-all domain."""
    pcie = "pcie"
    """PCIe only (workstations); traffic goes through the host bridge."""


class IntraNode(_Strict):
    """The NVLink (or PCIe) domain: every GPU of a node reaches every other at this rate."""

    kind: LinkKind = Field(description="nvlink | pcie")
    bandwidth_gb_per_s: float = Field(gt=0, description="Per GPU per direction peak, GB/s")
    latency_us: float = Field(ge=0, description="Per step latency of point-to-point traffic (EP dispatch, pipeline sends) inside the node, "
                              "microseconds; NCCL collectives take NCCL's own tuning-model latencies (profiles/cost nccl, scaled by a calibration)")
    sharp: bool = Field(False, description="NVLink SHARP (NVLS) in-switch reduction available")


class NetworkTier(_Strict):
    """One level of the scale-out fabric above the node, innermost first."""

    name: str = Field(description="leaf, spine, core, ...")
    num_nodes: int = Field(gt=0, description="Nodes reachable without leaving this tier")
    latency_us: float = Field(ge=0, description="Per step latency of traffic that crosses this tier, microseconds (an outer tier adds "
                              "its latency over the leaf's to NCCL's network latency)")
    oversubscription: float = Field(1.0, ge=1.0, description="Uplink oversubscription; 1.0 = non-blocking")


class ClusterSpec(_Strict):
    """A cluster: GPU type, node and fabric (profiles/clusters/*.yaml or a user file)."""

    name: str = Field(description="Preset or user name")
    description: str = Field("", description="Free text")
    gpu: GpuSpec = Field(description="GPU profile (a name or alias in files, resolved at load)")
    gpus_per_node: int = Field(gt=0, description="GPUs per node = NVLink domain (72 for NVL72)")
    num_nodes: int = Field(gt=0, description="Nodes in the cluster")
    intra_node: IntraNode = Field(description="Links inside a node")
    nic_gb_per_s_per_gpu: float = Field(ge=0, description="Scale-out NIC bandwidth per GPU per direction, GB/s (bytes: a 400 Gb/s NIC is 50); "
                                        "at most autopar.limits.MAX_NIC_GB_PER_S_PER_GPU")
    tiers: list[NetworkTier] = Field(default_factory=list, description="Fabric tiers above the node, innermost first")
    sharp: bool = Field(False, description="InfiniBand SHARP in-network reduction available")
    price_usd_per_gpu_hour: float | None = Field(None, ge=0, description="Price per GPU-hour, USD")
    host_memory_gb_per_gpu: float | None = Field(
        None, gt=0, description="Each GPU's share of its node's CPU (host) memory, GB: the room activation offloading has; null = unknown (not checked)")
    mtbf_hours_per_gpu: float = Field(50_000.0, gt=0, description="Mean time between failures of one GPU (with its share of node), hours")
    memory_headroom_gb: float = Field(
        0.0, ge=0, allow_inf_nan=False,
        description="HBM per GPU kept free of the plan, GB (1e9 bytes): an operator's reserve for other processes, a MIG slice, "
        "the allocator's fragmentation, the memory model's own error. Every feasibility check compares a plan's peak with "
        "usable_hbm_bytes = HBM less this; --memory-headroom overrides it. 0 = the whole HBM")
    calibration: str | None = Field(None, description="Path of a fitted calibration profile (YAML)")
    sources: dict[str, str] = Field(default_factory=dict, description="Where each number comes from")
    _physical_gpus_per_node: int | None = PrivateAttr(None)  # set by with_gpus when it takes part of a node
    _file_num_nodes: int | None = PrivateAttr(None)  # the file's num_nodes, kept by with_gpus for fabric_num_gpus
    # -- fleet-level fields for `autopar plan` (goodput, checkpoints, energy) --
    mtbf_hours_per_node: float | None = Field(
        None, gt=0, description="Mean time between failures of one node's non-GPU parts (host, NICs, PSUs), hours; null = included in mtbf_hours_per_gpu")
    mtbf_hours_per_switch: float | None = Field(None, gt=0, description="Mean time between failures of one fabric switch, hours; null = not counted")
    switches_per_node: float = Field(0.0, ge=0, description="Fabric switches per node (leaf + spine + core share), for the switch failure rate")
    storage_write_gb_per_s_per_node: float | None = Field(
        None, gt=0, description="Sustained checkpoint write bandwidth of the shared storage per compute node, GB/s; null = unknown")
    storage_write_gb_per_s: float | None = Field(
        None, gt=0, description="Aggregate sustained write bandwidth of the shared storage, GB/s (caps the per-node figure); null = no cap")
    # 300 s: the default recovery time (checkpoint reload, process restart, re-warmup) of mlsysim's
    # ReliabilityModel, the companion library of seed 000's book (harvard-edge cs249r)
    restart_seconds: float = Field(
        300.0, ge=0,
        description="Time from a failure to training again: detect, reschedule, reload the checkpoint, warm up, seconds")
    node_overhead_watts: float | None = Field(
        None, ge=0, description="Power of one node beyond its GPUs (CPUs, NICs, NVSwitch, fans), W; null = not counted")
    # 1.58: average annual PUE of the Uptime Institute Global Data Center Survey 2023
    pue: float = Field(1.58, ge=1.0, description="Data-centre power usage effectiveness: facility power / IT power")

    @model_validator(mode="after")
    def _check(self) -> "ClusterSpec":
        if self.num_nodes > 1 and self.nic_gb_per_s_per_gpu <= 0:
            raise ValueError(f"num_nodes={self.num_nodes} needs nic_gb_per_s_per_gpu > 0")
        if self.nic_gb_per_s_per_gpu > MAX_NIC_GB_PER_S_PER_GPU:
            nic = self.nic_gb_per_s_per_gpu
            raise ValueError(f"nic_gb_per_s_per_gpu={nic:g}: exceeds {MAX_NIC_GB_PER_S_PER_GPU:g} GB/s, an 800 Gb/s ConnectX-8 per GPU "
                             f"(the fastest NIC shipping); the field is GB/s (bytes): a {nic:g} Gb/s NIC is {nic / 8:g} GB/s (divide by 8)")
        for inner, outer in zip(self.tiers, self.tiers[1:]):
            if outer.num_nodes <= inner.num_nodes:
                raise ValueError(f"tiers.{outer.name}.num_nodes={outer.num_nodes}: tiers go innermost first, so it must exceed "
                                 f"tier {inner.name}'s {inner.num_nodes}")
            if outer.latency_us < inner.latency_us:
                raise ValueError(f"tiers.{outer.name}.latency_us={outer.latency_us}: an outer tier crosses more switches, so its "
                                 f"latency cannot be below tier {inner.name}'s {inner.latency_us} us")
        link = self.gpu.nvlink_gb_per_s if self.intra_node.kind == LinkKind.nvlink else self.gpu.pcie_gb_per_s
        if link is not None and self.intra_node.bandwidth_gb_per_s > link * (1 + 1e-9):
            raise ValueError(f"intra_node.bandwidth_gb_per_s={self.intra_node.bandwidth_gb_per_s}: exceeds gpu {self.gpu.name}'s "
                             f"{self.intra_node.kind.value} rate of {link} GB/s per direction (GB/s, not Gb/s)")
        if self.memory_headroom_bytes >= self.gpu.hbm_bytes:
            raise ValueError(f"memory_headroom_gb={self.memory_headroom_gb:g}: must be below the {self.gpu.name}'s HBM of "
                             f"{gb_gib(self.gpu.hbm_bytes)} (it is the part of HBM kept free, in GB)")
        if self.intra_node.kind == LinkKind.nvlink and self.gpu.nvlink_gb_per_s is None and self.gpus_per_node > 1:
            raise ValueError(f"intra_node.kind=nvlink: gpu {self.gpu.name} has no node-wide NVLink (a PCIe card): "
                             f"give intra_node kind pcie at its PCIe rate ({self.gpu.pcie_gb_per_s} GB/s per direction)")
        return self

    @model_serializer(mode="wrap")
    def _without_zero_headroom(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No headroom is left out of a dump, so that results, sweep folders' and tune studies'
        fingerprints of a cluster without one are those written before the field existed."""
        data = handler(self)
        if not self.memory_headroom_gb and isinstance(data, dict):
            data.pop("memory_headroom_gb", None)
        return data

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def memory_headroom_bytes(self) -> float:
        return self.memory_headroom_gb * GB

    @property
    def usable_hbm_bytes(self) -> float:
        """HBM per GPU a plan may fill: the GPU's capacity less memory_headroom_gb (every
        feasibility check compares with this; physics, e.g. a message size, uses gpu.hbm_bytes)."""
        return self.gpu.hbm_bytes - self.memory_headroom_bytes

    def hbm_limit_text(self) -> str:
        """The limit plans are held to, for people: the HBM, or with a headroom the usable part
        and how it comes about (usable_hbm_text)."""
        if not self.memory_headroom_gb:
            return f"{gb_gib(self.gpu.hbm_bytes)} HBM"
        return usable_hbm_text(self.usable_hbm_bytes, self.memory_headroom_bytes)

    def with_memory_headroom(self, headroom_bytes: float) -> "ClusterSpec":
        """The cluster with memory_headroom_gb replaced (--memory-headroom, checked by its parser:
        finite, >= 0, below the HBM); resized clusters keep their node part (model_copy)."""
        return self.model_copy(update={"memory_headroom_gb": headroom_bytes / GB})

    @property
    def host_memory_bytes_per_gpu(self) -> float | None:
        return None if self.host_memory_gb_per_gpu is None else self.host_memory_gb_per_gpu * GB

    @property
    def nic_bytes_per_second_per_gpu(self) -> float:
        return self.nic_gb_per_s_per_gpu * GB

    @property
    def fabric_num_gpus(self) -> int:
        """GPUs the file's fabric describes: as many as its top tier reaches when it has tiers (a
        num_nodes above that is beyond the described fabric: nothing says how those nodes are
        wired), else its num_nodes. The one rule of every command (check_fabric)."""
        nodes = self.tiers[-1].num_nodes if self.tiers else self._file_num_nodes or self.num_nodes  # tiers go innermost first (_check)
        # the file's, also once with_gpus resized it: a job on part of a node (gpus_per_node the
        # part, num_nodes 1) runs on a fabric of whole nodes
        return nodes * self.physical_gpus_per_node

    def check_fabric(self, num_gpus: int, beyond_fabric: bool, option: str = "gpus", value: object = None) -> None:
        """Refuse num_gpus beyond fabric_num_gpus unless beyond_fabric (--extrapolate-fabric: the
        top tier is assumed to repeat); the error names `option` (default: gpus) and `value`
        (default: num_gpus), and the file's num_nodes when that is what lies beyond its tiers."""
        if beyond_fabric or num_gpus <= self.fabric_num_gpus:
            return
        file_nodes = self._file_num_nodes or self.num_nodes
        if not self.tiers:
            where = f"num_nodes={file_nodes:,}, no tiers above the node"
        else:
            top = self.tiers[-1]
            where = f"top tier {top.name}: {top.num_nodes:,} nodes"
            if file_nodes > top.num_nodes:
                where += f"; its num_nodes={file_nodes:,} lies beyond the top tier"
        raise InputError(option, num_gpus if value is None else value,
                         f"cluster {self.name} describes a fabric of {self.fabric_num_gpus:,} GPUs ({where}); pass --extrapolate-fabric "
                         + ("to assume its top tier repeats" if self.tiers else "to assume more such nodes on its network"))

    @property
    def physical_gpus_per_node(self) -> int:
        """The node's GPUs before with_gpus took part of one (gpus_per_node is then the part)."""
        return self._physical_gpus_per_node or self.gpus_per_node

    def _part_of_node(self, gpus_per_node: int, num_nodes: int) -> "ClusterSpec":
        part = self.model_copy(update={"gpus_per_node": gpus_per_node, "num_nodes": num_nodes})
        part._physical_gpus_per_node = self.physical_gpus_per_node
        return part

    def whole_nodes(self) -> "ClusterSpec":
        """The cluster with its physical node again (the one to resize for another GPU count)."""
        if self._physical_gpus_per_node is None:
            return self
        whole = self.model_copy(update={"gpus_per_node": self._physical_gpus_per_node, "num_nodes": 1})
        whole._physical_gpus_per_node = None
        return whole

    def with_gpus(self, num_gpus: int, beyond_fabric: bool = True) -> "ClusterSpec":
        """The same cluster resized to num_gpus (whole nodes, or a part of one node). With
        beyond_fabric=False a count the fabric does not describe is refused (the CLI's default;
        --extrapolate-fabric allows it, assuming the top tier repeats)."""
        if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus <= 0:
            raise InputError("gpus", num_gpus, "must be a positive integer")
        if num_gpus > MAX_GPUS:
            raise InputError("gpus", num_gpus, f"must be at most {MAX_GPUS:,} (autopar.limits: 5x the largest GPU cluster built by 2025)")
        self.check_fabric(num_gpus, beyond_fabric)
        resized = self._resized(num_gpus)
        resized._file_num_nodes = self._file_num_nodes or self.num_nodes
        return resized

    def _resized(self, num_gpus: int) -> "ClusterSpec":
        if num_gpus <= self.gpus_per_node:
            return self._part_of_node(num_gpus, 1)
        if num_gpus % self.gpus_per_node:
            if self.gpus_per_node > 8:
                # rack-scale NVLink domains (NVL72) are used partially: the job's domain is the
                # largest divisor of its GPU count that fits in one rack (256 GPUs -> 4 x 64)
                domain = max(d for d in range(1, self.gpus_per_node + 1) if num_gpus % d == 0)
                return self._part_of_node(domain, num_gpus // domain)
            raise InputError("gpus", num_gpus, f"must be a multiple of gpus_per_node={self.gpus_per_node} (whole nodes) or at most one node")
        if self.nic_gb_per_s_per_gpu <= 0:
            raise InputError("gpus", num_gpus, f"cluster {self.name} has no scale-out network (nic_gb_per_s_per_gpu=0); at most {self.gpus_per_node} GPUs")
        return self.model_copy(update={"num_nodes": num_gpus // self.gpus_per_node})


def _gpu_key(name: str) -> str:
    """A GPU name compared case-, space-, hyphen- and underscore-blind ('H800 SXM' = 'H800-SXM')."""
    return re.sub(r"[\s_-]+", "", name.strip().lower())


def _all_gpus() -> dict[str, GpuSpec]:
    out: dict[str, GpuSpec] = {}
    for stem, path in preset_files("gpus").items():
        try:
            spec = GpuSpec.model_validate(read_mapping(path, "gpu"))
        except ValidationError as exc:
            raise InputError.from_validation(exc, f"gpu profile {path.name}") from None
        for key in [stem, spec.name, *spec.aliases]:
            out[_gpu_key(key)] = spec
    return out


def load_gpu(name: str) -> GpuSpec:
    """A GPU by preset name or alias (case, spaces, hyphens and underscores ignored)."""
    table = _all_gpus()
    spec = table.get(_gpu_key(name))
    if spec is None:
        raise ProfileNotFound("GPU", name, sorted({s.name for s in table.values()}))
    return spec


def cluster_from_mapping(data: dict[str, Any], what: str = "cluster") -> ClusterSpec:
    data = dict(data)
    gpu = data.get("gpu")
    if isinstance(gpu, str):
        data["gpu"] = load_gpu(gpu)
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise InputError.from_validation(exc, what) from None


def load_cluster(name_or_path: str) -> ClusterSpec:
    """A cluster preset (profiles/clusters/NAME.yaml) or a user YAML file."""
    presets = preset_files("clusters")
    if name_or_path in presets:
        return cluster_from_mapping(read_mapping(presets[name_or_path], "cluster"), f"cluster {name_or_path}")
    if looks_like_path(name_or_path) or Path(name_or_path).is_file():
        return cluster_from_mapping(read_mapping(Path(name_or_path), "cluster"))
    raise ProfileNotFound("cluster", name_or_path, list(presets))
