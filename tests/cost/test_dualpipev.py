"""schedule=dualpipev: DeepSeek's DualPipe cut in half (deepseek-ai/DualPipe dualpipev.py,
torchtitan ScheduleDualPipeV). Its README table: bubble (PP/2 - 1)(F&B + B - 3W), PP + 1
stages' activations per device, for PP = 2 pp stages on pp devices; rank r runs stages r and
2 pp - 1 - r."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from autopar.cost import estimate
from autopar.cost.memory import in_flight_microbatches
from autopar.cost.pipeline import bubble_fraction
from autopar.cost.rules import plan_violations
from autopar.emit.common import EmitJob
from autopar.emit.torchtitan import check_torchtitan
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.costparams import params_for_cluster
from autopar.specs.layout import v_layout
from autopar.specs.plan import Plan, Schedule
from autopar.validation.rows import row_plan_fields


def test_v_layout_places_both_ends_on_rank_zero():
    # LLaMA-3 405B, 126 layers on a V of 2 x 16 stages: embedding and loss count one layer each
    # and both sit on rank 0 (128 units / 16 = 8 per rank): rank 0 runs 3 + 3, the others 4 + 4
    lay = v_layout(126, 16)
    assert lay.rank_decoders() == [6] + [8] * 15
    assert lay.rank_stages(0) == [0, 31] and lay.rank_stages(15) == [15, 16]
    assert lay.decoders[0] == 3 and lay.decoders[-1] == 3 and lay.last_rank == 0
    # DeepSeek-V3 on pp 4: 61 + E + L + MTP (2 units) = 65 -> 16, 17, 16, 16 (middle-out);
    # rank 0 holds 16 - 4 = 12 decoder layers: its two chunks of 8 units less the embedding (7)
    # and less the loss and the MTP's 2 units (5); the MTP layer runs on rank 0's second chunk
    lay = v_layout(61, 4, 1)
    assert lay.decoders == (7, 9, 8, 8, 8, 8, 8, 5)
    assert lay.rank_decoders() == [12, 17, 16, 16] and lay.rank_mtp() == [1, 0, 0, 0]


def test_in_flight_and_bubble():
    # PP + 1 = 2p + 1 chunks of half a rank's layers = p + 1/2 rank-units, on every rank
    assert in_flight_microbatches(np.arange(8), 8, 32, 2, Schedule.dualpipev).tolist() == [8.5] * 8
    # (PP/2 - 1) = p - 1 chunk bubbles of 2/3 chunk = (p - 1)/3 rank-units: p=8, m=32 ->
    # (7/3) / (32 + 7/3) = 6.80% (1F1B: 7/39 = 17.9%, seed 000 'Сценарий: цена пузыря конвейера')
    assert bubble_fraction(8, 32, 2, Schedule.dualpipev) == pytest.approx((7 / 3) / (32 + 7 / 3), rel=1e-12)
    assert bubble_fraction(8, 32, 2, Schedule.dualpipev) == pytest.approx(0.0680, abs=1e-4)


@pytest.fixture(scope="module")
def llama8b():
    m, c = load_model("llama3-8b"), load_cluster("dgx-h100-superpod").with_gpus(32)
    t = TrainingSpec(seq_len=8192, global_batch_size=64, precision="bf16", stack="torchtitan")
    return m, c, t, params_for_cluster(c)


def test_estimate_composes_the_v(llama8b):
    m, c, t, prm = llama8b
    v = estimate(m, c, t, parse_plan("tp=1,pp=4,vpp=2,zero=1,schedule=dualpipev"), prm)
    one = estimate(m, c, t, parse_plan("tp=1,pp=4,zero=1"), prm)
    assert [s.layers for s in v.stages] == [8, 8, 8, 8]
    # bubble = (sum t - max t) / 3 + the hop chain of 2p - 1 = 7 boundaries, both ways
    # (pp_comm is m micro-batches x 2 hops); m = 64 / (dp 8 x mbs 1) = 8
    sec = [s.seconds for s in v.stages]
    hop = v.time_breakdown["pp_comm"] / (2 * 8)
    assert v.time_breakdown["pipeline_bubble"] == pytest.approx((sum(sec) - max(sec)) / 3 + 2 * 7 * hop, rel=1e-9)
    # rank 0 runs the embedding and the output layer (untied: two vocab x hidden matrices)
    assert sec[0] > sec[1] == pytest.approx(sec[2]) and sec[3] == pytest.approx(sec[1])
    assert v.stages[0].memory_bytes == max(s.memory_bytes for s in v.stages)
    # activations: 4.5 units on rank 0 against 1F1B's 4, the rank's layers being the same
    assert v.memory_breakdown["activations"] == pytest.approx(4.5 / 4 * one.memory_breakdown["activations"], rel=1e-9)
    assert v.step_seconds < one.step_seconds


def test_plan_rules(llama8b):
    m, c, t, _ = llama8b
    with pytest.raises(ValidationError, match="dualpipev runs two model chunks per rank"):
        Plan.model_validate({"pp": 4, "vpp": 4, "schedule": "dualpipev"})
    with pytest.raises(ValidationError, match="dualpipev runs two model chunks per rank"):
        Plan.model_validate({"pp": 4, "schedule": "dualpipev"})
    # 64 sequences / (dp 8 x mbs 4) = 2 micro-batches < 2 pp = 8 (dualpipev.py: num_chunks >= num_ranks * 2)
    broken = plan_violations(m, c, t, parse_plan("tp=1,pp=4,vpp=2,mbs=4,zero=1,schedule=dualpipev"))
    assert broken == [("plan.schedule", "dualpipev", "dualpipev needs micro-batches(2) >= 2 * pp(4) "
                                                     "(DualPipe's dualpipev.py: num_chunks >= num_ranks * 2)")]


def test_torchtitan_writes_dualpipev(llama8b):
    m, c, t, prm = llama8b
    plan = parse_plan("tp=1,pp=4,vpp=2,zero=1,schedule=dualpipev")
    rules, cfg = check_torchtitan(EmitJob(m, c, t, plan, estimate(m, c, t, plan, prm)))
    assert not rules.found
    p = cfg.parallelism
    # 32 layers over 8 virtual stages of 4, placed in a V by torchtitan's "v" stage style
    assert (p["pipeline_parallel_schedule"], p["pipeline_parallel_layers_per_stage"]) == ("DualPipeV", 4)
    assert (p["pipeline_parallel_first_stage_less_layers"], p["pipeline_parallel_last_stage_less_layers"]) == (0, 0)


def test_row_reads_dualpipev(llama8b):
    m, _, t, _ = llama8b
    row = {"tp": 1, "pp": 4, "num_gpus": 32, "global_batch_size": 64, "other_metrics": {"pp_schedule": "DualPipeV"}}
    fields, _ = row_plan_fields(row, m, t)
    assert (fields["schedule"], fields["vpp"]) == (Schedule.dualpipev, 2)


def test_per_stage_solver_refuses_the_v():
    # solvers.stages solves per-rank layer counts for round-robin placement; the search leaves
    # V-shaped rows out of its per-stage step (solvers.stage_search.candidate_rows)
    from autopar.cost.stages import StageModelError
    from solvers.stages import core_of

    with pytest.raises(StageModelError, match="dualpipev places two stages per rank in a V"):
        core_of(parse_plan("tp=1,pp=4,vpp=2,zero=1,schedule=dualpipev"))
