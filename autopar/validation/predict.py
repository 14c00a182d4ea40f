"""Predict one published run and compare in tokens/s per GPU, converting a published TFLOP/s or
MFU with the *source's own* FLOP accounting (validation README). One global set of cost
coefficients; no per-row or per-source correction."""

from __future__ import annotations

import itertools
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autopar.cost import estimate
from autopar.cost.flops import model_flops_per_token
from autopar.cost.memory import cheap_checkpoints
from autopar.errors import AutoparError, InputError
from autopar.specs import ModelSpec
from autopar.specs.costparams import CostParams, params_for_cluster
from autopar.specs.estimate import Estimate
from autopar.specs.hardware import GpuSpec
from autopar.specs.plan import Recompute
from autopar.specs.training import Stack
from autopar.specs.trust import family_of
from autopar.validation.rows import RowInputs, frozen_weights, normalize_row, plan_of, row_inputs

GIB = 2**30


class RowResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    source_group: str
    model_name: str
    num_gpus: int
    family: str | None = Field(None, description="dense|moe / megatron-style|fsdp / precision / GPU generation")
    stack: str | None = None
    gpu: str | None = Field(None, description="The GPU profile the row resolved to (profiles/gpus: a power-limited or 96 GB part "
                            "is its own profile)")
    plan: str | None = None
    metric: str | None = Field(None, description="Which published figure was compared")
    measured_tokens_per_second_per_gpu: float | None = None
    predicted_tokens_per_second_per_gpu: float | None = None
    error: float | None = Field(None, description="(predicted - measured) / measured")
    predicted_mfu: float | None = None
    predicted_memory_gb: float | None = None
    measured_memory_gb: float | None = None
    feasible: bool | None = None
    gpu_memory_gb: float | None = Field(None, description="The row's GPU HBM, GB")
    resolved: dict[str, str] = Field(default_factory=dict, description="Choices the row does not publish, resolved to the fastest that fits; columns derived from others")
    unused: list[str] = Field(default_factory=list, description="Columns with a value the prediction does not read")
    network: str | None = Field(None, description="The scale-out network read from the interconnect column (rate and scope, "
                                "or a named cloud instance), in place of the GPU's cluster preset's NICs; null: the preset's")
    not_modelled: str | None = Field(None, description="A physical fact of the run the model does not take")
    skipped: str | None = Field(None, description="Why the row could not be predicted")


# Megatron-LM's num_floating_point_operations counts causal attention -- half the score and
# context FLOPs, "Only half of the attention matrix is non-zero" -- from commit 8873b55d6a
# (2025-03-06, first in Megatron-Core 0.12.0); earlier releases count the whole matrix.
MEGATRON_CAUSAL_FLOPS_FROM = (2025, 3)
# Sources that count causal attention without a dated version on every row:
# - the Megatron-MoE-ModelZoo tables name Megatron-LM main@1e057005 (2025-05-24) or later;
# - MoE Parallel Folding (Liu et al., arXiv 2504.14960, April 2025) is by Megatron-Core's MoE
#   team and quotes Megatron's model TFLOP/s (Table 2: 458.3 TFLOP/s = Table 3's 46.3% of 989.5).
#   Its sec. 4.3 says the MFU "only drops from 47.6% to 42.9%" from 16K to 128K context (Table 5).
#   Counted over the whole attention matrix, the FLOPs the run executes would fall from 42% to
#   28% of the peak (at 128K, 70% of those counted FLOPs are attention scores, half of them
#   masked out; autopar.cost.flops.model_flops_per_token, Mixtral-8x22B). Counted causal, they
#   fall from 48% to 43%, as ring CP's exchange and the longer bubble explain. Fused attention
#   runs causal 128-dim heads at 60% or more of the H100 peak at these lengths (FA3 paper
#   Fig. 5-6), so nothing in the run explains the larger drop.
MEGATRON_CAUSAL_SOURCES = (re.compile(r"Megatron-MoE-ModelZoo", re.I), re.compile(r"MoE Parallel Folding", re.I))
# A row whose published layout needs more memory than this multiple of its GPU's HBM (by the
# memory model) cannot have run as written: the memory model's error against the measured peaks
# in the three dev files spans -36% to +35% (25 rows with a published peak; `--report-dir`
# reports both columns), so a layout the model sizes at twice the HBM or more does not fit
# whatever that error is. Its throughput belongs to a layout the row does not state: reported
# as not modelled, with the memory named, and still counted in the all-rows figure.
PUBLISHED_LAYOUT_MEMORY_LIMIT = 2.0
_YEAR_MONTH = re.compile(r"\b(20\d\d)-(0[1-9]|1[0-2])\b")
_CORE_RELEASE = re.compile(r"(?:core|MCore)[ _]?[rv]?0\.(\d+)", re.I)


def megatron_counts_causal(row: dict[str, Any]) -> bool:
    """Whether the row's Megatron-LM release counts causal attention in its model TFLOP/s."""
    version = str(row.get("software_version") or "")
    releases = [int(m) for m in _CORE_RELEASE.findall(version)]
    if releases:
        return min(releases) >= 12
    dates = [(int(y), int(m)) for y, m in _YEAR_MONTH.findall(version)]
    if dates:
        return min(dates) >= MEGATRON_CAUSAL_FLOPS_FROM
    return any(p.search(str(row.get("source") or "")) for p in MEGATRON_CAUSAL_SOURCES)


def source_flops_per_token(row: dict[str, Any], model: ModelSpec) -> tuple[float, str]:
    """FLOPs per token in the row's own accounting (validation README)."""
    kind = f"{row.get('tflops_kind') or ''} {row.get('flop_formula_note') or ''}".lower()
    stack = f"{kind} {row.get('software') or ''}".lower()
    s, l, h, v = row["seq_len"], model.num_layers, model.hidden_size, model.vocab_size
    if "eq.(3)" in kind or "96*b*s*l*h^2" in kind:
        # Narayanan et al. 2021 eq. 3, full recompute counted: 96 B s l h^2 (1 + s/6h + V/16lh)
        return 96 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)), "narayanan_eq3"
    # Megatron-LM / NeMo model FLOPs: 3 x forward (2 x for LoRA), no recompute; attention
    # non-causal, or causal in Megatron-LM from 2025-03 (its --log-throughput TFLOP/s)
    frozen = frozen_weights(row)
    if "megatron" in stack and megatron_counts_causal(row):
        return model_flops_per_token(model, s, causal=True, frozen_weights=frozen), "megatron_model_flops_causal"
    return model_flops_per_token(model, s, frozen_weights=frozen), "megatron_model_flops"


def measured_tokens_per_gpu(row: dict[str, Any], model: ModelSpec, gpu: GpuSpec | None = None) -> tuple[float, str] | None:
    """The row's measured tokens/s per GPU and the column it came from. An MFU or HFU without the
    peak the source divided by is taken against `gpu`'s dense half-precision peak, the convention
    of MFU (PaLM, Chowdhery et al. 2022, App. B: against the accelerator's bf16 matmul peak;
    torchtitan's MFU, get_peak_flops, likewise for its float8 runs)."""
    n = row["num_gpus"]
    if row.get("tokens_per_sec_per_gpu"):
        return float(row["tokens_per_sec_per_gpu"]), "tokens_per_sec_per_gpu"
    if row.get("tokens_per_sec_total"):
        return float(row["tokens_per_sec_total"]) / n, "tokens_per_sec_total"
    if row.get("step_time_s"):
        return row["seq_len"] * row["global_batch_size"] / row["step_time_s"] / n, "step_time_s"
    if row.get("samples_per_sec"):
        return row["samples_per_sec"] * row["seq_len"] / n, "samples_per_sec"
    flops, how = source_flops_per_token(row, model)
    if row.get("tflops_per_gpu"):
        return row["tflops_per_gpu"] * 1e12 / flops, f"tflops_per_gpu ({how})"
    peak, note = row.get("peak_tflops_used_by_source"), how
    if not peak and gpu is not None:
        peak, note = getattr(gpu.peak_tflops, gpu.half_dtype), f"{how}; the part's dense {gpu.half_dtype} peak: none stated"
    for key in ("mfu", "hfu"):
        if row.get(key) and peak:
            return row[key] * peak * 1e12 / flops, f"{key} x {peak} TFLOP/s ({note})"
    return None


def family(inputs: RowInputs, zero: int) -> str:
    """The row's family (autopar.specs.trust.family_of): the grain at which the validated
    error is reported and attached to estimates."""
    return family_of(inputs.model.is_moe, zero, inputs.training.precision.value, inputs.cluster.gpu.architecture)


def _spelled(value: Any) -> str:
    """A resolved choice as the report prints it: an enum by its value, modules joined by '+'."""
    if isinstance(value, tuple):
        return "+".join(_spelled(v) for v in value)
    return value.value if hasattr(value, "value") else str(value)


def _candidates(inputs: RowInputs) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Plan fields for every value of the open choices, with what each resolved."""
    options: list[list[tuple[str, Any]]] = []
    if "recompute" in inputs.open_choices:
        distinct_selective = not inputs.training.flash_attention or inputs.training.stack != Stack.megatron
        modes = [Recompute.none] + ([Recompute.selective] if distinct_selective else []) + [Recompute.full]
        choices = [(("recompute", r),) for r in modes]
        # layer-level activation offloading, the other way Megatron-Core fits activations: NVIDIA's
        # benchmark recipes run it where memory is short (Megatron-Bridge perf_recipes/llama/gb200 and
        # gb300 llama3.py: LLaMA-3 70B on 64 GPUs, Megatron-FSDP, cpu_offloading_num_layers 20-40).
        # Megatron-Core allows it only at pp = 1 and without recompute (autopar.specs.plan.Plan);
        # the run offloaded just enough layers to fit: eighths of the model's layers
        if inputs.training.stack == Stack.megatron and inputs.plan_fields.get("pp", 1) == 1 and not inputs.plan_fields.get("offload_modules"):
            layers = inputs.model.num_layers
            choices += [(("recompute", Recompute.none), ("offload_num_layers", n))
                        for n in sorted({max(1, layers * k // 8) for k in range(1, 8)}) if n < layers]
        # Megatron-Core's output-discarding checkpoints (--recompute-modules layernorm / moe_act /
        # mla_up_proj: CheckpointWithoutOutput in megatron/core/transformer/transformer_layer.py,
        # moe/experts.py, multi_latent_attention.py): the cheapest way to fit when a layout is just
        # over memory, since each reruns only a norm, an activation or an up-projection
        # (a row that names its modules states its recompute, so none is open here)
        if inputs.training.stack == Stack.megatron:
            cheap = cheap_checkpoints(inputs.model)  # none on a dense model without MLA
            # every non-empty set, fewest modules first, in a fixed order (ties keep the first)
            choices += [(("recompute", Recompute.selective), ("recompute_modules", c))
                        for n in range(1, len(cheap) + 1) for c in itertools.combinations(cheap, n)]
        # full recompute of only some layers per stage (Megatron --recompute-num-layers): the run
        # may have recomputed just enough layers to fit; with interleaving the count is per model
        # chunk (block method: the first N layers of each of the vpp chunks), so a stage
        # recomputes a multiple of vpp (autopar/emit/megatron.py refuses the others)
        if inputs.training.stack == Stack.megatron:
            per_stage = -(-inputs.model.num_layers // inputs.plan_fields.get("pp", 1))
            vpp = inputs.plan_fields.get("vpp") or 1
            choices += [(("recompute", Recompute.full), ("recompute_num_layers", vpp * k))
                        for k in (1, 2, 4, 8, 16, 32, 64) if vpp * k < per_stage]
        options.append(choices)
    if "etp" in inputs.open_choices:
        f = inputs.plan_fields
        grid = inputs.cluster.num_gpus // f["pp"]  # tp x cp x dp ranks per stage, where experts fold
        options.append([("etp", e) for e in (1, 2, 4, 8) if grid % (e * f["ep"]) == 0])
    if "zero" in inputs.open_choices:  # 'ZeRO: yes' without its stage
        options.append([("zero", z) for z in (1, 2, 3)])
    if "mbs" in inputs.open_choices:
        options.append([("mbs", b) for b in (1, 2, 4)])
    out = []
    for combo in itertools.product(*options):
        pairs = [pair for group in combo for pair in (group if isinstance(group[0], tuple) else (group,))]
        fields = {**inputs.plan_fields, **dict(pairs)}
        out.append((fields, {k: _spelled(v) for k, v in pairs}))
    return out


def _resolve(inputs: RowInputs, params: CostParams) -> tuple[Estimate, dict[str, str], dict[str, Any]]:
    """The row's plan; unpublished choices resolved to the fastest that fits (the run did run),
    or to the least memory when none fits."""
    tried: list[tuple[Estimate, dict[str, str], dict[str, Any]]] = []
    last_error: AutoparError | None = None
    for fields, chosen in _candidates(inputs):
        try:
            tried.append((estimate(inputs.model, inputs.cluster, inputs.training, plan_of(fields), params), chosen, fields))
        except (AutoparError, ValueError) as exc:
            if isinstance(exc, ValidationError):  # a plan pydantic refuses: its first error, named
                exc = InputError.from_validation(exc, "plan", ",".join(f"{k}={getattr(v, 'value', v)}" for k, v in fields.items()))
            last_error = exc if isinstance(exc, AutoparError) else AutoparError(str(exc))
    if not tried:
        raise last_error or AutoparError("no candidate plan")
    fitting = [t for t in tried if t[0].feasible]
    if fitting:
        return min(fitting, key=lambda t: t[0].step_seconds)
    return min(tried, key=lambda t: t[0].memory_bytes_per_gpu)


def predict_row(row: dict[str, Any], params: CostParams | None = None) -> RowResult:
    base = RowResult(id=str(row.get("id")), source_group=str(row.get("source_group")), model_name=str(row.get("model_name")), num_gpus=0)
    try:
        row, derived = normalize_row(row)
        base = base.model_copy(update={"num_gpus": int(row.get("num_gpus") or 0)})
        inputs = row_inputs(row)
        base = base.model_copy(update={"unused": inputs.unused, "not_modelled": inputs.not_modelled, "stack": inputs.training.stack.value,
                                        "gpu": inputs.cluster.gpu.name})
        measured = measured_tokens_per_gpu(row, inputs.model, inputs.cluster.gpu)
        if measured is None:
            return base.model_copy(update={"skipped": "no measured throughput, step time, TFLOP/s or MFU"})
        est, resolved, fields = _resolve(inputs, params_for_cluster(inputs.cluster, params))
    except (AutoparError, ValueError, KeyError, TypeError) as exc:
        return base.model_copy(update={"skipped": f"{type(exc).__name__}: {exc}"})
    value, metric = measured
    pred = est.tokens_per_second_per_gpu
    hbm = inputs.cluster.gpu.hbm_bytes
    if not base.not_modelled and est.memory_bytes_per_gpu > PUBLISHED_LAYOUT_MEMORY_LIMIT * hbm:
        base = base.model_copy(update={"not_modelled": (
            f"the published layout ({est.plan}) needs {est.memory_bytes_per_gpu / 1e9:.0f} GB per GPU, "
            f"{est.memory_bytes_per_gpu / hbm:.1f}x the GPU's {hbm / 1e9:.0f} GB: the run cannot have used it as written")})
    memory = row.get("memory_gb")
    unit = GIB if str((row.get("other_metrics") or {}).get("memory_unit", "")).lower() == "gib" else 1e9
    return base.model_copy(update={
        "family": family(inputs, plan_of(fields).zero),
        "plan": est.plan, "metric": metric, "measured_tokens_per_second_per_gpu": value,
        "predicted_tokens_per_second_per_gpu": pred, "error": (pred - value) / value,
        "predicted_mfu": est.mfu, "predicted_memory_gb": est.memory_bytes_per_gpu / 1e9, "feasible": est.feasible,
        "gpu_memory_gb": hbm / 1e9, "measured_memory_gb": memory * unit / 1e9 if memory else None, "resolved": {**derived, **resolved}, "network": inputs.network,
    })
