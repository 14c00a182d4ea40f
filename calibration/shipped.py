"""The fitted profiles shipped in calibration/fitted/, rebuilt from calibration/data/ with
`python -m calibration.shipped` (the same functions `autopar calibrate nccl|gemm` run).

Choices (each log's own curve fit is in results/calibration/nccl_fits.txt; how small logs
predict large ones in results/calibration/heldout.txt):
- Hopper NVLink: the two 8x H100 all_reduce logs ran NVLS (busbw > 450 GB/s); the ring
  bandwidth and the NVLS gain come from the 8x H200 table (same NVLink 4 and NVSwitch), the
  ring's mid sizes from Together's NCCL_ALGO=RING all_reduce / all_gather / reduce_scatter runs
  on one 8x H100 node (`NAME@ring`, 16 MiB-8 GiB). They measure about twice the seed's 58 MB
  point; another cluster's node (xxrjun cnode3, held out in calibration/heldout.py) agrees with
  them within 8%; that node's all_to_all sets the point-to-point saturation inside a node.
- H100 over InfiniBand: the node logs above (their parameters fitted first, calibration/
  nccl_physfit.py) + the default-settings runs of nccl-tests#309 on 8x H100 + 8x 400G IB
  nodes at 2, 4 and 8 nodes (NVLS-tree). The NCCL_ALGO=Ring 2-node log ran with
  NCCL_MIN_CTAS=24 (more channels than NCCL's default) and is left out: it measures a tuned
  network (97% of the NICs) that default jobs do not get (81-91% at 4-8 nodes).
- A100 over RoCE: the four tuned OCI 2-node logs (16 x 100 Gb/s RoCE per node, 174-190 GB/s);
  the 2021 OCI log of the same shape ran an untuned container at 71.6 GB/s and is left out.
  They ran NCCL 2.14 and 2.29, whose tuning models differ only for NVLS-tree, which A100 lacks:
  fitted as 2.29.
- NCCL release: the one the logs print (nccl-tests#309: 2.26.2; gj-aion's runs in the same
  thread print none and are taken as the same era), which picks the algorithms in the fit.
- GEMM: H100 only (calibration/data/gemm/h100sxm_samples.csv); the A100 profiles keep the
  default GEMM coefficients (two A100 measurements published, too few to fit).
"""

from __future__ import annotations

from pathlib import Path

from autopar.specs import load_cluster
from autopar.specs.costparams import CalibrationProfile
from calibration.gemm_data import read_samples
from calibration.gemm_fit import fit_gemm
from calibration.nccl_log import NcclLog, read_log
from calibration.nccl_points import read_points
from calibration.nccl_profile import split_forced
from calibration.profile import dump_profile, nccl_profile

ROOT = Path(__file__).resolve().parent
NCCL = ROOT / "data" / "nccl"
FITTED = ROOT / "fitted"
GEMM_CSV = ROOT / "data" / "gemm" / "h100sxm_samples.csv"

H100_NODE = ["h100x8_allreduce_aws-batch-p5_partial.txt", "h100x8_allreduce_nvls_nccl-tests-issue290.txt", "hopper_ring_vs_nvls_points.yaml",
             "h100x8_allreduce_ringforced_from16MiB_together.txt@ring", "h100x8_allgather_ringforced_from16MiB_together.txt@ring",
             "h100x8_reducescatter_ringforced_from16MiB_together.txt@ring", "h100x8_alltoall_default_from32MiB_xxrjun-cnode3-002.txt"]
A100_NODE = ["a100x8_allreduce_oci-japan.txt", "a100x8_allreduce_10GiB_oci-japan-v2.txt", "a100x8_sendrecv_li-plus-playground_partial.txt"]
H100_IB = ["h100x16_2node_allreduce_ib400_nccl-tests-issue309a.txt", "h100x16_2node_allreduce_ib400_nccl-tests-issue309d.txt",
           "h100x32_4node_allreduce_ib400_nccl-tests-issue309g.txt", "h100x32_4node_allreduce_ib400_nccl-tests-issue309b.txt",
           "h100x64_8node_allreduce_ib400_nccl-tests-issue309f.txt"]
# name -> (description, logs, with GEMM fit, cluster preset the logs ran on)
PROFILES = {
    "h100-nvlink": ("8x H100 SXM5 node: NVLink 4 / NVSwitch gen 3 with NVLS", H100_NODE, True, "dgx-h100"),
    "h100-ib": ("H100 SXM5 nodes, 8 GPUs with 8x 400 Gb/s InfiniBand NDR (ConnectX-7) each", H100_NODE + H100_IB, True, "dgx-h100"),
    "a100-nvlink": ("8x A100 SXM4 40GB node: NVLink 3 / NVSwitch gen 2 (no NVLS)", A100_NODE, False, "dgx-a100-40gb"),
    "a100-roce": ("A100 SXM4 40GB nodes (OCI BM.GPU4.8), 8 GPUs with 16x 100 Gb/s RoCE v2 each", A100_NODE + [
        "a100x16_2node_allreduce_10GiB_roce_oci-japan-v2.txt", "a100x16_2node_allreduce_roce_oci-oke_nccl2.14.txt",
        "a100x16_2node_allreduce_roce_oci-oke-slurm_nccl2.29_ranks-trimmed.txt",
        "a100x16_2node_allreduce_roce_oci-oke-slurmop_nccl2.29_ranks-trimmed_no-avg.txt"], False, "dgx-a100-40gb"),
}


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT.parent))


def load_inputs(names: list[str]) -> tuple[list[NcclLog], dict[str, tuple[str | None, str | None]]]:
    """The logs, and the algorithm / protocol each NAME@ALGO[/PROTO] entry forced (as `calibrate nccl` takes them)."""
    logs: list[NcclLog] = []
    forced: dict[str, tuple[str | None, str | None]] = {}
    for name in names:
        file, algorithm, protocol = split_forced(name)
        path = NCCL / file
        if path.suffix == ".yaml":
            logs.extend(read_points(_relative(path)))
            continue
        logs.append(read_log(_relative(path)))
        forced[logs[-1].path] = (algorithm, protocol)
    return logs, forced


NCCL_VERSIONS = {"a100-roce": "2.29"}  # when the logs print several releases


def build(name: str) -> CalibrationProfile:
    description, logs, with_gemm, cluster = PROFILES[name]
    command = "python -m calibration.shipped  # = autopar calibrate nccl " + " ".join(_relative(NCCL / n) for n in logs) + f" --out calibration/fitted/{name}.yaml"
    if with_gemm:
        command += f"; autopar calibrate gemm {_relative(GEMM_CSV)} --out calibration/fitted/{name}.yaml"
    version = NCCL_VERSIONS.get(name)
    command = command.replace("--out", f"--cluster {cluster}" + (f" --nccl-version {version}" if version else "") + " --out", 1)
    parsed, forced = load_inputs(logs)
    profile = nccl_profile(name, parsed, command=command, cluster=load_cluster(cluster), nccl_version=version, forced=forced)
    update = {"description": description,
              "sources": {"nccl": "calibration/data/nccl/SOURCES.md", "choices": "calibration/shipped.py (docstring)"}}
    if with_gemm:
        fit, _ = fit_gemm(read_samples([_relative(GEMM_CSV)]), "H100", [_relative(GEMM_CSV)])
        update["gemm"] = fit
        update["sources"]["gemm"] = "calibration/data/gemm/SOURCES.md"
    return profile.model_copy(update=update)


def main() -> None:
    FITTED.mkdir(exist_ok=True)
    for name in PROFILES:
        path = FITTED / f"{name}.yaml"
        path.write_text(dump_profile(build(name)))
        print(f"wrote {_relative(path)}")


if __name__ == "__main__":  # pragma: no cover
    main()
