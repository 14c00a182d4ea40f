"""Jobs for the emitter tests: presets with a fixed, hand-made estimate, so golden files depend
on the emitters only (not on the cost model's coefficients), and the fixed golden plans."""

from __future__ import annotations

from autopar.emit.common import EmitJob
from autopar.specs import TrainingSpec, load_cluster, load_model, parse_plan
from autopar.specs.estimate import Bottleneck, Estimate
from autopar.specs.training import Precision

TEST_VERSION = "0.0.0-test"


def fixed_estimate(plan_text: str, num_gpus: int, dp: int, m: int, stages: list[int]) -> Estimate:
    """Round numbers that stand in for the cost model in headers."""
    return Estimate(
        plan=plan_text, feasible=True, reasons=[], num_gpus=num_gpus, dp=dp, num_microbatches=m, stage_layers=stages,
        step_seconds=10.0, tokens_per_second=1.0e6, tokens_per_second_per_gpu=1.0e6 / num_gpus,
        model_flops_per_step=1.0e18, hardware_flops_per_step=1.2e18, model_tflops_per_gpu=400.0, mfu=0.4, hfu=0.48,
        bubble_fraction=0.05, memory_bytes_per_gpu=60.0e9, memory_capacity_bytes=80.0e9, worst_stage=0,
        memory_breakdown={"total": 60.0e9}, time_breakdown={"total": 10.0}, bottleneck=Bottleneck.compute,
    )


FP32_REDUCE = {"grad_reduce_bytes_per_param": 4.0, "grad_bytes_per_param": 4.0}  # gradients reduced in fp32
BF16_REDUCE = {"grad_reduce_bytes_per_param": 2.0}  # gradients reduced in bf16 (Megatron --grad-reduce-in-bf16)


def make_job(model: str, cluster: str, gpus: int, seq_len: int, global_batch: int, plan: str,
             precision: str = "bf16", extra: dict | None = None, **training) -> EmitJob:
    spec = load_model(model)
    clus = load_cluster(cluster).with_gpus(gpus)
    train = TrainingSpec(seq_len=seq_len, global_batch_size=global_batch, precision=Precision(precision), **(extra or {}), **training)
    p = parse_plan(plan)
    dp = gpus // (p.tp * p.cp * p.pp)
    m = global_batch // (dp * p.mbs) if global_batch % (dp * p.mbs) == 0 else 0
    try:
        stages = p.layers_per_stage(spec.num_layers)
    except ValueError:
        stages = []
    return EmitJob(spec, clus, train, p, fixed_estimate(p.text(), gpus, dp, m, stages), rank=1, version=TEST_VERSION)


# The plans of issue 14 (the eleven kinds checked with the real frameworks, plus the plan-language
# cases), each emitted in every format; the integration tests load every artefact with the
# framework's own code (tests/emit/test_emit_frameworks.py).
GOLDEN_CASES = {
    # Llama-3 8B, tp 2 x pp 2 (a plain 1F1B pipeline)
    "dense_1f1b": ("llama3-8b", "dgx-h100", 16, 4096, 256, "tp=2,pp=2,mbs=2,zero=1,recompute=none", "bf16", BF16_REDUCE),
    # Llama-3 8B FSDP (ZeRO-3) on one node of 8 GPUs
    "fsdp_zero3": ("llama3-8b", "dgx-h100", 8, 8192, 128, "tp=1,pp=1,zero=3,recompute=full", "bf16", FP32_REDUCE),

    # Llama-3 70B tp 8 x pp 4 x vpp 5
    "interleaved_vpp": ("llama3-70b", "dgx-h100-superpod", 1024, 8192, 2048, "tp=8,pp=4,vpp=5,zero=1,recompute=selective", "bf16", FP32_REDUCE),

    # Llama-3 70B, pp 8 without tensor parallelism (a plan DeepSpeed's PipelineModule runs)
    "pp8_no_tp": ("llama3-70b", "dgx-h100", 64, 4096, 512, "tp=1,pp=8,zero=1,recompute=full"),
    # Llama-3.1 405B on 16,384 H100 (Dubey et al. 2024 section 3.3: tp 8, pp 16, 2,048 x 8K tokens)
    "gqa_sp": ("llama3-405b", "dgx-h100-superpod", 16384, 8192, 2048, "tp=8,sp=on,pp=16,zero=1,recompute=selective", "bf16", FP32_REDUCE),

    # 128K context: ring CP with tp 4, and Ulysses CP without TP
    "long_context_cp": ("llama3-8b", "dgx-h100", 64, 131072, 16, "tp=4,cp=4,cp_algo=ring,zero=1,recompute=full", "bf16", FP32_REDUCE),

    "long_context_ulysses": ("llama3-8b", "dgx-h100", 64, 131072, 16, "tp=1,cp=8,cp_algo=ulysses,zero=3,recompute=full", "bf16", BF16_REDUCE),
    # Qwen3-30B-A3B (global-batch balance loss, weight 0.001): Bridge's Qwen3-MoE recipe; torchtitan refuses (expert-bias router)
    "moe_qwen3": ("qwen3-30b-a3b", "dgx-h100", 64, 4096, 256, "tp=2,pp=2,ep=8,etp=1,zero=1,recompute=selective", "bf16", FP32_REDUCE),
    # Mixtral 8x7B with expert parallelism and expert tensor parallelism
    "moe_ep_etp": ("mixtral-8x7b", "dgx-h100", 64, 4096, 512, "tp=4,pp=2,ep=4,etp=2,zero=1,recompute=selective"),
    # DeepSeek-V3 on 2,048 H800: pp 16 x ep 64 (uneven balanced stages), and tp 2 x ep 64 with DeepEP
    "mla_uneven": ("deepseek-v3", "hgx-h800", 2048, 4096, 4096, "tp=1,pp=16,ep=64,zero=1,recompute=full", "bf16", FP32_REDUCE),

    "mla_tp_deepep": ("deepseek-v3", "hgx-h800", 2048, 4096, 4096, "tp=2,pp=1,ep=64,etp=1,zero=1,recompute=full,dispatcher=deepep", "bf16", FP32_REDUCE),

    # Llama-3 70B in FP8 (per-tensor current scaling on Hopper)
    "fp8_70b": ("llama3-70b", "dgx-h100", 64, 8192, 256, "tp=4,pp=2,zero=1,recompute=selective", "fp8", FP32_REDUCE),
    # plan language: an explicit uneven layout over pp 4 x vpp 2, FSDP with pipeline parallelism,
    # and full recompute with a different layer count per pipeline stage
    "uneven_vpp_layout": ("llama3-70b", "dgx-h100", 64, 4096, 256, "tp=4,pp=4,zero=1,recompute=selective,layout=Et*9|t*10|t*10|t*10|t*10|t*10|t*10|t*11L"),
    "fsdp_pp": ("llama3-70b", "dgx-h100", 64, 4096, 256, "tp=2,pp=4,zero=3,recompute=full", "bf16", FP32_REDUCE),

    "stage_recompute": ("llama3-70b", "dgx-h100", 64, 4096, 256, "tp=4,pp=4,recompute=full,stage_recompute_layers=16/12/8/4"),
    # hybrid Mamba-2 models (pretrain_hybrid.py --hybrid-layer-pattern; Bridge: HybridModelProvider): Nemotron-H 8B with tp 2, and
    # Nemotron 3 Super (LatentMoE, an '*E' MTP module) on pp 4 x vpp 2 with ep 32, its stages as '|' segments
    "hybrid_mamba": ("nemotron-h-8b", "dgx-h100", 16, 8192, 256, "tp=2,sp=on,pp=1,zero=1,recompute=selective", "bf16", FP32_REDUCE),
    "hybrid_latent_moe_vpp": ("nemotron-3-super-120b-a12b", "dgx-h100", 256, 8192, 512,
                              "tp=2,sp=on,pp=4,vpp=2,ep=32,etp=1,zero=1,recompute=full", "bf16", FP32_REDUCE),
    # the same model without virtual stages, which Megatron-Bridge's HybridModelProvider also builds
    "hybrid_latent_moe_pp": ("nemotron-3-super-120b-a12b", "dgx-h100", 128, 8192, 256,
                             "tp=2,sp=on,pp=4,ep=16,etp=1,zero=1,recompute=full", "bf16", FP32_REDUCE),
    # Nemotron 3 Nano (Mamba-2 + MoE, its recipe builds the provider itself) and Nemotron-H 56B on pp 2
    "hybrid_moe_nano": ("nemotron-3-nano-30b-a3b", "dgx-h100", 16, 8192, 128, "tp=1,pp=1,ep=8,zero=1,recompute=selective", "bf16", FP32_REDUCE),
    "hybrid_mamba_pp": ("nemotron-h-56b", "dgx-h100", 64, 8192, 128, "tp=8,sp=on,pp=2,zero=1,recompute=full", "bf16", FP32_REDUCE),
}
