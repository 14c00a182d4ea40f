"""Memory headroom (cluster memory_headroom_gb, --memory-headroom): every feasibility decision
holds plans to HBM less the headroom -- the search's ranking and the per-stage CP-SAT step."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.costparams import params_for_cluster
from solvers.stage_oracle import oracle
from solvers.stages import core_of, solve_core

SEARCH = ["search", "--model", "llama3-70b", "--cluster", "dgx-h100-superpod", "--gpus", "1024", "--seq-len", "8192",
          "--global-batch-tokens", "16M", "--json"]
H100_HBM = load_cluster("dgx-h100-superpod").gpu.hbm_bytes  # 85.52 GB (79.65 GiB, the profile's hbm_gib)


def _search(*extra: str) -> dict:
    res = CliRunner().invoke(main, [*SEARCH, *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_a_ten_percent_headroom_keeps_every_ranked_plan_under_ninety_percent_of_hbm():
    # without a headroom the best plan fills 84.2 of the H100's 85.5 GB (98.5%): the case that
    # motivated the option. With 10% held back (8.55 GB) the limit is 76.97 GB: the pp=2 plans
    # (84.2-85.4 GB) and the pp=4 mbs=2 ones (83.0-83.3 GB) drop out, and the best is the
    # zero-bubble pp=4 plan ranked 6th without a headroom (70.4 GB), 1.2% slower
    base, held = _search(), _search("--memory-headroom", "10%")
    best0, best10 = base["plans"][0]["estimate"], held["plans"][0]["estimate"]
    assert best0["memory_bytes_per_gpu"] / 1e9 == pytest.approx(84.24, abs=0.01)
    assert best0["step_seconds"] == pytest.approx(12.9705, abs=1e-3)
    assert best0["memory_capacity_bytes"] == H100_HBM and best0["memory_headroom_bytes"] == 0
    assert held["plans"], "plans fit under 90% of HBM"
    for plan in held["plans"]:
        e = plan["estimate"]
        assert e["memory_bytes_per_gpu"] <= 0.9 * H100_HBM and e["feasible"]
        assert e["memory_capacity_bytes"] == pytest.approx(0.9 * H100_HBM)
        assert e["memory_headroom_bytes"] == pytest.approx(0.1 * H100_HBM)
    assert best10["plan"] != best0["plan"]
    assert best10["step_seconds"] == pytest.approx(13.1207, abs=1e-3) and best10["step_seconds"] >= best0["step_seconds"]
    assert best10["memory_bytes_per_gpu"] / 1e9 == pytest.approx(70.39, abs=0.01)
    assert "schedule=zero-bubble" in best10["plan"] and "pp=4" in best10["plan"]
    ranked0 = [p["estimate"]["plan"] for p in base["plans"]]
    assert best10["plan"] in ranked0  # the same plan, costed the same: only the limit moved


def test_search_text_names_the_usable_limit():
    res = CliRunner().invoke(main, [*SEARCH[:-1], "--memory-headroom", "10%", "--top", "2"])
    assert res.exit_code == 0, res.output
    assert "memory: 70.4 GB of 77.0 GB usable (85.5 GB HBM less 8.6 GB headroom) per GPU (91%)" in res.output
    assert "mem/77.0 GB" in res.output


def test_the_per_stage_step_holds_each_stage_to_the_usable_hbm():
    # llama3-8b cut to 24 layers on 4 A100-40GB (42.95 GB), tp=2 pp=2 zero-bubble, recompute free
    # per stage: at no headroom CP-SAT recomputes 8/2 layers and fills 42.67 GB; 4 GB held back
    # (limit 38.95 GB) forces 10/9 recomputed layers, 38.72 GB, 15% slower -- what the oracle
    # (every split x every recompute count, costed whole) finds under the same limit
    m = load_model("llama3-8b").model_copy(update={"num_layers": 24})
    c = load_cluster("dgx-a100-40gb").with_gpus(4)
    t = TrainingSpec(seq_len=8192, global_batch_size=16)
    p = params_for_cluster(c)
    sc = core_of(parse_plan("tp=2,pp=2,mbs=1,zero=1,schedule=zero-bubble"), False)
    free = solve_core(m, c, t, p, sc)
    assert free.estimate.memory_bytes_per_gpu / 1e9 == pytest.approx(42.67, abs=0.01)
    assert free.estimate.memory_bytes_per_gpu > c.gpu.hbm_bytes - 4e9  # so 4 GB of headroom binds
    held = c.with_memory_headroom(4e9)
    assert held.usable_hbm_bytes == pytest.approx(c.gpu.hbm_bytes - 4e9)
    sol = solve_core(m, held, t, p, sc)
    assert sol.status == "OPTIMAL" and sol.estimate.feasible
    assert sol.estimate.memory_bytes_per_gpu <= held.usable_hbm_bytes
    assert sol.estimate.memory_bytes_per_gpu / 1e9 == pytest.approx(38.72, abs=0.01)
    assert [s.recompute_layers for s in sol.estimate.stages] == [10, 9]
    assert sol.estimate.step_seconds == pytest.approx(8.6189, abs=1e-3)
    assert sol.estimate.step_seconds > free.estimate.step_seconds
    assert sol.estimate.step_seconds == pytest.approx(oracle(m, held, t, p, sc).step_seconds, rel=1e-6)
