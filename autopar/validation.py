"""Check the cost model against published training runs (shared/validation/dev_runs.json
format). Each row is turned into model, cluster, training and plan with documented defaults
for what the row leaves out; the prediction is compared in tokens/s per GPU, converting a
published TFLOP/s or MFU with the *source's own* FLOP accounting. One global set of cost
coefficients; no per-row or per-source correction."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from autopar.cost import estimate
from autopar.cost.flops import model_flops_per_token
from autopar.errors import AutoparError, InputError
from autopar.specs import ClusterSpec, ModelSpec, Plan, Precision, TrainingSpec, load_cluster, load_gpu
from autopar.specs.costparams import CostParams, params_for_cluster
from autopar.specs.plan import Recompute

# GPU of a row -> cluster preset whose node and fabric it ran on (resized to the row's GPUs)
CLUSTER_FOR_GPU = {
    "H100": "dgx-h100-superpod", "H200": "dgx-h200", "H800": "hgx-h800", "A100-80GB": "dgx-a100",
    "A100-40GB": "dgx-a100-40gb", "B200": "dgx-b200", "B300": "dgx-b300", "GB200": "gb200-nvl72",
    "GB300": "gb300-nvl72", "V100": "dgx-a100",
}
PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_current_scaling": "fp8", "mxfp8": "fp8", "nvfp4": "fp4", "fp4": "fp4"}
GATED_NAMES = re.compile(r"llama|mistral|mixtral|qwen|deepseek|gemma|olmo", re.I)

DEFAULTS_DOC = """Defaults for fields a row leaves out:
- micro_batch_size: 1; cp, ep, vpp: 1; etp: tp (Megatron default)
- precision: bf16; gpus_per_node: 8 (72 for NVL72 GPUs)
- recompute: none (the run's time is predicted even where the memory model says it would not fit; 'feasible' reports that)
- sequence_parallel: on when tp > 1 (Megatron-Core and NeMo default), off for 2021 software
- ZeRO: 3 for FSDP rows; 1 (distributed optimizer) for Megatron/NeMo rows from 2022 on; 0 for 2021 software
- flash attention: off for 2021 software (unfused softmax), on otherwise
- TP communication overlap: off for 2021 software, on with sequence parallel otherwise
- task lora: base weights frozen (no weight gradients, optimizer or DP reduction)
- gated MLP (SwiGLU): Llama/Mistral/Mixtral/Qwen/DeepSeek/Gemma/OLMo names; GPT, MPT, Nemotron not gated
- dropout: on for GPT-style Megatron models (Megatron default 0.1), off otherwise
- tied embeddings: GPT and MPT tied, the others untied
- vocab_size: the family's tokenizer (Nemotron 256000, Llama-3 128256, Llama-2/Mistral 32000, MPT 50432, GPT 50257)"""


class RowResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    source_group: str
    model_name: str
    num_gpus: int
    plan: str | None = None
    metric: str | None = Field(None, description="Which published figure was compared")
    measured_tokens_per_second_per_gpu: float | None = None
    predicted_tokens_per_second_per_gpu: float | None = None
    error: float | None = Field(None, description="(predicted - measured) / measured")
    predicted_mfu: float | None = None
    predicted_memory_gb: float | None = None
    feasible: bool | None = None
    skipped: str | None = Field(None, description="Why the row could not be predicted")


# tokenizer size of a model family, for rows that leave vocab_size out
FAMILY_VOCAB = (("nemotron", 256000), ("llama3", 128256), ("llama-3", 128256), ("llama", 32000),
                ("mixtral", 32000), ("mistral", 32000), ("mpt", 50432), ("gpt", 50257))


def _family_vocab(name: str) -> int:
    low = name.lower().replace(" ", "")
    return next((v for key, v in FAMILY_VOCAB if key in low), 50257)


def _gpu_name(row: dict[str, Any]) -> str:
    name = str(row.get("gpu_normalized") or row.get("gpu_type") or "")
    if name.lower().startswith("ampere"):
        return "A100-80GB"
    return name


def _is_2021(row: dict[str, Any]) -> bool:
    return "2021" in str(row.get("software_version") or "") or str(row.get("source_group", "")).endswith("2021_table1")


def row_model(row: dict[str, Any]) -> ModelSpec:
    name = str(row.get("model_name") or row["id"])
    h, ffn = row["hidden_size"], row.get("ffn_hidden_size") or 4 * row["hidden_size"]
    gated = bool(GATED_NAMES.search(name))
    megatron_gpt = not gated and "megatron" in str(row.get("software", "")).lower() and "gpt" in name.lower()
    fields: dict[str, Any] = {
        "name": name, "num_layers": row["num_layers"], "hidden_size": h,
        "num_attention_heads": row["num_attention_heads"], "num_kv_heads": row.get("num_kv_heads"),
        "ffn_hidden_size": ffn, "gated_mlp": gated, "vocab_size": row.get("vocab_size") or _family_vocab(name),
        "tied_embeddings": not gated and "nemotron" not in name.lower(), "dropout": megatron_gpt,
    }
    if row.get("moe_num_experts"):
        fields.update(num_experts=row["moe_num_experts"], moe_top_k=row.get("moe_top_k") or 2,
                      moe_ffn_hidden_size=row.get("moe_ffn_hidden_size") or ffn,
                      moe_shared_expert_ffn_size=row.get("moe_shared_expert_ffn_size") or 0)
    return ModelSpec.model_validate(fields)


def row_cluster(row: dict[str, Any]) -> ClusterSpec:
    gpu = load_gpu(_gpu_name(row))
    preset = CLUSTER_FOR_GPU.get(gpu.name)
    if preset is None:
        raise InputError("gpu_normalized", row.get("gpu_normalized"), f"no cluster preset for {gpu.name}")
    cluster = load_cluster(preset)
    per_node = row.get("gpus_per_node")
    # a smaller node than the preset's (e.g. 4-GPU PCIe boxes) narrows the NVLink domain; an
    # NVL72 rack's 4-GPU compute trays do not (the NVLink domain stays 72)
    if per_node and per_node < cluster.gpus_per_node <= 8:
        cluster = cluster.model_copy(update={"gpus_per_node": per_node})
    return cluster.with_gpus(int(row["num_gpus"]))


def row_training(row: dict[str, Any]) -> TrainingSpec:
    precision = PRECISION.get(str(row.get("precision_normalized") or "bf16").lower(), "bf16")
    return TrainingSpec(seq_len=row["seq_len"], global_batch_size=row["global_batch_size"],
                        precision=Precision(precision), flash_attention=not _is_2021(row),
                        frozen_weights=str(row.get("task") or "").lower() in ("lora", "qlora", "peft", "adapter"))


def _recompute(row: dict[str, Any]) -> Recompute | None:
    text = str(row.get("recompute") or "").lower()
    if text.startswith("full"):
        return Recompute.full
    if text.startswith("selective"):
        return Recompute.selective
    if text.startswith("none") or text in ("false", "no"):
        return Recompute.none
    return None


def _zero(row: dict[str, Any]) -> int:
    if row.get("fsdp"):
        return 3
    if row.get("zero_stage") is not None:
        return int(row["zero_stage"])
    if row.get("distributed_optimizer") is not None:
        return 1 if row["distributed_optimizer"] else 0
    return 0 if _is_2021(row) else 1


def row_plan(row: dict[str, Any], recompute: Recompute) -> Plan:
    tp = row.get("tp") or 1
    sp = row.get("sequence_parallel")
    if sp is None:
        sp = tp > 1 and not _is_2021(row)
    fields: dict[str, Any] = {
        "tp": tp, "pp": row.get("pp") or 1, "cp": row.get("cp") or 1, "ep": row.get("ep") or 1,
        "etp": row.get("etp"), "vpp": row.get("vpp") or 1, "mbs": row.get("micro_batch_size") or 1,
        "zero": _zero(row), "recompute": recompute, "sp": bool(sp) and tp > 1,
    }
    if _is_2021(row):
        fields["tp_overlap"] = False  # --tp-comm-overlap arrived with Megatron-Core (2023)
    fsdp = row.get("fsdp")
    if isinstance(fsdp, int) or (isinstance(fsdp, str) and fsdp.isdigit()):
        fields["zero_shard_size"] = int(fsdp)
    return Plan.model_validate(fields)


def source_flops_per_token(row: dict[str, Any], model: ModelSpec) -> tuple[float, str]:
    """FLOPs per token in the row's own accounting (validation/README.md)."""
    kind = f"{row.get('tflops_kind') or ''} {row.get('flop_formula_note') or ''}".lower()
    s, l, h, v = row["seq_len"], model.num_layers, model.hidden_size, model.vocab_size
    if "eq.(3)" in kind or "96*b*s*l*h^2" in kind:
        # Narayanan et al. 2021 eq. 3, full recompute counted: 96 B s l h^2 (1 + s/6h + V/16lh)
        return 96 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)), "narayanan_eq3"
    # Megatron-LM / NeMo model FLOPs: 3 x forward (2 x for LoRA), no recompute, non-causal attention
    frozen = str(row.get("task") or "").lower() in ("lora", "qlora", "peft", "adapter")
    return model_flops_per_token(model, s, frozen_weights=frozen), "megatron_model_flops"


def measured_tokens_per_gpu(row: dict[str, Any], model: ModelSpec) -> tuple[float, str] | None:
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
    peak = row.get("peak_tflops_used_by_source")
    for key in ("mfu", "hfu"):
        if row.get(key) and peak:
            return row[key] * peak * 1e12 / flops, f"{key} x {peak} TFLOP/s ({how})"
    return None


def predict_row(row: dict[str, Any], params: CostParams | None = None) -> RowResult:
    base = RowResult(id=str(row.get("id")), source_group=str(row.get("source_group")),
                     model_name=str(row.get("model_name")), num_gpus=int(row.get("num_gpus") or 0))
    try:
        model, cluster, training = row_model(row), row_cluster(row), row_training(row)
        measured = measured_tokens_per_gpu(row, model)
        if measured is None:
            return base.model_copy(update={"skipped": "no measured throughput, step time, TFLOP/s or MFU"})
        plan = row_plan(row, _recompute(row) or Recompute.none)
        est = estimate(model, cluster, training, plan, params_for_cluster(cluster, params))
    except (AutoparError, ValueError, KeyError, TypeError) as exc:
        return base.model_copy(update={"skipped": f"{type(exc).__name__}: {exc}"})
    value, metric = measured
    pred = est.tokens_per_second_per_gpu
    return base.model_copy(update={
        "plan": est.plan, "metric": metric, "measured_tokens_per_second_per_gpu": value,
        "predicted_tokens_per_second_per_gpu": pred, "error": (pred - value) / value,
        "predicted_mfu": est.mfu, "predicted_memory_gb": est.memory_bytes_per_gpu / 1e9, "feasible": est.feasible,
    })


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InputError("runs", str(path), f"cannot read file ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise InputError("runs", str(path), f"not valid JSON: {exc}") from None
    rows = data.get("rows", data.get("runs")) if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InputError("runs", str(path), "must be a JSON list of run objects (or {\"rows\": [...]})")
    for i, r in enumerate(rows):
        for key in ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "num_gpus", "global_batch_size"):
            if key not in r:
                raise InputError(f"runs[{i}].{key}", None, "required column is missing")
    return rows


def summarize(results: list[RowResult]) -> dict[str, Any]:
    done = [r for r in results if r.error is not None]
    groups: dict[str, list[float]] = {}
    for r in done:
        groups.setdefault(r.source_group, []).append(abs(r.error))
    return {
        "overall_mape": statistics.fmean(abs(r.error) for r in done) if done else None,
        "by_group": {g: {"mape": statistics.fmean(v), "num_rows": len(v)} for g, v in sorted(groups.items())},
        "num_rows": len(results),
        "num_predicted": len(done),
        "num_skipped": len(results) - len(done),
        "median_abs_error": statistics.median(abs(r.error) for r in done) if done else None,
        "mean_signed_error": statistics.fmean(r.error for r in done) if done else None,
        "defaults": DEFAULTS_DOC,
    }


def validate_runs(path: str | Path, params: CostParams | None = None,
                  progress: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """progress(done, total, row id) is called after each row (the CLI's progress line)."""
    rows = load_rows(path)
    results = []
    for i, row in enumerate(rows, 1):
        results.append(predict_row(row, params))
        if progress:
            progress(i, len(rows), str(row.get("id")))
    return {"rows": [r.model_dump(mode="json") for r in results], "summary": summarize(results)}
