"""Megatron-LM emitter: the script passes `bash -n`, parses back to the same plan and training
spec, and Megatron's own rules refuse bad plans by name."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from autopar.emit import RuleViolation
from autopar.emit.common import Rules, canonical_plan, training_key
from autopar.emit.megatron import emit_megatron, megatron_argv, stage_layout_string
from autopar.emit.megatron_parse import layout_stage_layers, parse_megatron_script
from autopar.emit.megatron_rules import validate_megatron
from emit_cases import GOLDEN_CASES, make_job

ROUND_TRIPS = {
    **{k: v for k, v in GOLDEN_CASES.items() if k != "stage_recompute"},  # refused: one recompute count for every stage
    "layout_vpp_uneven": ("llama3-405b", "dgx-h100-superpod", 1024, 8192, 1024, "tp=8,pp=16,vpp=2,zero=1,recompute=selective"),
    "hybrid_cp": ("llama3-8b", "dgx-h100", 64, 65536, 16, "tp=2,cp=8,cp_algo=hybrid,zero=1,recompute=full"),
    "ulysses_cp": ("llama3-8b", "dgx-h100", 16, 32768, 16, "tp=1,cp=4,cp_algo=ulysses,zero=0"),
    "zero2_fsdp": ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=2,recompute=selective"),
    "pp_dp_order": ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=2,pp=2,ep=2,etp=1,order=tp-cp-ep-pp-dp"),
    "hsdp_shard": ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=1,zero=1,zero_shard_size=8"),
    "block_recompute": ("llama3-70b", "dgx-h100-superpod", 1024, 8192, 2048, "tp=8,pp=4,vpp=5,recompute=full,recompute_num_layers=10"),
    "no_tp_overlap": ("llama3-70b", "dgx-h100", 64, 8192, 64, "tp=8,pp=2,tp_overlap=off,zero=0"),
    "deepep_overlap": ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=1,pp=2,ep=8,vpp=2,zero=1,dispatcher=deepep,ep_overlap=on"),
    "recompute_modules": ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=2,pp=2,ep=4,etp=1,zero=1,recompute=selective,recompute_modules=layernorm+moe"),
    # Megatron-LM docs/user-guide/features/fine_grained_activation_offloading.md: --offload-modules with fine-grained recompute
    "offload_modules": ("mixtral-8x7b", "dgx-h100", 64, 4096, 256,
                        "tp=2,pp=2,ep=4,etp=1,zero=1,recompute=selective,recompute_modules=layernorm+moe_act,offload_modules=expert_fc1+moe_act"),
    # layer-level CPU offloading: Megatron-LM arguments.py turns cpu_offloading on with --cpu-offloading-num-layers > 0
    "offload_num_layers": ("llama3-8b", "dgx-h100", 8, 4096, 32, "tp=2,zero=1,offload_num_layers=8"),
}
TRAINING_VARIANTS = {
    "fp8_hopper": ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=1", "fp8"),
    "fp8_blackwell": ("llama3-8b", "dgx-b200", 16, 4096, 64, "tp=2,zero=1", "fp8"),
    "fp8_param_gather": ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=1", "fp8"),
    "fp16": ("gpt3-175b", "dgx-h100", 64, 2048, 64, "tp=8,pp=8,zero=1", "fp16"),
}


def script_of(job) -> str:
    return emit_megatron(job)[0].text


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_script_passes_bash_n(case, tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text(script_of(make_job(*ROUND_TRIPS[case])))
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_round_trip_plan_and_training(case):
    job = make_job(*ROUND_TRIPS[case])
    plan, training = parse_megatron_script(script_of(job))
    assert canonical_plan(plan, job.model, job.num_gpus) == canonical_plan(job.plan, job.model, job.num_gpus)
    assert training_key(training) == training_key(job.training)


@pytest.mark.parametrize("case", sorted(TRAINING_VARIANTS))
def test_round_trip_precision(case):
    model, cluster, gpus, seq, gbs, plan, precision = TRAINING_VARIANTS[case]
    job = make_job(model, cluster, gpus, seq, gbs, plan, precision, grad_reduce_bytes_per_param=4.0, grad_bytes_per_param=4.0,
                   fp8_param_gather=case == "fp8_param_gather")
    parsed_plan, training = parse_megatron_script(script_of(job))
    assert training_key(training) == training_key(job.training)
    assert canonical_plan(parsed_plan, job.model, gpus) == canonical_plan(job.plan, job.model, gpus)


def test_vpp_uses_virtual_stages_flag_never_the_missing_one():
    text = script_of(make_job(*GOLDEN_CASES["interleaved_vpp"]))
    assert "--num-virtual-stages-per-pipeline-rank 5" in text
    assert "--virtual-pipeline-model-parallel-size" not in text


def test_uneven_stages_emit_first_and_last():
    text = script_of(make_job(*GOLDEN_CASES["gqa_sp"]))  # 126 layers on 16 stages: 7 + 14 x 8 + 7
    assert "--decoder-first-pipeline-num-layers 7" in text
    assert "--decoder-last-pipeline-num-layers 7" in text


def test_layout_string_round_trips():
    stages = [7] + [8] * 14 + [7]
    layout = stage_layout_string(stages, 2)
    assert layout.startswith("Et*4|") and layout.endswith("t*3L")
    assert layout_stage_layers(layout, 16) == (stages, 2)


@pytest.mark.parametrize("cluster, expect", [("dgx-h100", True), ("dgx-b200", False)])
def test_max_connections_only_before_blackwell(cluster, expect):
    text = script_of(make_job("llama3-8b", cluster, 16, 4096, 64, "tp=2"))
    assert ("export CUDA_DEVICE_MAX_CONNECTIONS=1" in text) is expect


def test_fsdp_unsets_max_connections():
    text = script_of(make_job(*GOLDEN_CASES["fsdp_zero3"]))
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in text and "--ckpt-format fsdp_dtensor" in text


def test_moe_and_mla_flags():
    text = script_of(make_job(*GOLDEN_CASES["mla_uneven"]))
    for flag in ("--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512", "--qk-head-dim 128",
                 "--qk-pos-emb-head-dim 64", "--v-head-dim 128", "--num-experts 256", "--moe-router-topk 8",
                 "--moe-layer-freq '([0]*3+[1]*58)'", "--moe-shared-expert-intermediate-size 2048",
                 "--expert-model-parallel-size 64"):
        assert flag in text
    assert "--group-query-attention" not in text


def test_router_balance_scope_flag():
    """Qwen3-MoE balances its router over the global batch (Qwen3 Technical Report section 2):
    Megatron-LM's --moe-router-load-balancing-type global_aux_loss; Mixtral keeps the default
    per-micro-batch aux_loss. The Megatron-Bridge override carries the same value."""
    from autopar.emit.bridge import bridge_overrides
    job = make_job("qwen3-30b-a3b", "dgx-h100", 64, 4096, 256, "tp=2,pp=2,ep=8,etp=1,zero=1")
    assert "--moe-router-load-balancing-type global_aux_loss" in script_of(job)
    from autopar.emit.megatron_parse import argv_from_script, parse_megatron_argv
    assert parse_megatron_argv(argv_from_script(script_of(job))).moe_router_load_balancing_type == ["global_aux_loss"]
    assert bridge_overrides(job)["model.moe_router_load_balancing_type"] == "global_aux_loss"
    mixtral = make_job(*GOLDEN_CASES["moe_ep_etp"])
    assert "--moe-router-load-balancing-type" not in script_of(mixtral)
    assert "model.moe_router_load_balancing_type" not in bridge_overrides(mixtral)


BAD_PLANS = [
    # (model, cluster, gpus, seq, gbs, plan, rule named in the refusal)
    ("llama3-8b", "dgx-h100", 24, 4096, 48, "tp=3", "num_attention_heads % TP == 0"),
    ("llama3-8b", "dgx-h100", 16, 4096, 100, "tp=2", "GBS % (MBS * DP) == 0"),
    ("llama3-70b", "dgx-h100", 64, 8192, 12, "tp=8,pp=4,vpp=5", "interleaved: num_microbatches % group_size"),
    ("llama3-8b", "dgx-h100", 16, 4100, 16, "tp=1,cp=4", "seq_length % (2*CP) == 0"),
    ("gpt3-175b", "dgx-h100", 64, 4096, 64, "tp=8,pp=8", "max_position_embeddings >= seq_length"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,pp=2,schedule=gpipe", "schedule in {1f1b, interleaved}"),
    ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=2,pp=2,ep=4,etp=1,order=tp-cp-ep-pp-dp", "expert_dp == dp"),
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,pp=2,recompute=full,recompute_num_layers=3,vpp=2", "recompute-num-layers per model chunk"),
    # Megatron's EP A2A overlap: no full recompute, and with PP > 1 only under a virtual pipeline
    ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=1,pp=2,ep=8,recompute=full,vpp=2,ep_overlap=on", "excludes full recompute"),
    ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=1,pp=2,ep=8,ep_overlap=on", "needs virtual pipeline stages"),
    ("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=1,pp=2,ep=8,vpp=2,dispatcher=allgather,ep_overlap=on", "alltoall or flex dispatcher"),
    # TransformerConfig.__post_init__ (d98e8a6): 'Invalid choices for offload_modules' -- autopar's
    # layer_input (the checkpointed layer input) is not a Megatron module
    ("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=1,recompute=full,offload_modules=layer_input", "offload modules in {"),
]


@pytest.mark.parametrize("model, cluster, gpus, seq, gbs, plan, rule", BAD_PLANS, ids=[b[-1] for b in BAD_PLANS])
def test_refuses_bad_plans_naming_the_rule(model, cluster, gpus, seq, gbs, plan, rule):
    with pytest.raises(RuleViolation) as info:
        emit_megatron(make_job(model, cluster, gpus, seq, gbs, plan))
    assert rule in str(info.value)
    assert info.value.framework == "megatron" and info.value.field == "plan"


def _check(argv, world=16, env=None, cc=9.0):
    return [v.rule for v in validate_megatron(argv, world, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if env is None else env, cc, Rules("megatron")).found]


BASE = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "4096",
        "--max-position-embeddings", "4096", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16"]


@pytest.mark.parametrize("extra, env, rule", [
    (["--tensor-model-parallel-size", "2"], {}, "CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP > 1 before Blackwell"),
    (["--use-megatron-fsdp"], None, "Megatron-FSDP only supports ckpt format fsdp_dtensor"),
    (["--overlap-param-gather"], None, "--overlap-param-gather needs the distributed optimizer"),
    (["--num-experts", "8", "--expert-tensor-parallel-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"], None,
     "MoE with linear bias needs ETP == 1"),
    (["--num-experts", "8", "--expert-model-parallel-size", "3", "--disable-bias-linear"], None, "num_experts % EP == 0"),
    (["--recompute-granularity", "full"], None, "full recompute needs --recompute-method and --recompute-num-layers"),
    (["--fp16"], None, "bf16 and fp16 are mutually exclusive"),
    (["--tensor-model-parallel-size", "2", "--tp-comm-overlap"], None, "--tp-comm-overlap requires --sequence-parallel"),
    (["--context-parallel-size", "2", "--cp-comm-type", "a2a+p2p"], None, "a2a+p2p needs hierarchical CP sizes"),
    (["--num-layers-per-virtual-pipeline-stage", "2", "--num-virtual-stages-per-pipeline-rank", "2",
      "--pipeline-model-parallel-size", "2"], None, "at most one VPP option"),
    (["--group-query-attention", "--num-query-groups", "8", "--multi-latent-attention"], None, "MLA and GQA are mutually exclusive"),
    (["--num-experts", "8", "--moe-router-topk", "1", "--disable-bias-linear"], None, "topk 1 with softmax scoring requires --moe-router-pre-softmax"),
    # arguments.py validate_args: "MoE latent projections are applicable only for MoE models"
    (["--moe-latent-size", "256"], None, "--moe-latent-size > 0 and only with --num-experts"),
    # TransformerConfig.__post_init__: layer-level CPU offloading refuses PP > 1 and recompute
    (["--cpu-offloading-num-layers", "4", "--pipeline-model-parallel-size", "2"], None, "CPU offloading needs pipeline parallel 1"),
    (["--cpu-offloading-num-layers", "4", "--recompute-granularity", "selective"], None,
     "CPU offloading does not work with activation recomputation"),
    (["--cpu-offloading-num-layers", "32"], None, "--cpu-offloading-num-layers below the model's layers"),
    # Megatron-LM fine_grained_activation_offloading.md: the module list goes with the switch; TransformerConfig: known modules only
    (["--offload-modules", "core_attn"], None, "--offload-modules goes with --fine-grained-activation-offloading"),
    (["--fine-grained-activation-offloading", "--offload-modules", "experts"], None, "offload modules in {"),
    (["--fine-grained-activation-offloading", "--offload-modules", "layer_input"], None, "offload modules in {"),
    # TransformerConfig.__post_init__ (d98e8a6): bias_activation_fusion with gelu, swiglu or quick_geglu
    # only; --bias-gelu-fusion is on by default and Megatron-LM's default has linear biases
    (["--squared-relu"], None, "bias-activation fusion only with gelu, swiglu or quick_geglu"),
])
def test_validator_rules_on_arguments(extra, env, rule):
    assert any(rule in found for found in _check(BASE + extra, env=env))


def test_fine_grained_offloading_exports_what_transformer_engine_needs():
    # Megatron-LM arguments.py validate_args: with TE >= 2.10, fine-grained activation offloading
    # asserts NVTE_CPU_OFFLOAD_V1=1; Bridge runs the same Megatron Core
    from autopar.emit.bridge import render_launcher

    job = make_job(*ROUND_TRIPS["offload_modules"])
    assert "\nexport NVTE_CPU_OFFLOAD_V1=1  # fine-grained activation offloading" in script_of(job)
    assert "\nexport NVTE_CPU_OFFLOAD_V1=1  # fine-grained activation offloading" in render_launcher(job)
    assert "NVTE_CPU_OFFLOAD_V1" not in script_of(make_job(*ROUND_TRIPS["offload_num_layers"]))


def test_valid_arguments_pass_and_blackwell_needs_no_env():
    assert _check(BASE) == []
    assert _check(BASE + ["--tensor-model-parallel-size", "2"], env={}, cc=10.0) == []


def test_emitted_argv_is_valid_for_every_golden_case():
    for case in GOLDEN_CASES:
        job = make_job(*GOLDEN_CASES[case])
        assert megatron_argv(job)
        if case == "stage_recompute":
            with pytest.raises(RuleViolation, match="one recompute-num-layers for every pipeline stage"):
                emit_megatron(job)
            continue
        emit_megatron(job)  # would raise RuleViolation


def _hf_model(tmp_path, name, **cfg):
    import json
    base = {"hidden_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 16, "num_key_value_heads": 8,
            "intermediate_size": 8192, "vocab_size": 32000, "rope_theta": 10000.0}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({**base, **cfg}))
    return str(path)


def test_latent_moe_flag(tmp_path):
    import json
    # an autopar model file with a LatentMoE width (Megatron-Core moe_layer.py fc1_latent_proj);
    # Megatron-LM's flag as its Nemotron 3 Super example passes it (--moe-latent-size 1024)
    path = tmp_path / "latent.json"
    path.write_text(json.dumps({"name": "latent-moe", "num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16,
                                "num_kv_heads": 8, "ffn_hidden_size": 8192, "vocab_size": 32000, "num_experts": 8,
                                "moe_top_k": 2, "moe_ffn_hidden_size": 1024, "moe_latent_size": 512}))
    text = script_of(make_job(str(path), "dgx-h100", 16, 4096, 64, "tp=2,ep=8,zero=1"))
    assert "--moe-latent-size 512" in text


def test_sliding_window_flags(tmp_path):
    # gpt-oss's layer pattern: sliding, full, sliding, ... = one full layer after each sliding one (N = 2),
    # here on a Qwen3 config (transformers' layer_types), since gpt-oss itself is refused for its
    # attention sinks (tests/emit/test_emit_gpt_oss.py)
    oss = _hf_model(tmp_path, "oss", model_type="qwen3", sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 6)
    text = script_of(make_job(oss, "dgx-h100", 16, 4096, 64, "tp=2,zero=1"))
    assert "--window-size 128,0" in text and "--window-attn-skip-freq 2" in text
    # Mistral-7B v0.1: every layer slides, no skip pattern
    mistral = _hf_model(tmp_path, "mistral", model_type="mistral", sliding_window=4096)
    text = script_of(make_job(mistral, "dgx-h100", 16, 8192, 64, "tp=2,zero=1"))
    assert "--window-size 4096,0" in text and "--window-attn-skip-freq" not in text
    # Qwen2 with use_sliding_window: the first max_window_layers (4) global, the rest slide
    qwen = _hf_model(tmp_path, "qwen", model_type="qwen2", sliding_window=4096, use_sliding_window=True, max_window_layers=4)
    text = script_of(make_job(qwen, "dgx-h100", 16, 8192, 64, "tp=2,zero=1"))
    assert "--window-attn-skip-freq '([0]*4+[1]*8)'" in text


def test_sliding_window_context_parallelism_runs_only_the_types_transformer_engine_accepts(tmp_path):
    # Transformer Engine 2.17.1 (the revision Megatron-LM d98e8a6 pins), context_parallel.py
    # attn_forward_func_with_cp: 'assert not sliding_window_attn or cp_comm_type in ["a2a", "all_gather"]'
    # (since TE v2.0). Mistral-7B v0.1's 4096-token window on every layer (review item 1)
    from autopar.emit.megatron_parse import parse_megatron_argv
    from autopar.emit.megatron_rules import SWA_CP_RULE
    mistral = _hf_model(tmp_path, "mistral", model_type="mistral", sliding_window=4096, num_attention_heads=32,
                        num_key_value_heads=8, hidden_size=4096)
    for cp, algo, written in ((8, "ring", "p2p"), (16, "hybrid", "a2a+p2p")):
        with pytest.raises(RuleViolation) as err:
            emit_megatron(make_job(mistral, "dgx-h100", 16, 32768, 16, f"tp=1,cp={cp},cp_algo={algo}"))
        [found] = err.value.violations
        assert found.rule == SWA_CP_RULE
        assert found.detail.startswith(f"--window-size 4096,0 with --context-parallel-size {cp} and --cp-comm-type {written}: ")
    # Ulysses writes a2a, which TE runs with a window
    job = make_job(mistral, "dgx-h100", 16, 32768, 16, "tp=1,cp=8,cp_algo=ulysses")
    assert "--cp-comm-type a2a" in script_of(job)
    # hybrid with every a2a rank in one node: hierarchical sizes [8, 1], which TE runs as a2a
    # (attn_forward_func_with_cp: p2p group of world size 1 -> cp_comm_type = "a2a", before the assert)
    job = make_job(mistral, "dgx-h100", 16, 32768, 16, "tp=1,cp=8,cp_algo=hybrid")
    assert parse_megatron_argv(megatron_argv(job)).hierarchical_context_parallel_sizes == [8, 1]
    emit_megatron(job)
    # without a window, ring CP stays legal
    emit_megatron(make_job("llama3-8b", "dgx-h100", 16, 32768, 16, "tp=1,cp=8,cp_algo=ring"))


def test_mla_with_ulysses_context_parallelism_names_the_transformer_engine_it_needs():
    # review item 2 said TE refuses MLA (K head dim != V head dim) on cp_comm_type a2a. TE v2.5 to v2.14
    # context_parallel.py attn_forward_func_with_cp do assert 'not enable_mla or cp_comm_type in ["p2p",
    # "a2a+p2p"]'; v2.15 (ee5dcec22 "open up a2a for mla") removed it, and Megatron-LM d98e8a6 pins TE
    # 2.17.1, so the launcher runs and is not refused: it says which TE it needs instead.
    # deepseek-v2-lite: qk_nope 128 + qk_rope 64 = 192, v_head_dim 128 (HF config.json)
    from autopar.emit.bridge import render_script as bridge_script, check_bridge
    job = make_job("deepseek-v2-lite", "dgx-h100", 16, 8192, 64, "tp=1,cp=4,cp_algo=ulysses,ep=4")
    text = script_of(job)
    assert "--cp-comm-type a2a" in text
    assert "# note: MLA (K head dim 192, V head dim 128) with context parallelism on cp_comm_type a2a needs Transformer " \
           "Engine >= 2.15" in text
    # ring (p2p) runs MLA on every TE since 2.5: no note
    assert "needs Transformer Engine" not in script_of(make_job("deepseek-v2-lite", "dgx-h100", 16, 8192, 64, "tp=1,cp=4,ep=4"))
    # Megatron-Bridge writes the same cp_comm_type and the same note (DeepSeek-V3 has a recipe)
    job = make_job("deepseek-v3", "hgx-h800", 2048, 8192, 4096, "tp=1,pp=16,cp=2,cp_algo=ulysses,ep=64,zero=1,recompute=full")
    rules, overrides = check_bridge(job)
    assert not rules.found and overrides["model.cp_comm_type"] == "a2a"
    assert "cp_comm_type a2a needs Transformer Engine >= 2.15" in bridge_script(job, overrides)


def test_chunked_attention_is_refused_by_name(tmp_path):
    scout = _hf_model(tmp_path, "scout", model_type="llama4_text", attention_chunk_size=8192)
    with pytest.raises(RuleViolation, match="local attention is a sliding window"):
        emit_megatron(make_job(scout, "dgx-h100", 16, 8192, 64, "tp=2,zero=1"))


def test_hybrid_pattern_carries_the_stages_and_mtp():
    # Nemotron 3 Super (88 layers, MTP module '*E') on pp 4 x vpp 2: eight '|' segments in
    # virtual order (segment v * 4 + p runs on rank p as chunk v: Megatron-Core
    # hybrid_layer_allocation.select_pipeline_segment), holding the plan's layer counts, then '/*E'
    job = make_job(*GOLDEN_CASES["hybrid_latent_moe_vpp"])
    argv = megatron_argv(job)
    pattern = argv[argv.index("--hybrid-layer-pattern") + 1]
    main, mtp = pattern.split("/")
    segments = main.split("|")
    layout = job.plan.model_layout(job.model)
    assert [len(s) for s in segments] == list(layout.decoders) and len(segments) == 8
    assert "".join(segments) == job.model.hybrid_layer_pattern and mtp == "*E"
    # the pattern is the layout: no --num-layers, VPP or layout flags (arguments.py asserts them away)
    assert not {"--num-layers", "--num-virtual-stages-per-pipeline-rank", "--pipeline-model-parallel-layout",
                "--mtp-num-layers", "--moe-layer-freq"} & set(argv)
    text = script_of(job)
    assert '"$MEGATRON_LM/pretrain_hybrid.py"' in text and "pretrain_gpt.py" not in text
    # Mamba-2 shape, squared ReLU and no position embedding (Megatron's default is learned_absolute)
    for flags in (["--mamba-num-heads", "128"], ["--mamba-head-dim", "64"], ["--mamba-state-dim", "128"],
                  ["--mamba-num-groups", "8"], ["--squared-relu"], ["--position-embedding-type", "none"],
                  ["--moe-latent-size", "1024"]):
        i = argv.index(flags[0])
        assert argv[i:i + len(flags)] == flags


def test_squared_relu_for_a_gpt_model():
    # Nemotron-4 340B (profiles/models/nemotron4-340b.yaml activation squared_relu): without
    # --squared-relu Megatron builds a GeLU MLP
    argv = megatron_argv(make_job("nemotron4-340b", "dgx-h100", 64, 4096, 64, "tp=8,pp=8,zero=1"))
    assert "--squared-relu" in argv and "--swiglu" not in argv


HYBRID = ["--hybrid-layer-pattern", "M-M*|M-M-", "--hidden-size", "1024", "--num-attention-heads", "8", "--seq-length", "4096",
          "--max-position-embeddings", "4096", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16",
          "--mamba-num-heads", "32", "--mamba-num-groups", "8"]


@pytest.mark.parametrize("extra, rule", [
    # arguments.py: the '|' segments are the layout; segments % PP; mamba_mixer.py: groups % TP
    (["--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2"], "no other layout flags"),
    (["--pipeline-model-parallel-size", "4"], "pipeline segments ('|') % PP == 0"),
    (["--tensor-model-parallel-size", "16"], "mamba heads and groups % TP == 0"),
    # mamba_context_parallel.py: (heads / TP) % CP with 32 heads over tp 2 x cp 32 -> 16 % 32
    (["--tensor-model-parallel-size", "2", "--context-parallel-size", "32"], "Mamba CP"),
])
def test_hybrid_rules(extra, rule):
    assert any(rule in found for found in _check(HYBRID + extra, world=1024))


def test_hybrid_valid_arguments_pass():
    # the layout the pattern states: 2 segments on pp 2 -> 4 layers, no VPP
    assert _check(HYBRID + ["--pipeline-model-parallel-size", "2"]) == []


def test_hybrid_mtp_off_the_last_stage_is_refused():
    # Super on pp 2 x vpp 2 with its MTP module on virtual stage 2 of 4: --hybrid-layer-pattern
    # can only put the '/' segments after the last stage
    job = make_job("nemotron-3-super-120b-a12b", "dgx-h100", 64, 8192, 512,
                   "tp=2,pp=2,vpp=2,ep=16,etp=1,zero=1,recompute=full,layout=Et*30|t*29|t*29m|L")
    with pytest.raises(RuleViolation, match="MTP modules run on the last pipeline stage"):
        emit_megatron(job)


def test_hybrid_mtp_after_an_empty_last_stage(tmp_path):
    # a Nemotron-H file with an MTP module but no mtp_hybrid_override_pattern: the module is one
    # block of the last layer's letter (E). With pp 3 and the last stage holding only MTP and loss
    # (layout ...|mL) the pattern ends in an empty segment, '|', then '/E' -- Megatron-Core 0.19.2
    # reads 'M-M*|-M-E|/E' as 8 layers in segments ['M-M*'], ['-M-E'], [''] and MTP depth 1
    import json
    from pathlib import Path
    cfg = json.loads((Path(__file__).parents[2] / "profiles/models/nemotron-3-super-120b-a12b.json").read_text())
    del cfg["mtp_hybrid_override_pattern"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    job = make_job(str(path), "dgx-h100", 96, 8192, 384, "tp=2,pp=3,ep=16,etp=1,zero=1,recompute=full,layout=Et*44|t*44|mL")
    argv = megatron_argv(job)
    pattern = argv[argv.index("--hybrid-layer-pattern") + 1]
    assert pattern.endswith("MEMEMEME|/E") and pattern.count("|") == 2
    plan, _ = parse_megatron_script(script_of(job))  # emits without a refusal and reads back as planned
    assert canonical_plan(plan, job.model, job.num_gpus) == canonical_plan(job.plan, job.model, job.num_gpus)


def test_fp8_param_gather_reaches_every_launcher_or_is_refused():
    """The plan costed with FP8 weight gathers is launched with them: Megatron-LM --fp8-param-gather
    (only with sharded weights: its validate_args refuses it without the distributed optimizer or
    FSDP, and unsharded nothing is gathered), Bridge's mixed-precision fp8_param_gather (its FP8
    recipes turn it on, so a plan costed without it says False); torchtitan 0.3.0 runs torchao's
    rowwise recipes, which do not gather in FP8."""
    from autopar.emit.bridge import emit_bridge
    from autopar.emit.torchtitan import emit_torchtitan

    on = make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=1", "fp8", fp8_param_gather=True)
    assert "--fp8-param-gather" in script_of(on)
    assert "--fp8-param-gather" not in script_of(make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=0", "fp8",
                                                          fp8_param_gather=True))
    bridge = next(a.text for a in emit_bridge(on) if a.name.endswith(".py"))
    assert "FP8_PARAM_GATHER = True" in bridge and "precision.fp8_param_gather = FP8_PARAM_GATHER" in bridge
    with pytest.raises(RuleViolation, match="FP8 all-gather only with tensorwise scaling"):
        emit_torchtitan(make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=3", "fp8", fp8_param_gather=True,
                                 fp8_recipe="rowwise", stack="torchtitan"))


def test_fp8_tensorwise_runs_current_scaling_on_hopper():
    """The plan's FP8 tensorwise is TE per-tensor current scaling on both Megatron launchers:
    Megatron-LM d98e8a6 --fp8-recipe tensorwise builds Float8CurrentScaling (megatron/core/fp8_utils.py
    get_fp8_recipe; the default 'delayed' is amax-history scaling, and its --fp8-amax-* flags are
    delayed-only), Megatron-Bridge 067f987 bf16_with_fp8_current_scaling_mixed sets fp8_recipe
    'tensorwise' with first_last_layers_bf16=True, which the plan (every layer in FP8) turns off as
    Bridge's scripts/performance/utils/precision.py fp8_cs does."""
    from autopar.emit.bridge import emit_bridge

    job = make_job(*GOLDEN_CASES["fp8_70b"])
    argv = megatron_argv(job)
    assert argv[argv.index("--fp8-recipe") + 1] == "tensorwise" and argv[argv.index("--fp8-format") + 1] == "hybrid"
    assert "--fp8-amax-history-len" not in argv and "--fp8-amax-compute-algo" not in argv
    assert "# note: FP8 tensorwise runs as Transformer Engine per-tensor current scaling" in script_of(job)
    bridge = next(a.text for a in emit_bridge(job) if a.name.endswith(".py"))
    assert "MIXED_PRECISION = 'bf16_with_fp8_current_scaling_mixed'" in bridge
    assert "precision.first_last_layers_bf16 = False" in bridge
    # Megatron Core refuses layernorm / moe_act recompute with delayed scaling (transformer_config.py
    # __post_init__: 'Delayed scaling does not support moe_act and layernorm recompute for fp8'); with
    # current scaling the plan language's output-discarding recompute runs in FP8
    moe = make_job("mixtral-8x7b", "dgx-h100", 64, 4096, 256, "tp=2,pp=2,ep=4,etp=1,zero=1,recompute=selective,"
                   "recompute_modules=layernorm+moe_act", "fp8")
    argv = megatron_argv(moe)
    assert argv[argv.index("--fp8-recipe") + 1] == "tensorwise"
    emit_megatron(moe)
    # Blackwell keeps MXFP8 block scaling, and says so
    b200 = make_job("llama3-8b", "dgx-b200", 16, 4096, 64, "tp=2,zero=1", "fp8")
    assert megatron_argv(b200)[megatron_argv(b200).index("--fp8-recipe") + 1] == "mxfp8"
    assert "# note: FP8 runs as MXFP8 block scaling" in script_of(b200)
    assert "first_last_layers_bf16" not in next(a.text for a in emit_bridge(b200) if a.name.endswith(".py"))


def test_bridge_nvfp4_recipe_does_not_gather_weights_the_plan_gathers_in_bf16():
    """Bridge's bf16_with_nvfp4_mixed turns on fp4_param_gather (mixed_precision.py); autopar
    costs an FP4 plan's ZeRO weight gathers in bf16, so the launcher turns it off; other
    precisions leave the recipe's FP4 field alone."""
    from autopar.emit.bridge import emit_bridge

    fp4 = make_job("llama3-8b", "dgx-b200", 16, 4096, 64, "tp=2,zero=1", "fp4")
    script = next(a.text for a in emit_bridge(fp4) if a.name.endswith(".py"))
    assert "MIXED_PRECISION = 'bf16_with_nvfp4_mixed'" in script
    assert "precision.fp4_param_gather = False" in script
    bf16 = make_job("llama3-8b", "dgx-b200", 16, 4096, 64, "tp=2,zero=1")
    assert "fp4_param_gather" not in next(a.text for a in emit_bridge(bf16) if a.name.endswith(".py"))


@pytest.mark.parametrize("model, plan, flags", [
    # mistralai/Mixtral-8x7B-v0.1 router_aux_loss_coef 0.02; Megatron-LM d98e8a6 arguments.py
    # --moe-aux-loss-coeff defaults to 0.0 (no balance loss), aux_loss (per micro-batch) is its default type
    ("mixtral-8x7b", "tp=2,ep=8,etp=1,zero=1", ["--moe-aux-loss-coeff 0.02"]),
    ("mixtral-8x22b", "tp=4,pp=2,ep=8,etp=1,zero=1", ["--moe-aux-loss-coeff 0.001"]),
    # Qwen/Qwen3-30B-A3B router_aux_loss_coef 0.001, over the global batch (Qwen3 report section 2)
    ("qwen3-30b-a3b", "tp=2,pp=2,ep=8,etp=1,zero=1", ["--moe-router-load-balancing-type global_aux_loss", "--moe-aux-loss-coeff 0.001"]),
    # DeepSeek-V3: expert bias plus the sequence-wise loss of weight 1e-4 (Megatron-LM d98e8a6
    # examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh: seq_aux_loss, --moe-aux-loss-coeff 1e-4)
    ("deepseek-v3", "tp=2,pp=8,ep=64,etp=1,zero=1",
     ["--moe-router-enable-expert-bias", "--moe-router-load-balancing-type seq_aux_loss", "--moe-aux-loss-coeff 0.0001"]),
])
def test_balance_loss_weight_flags(model, plan, flags):
    from autopar.emit.megatron_parse import argv_from_script
    job = make_job(model, "dgx-h100", 1024 if model == "deepseek-v3" else 64, 4096, 2048 if model == "deepseek-v3" else 256, plan)
    text = script_of(job)
    for flag in flags:
        assert flag in text
    argv = argv_from_script(text)
    assert float(argv[argv.index("--moe-aux-loss-coeff") + 1]) == job.model.moe_aux_loss_coeff


def test_balance_loss_weight_in_the_bridge_overrides():
    from autopar.emit.bridge import bridge_overrides
    # Qwen/Qwen3-30B-A3B router_aux_loss_coef 0.001 (Bridge TransformerConfig moe_aux_loss_coeff)
    o = bridge_overrides(make_job("qwen3-30b-a3b", "dgx-h100", 64, 4096, 256, "tp=2,pp=2,ep=8,etp=1,zero=1"))
    assert (o["model.moe_aux_loss_coeff"], o["model.moe_router_load_balancing_type"]) == (0.001, "global_aux_loss")
    # DeepSeek-V3: what Bridge 067f987 deepseek_v3_bridge.py sets (seq_aux_loss, aux_loss_alpha or 0.0001)
    o = bridge_overrides(make_job(*GOLDEN_CASES["mla_uneven"]))
    assert (o["model.moe_aux_loss_coeff"], o["model.moe_router_load_balancing_type"]) == (0.0001, "seq_aux_loss")


def test_gated_gelu_is_refused_naming_the_activation(tmp_path):
    # google/gemma-2 configs: hidden_activation gelu_pytorch_tanh with a gated MLP (GeGLU). Megatron-LM
    # d98e8a6 argument_utils.py core_transformer_config_from_args builds gated MLPs from --swiglu (silu)
    # and --quick-geglu (x sigmoid(1.702 x)) only; activation_func has no flag, --openai-gelu is read nowhere
    gemma = _hf_model(tmp_path, "gemma2", model_type="gemma2", hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh")
    job = make_job(gemma, "dgx-h100", 16, 4096, 64, "tp=2,zero=1")
    with pytest.raises(RuleViolation, match=r"\[a gated MLP is SwiGLU \(--swiglu\) or quick GeGLU \(--quick-geglu\)\] "
                                            r"gemma2: activation=gelu_pytorch_tanh \(HF hidden_activation"):
        emit_megatron(job)
    assert "--swiglu" not in megatron_argv(job)
    # HF quick_gelu with a gated MLP is Megatron's --quick-geglu
    quick = _hf_model(tmp_path, "quick", model_type="llama", hidden_act="quick_gelu")
    argv = megatron_argv(make_job(quick, "dgx-h100", 16, 4096, 64, "tp=2,zero=1"))
    assert "--quick-geglu" in argv and "--swiglu" not in argv
    assert "--swiglu" in megatron_argv(make_job("llama3-8b", "dgx-h100", 16, 4096, 64, "tp=2,zero=1"))


def test_a_local_rope_base_is_refused(tmp_path):
    # Gemma-3's sliding layers rotate by rope_local_base_freq 10,000, its global layers by rope_theta
    # 1,000,000; GPTModel builds one rotary embedding (--rotary-base), so the launcher wrote
    # --rotary-base 1000000 for every layer (silu here, so that the GeGLU refusal is not the only one)
    gemma = _hf_model(tmp_path, "gemma3", model_type="gemma3_text", hidden_activation="silu", rope_theta=1000000,
                      rope_local_base_freq=10000, sliding_window=512, sliding_window_pattern=6)
    with pytest.raises(RuleViolation) as err:
        emit_megatron(make_job(gemma, "dgx-h100", 16, 4096, 64, "tp=2,zero=1"))
    assert str(err.value).split(" megatron refuses it: ")[1] == (
        "[one RoPE for every layer (--rotary-base)] gemma3: rope_local_theta=10000 (HF rope_local_base_freq): its sliding-window "
        "layers rotate by their own unscaled RoPE, its global layers by rope_theta=1e+06; GPTModel builds one rotary embedding "
        "for every layer (--rotary-base), so the run would train the local layers at the global base (Megatron-Bridge's "
        "Gemma3ModelProvider takes the pair)")


def test_query_key_norms_across_heads_are_refused(tmp_path):
    # OLMo-2 norms queries and keys over the whole projection (Olmo2RMSNorm(num_heads x head_dim));
    # --qk-layernorm builds TE norms over head_dim, one per head. Gemma-3's per-head norms are written
    olmo2 = _hf_model(tmp_path, "olmo2", model_type="olmo2")
    with pytest.raises(RuleViolation) as err:
        emit_megatron(make_job(olmo2, "dgx-h100", 16, 4096, 64, "tp=2,zero=1"))
    assert str(err.value).split(" megatron refuses it: ")[1] == (
        "[query and key norms per head (--qk-layernorm)] olmo2: qk_norm_across_heads (OLMo-2's Olmo2RMSNorm over "
        "num_heads x head_dim = 2048): --qk-layernorm builds TE's q_layernorm and k_layernorm over head_dim=128, each head "
        "normed alone, so the run would train another network")
    gemma = _hf_model(tmp_path, "gemma3", model_type="gemma3_text", hidden_activation="silu", sliding_window=None)
    assert "--qk-layernorm" in megatron_argv(make_job(gemma, "dgx-h100", 16, 4096, 64, "tp=2,zero=1"))


def test_mla_yarn_flags_that_take_effect():
    # deepseek-ai/DeepSeek-V3 rope_scaling: yarn factor 40, mscale 1, mscale_all_dim 1, beta_fast 32,
    # beta_slow 1, original 4096. MLATransformerConfig (d98e8a6) reads rotary_scaling_factor, mscale,
    # mscale_all_dim from the MLA args; the --yarn-* flags reach non-MLA models only
    # (argument_utils.py _apply_yarn_config_from_args returns early for MLA), so none is written
    argv = megatron_argv(make_job(*GOLDEN_CASES["mla_uneven"]))
    text = " ".join(argv)
    assert "--rotary-scaling-factor 40 --mscale 1 --mscale-all-dim 1" in text
    assert not [a for a in argv if a.startswith("--yarn-")]
    assert "--rope-type" not in argv  # MLATransformerConfig rope_type defaults to yarn


def test_mla_yarn_megatron_cannot_set_is_refused():
    # moonshotai/Kimi-K2-Instruct rope_scaling beta_fast 1: MLATransformerConfig.beta_fast (default 32)
    # has no Megatron-LM flag at d98e8a6
    job = make_job("kimi-k2", "dgx-h100", 512, 4096, 1024, "tp=1,pp=8,ep=64,etp=1,zero=1")
    with pytest.raises(RuleViolation, match=r"\[MLA's RoPE is plain or YaRN with the flags' reach\] kimi-k2: rope_scaling "
                                            r"type=yarn, beta_fast=1: .*beta_fast 32"):
        emit_megatron(job)


def test_mla_without_rope_scaling_asks_for_plain_rope(tmp_path):
    # MLATransformerConfig rope_type defaults to yarn (factor 40); plain RoPE needs --rope-type rope, and
    # the fused MLA RoPE works with yarn only (MLATransformerConfig.__post_init__), so --no-rope-fusion
    import json
    from autopar.specs._files import PROFILES_DIR
    cfg = json.loads((PROFILES_DIR / "models" / "deepseek-v2-lite.json").read_text())
    cfg["rope_scaling"] = None
    path = tmp_path / "v2-lite-rope.json"
    path.write_text(json.dumps(cfg))
    argv = megatron_argv(make_job(str(path), "dgx-h100", 16, 4096, 64, "tp=1,ep=8,etp=1,zero=1"))
    assert argv[argv.index("--rope-type") + 1] == "rope" and "--no-rope-fusion" in argv
    assert "--rotary-scaling-factor" not in argv


def test_yarn_without_mla_uses_the_yarn_position_embedding(tmp_path):
    # GPTModel (d98e8a6) builds YarnRotaryEmbedding only for --position-embedding-type yarn, and
    # _apply_yarn_config_from_args reads --yarn-beta-fast etc. only then
    yarn = _hf_model(tmp_path, "qwen-yarn", model_type="qwen3", rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "beta_fast": 16, "beta_slow": 1})
    text = " ".join(megatron_argv(make_job(yarn, "dgx-h100", 16, 4096, 64, "tp=2,zero=1")))
    assert "--position-embedding-type yarn" in text
    assert "--rotary-scaling-factor 4 --yarn-original-max-position-embeddings 32768 --yarn-beta-fast 16 --yarn-beta-slow 1" in text


def test_hybrid_cp_at_tp8_runs_ring_only():
    # Not a bug: with tp=8 on 8-GPU nodes no two CP ranks share a node, so the a2a level is 1 and
    # the ring spans all cp ranks. Megatron-LM d98e8a6 validate_args asserts only
    # context_parallel_size == prod(hierarchical_context_parallel_sizes), the first size being the a2a
    # level (model_parallel_config.py); Transformer Engine's a2a+p2p skips the all-to-all at size 1
    # (context_parallel.py: 'if cp_size_a2a > 1')
    from autopar.emit.megatron_parse import parse_megatron_argv
    job = make_job("llama3-8b", "dgx-h100", 64, 65536, 8, "tp=8,cp=8,cp_algo=hybrid,zero=1,recompute=full")
    ns = parse_megatron_argv(megatron_argv(job))
    assert ns.hierarchical_context_parallel_sizes == [1, 8] and ns.cp_comm_type == ["a2a+p2p"]
    emit_megatron(job)  # Megatron's rules pass
    job = make_job("llama3-8b", "dgx-h100", 64, 65536, 16, "tp=2,cp=8,cp_algo=hybrid,zero=1,recompute=full")
    assert parse_megatron_argv(megatron_argv(job)).hierarchical_context_parallel_sizes == [4, 2]  # tp 2 x a2a 4 = a node


@pytest.mark.parametrize("model, act, bias, flags", [
    # openai-community/gpt2-xl activation_function gelu_new (tanh), linear biases: Megatron-LM's
    # default bias-GeLU fusion (fused_bias_gelu.py bias_gelu) is the tanh approximation, no flag
    ("gpt2-xl", "gelu_new", True, []),
    # HF 'gelu' is exact (erf): with biases the default fusion would train tanh, so it is turned off
    ("gpt3-175b", "gelu", True, ["--no-bias-gelu-fusion"]),
    # no biases: arguments.py turns the fusion off and F.gelu (exact) runs
    ("mpt-7b", "gelu", False, []),
    ("nemotron4-340b", "squared_relu", False, ["--squared-relu"]),
    # squared ReLU with biases: TransformerConfig refuses the bias-activation fusion with it
    ("nemotron4-340b", "relu2", True, ["--squared-relu", "--no-bias-gelu-fusion"]),
])
def test_non_gated_activation_flags(model, act, bias, flags):
    """The flags Megatron-LM d98e8a6 needs to train the model's non-gated activation
    (argument_utils.py core_transformer_config_from_args; core/transformer/mlp.py MLP.forward)."""
    import dataclasses
    from autopar.emit.megatron_model import plain_mlp_flags

    job = make_job(model, "dgx-h100", 64, 2048, 64, "tp=8,zero=1")
    m = job.model.model_copy(update={"activation": act, "linear_bias": bias})
    assert plain_mlp_flags(m) == [[f] for f in flags]
    argv = megatron_argv(dataclasses.replace(job, model=m))
    assert [a for a in argv if a in ("--squared-relu", "--no-bias-gelu-fusion", "--openai-gelu")] == flags


@pytest.mark.parametrize("act, bias, why", [
    ("gelu_new", False, "Megatron-LM applies the tanh GeLU only in its bias-GeLU fusion, which arguments.py turns off"),
    ("relu", True, "TransformerConfig.activation_func has no flag, so the run would train GeLU"),
    ("silu", False, "TransformerConfig.activation_func has no flag, so the run would train GeLU"),
])
def test_non_gated_activation_megatron_cannot_build_is_refused(act, bias, why):
    # --openai-gelu is parsed (arguments.py) and read nowhere at d98e8a6 (megatron/core/transformer/utils.py
    # openai_gelu is never called); relu and plain silu have no flag
    import dataclasses
    from autopar.emit.bridge import check_bridge

    job = make_job("gpt3-175b", "dgx-h100", 64, 2048, 64, "tp=8,pp=8,zero=1")
    job = dataclasses.replace(job, model=job.model.model_copy(update={"activation": act, "linear_bias": bias}))
    with pytest.raises(RuleViolation, match=rf"\[a non-gated MLP is GeLU \(exact, or tanh with linear biases\) or squared ReLU "
                                            rf"\(--squared-relu\)\] gpt3-175b: activation={act} \(HF hidden_act\) with a non-gated MLP"):
        emit_megatron(job)
    with pytest.raises(RuleViolation, match=why):
        emit_megatron(job)
    # Megatron-Bridge builds the MLP from its recipe's provider (Nemotron-H: activation_func squared_relu),
    # and a recipe only for a preset's exact architecture, activation included (presets.architecture):
    # another activation finds no recipe and is refused for the model, not by the CLI rule
    from autopar.emit.bridge import RECIPE_RULE
    nemo = make_job("nemotron-h-8b", "dgx-h100", 16, 8192, 256, "tp=2,sp=on,zero=1")
    assert not check_bridge(nemo)[0].found
    relu = dataclasses.replace(nemo, model=nemo.model.model_copy(update={"activation": "relu"}))
    assert [v.rule for v in check_bridge(relu)[0].found] == [RECIPE_RULE]


def test_linear_rope_scaling_is_position_interpolation(tmp_path):
    # HF rope_type linear divides the positions by the factor; Megatron-LM d98e8a6
    # --rotary-seq-len-interpolation-factor (an int flag, arguments.py) does the same in RotaryEmbedding
    # (rotary_pos_embedding.py: seq *= 1 / seq_len_interpolation_factor)
    linear = _hf_model(tmp_path, "llama-linear", model_type="llama", rope_scaling={"rope_type": "linear", "factor": 4.0})
    text = " ".join(megatron_argv(make_job(linear, "dgx-h100", 16, 4096, 64, "tp=2,zero=1")))
    assert "--position-embedding-type rope --rotary-base 10000 --rotary-seq-len-interpolation-factor 4" in text
    assert "--use-rope-scaling" not in text


@pytest.mark.parametrize("scaling, given", [
    # no flag builds these HF types (rotary_pos_embedding.py has llama3 scaling and interpolation only)
    ({"rope_type": "dynamic", "factor": 2.0}, "type=dynamic"),
    # microsoft/Phi-3-mini-128k-instruct's form: no factor, per-frequency short/long factors (head 128 -> 64)
    ({"rope_type": "longrope", "short_factor": [1.0] * 64, "long_factor": [4.0] * 64, "original_max_position_embeddings": 4096},
     "type=longrope"),
    # YaRN with an explicit cos/sin scale: YarnRotaryEmbedding derives it from the mscales, no flag sets it
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "attention_factor": 1.2},
     "type=yarn, attention_factor=1.2"),
    # --rotary-seq-len-interpolation-factor is an int
    ({"rope_type": "linear", "factor": 1.5}, "type=linear, factor=1.5"),
    # --use-rope-scaling takes the factor only; _apply_scaling fixes low 1, high 4, original 8192
    ({"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 4096}, "type=llama3, original_max_position_embeddings=4096"),
])
def test_rope_scaling_megatron_cannot_build_is_refused(tmp_path, scaling, given):
    from autopar.emit.megatron import ROPE_SCALING_RULE
    model = _hf_model(tmp_path, "scaled", model_type="llama", rope_scaling=scaling)
    with pytest.raises(RuleViolation, match=rf"\[{ROPE_SCALING_RULE.replace('(', '.').replace(')', '.')}\] scaled: rope_scaling {given}:"):
        emit_megatron(make_job(model, "dgx-h100", 16, 4096, 64, "tp=2,zero=1"))


def test_yarn_values_transformers_leaves_implicit(tmp_path):
    import dataclasses
    # transformers 5.12 standardize_rope_params: a YaRN block without original_max_position_embeddings
    # extends from max_position_embeddings (here 32768), where Megatron-LM d98e8a6 would default to 4096
    # (argument_utils.py _apply_yarn_config_from_args)
    yarn = _hf_model(tmp_path, "yarn-implicit", model_type="qwen3", max_position_embeddings=32768,
                     rope_scaling={"rope_type": "yarn", "factor": 4.0, "mscale": 0.707})
    job = make_job(yarn, "dgx-h100", 16, 4096, 64, "tp=2,zero=1")
    text = " ".join(megatron_argv(job))
    assert "--rotary-scaling-factor 4 --yarn-original-max-position-embeddings 32768" in text
    # mscale without mscale_all_dim: transformers' _compute_yarn_parameters uses 0.1 ln(factor) + 1, which
    # Megatron's defaults (--mscale 1 --mscale-all-dim 0) give; --mscale 0.707 alone would scale by 0.0707 ln(4) + 1
    assert "--mscale" not in text
    both = job.model.rope_scaling.model_copy(update={"mscale": 0.707, "mscale_all_dim": 0.707})
    text = " ".join(megatron_argv(dataclasses.replace(job, model=job.model.model_copy(update={"rope_scaling": both}))))
    assert "--mscale 0.707 --mscale-all-dim 0.707" in text
    # openai/gpt-oss-20b rope_scaling truncate false: the correction range stays unrounded
    # (Megatron-LM d98e8a6 arguments.py --no-yarn-correction-range-round-to-int)
    from autopar.specs import load_model
    gpt_oss = load_model("gpt-oss-20b")
    assert gpt_oss.rope_scaling.truncate is False
    plain = job.model.model_copy(update={"rope_scaling": gpt_oss.rope_scaling})
    assert "--no-yarn-correction-range-round-to-int" in megatron_argv(dataclasses.replace(job, model=plain))
    assert "--no-yarn-correction-range-round-to-int" not in megatron_argv(job)


def test_llama3_rope_scaling_with_megatrons_fixed_values_is_built():
    # meta-llama/Llama-3.1-405B rope_scaling: llama3 factor 8, low 1, high 4, original 8192 -- the values
    # rotary_pos_embedding.py _apply_scaling fixes, so --use-rope-scaling --rope-scaling-factor 8 builds it
    text = " ".join(megatron_argv(make_job(*GOLDEN_CASES["gqa_sp"])))
    assert "--use-rope-scaling --rope-scaling-factor 8" in text
    emit_megatron(make_job(*GOLDEN_CASES["gqa_sp"]))
