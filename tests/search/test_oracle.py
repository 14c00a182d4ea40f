"""CP-SAT against the exhaustive oracle on 20 spaces (dense, GQA, MoE, MLA, long context,
small and large clusters): same optimum within the integer quantum, and the cost model
re-evaluating CP-SAT's plan reproduces its objective."""

from __future__ import annotations

import numpy as np
import pytest

from autopar.cost import estimate
from autopar.cost.context import Batch
from autopar.space import SpaceOptions, enumerate_space
from autopar.specs import Precision, TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import load_cost_params
from solvers import cpsat, exhaustive
from solvers.base import Objective

Q = cpsat.STEP_QUANTUM_SECONDS
# model, cluster, GPUs, seq, global batch (sequences), precision, --fix
SPACES = [
    ("gpt2-xl", "dgx-h100", 8, 1024, 64, "bf16", {}),
    ("gpt2-xl", "pcie-workstation", 4, 1024, 16, "bf16", {}),
    ("llama2-7b", "dgx-a100", 16, 4096, 64, "bf16", {}),
    ("llama2-7b", "dgx-a100-40gb", 32, 4096, 128, "fp16", {}),
    ("llama3-8b", "dgx-h100", 8, 8192, 32, "bf16", {}),
    ("llama3-8b", "dgx-h100", 64, 8192, 256, "fp8", {}),
    ("llama3-8b", "dgx-h100", 16, 131072, 8, "bf16", {}),  # long context: cp
    ("llama3-8b", "dgx-b200", 32, 32768, 32, "fp8", {}),
    ("llama3-70b", "dgx-h100", 64, 8192, 64, "bf16", {}),
    ("llama3-70b", "dgx-h200", 128, 8192, 256, "bf16", {"tp": 8}),
    ("llama3-70b", "gb200-nvl72", 144, 8192, 288, "bf16", {"tp": 4}),
    ("llama2-70b", "dgx-a100", 256, 4096, 512, "bf16", {"tp": 8}),
    ("mixtral-8x7b", "dgx-h100", 32, 4096, 64, "bf16", {}),
    ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "fp8", {"tp": 2}),
    ("mpt-7b", "dgx-a100", 8, 2048, 64, "bf16", {}),
    ("mpt-30b", "dgx-a100", 64, 8192, 128, "bf16", {"pp": 1}),
    ("gpt3-175b", "dgx-h100", 256, 2048, 512, "bf16", {"tp": 8}),
    ("nemotron4-340b", "dgx-h100", 512, 4096, 256, "fp8", {"tp": 8, "cp": 1}),
    ("deepseek-v3", "hgx-h800", 256, 4096, 256, "bf16", {"tp": 1, "cp": 1, "pp": 16}),
    ("llama3-405b", "dgx-h100-superpod", 1024, 8192, 512, "bf16", {"tp": 8, "cp": 1}),
]


def _batch(model, cluster, gpus, seq, gbs, precision, fixed):
    m, c = load_model(model), load_cluster(cluster).with_gpus(gpus)
    t = TrainingSpec(seq_len=seq, global_batch_size=gbs, precision=Precision(precision))
    space = enumerate_space(m, c, t, SpaceOptions(fixed=fixed))
    return Batch(m, c, t, load_cost_params(), space)


@pytest.mark.parametrize("case", SPACES, ids=[f"{c[0]}-{c[1]}-{c[2]}gpu-s{c[3]}-{c[5]}" for c in SPACES])
def test_cpsat_matches_oracle(case):
    batch = _batch(*case)
    assert len(batch.tab) > 0
    oracle = exhaustive.solve(batch, Objective.throughput, 1)
    tables = cpsat.build_tables(batch)
    model, var = cpsat.build_model(tables)
    solver, status = cpsat.solve_model(model)
    assert solver.status_name(status) == "OPTIMAL"
    index = int(solver.value(var["pair"]))
    row = int(tables.pair_rows[index])
    cpsat_seconds = solver.objective_value * Q
    # same optimum: three terms rounded to the quantum (<= 1.5 Q each way) -> within 3 quanta
    assert abs(cpsat_seconds - oracle.objective[0]) <= 3 * Q
    # the cost model re-evaluating CP-SAT's plan reproduces its objective
    plan = batch.tab.plan(row)
    est = estimate(batch.model, batch.cluster, batch.training, plan)
    assert est.feasible
    assert abs(est.step_seconds - cpsat_seconds) <= 1.5 * Q
    assert est.step_seconds == pytest.approx(tables.step_seconds[row], rel=1e-12)


def test_top_k_is_ranked_and_distinct():
    batch = _batch("llama3-8b", "dgx-h100", 8, 8192, 32, "bf16", {})
    a = cpsat.solve(batch, Objective.throughput, 5)
    b = exhaustive.solve(batch, Objective.throughput, 5)
    assert len(set(a.rows.tolist())) == 5
    assert list(a.objective) == sorted(a.objective)
    assert a.objective == pytest.approx(b.objective, abs=3 * Q)


def test_cost_objective_ranks_like_throughput_at_fixed_gpus():
    batch = _batch("llama3-8b", "dgx-h100", 8, 8192, 32, "bf16", {})
    fast = exhaustive.solve(batch, Objective.throughput, 3)
    cheap = exhaustive.solve(batch, Objective.cost, 3)
    assert fast.rows.tolist() == cheap.rows.tolist()
    # $ per million tokens = step x GPUs x $/GPU-h / 3600 / tokens x 1e6
    price = batch.cluster.price_usd_per_gpu_hour
    assert cheap.objective[0] == pytest.approx(fast.objective[0] * 8 * price / 3600 / (32 * 8192) * 1e6)


def test_stage_layouts_are_a_search_dimension():
    # LLaMA-3 405B-like depth on 16 stages: 126 layers; the balanced default is 7 + 14 x 8 + 7,
    # and with stage_layouts the space also holds 6/8 and 8/6 end stages. Both solvers agree
    # on the optimum over the larger space, and it is never worse than without layouts.
    m, c = load_model("llama3-405b"), load_cluster("dgx-h100-superpod").with_gpus(1024)
    t = TrainingSpec(seq_len=8192, global_batch_size=256)
    fixed = {"tp": 8, "pp": 16, "cp": 1}
    plain = Batch(m, c, t, load_cost_params(), enumerate_space(m, c, t, SpaceOptions(fixed=fixed)))
    wide = Batch(m, c, t, load_cost_params(), enumerate_space(m, c, t, SpaceOptions(fixed=fixed, stage_layouts=True)))
    assert len(wide.tab) == 3 * len(plain.tab)
    assert set(zip(wide.tab.first.tolist(), wide.tab.last.tolist())) == {(-1, -1), (6, 8), (8, 6)}
    best_plain = exhaustive.solve(plain, Objective.throughput, 1).objective[0]
    oracle = exhaustive.solve(wide, Objective.throughput, 1)
    cp = cpsat.solve(wide, Objective.throughput, 1)
    assert oracle.objective[0] <= best_plain
    assert abs(cp.objective[0] - oracle.objective[0]) <= 3 * Q


def test_chunked_tables_equal_one_piece():
    # build_tables costs the space a chunk of plans at a time (bounded memory on 9M-plan
    # spaces): any chunk size gives the same step and memory of every plan, bit for bit
    batch = _batch("mixtral-8x7b", "dgx-h100", 32, 4096, 64, "bf16", {})
    whole = cpsat.build_tables(batch, chunk_rows=len(batch.tab))
    chunked = cpsat.build_tables(batch, chunk_rows=997)
    assert len(batch.tab) > 5 * 997
    assert chunked.step_seconds.tolist() == whole.step_seconds.tolist()
    assert chunked.memory_bytes.tolist() == whole.memory_bytes.tolist()
    assert chunked.pair_rows.tolist() == whole.pair_rows.tolist()


def test_candidate_pairs_keep_ties_at_the_kth_step():
    # steps 5, 3, 3, 9, 3, 4 quanta: the 2nd smallest is 3, so every pair at 3 stays (ties kept)
    # and 4, 5, 9 are dropped; the 4th smallest is 4, so 3, 3, 3, 4 stay
    steps = np.array([5, 3, 3, 9, 3, 4]) * Q
    tables = cpsat.Tables(pair_rows=np.arange(6), step_seconds=steps, memory_bytes=np.zeros(6))
    assert cpsat.candidate_pairs(tables, 2).tolist() == [1, 2, 4]
    assert cpsat.candidate_pairs(tables, 4).tolist() == [1, 2, 4, 5]
    assert cpsat.candidate_pairs(tables, None).tolist() == list(range(6))


def test_top_k_over_candidate_pairs_equals_the_full_model():
    # the reduced model's top 12 (one solve each, found pair forbidden) are the full model's
    batch = _batch("llama3-8b", "dgx-h100", 8, 8192, 32, "bf16", {})
    tables = cpsat.build_tables(batch)
    model, var = cpsat.build_model(tables)
    full = []
    for _ in range(12):
        solver, _status = cpsat.solve_model(model)
        index = int(solver.value(var["pair"]))
        full.append(round(solver.objective_value))
        model.add(var["pair"] != index)
    reduced = cpsat.solve(batch, Objective.throughput, 12, tables)
    assert len(reduced.rows) == 12
    assert np.rint(reduced.objective / Q).astype(int).tolist() == full


def test_exact_ties_rank_the_lower_memory_first():
    # GPT-2 XL on 8 H100 (the first space above): plans of exactly the same step (e.g. ZeRO-1 and
    # ZeRO-2, whose gradient shards cost no time here) come lower peak memory first, in both
    # solvers (7 of the top 50's 21 exact ties differ in memory); distinct steps keep their order
    batch = _batch(*SPACES[0])
    oracle = exhaustive.solve(batch, Objective.throughput, 50)
    step, memory = oracle.extra["all_objective"], cpsat.build_tables(batch).memory_bytes
    rows = oracle.rows
    assert rows.tolist() == oracle.extra["all_order"][:50].tolist()  # the order the search walks
    assert np.all(np.diff(step[rows]) >= 0)
    tied = np.flatnonzero(np.diff(step[rows]) == 0)
    assert len(tied) > 0  # the case is exercised
    assert np.all(memory[rows[tied + 1]] >= memory[rows[tied]])
    assert np.any(memory[rows[tied + 1]] > memory[rows[tied]])
    sat = cpsat.solve(batch, Objective.throughput, 20)
    assert sat.rows.tolist() == rows[:20].tolist()
