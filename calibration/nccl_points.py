"""Single-size busbw points transcribed from published tables (no log was published):
a YAML file `kind: nccl-points` with gpu, nodes and a list of {collective, ranks, size_bytes,
busbw_gb_per_s, algorithm}. Each point becomes a one-row log whose time is
size x factor / busbw, so it pools with real logs in the fits."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autopar.cost.comm import Collective, busbw_factor
from autopar.specs._files import read_data
from autopar.errors import InputError
from calibration.nccl_log import NcclLog, NcclRow


class _Point(BaseModel):
    model_config = ConfigDict(extra="forbid")
    collective: Collective = Field(description="nccl-tests collective")
    ranks: int = Field(ge=2, description="Ranks of the run")
    size_bytes: int = Field(gt=0, description="nccl-tests size, bytes")
    busbw_gb_per_s: float = Field(gt=0, description="Printed busbw, GB/s")
    algorithm: str = Field("ring", description="ring | nvls (NCCL_NVLS_ENABLE=0 forces ring)")


class _PointsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(pattern="^nccl-points$")
    source: str
    gpu: str | None = None
    nodes: int = Field(1, ge=1)
    points: list[_Point] = Field(min_length=1)


def is_points_file(path: str | Path) -> bool:
    return Path(path).suffix in (".yaml", ".yml")


def read_points(path: str | Path) -> list[NcclLog]:
    path = Path(path)
    data = read_data(path, "logs")  # strictly: regular UTF-8 files, no duplicate keys, no NaN/inf
    try:
        spec = _PointsFile.model_validate(data)
    except ValidationError as exc:
        raise InputError.from_validation(exc, path.name) from None
    logs = []
    for i, p in enumerate(spec.points):
        busbw = p.busbw_gb_per_s
        algbw = busbw / busbw_factor(p.collective, p.ranks)
        time_us = p.size_bytes / algbw / 1e3
        row = NcclRow(i + 1, p.size_bytes, None, None, None, (time_us,), (algbw,), (busbw,), (None,))
        logs.append(NcclLog(f"{path}#points[{i}]", p.collective, p.ranks, spec.nodes, [row], gpu_name=spec.gpu,
                            notes=[f"single point from a published table: {spec.source}"], algorithm=p.algorithm))
    return logs
