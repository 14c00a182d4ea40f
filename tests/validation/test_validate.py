"""`autopar validate` on the development set of published runs (tests/data, copied from the product's validation set)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.validation import predict_row, validate_runs

DEV_RUNS = Path(__file__).resolve().parents[1] / "data" / "dev_runs.json"


@pytest.fixture(scope="module")
def report(validated):
    return validated("dev_runs")


def test_predicts_every_row(report):
    # 98 rows, each with a layout and a measurement: none may be skipped
    assert report["summary"]["num_rows"] == 98
    assert report["summary"]["num_skipped"] == 0


def test_accuracy_targets(report):
    # issue 2: overall MAPE <= 15% and no source group above 25%, one global set of defaults
    s = report["summary"]
    assert s["overall_mape"] <= 0.15
    assert all(g["mape"] <= 0.25 for g in s["by_group"].values()), s["by_group"]


def test_narayanan_flop_accounting_counts_recompute(report):
    # Narayanan 2021 Table 1, GPT 1.7B: 137 TFLOP/s per GPU with eq. 3 (96 B s l h^2 (...)),
    # i.e. 137e12 / (96 x 24 x 2304^2 x (1 + 2048/13824 + 51200/884736)) = 9,288 tokens/s per GPU
    row = next(r for r in report["rows"] if r["id"] == "narayanan2021_table1-001")
    assert row["measured_tokens_per_second_per_gpu"] == pytest.approx(9288, rel=0.001)


def test_other_columns_and_skips():
    base = {"id": "x", "source_group": "g", "model_name": "GPT 1B", "num_layers": 24, "hidden_size": 2048,
            "num_attention_heads": 16, "seq_len": 2048, "num_gpus": 8, "global_batch_size": 64,
            "gpu_normalized": "B200", "tp": 1, "pp": 1}
    assert predict_row({**base, "step_time_s": 1.0}).metric == "step_time_s"
    assert predict_row({**base, "gpu_normalized": "Ampere (unspecified; A100-class)", "samples_per_sec": 100}).metric == "samples_per_sec"
    skipped = predict_row(base)
    assert skipped.skipped and "no measured" in skipped.skipped
    bad = predict_row({**base, "tp": 3, "step_time_s": 1.0})
    assert bad.skipped and "tp" in bad.skipped


def test_cli_json_shape(tmp_path):
    rows = json.loads(DEV_RUNS.read_text())[:3]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(rows))
    r = CliRunner().invoke(main, ["validate", str(path), "--json"])
    out = json.loads(r.output)
    assert r.exit_code == 0 and set(out) == {"rows", "summary"}
    assert set(out["summary"]) >= {"overall_mape", "by_group", "num_rows", "num_skipped"}


def test_cli_bad_file(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text("{not json")
    r = CliRunner().invoke(main, ["validate", str(path)])
    assert r.exit_code == 1 and r.output.startswith("Error: runs=") and len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "extra",
    [
        {"gpu_normalized": "GB200", "gpus_per_node": 4, "num_gpus": 256, "tp": 4, "pp": 1, "cp": 32,
         "seq_len": 1048576, "global_batch_size": 2},  # long-context CP row, NVL72 trays
        {"gpu_normalized": "B300", "precision_normalized": "nvfp4", "num_gpus": 64, "tp": 2, "pp": 2},
        {"gpu_normalized": "GB300", "precision_normalized": "mxfp8", "num_gpus": 144, "tp": 4, "pp": 2, "global_batch_size": 576},
        {"gpu_normalized": "A100-40GB", "fsdp": "8", "num_gpus": 64, "tp": 1, "pp": 1},  # HSDP shard group of 8
        {"moe_num_experts": 8, "moe_top_k": 2, "moe_ffn_hidden_size": 14336, "ep": 8, "etp": 1, "num_gpus": 64,
         "tp": 2, "pp": 1, "model_name": "Mixtral 8x7B", "precision_normalized": "fp8_current_scaling"},
    ],
)
def test_other_published_row_kinds_are_predicted(extra):
    # issue 2: validate must accept B300/GB200/GB300, nvfp4/mxfp8/fp8_current_scaling, CP rows up
    # to 1M tokens, FSDP shard-group sizes and MoE rows, not only the dev set's kinds
    row = {"id": "x", "source_group": "g", "model_name": "Llama 3 70B", "num_layers": 80, "hidden_size": 8192,
           "num_attention_heads": 64, "num_kv_heads": 8, "ffn_hidden_size": 28672, "vocab_size": 128256,
           "seq_len": 8192, "global_batch_size": 512, "gpu_normalized": "H100-80GB", "tokens_per_sec_per_gpu": 1000.0}
    result = predict_row({**row, **extra})
    assert result.skipped is None, result.skipped
    assert result.predicted_tokens_per_second_per_gpu > 0


def test_megatron_flop_accounting_by_release():
    # Megatron-LM counts causal attention (seq/2 in the score and context terms) from commit
    # 8873b55d6a (2025-03-06, Megatron-Core 0.12). Hand calculation, Qwen3-235B-A22B at 128K
    # (L 94, h 4096, 64 heads x kv_channels 128, 4 groups, 8 of 128 experts x 1536, vocab 151936):
    # active parameters per token 18.22e9 (attention 94 x 4096 x (8192 + 2 x 512 + 8192) = 5.92e9,
    # experts 94 x 8 x 3 x 4096 x 1536 = 14.19e9 ... as autopar counts them); attention core per
    # token and layer 4 x 64 x 128 x 131072 = 4.29e9 non-causal. Causal halves it:
    # 3 x (2 x P + 94 x 2.15e9) against 3 x (2 x P + 94 x 4.29e9).
    from autopar.cost.flops import active_params_per_token
    from autopar.validation.predict import megatron_counts_causal, source_flops_per_token
    from autopar.validation.rows import row_model
    row = {"id": "q", "model_name": "Qwen3-235B-A22B", "num_layers": 94, "hidden_size": 4096, "num_attention_heads": 64,
           "num_kv_heads": 4, "ffn_hidden_size": 12288, "vocab_size": 151936, "seq_len": 131072, "moe_num_experts": 128,
           "moe_top_k": 8, "moe_ffn_hidden_size": 1536, "dims_source": "Qwen3-235B-A22B.yaml (64 heads, 4 query groups, kv_channels 128)",
           "tflops_kind": "Per GPU TF (Megatron --log-throughput model TFLOPs)", "software_version": "Megatron-LM main(1e057005)",
           "source": "Megatron-MoE-ModelZoo best_practice/qwen3/readme.md"}
    model = row_model(row)
    assert model.head_size == 128  # stated kv_channels, not 4096 / 64
    p = active_params_per_token(model)
    core = 4 * 64 * 128 * 131072
    causal, how = source_flops_per_token(row, model)
    assert how == "megatron_model_flops_causal"
    assert causal == pytest.approx(3 * (2 * p + 94 * core / 2), rel=1e-9)
    old = {**row, "software_version": "Megatron-Core r0.8.0", "source": "Megatron-LM README"}
    assert not megatron_counts_causal(old)
    full, how = source_flops_per_token(old, model)
    assert how == "megatron_model_flops" and full == pytest.approx(3 * (2 * p + 94 * core), rel=1e-9)
    # dated versions on either side of 2025-03
    assert megatron_counts_causal({"software_version": "Megatron-LM (MCore dev, 2026-05)"})
    assert not megatron_counts_causal({"software_version": "Megatron-LM 2024-12"})
    assert not megatron_counts_causal({"software_version": "MCore ~v0.10-0.11 (paper)"})


def test_parallel_folding_mfu_counts_causal_attention():
    # MoE Parallel Folding (arXiv 2504.14960) quotes Megatron's model TFLOP/s without a dated
    # release; its sec. 4.3 MFU "only drops from 47.6% to 42.9%" from 16K to 128K, which only
    # causal counting makes physical (autopar.validation.predict.MEGATRON_CAUSAL_SOURCES).
    # Hand calculation, Mixtral-8x22B at 128K (56 layers, 48 heads x 128): attention core per
    # token and layer 4 x 48 x 128 x 131072 = 3.22e9 non-causal, half of it causal.
    from autopar.cost.flops import active_params_per_token
    from autopar.validation.predict import measured_tokens_per_gpu, source_flops_per_token
    from autopar.validation.rows import row_model
    row = {"id": "f", "model_name": "Mixtral-8x22B", "num_layers": 56, "hidden_size": 6144, "num_attention_heads": 48,
           "num_kv_heads": 8, "ffn_hidden_size": 16384, "vocab_size": 32000, "seq_len": 131072, "moe_num_experts": 8,
           "moe_top_k": 2, "moe_ffn_hidden_size": 16384, "num_gpus": 1024, "mfu": 0.429, "peak_tflops_used_by_source": 989.5,
           "tflops_kind": "model TFLOPS (paper Table 2)", "software": "Megatron-Core (all baselines implemented in MCore)",
           "software_version": "MCore ~v0.10-0.11 (paper; PyTorch 2.5.0, CUDA 12.6)",
           "source": "Liu et al. 2025, 'MoE Parallel Folding: Heterogeneous Parallelism Mappings for Efficient Large-Scale MoE Model Training with Megatron Core' (arXiv 2504.14960)"}
    model = row_model(row)
    p = active_params_per_token(model)
    core = 4 * 48 * 128 * 131072
    flops, how = source_flops_per_token(row, model)
    assert how == "megatron_model_flops_causal"
    assert flops == pytest.approx(3 * (2 * p + 56 * core / 2), rel=1e-9)
    # 0.429 x 989.5e12 / flops: about 842 tokens/s per GPU (non-causal counting would give 548)
    tokens, _ = measured_tokens_per_gpu(row, model)
    assert tokens == pytest.approx(0.429 * 989.5e12 / flops, rel=1e-9)
    assert tokens == pytest.approx(842, rel=0.01)


def test_unpublished_recompute_resolves_to_just_enough_layers():
    # NeMo 25.04/25.07 on 64 GB200 (189,471 MiB = 198.7e9 B each), seq 8192, FSDP, fp8, no recompute
    # published. NeMo's recipe for these runs (scripts/performance/recommended_model_configs/
    # model_configs_gb200.csv, NVIDIA/NeMo 06c0e70) sets recompute_layers 0 for Llama-3 70B: the
    # model resolves to no recompute at 195 GB, which fits only because the GPU holds 198.7e9 bytes,
    # not the 186e9 its "186 GB" label would give. Llama-3.1 405B (tp 2) cannot hold all 126 layers'
    # activations: NeMo's recipe offloads 95 layers to the CPU (Megatron-Bridge e645566
    # scripts/performance/configs/llama31/workload_base_configs.py, LLAMA31_405B_GB200_FP8_CS_BASE_CONFIG:
    # cpu_offloading_num_layers=95), and the resolver, trying eighths of the layers, finds 63 the fewest
    # that fit; it is faster than the full recompute of part of them that fits too
    rows = {r["id"]: r for r in json.loads((DEV_RUNS.parent / "fsdp_runs.json").read_text())}
    small = predict_row(rows["new-nemopages-2504-gb200-llama3-70b-fsdp"])
    assert small.resolved == {"recompute": "none"}
    assert small.feasible and 186 < small.predicted_memory_gb <= small.gpu_memory_gb == pytest.approx(198.67, abs=0.01)
    large = predict_row(rows["new-nemopages-2507-gb200-llama31-405b-fsdp"])
    assert large.resolved == {"recompute": "none", "offload_num_layers": "63"}
    assert large.feasible and large.predicted_memory_gb <= large.gpu_memory_gb


def test_unpublished_recompute_layers_are_whole_per_model_chunk():
    # Megatron's --recompute-num-layers counts layers per model chunk (block method: the first N of
    # each of the vpp chunks), so an interleaved stage recomputes a multiple of vpp: GPT-3 175B on
    # 512 H100 (NeMo 24.07, tp4 pp8 vpp6: 12 layers per stage, 2 per chunk) offers 6 per stage, not 1
    from autopar.validation.predict import _candidates
    from autopar.validation.rows import row_inputs
    row = next(r for r in json.loads(DEV_RUNS.read_text()) if r["id"] == "nemo_perf_summary_24.07-004")
    counts = [fields["recompute_num_layers"] for fields, _ in _candidates(row_inputs(row)) if "recompute_num_layers" in fields]
    assert counts == [6]


def test_layernorm_checkpoint_drops_only_norms_that_are_modules():
    # Megatron-Core's TE layer spec fuses a standard attention's input norm into linear_qkv and a
    # dense MLP's into linear_fc1 (gpt_layer_specs.py: input_layernorm and pre_mlp_layernorm are
    # IdentityOp); only a MoE layer's pre-MLP norm and MLA's input norm are modules that
    # --recompute-modules layernorm checkpoints. Hand count, Mixtral-8x7B (32 MoE layers, hidden
    # 4096) at tp 1, pp 1, one micro-batch of 4,096 tokens, bf16: one norm output per layer,
    # 4096 x 4096 x 2 B x 32 = 1.0737e9 bytes less stored, with the caching allocator's 5% slack
    # on activations (profiles/cost/defaults.yaml memory.fragmentation) 1.1274e9. Llama-3 8B
    # (dense): nothing dropped, nothing rerun
    from autopar.cost import estimate
    from autopar.specs import load_cluster, load_model
    from autopar.specs.plan import parse_plan
    from autopar.specs.training import Precision, TrainingSpec
    t = TrainingSpec(seq_len=4096, global_batch_size=8, precision=Precision.bf16)
    c = load_cluster("dgx-h100").with_gpus(8)
    base = "tp=1,pp=1,dp=8,cp=1,ep={ep},vpp=1,mbs=1,zero=1,recompute={rc}"
    for name, ep, dropped in (("mixtral-8x7b", 8, 4096 * 4096 * 2 * 32 * 1.05), ("llama3-8b", 1, 0)):
        m = load_model(name)
        none = estimate(m, c, t, parse_plan(base.format(ep=ep, rc="none")))
        norms = estimate(m, c, t, parse_plan(base.format(ep=ep, rc="selective") + ",recompute_modules=layernorm"))
        assert none.memory_bytes_per_gpu - norms.memory_bytes_per_gpu == pytest.approx(dropped, rel=1e-6, abs=1.0)
        assert (norms.step_seconds > none.step_seconds) == (dropped > 0)


def test_cheap_checkpoints_offered_follow_the_model():
    # moe_act (the experts' activation) and layernorm (the pre-MLP norm, a module of its own) with
    # routed experts; mla_up_proj and layernorm (MLA's input norm) with multi-latent attention:
    # DeepSeek-V3 (Megatron-Bridge 25.11 on GB200) is offered all seven non-empty sets of the three.
    # A dense model without MLA has none: NeMo 24.07's Nemotron-340B (tp8 pp8 vpp12, FP8, no
    # recompute published), 87.4e9 bytes with every activation stored against the 85.5e9 an H100
    # holds, fits only by recomputing layers
    from autopar.validation.predict import _candidates
    from autopar.validation.rows import normalize_row, row_inputs
    holdout = {r["id"]: r for r in json.loads((DEV_RUNS.parent / "holdout_runs.json").read_text())["rows"]}
    dense = next(r for r in json.loads(DEV_RUNS.read_text()) if r["id"] == "nemo_perf_summary_24.07-010")
    def offered(row):
        return sorted(chosen["recompute_modules"] for _, chosen in _candidates(row_inputs(normalize_row(row)[0])) if "recompute_modules" in chosen)
    assert offered(dense) == []
    stored = predict_row({**dense, "recompute": "none"})
    assert not stored.feasible and stored.predicted_memory_gb == pytest.approx(87.4, abs=0.2)
    assert predict_row(dense).resolved == {"recompute": "full"}
    assert offered(holdout["holdout-mb2511-gb200-deepseek-v3-bf16"]) == sorted(
        ["layernorm", "moe_act", "mla_up_proj", "layernorm+moe_act", "layernorm+mla_up_proj", "moe_act+mla_up_proj",
         "layernorm+moe_act+mla_up_proj"])


def test_rows_above_memory_are_reported(report, tmp_path):
    # LLM Foundry's MPT rows (MPT-3B at mbs 3 x 8192 tokens, MPT-760M at mbs 48 x 1024, no recompute)
    # ran on "80 GB" A100s; the model puts them at 81-84e9 bytes, under the 81,920 MiB = 85.9e9 bytes
    # the driver reports: none is over memory
    rows = {r["id"]: r for r in report["rows"]}
    mpt = [r for i, r in rows.items() if i.startswith("llmfoundry_mpt")]
    assert mpt and all(r["feasible"] for r in mpt) and max(r["predicted_memory_gb"] for r in mpt) > 80
    assert report["summary"]["over_memory"] == []
    # torchtitan's Llama-4 Scout on GB200 (local batch 10 x 8192 tokens, no recompute, doc's layout)
    # needs 951 GB per GPU: listed with the GPU's HBM and still predicted (never dropped)
    moe = [r for r in json.loads((DEV_RUNS.parent / "moe_runs.json").read_text()) if r["id"] == "new-torchtitan-llama4scout-gb200-bf16"]
    (tmp_path / "scout.json").write_text(json.dumps(moe))
    scout = validate_runs(tmp_path / "scout.json")
    over = scout["summary"]["over_memory"]
    assert [o["id"] for o in over] == ["new-torchtitan-llama4scout-gb200-bf16"]
    assert over[0]["predicted_memory_gb"] > over[0]["gpu_memory_gb"] == pytest.approx(198.67, abs=0.01)
    assert scout["rows"][0]["error"] is not None
    # 951 GB against 199 GB (4.8x; torchtitan's launcher runs expandable segments, so no 5%
    # fragmentation slack: (998 - 3) / 1.05 + 3 = 951 with the 3 GB reserve) is far outside the memory
    # model's -36%..+35% error on the measured peaks: the run used a layout the row does not state,
    # so the row is reported as not modelled (memory named) and counted only in the all-rows figure;
    # rows within memory are not
    assert "needs 951 GB per GPU, 4.8x the GPU's 199 GB" in scout["rows"][0]["not_modelled"]
    assert scout["summary"]["not_modelled"][0]["id"] == "new-torchtitan-llama4scout-gb200-bf16"
    assert all(r["not_modelled"] is None for r in mpt)
