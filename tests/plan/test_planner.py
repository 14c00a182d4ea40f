"""solvers/planner.py and solvers/plan_choice.py: the batch grid, the search hook (a shared
candidate table gives the same ranking as enumerating), the Pareto front and the choice."""

from __future__ import annotations

import pytest

from autopar.errors import InputError
from autopar.space import SpaceOptions, candidate_space
from autopar.specs import Precision, TrainingSpec, load_cluster, load_model
from autopar.specs.costparams import params_for_cluster
from solvers import SearchRequest, run_search
from solvers.plan_choice import Constraints, choose, mark_pareto
from solvers.plan_points import PlanPoint
from solvers.planner import batch_grid


def test_batch_grid():
    # cap 67.8M tokens at seq 8192 = 8,277 sequences -> 8192, 6144, 4096 (2^k or 3 x 2^k)
    assert batch_grid(67.8e6, 8192, 3) == [8192 * 8192, 6144 * 8192, 4096 * 8192]
    assert batch_grid(31.5e6, 4096, 2) == [6144 * 4096, 4096 * 4096]
    with pytest.raises(InputError):
        batch_grid(1000, 4096, 1)


def test_shared_candidates_give_the_same_search():
    # the table enumerated once at the lcm of the batches holds every candidate of each batch:
    # keeping its legal rows must reproduce the plain search exactly (rows, order, numbers)
    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100").with_gpus(64)
    params = params_for_cluster(cluster)
    template = TrainingSpec(seq_len=4096, global_batch_size=384, precision=Precision.bf16)
    candidates = candidate_space(model, cluster, template, SpaceOptions())
    for gbs in (128, 192):
        training = TrainingSpec(seq_len=4096, global_batch_size=gbs, precision=Precision.bf16)
        plain = run_search(SearchRequest(model, cluster, training, top_k=5, solver="exhaustive", params=params))
        shared = run_search(SearchRequest(model, cluster, training, top_k=5, solver="exhaustive", params=params, candidates=candidates))
        assert shared.ranking.num_evaluated == plain.ranking.num_evaluated
        assert [p.plan.text() for p in shared.results.plans] == [p.plan.text() for p in plain.results.plans]
        assert [p.estimate.step_seconds for p in shared.results.plans] == [p.estimate.step_seconds for p in plain.results.plans]


def point(gpus, days, cost, energy=1.0):
    return PlanPoint(gpus=gpus, global_batch_tokens=2**24, plan="tp=1", step_seconds=1.0, mfu=0.5, goodput=0.9,
                     checkpoint_interval_seconds=60.0, wall_days=days, gpu_hours=cost / 3, cost_usd=cost, energy_mwh=energy)


def test_pareto_front():
    pts = [point(8, 10, 100), point(16, 6, 110), point(32, 6, 120), point(64, 3, 200), point(64, 3, 200)]
    mark_pareto(pts)
    # (6, 120) is dominated by (6, 110); the two equal (3, 200) points do not dominate each other
    assert [p.pareto for p in pts] == [True, True, False, True, True]


def test_choice_and_tightest_constraint():
    pts = [point(8, 10, 100, energy=5), point(16, 6, 110, energy=4), point(64, 3, 200, energy=6)]
    assert choose(pts, Constraints()) == (2, "time")
    assert choose(pts, Constraints(deadline_days=7)) == (1, "cost")  # cheapest that finishes in time
    assert choose(pts, Constraints(objective="energy")) == (1, "energy")
    assert choose(pts, Constraints(budget_usd=105)) == (0, "time")
    # deadline 5 d needs 200 (+33% over a 150 budget); budget 150 allows 6 d (+20% over the
    # deadline): the deadline is the nearer relaxation
    with pytest.raises(InputError) as exc:
        choose(pts, Constraints(deadline_days=5, budget_usd=150))
    assert exc.value.field == "deadline" and "+20%" in str(exc.value) and "16 GPUs" in str(exc.value)
    with pytest.raises(InputError) as exc:
        choose(pts, Constraints(deadline_days=5, budget_usd=190))
    assert exc.value.field == "budget" and "+5%" in str(exc.value) and "64 GPUs" in str(exc.value)


def test_placement_pins_keep_the_best_layout():
    # the planner pins rank order and CP algorithm (PLACEMENT_PINS); on a dense 70B point with
    # pp, dp and cp all > 1 in the space, the best step must stay within 2% of the full space's
    from solvers.planner import planning_options

    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100").with_gpus(64)
    training = TrainingSpec(seq_len=16384, global_batch_size=128, precision=Precision.bf16)
    params = params_for_cluster(cluster)
    full = run_search(SearchRequest(model, cluster, training, top_k=1, solver="exhaustive", params=params))
    pinned = run_search(SearchRequest(model, cluster, training, top_k=1, solver="exhaustive", params=params,
                                      options=planning_options(SpaceOptions(), full_space=False)))
    assert pinned.ranking.num_evaluated < full.ranking.num_evaluated
    assert pinned.results.plans[0].estimate.step_seconds == pytest.approx(full.results.plans[0].estimate.step_seconds, rel=0.02)
