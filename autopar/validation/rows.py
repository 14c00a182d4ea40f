"""A published run (one row of a runs file: tests/data/*_runs.json) as model, cluster, training
and plan, with documented defaults for what the row leaves out. Every column the prediction
reads is read here; columns it cannot use are listed per row (RowInputs.unused)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from autopar.errors import InputError, ProfileNotFound
from autopar.specs import ClusterSpec, ModelSpec, Precision, TrainingSpec, load_cluster, load_gpu, load_model
from autopar.specs._files import preset_files
from autopar.specs.hardware import GpuSpec, IntraNode
from autopar.specs.layout import megatron_layout
from autopar.specs.plan import CpAlgo, Dispatcher, OffloadModule, Plan, Recompute, RecomputeModule, Schedule, module_names
from autopar.specs.training import AttentionKernel, Fp8Recipe, MoeRouting, Stack
from autopar.validation.network import MAX_NIC_NODE_GPUS, stated_network

# GPU of a row -> cluster preset whose node and fabric it ran on (resized to the row's GPUs)
CLUSTER_FOR_GPU = {
    "H100": "dgx-h100-superpod", "H200": "dgx-h200", "H800": "hgx-h800", "A100-80GB": "dgx-a100", "A800": "dgx-a100",
    "A100-40GB": "dgx-a100-40gb", "B200": "dgx-b200", "B300": "dgx-b300", "GB200": "gb200-nvl72",
    "GB300": "gb300-nvl72", "V100": "dgx-2", "H20": "dgx-h100-superpod", "GH200": "quad-gh200",
}
PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_current_scaling": "fp8", "mxfp8": "fp8", "nvfp4": "fp4", "fp4": "fp4"}
GATED_NAMES = re.compile(r"llama|mistral|mixtral|qwen|deepseek|gemma|olmo|gpt-?oss|kimi|\byi\b|internlm|baichuan|dbrx|grok|"
                         r"phi-?3|granite|stablelm|vicuna|arctic|command[- ]?r|\bglm|chatglm|\bpalm\b|hunyuan|minimax|skywork|"
                         r"xverse|aquila|smollm", re.I)
# Mistral NeMo (12B, the only size) and Mistral Small 3 / 3.1 / 3.2 (24B; Small 2409 is a 22B
# model with the v3 tokenizer): their vocabulary (FAMILY_VOCAB) and their presets (PRESET_NAMES)
MISTRAL_NEMO = r"mistral[-_ ]?nemo"
MISTRAL_SMALL_3 = r"mistral[-_ ]?small[-_ ]?(?:3(?:\.[12])?\b|24b)"
# tokenizer size of a model family, for rows that leave vocab_size out
# (a pattern searched in the lowercase name, in order; 'llama3' not followed by a digit: Llama 3.x, not
# CodeLlama-34B or LLaMA-33B)
# Sizes are the HF config.json vocab_size of each family's published checkpoints: gpt-oss
# (openai/gpt-oss-120b) 201088; Qwen3 151936 (Qwen2/2.5 7B and up pad to 152064); DeepSeek-V3/R1
# 129280, DeepSeek-V2 and DeepSeek LLM 102400; Gemma 3 262208, Gemma 1/2 256000; Falcon 65024; BLOOM
# 250880; OPT 50272; Pythia 50304; GPT-NeoX-20B 50432; Phi-3 32064; Yi 64000. Llama 3 comes first:
# 'Llama-3.1-Nemotron-70B' is a Llama with Llama 3's tokenizer. Mistral's Tekken tokenizer
# (mistralai/Mistral-Nemo-Base-2407, Mistral-Small-24B-Base-2501, Ministral-8B-Instruct-2410,
# Pixtral-12B-2409, Magistral and Devstral Small: 131072) and its v3 tokenizer
# (Mistral-Large-Instruct-2407, Codestral-22B-v0.1, Mistral-7B-v0.3: 32768) before the v1 32000
# of Mistral 7B v0.1/v0.2.
FAMILY_VOCAB = ((r"llama[-_ ]?3(?!\d)", 128256), ("nemotron", 256000), (r"gpt[-_ ]?oss", 201088), ("qwen", 151936),
                (r"deepseek[-_ ]?(?:v3|r1)", 129280), ("deepseek", 102400), (r"gemma[-_ ]?3", 262208), ("gemma", 256000),
                ("llama", 32000), ("mixtral", 32000),
                (rf"{MISTRAL_NEMO}|ministral|{MISTRAL_SMALL_3}|pixtral|magistral|devstral", 131072),
                (r"mistral[-_ ]?large|codestral|mistral[-_ ]?7b[-_ ]?v0\.3", 32768), ("mistral", 32000), ("falcon", 65024), ("bloom", 250880),
                (r"\bopt-\d", 50272), ("pythia", 50304), ("neox", 50432), (r"phi[-_ ]?3", 32064), (r"\byi-\d", 64000),
                ("mpt", 50432), ("gpt", 50257))
# columns that describe the row, not the run's inputs or outcome
META = {"id", "source_group", "source", "source_location", "source_commit", "table_or_section", "variant", "superseded",
        "model_name", "model_type", "num_params_billion", "dims_source", "derived_fields", "validation_tier", "notes",
        "tflops_kind", "flop_formula_note", "peak_tflops_used_by_source", "software_version", "task", "gpu_normalized",
        "dp_inferred", "tokens_per_batch", "grad_accum_steps", "model_parallel_size", "precision"}
# columns the prediction reads
READ = {"interconnect", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "seq_len",
        "moe_num_experts", "moe_top_k", "moe_ffn_hidden_size", "moe_shared_expert_ffn_size", "gpu_type", "num_gpus",
        "gpus_per_node", "tp", "pp", "dp", "cp", "ep", "etp", "vpp", "sequence_parallel", "recompute", "zero_stage",
        "distributed_optimizer", "fsdp", "micro_batch_size", "global_batch_size", "precision_normalized", "software",
        "moe_dispatcher", "extra_layout", "other_metrics", "tokens_per_sec_per_gpu", "tokens_per_sec_total", "step_time_s",
        "samples_per_sec", "tflops_per_gpu", "mfu", "hfu", "memory_gb", "aggregate_pflops"}
USED_METRICS = {"torch_compile", "async_tp", "pp_schedule", "local_batch_size", "memory_unit"}

DEFAULTS_DOC = """Defaults for fields a row leaves out:
- torchtitan with pipeline parallelism: each rank's batch split into pp micro-batches (its default)
- 'selective: layernorm, moe' (Megatron --recompute-modules; 'norm, act' = layernorm, moe_act):
  selective recompute of those modules
- torchtitan 'selective (layer)' recompute: every other block whole (its default n = 2), i.e.
  full recompute of half the layers of a stage
- micro_batch_size and recompute when not published: the fastest choice that fits in memory
  (the run did run), for Megatron stacks including full recompute of 1-64 layers per stage
  (--recompute-num-layers); the row's report lists what was resolved ('resolved'). Interleaving is
  not resolved this way: it takes an explicit flag in every framework, so a row that does not
  name it ran without it
- global_batch_size: tokens_per_batch / seq_len, else micro_batch_size x dp x grad_accum_steps
  (the report lists the derivation under 'resolved'); numeric columns written as text ('1,024')
  read as numbers, a zero_stage written as text ('ZeRO-3') as its stage, an mfu or hfu written
  as a percentage ('38.2%', or a number above 1) as its fraction; a number with a unit or an
  approximation ('~3700', '3700 tok/s', '64 GPUs', '850 ms' in step_time_s) as the number, a K or
  M after a count of tokens, sequences or GPUs binary ('4K' = 4,096), after a throughput decimal;
  'None', 'N.A.', 'TBD' in a numeric column: not given; a label or note around the number ('TP=2',
  '2-way', '64 (8 nodes)') is dropped, a degree written as off ('no CP') is 1, num_gpus in nodes is
  nodes x GPUs per node, a global batch in tokens ('4M tokens') is tokens_per_batch, a per-GPU
  throughput written per node is divided by the node's GPUs, '0.4 PFLOPS' is 400 TFLOP/s, memory
  in MB, MiB or TB is converted to the column's GB; a measured value written with its spread
  ('3,700 ± 50') is its central value, one written as a range ('3700-3800', '3.7k-3.8k tok/s') the
  range's midpoint (listed under 'resolved'; a degree written as a range is refused); ZeRO text
  takes the digit after 'ZeRO'/'stage' ('DP=32, ZeRO-1' is 1); dp, where the batch needs it
  and the row has none, is num_gpus / (tp x pp x cp)
- tp or pp left out: model_parallel_size / the other, else num_gpus / (dp x cp x the other)
  when dp is stated (listed under 'resolved'); num_kv_heads left out: the model preset's when the
  preset has the row's query heads, else multi-head attention
- cp, ep, vpp: 1; etp: tp (Megatron default); a pp_schedule 'DualPipeV' (torchtitan): schedule
  dualpipev with its two stages per rank
- a blank cell ('', n/a, -, ?, unknown): not given; layers, width or heads (or, with EP, the
  experts) left out: the model preset the model_name names (also 'Llama 3.1 70B' for the Llama 3
  preset of that size); num_gpus left out: tp x pp x cp x dp, else total / per-GPU throughput;
  seq_len left out: tokens_per_batch / global_batch_size
- precision: precision_normalized, else the narrowest format the precision column names (FP4,
  FP8/MXFP8, BF16, FP16/AMP; not one it names as unused: 'bf16 (no FP8)'), else bf16 (fp16 on
  a part without bf16: V100)
- gpus_per_node: 8 (72 for NVL72 GPUs, 4 for GH200, 16 for V100: DGX-2); attention unfused on
  V100 (FlashAttention needs sm_75+)
- GPU: a part gpu_type names (A800, H800, H20, GH200, H100 or A100 PCIe, a 40 GB A100, a 96 GB
  H100, a power-capped 750 W B200) outranks the nearest label in gpu_normalized, which is read
  for the same parts next; a label that is no preset ('H100 (80GB)', 'DGX-B200') is read for the
  GPU it names; a PCIe card's node talks over PCIe at the card's link rate
- scale-out network: the GPU's cluster preset (CLUSTER_FOR_GPU), unless the interconnect column
  states a rate with its scope ('400 Gbps per node', '8x 200 Gb/s HDR per node', '400 Gb/s per
  GPU'; a count of NICs is a node's) or names a cloud instance in profiles/validation/networks.yaml
  (AWS p4d, p5; Azure ND A100 v4, ND H100 v5): then that rate per GPU (the row's 'network');
  a rate without a scope ('InfiniBand 400 Gb/s') is not read, nor a per-node one in an NVL72 rack
- software stack from the 'software' column: Megatron-Core/NeMo -> megatron; torchtitan ->
  torchtitan (torchtitan-compile when torch.compile is on: the torch_compile column, or
  'compile' in the precision or variant, or notes / software version saying 'torch.compile
  enabled', 'compile on', 'compile from <toml>' and not 'compile off'); Composer/llm-foundry FSDP ->
  llm-foundry; HF Trainer / Accelerate, fairscale, metaseq, fms-fsdp or 'PyTorch FSDP' as the trainer
  (not Megatron/NeMo) -> pytorch-fsdp; other DeepSpeed rows -> deepspeed; the rest -> megatron
- sequence_parallel, torch_compile, async_tp: yes/no as written ('False' is off); sequence
  parallel not given: on when tp > 1 (Megatron-Core and NeMo default), off for software from
  before 2022 (a version or software naming 2021, or dated earlier)
- recompute in other trainers' words: 'none', 'without/no activation checkpointing', 'No AC',
  'AC off', 'activation checkpointing: off' -> none (read first); 'full...' -> full; 'selective'
  anywhere, 'SAC', --recompute-activations -> selective; 'activation/gradient checkpointing',
  'AC=full', --checkpoint-activations, a true flag -> full; a false flag -> none; anything else
  (a count of layers, 'partial') is an open choice
- ZeRO stage in words: os / os+g / os+g+p (the ZeRO paper's partitions) -> 1 / 2 / 3, FSDP -> 3,
  distributed optimizer -> 1, none/DDP -> 0; 'yes'/'True'/'ZeRO' without a stage: stages 1-3 are open
  choices (the fastest that fits); PyTorch FSDP HYBRID_SHARD shards within a node,
  SHARD_GRAD_OP keeps the gathered weights from forward to backward (reshard off)
- ZeRO: 3 for FSDP rows; 1 (distributed optimizer) for Megatron/NeMo rows from 2022 on; 0 for 2021 software
- flash attention: off for 2021 software (unfused softmax), on otherwise
- gradient reduction: bf16 for NeMo rows, whose performance recipes set it (NeMo-Framework-Launcher
  conf/training/*_performance.yaml optim.grad_sync_dtype: bf16; NeMo 2.0 scripts/performance/helpers.py
  set_precision_configs: grad_reduce_in_fp32 = False); fp32 otherwise (Megatron-LM's default with --bf16),
  which Megatron-Core also keeps its main gradients in
- TP communication overlap: off for 2021 software and for stacks without it; on with sequence parallel
  in Megatron; async TP in torchtitan when the row says so
- FP8 recipe: rowwise when the precision says so (torchao), else tensorwise (the rows predate
  torchtitan's rowwise-only converter)
- FP8 parameter gathering: when the precision, variant or notes say 'float8 all-gather' (torchao's
  enable_fsdp_float8_all_gather) or 'fp8-param-gather' (Megatron-LM); off otherwise
- torchtitan per-op SAC: keeps cuDNN attention's output unless the software version's latest date
  is before 2025-12 (torchtitan PR #2095 added cuDNN to the save list; Blackwell runs cuDNN first)
- Megatron-Core clamps gpt-oss's GLU in eager kernels when the software's latest date (an ISO date,
  a month, or an NVIDIA container's YY.MM: 'NeMo 26.02.01') is before 2026-08 (TE's fused
  ScaledClampedQGeGLU on Megatron-Core's fused grouped MLP); no date stated: fused
- MoE routing: forced balanced when the row says so ('force-balanced', 'uniform routing',
  'ideal routing', --moe-router-force-load-balancing), in consecutive expert blocks when it names
  NeMo AutoModel's fake balanced gate; token dropping at the capacity the row names;
  otherwise learned dropless
- task naming LoRA, QLoRA, PEFT or adapters: base weights frozen (no weight gradients, optimizer
  or DP reduction)
- an mfu or hfu without peak_tflops_used_by_source: against the part's dense bf16 peak (fp16 on
  Volta), MFU's convention (PaLM App. B)
- MoE: dispatcher 'DeepEP'/'deep_ep'/'Hybrid-EP'/'flex' -> deepep, 'all-gather' -> allgather, else
  all-to-all; EP all-to-all overlapped when the row says 'A2A overlap', 'EP overlap' or
  --overlap-moe-expert-parallel-comm; HSDP shards within a node as HYBRID_SHARD
- gated MLP (SwiGLU): Llama/Mistral/Mixtral/Qwen/DeepSeek/Gemma/OLMo/gpt-oss/Kimi names; GPT, MPT, Nemotron not gated
- dropout: on for GPT-style Megatron models (Megatron default 0.1), off otherwise
- tied embeddings: GPT and MPT tied, the others untied
- vocab_size: the family's tokenizer (Llama-3 128256, Nemotron 256000, gpt-oss 201088, Qwen 151936, DeepSeek-V3
  129280, DeepSeek-V2 102400, Gemma 256000 (Gemma 3 262208), Llama-2/Mistral 32000 (Mistral NeMo, Small 3,
  Ministral 131072; Mistral Large 2, Codestral, 7B v0.3 32768), Falcon, BLOOM, OPT, Pythia,
  Phi-3, Yi, MPT 50432, GPT 50257)
- head_dim: the kv_channels / head_dim its dims_source states, else the preset's (below), else hidden / heads
- a Hugging Face repo id names its model ('meta-llama/Llama-2-7b-hf', 'Mixtral-8x7B-v0.1'); a MoE
  named by its total size only ('Qwen3-235B') is the one preset adding its active size ('-a22b')
- a pipeline schedule named non-interleaved or with interleaving off is 1F1B; 'GPipe' is GPipe; a zero-bubble
  schedule (ZB-H1/H2, ZBV, 'zero bubble') without virtual stages is ZB-H2; a vpp written in words
  ('vpp=5', 'virtual pipeline 4', '2 chunks per stage') where the vpp column is empty; CP named
  Ulysses / a2a runs all-to-all CP, 'a2a+p2p' the hybrid
- a choice named only to deny it ('no DeepEP', 'a2a_overlap=false', 'not force-balanced', 'without
  FSDP', 'SP off') is not taken; a capacity factor however written ('--moe-expert-capacity-factor 1.0',
  'CF=1') drops tokens at it
- the architecture's own fields (MLA, dense prefix and interleaved MoE layers, MTP, local attention
  windows, Gated DeltaNet layers, QK norm, router scoring, MLP gating, tied embeddings; not dropout,
  a training choice): from the model preset the row names (profiles/models; file name or a known
  alias such as 'Llama4 Scout') when its layers, width and experts are the row's; the preset also
  fills KV heads, FFN widths, top-k and vocabulary the row leaves out
- hybrid Mamba models (Nemotron-H, Jamba, Zamba, Falcon-H1, or a row that says Mamba): not modelled,
  unless the row's model is a preset with its Mamba-2 layers (Nemotron-H 8B / 56B, Nemotron 3
  Nano / Super / Ultra)"""


@dataclass
class RowInputs:
    """What a row says, as autopar inputs. `plan_fields` leaves out the choices the row does
    not publish (`open_choices`), which the prediction resolves."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    plan_fields: dict[str, Any]
    open_choices: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    not_modelled: str | None = None
    network: str | None = None  # the scale-out network read from the interconnect column, for the report


# numeric columns as runs files from other sources may write them ("4096", "1,024", "2.0")
INTEGER_COLUMNS = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size",
                   "seq_len", "num_gpus", "gpus_per_node", "tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch_size",
                   "global_batch_size", "grad_accum_steps", "moe_num_experts", "moe_top_k", "moe_ffn_hidden_size",
                   "moe_shared_expert_ffn_size")
FLOAT_COLUMNS = ("tokens_per_sec_per_gpu", "tokens_per_sec_total", "step_time_s", "samples_per_sec", "tflops_per_gpu",
                 "mfu", "hfu", "memory_gb", "aggregate_pflops", "tokens_per_batch", "peak_tflops_used_by_source")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


# a number as tables write it: '~3700', '3700 tok/s', '64 GPUs', '4K', '1.2M'; a K or M after a
# count of tokens, sequences or GPUs is binary ('4K' sequence = 4,096; '16K GPUs' = 16,384, Llama 3
# paper sec. 3.3), after a throughput decimal ('3.7K tokens/s' = 3,700)
_WRITTEN_NUMBER = re.compile(r"^(?:[a-zA-Z]{1,4}\s*[=:]?\s*(?=\d))?(?:~|\u2248|approx\.?|about|ca\.)?\s*"
                             r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*"
                             r"(?:([kKmM])(?![a-zA-Z]))?\s*(?:-way\b|[x*](?![a-zA-Z\d]))?\s*([a-zA-Z/%][\w/ .%-]*)?\s*(?:\([^()]*\))?\s*$")
# a memory cell written in another unit than the column's GB: MB and TB decimal, MiB and TiB
# against GiB (the prefix's two letters: 'mb', 'mi', 'tb', 'ti'); GB and GiB are taken as written
MEMORY_UNITS_IN_GB = {"mb": 1e-3, "mi": 1 / 1024, "tb": 1e3, "ti": 1024.0}
BINARY_MULTIPLES = frozenset({"seq_len", "global_batch_size", "num_gpus", "tokens_per_batch", "vocab_size"})


def _number(column: str, value: Any, integer: bool) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip().replace(",", "").replace("_", "")
    if not text or text.lower() in ("none", "n.a.", "tbd"):
        return None
    plain = _NUMBER.match(text)
    written = None if plain else _WRITTEN_NUMBER.match(text)
    if not plain and written is None:
        raise InputError(column, value, "must be a number")
    number = float(written.group(1) if written else text)
    if written and written.group(2):
        base = 1024 if column in BINARY_MULTIPLES else 1000
        number *= base ** (1 if written.group(2).lower() == "k" else 2)
    unit = (written.group(3) or "").strip().lower() if written else ""
    if column == "step_time_s" and re.match(r"ms(?:ec)?\b|millisec", unit):
        number /= 1000  # '850 ms' in the seconds column
    if column == "tflops_per_gpu" and unit.startswith("pflop"):
        number *= 1000  # '0.4 PFLOPS' in the TFLOP/s column
    if column == "memory_gb" and unit[:2] in MEMORY_UNITS_IN_GB:
        number *= MEMORY_UNITS_IN_GB[unit[:2]]  # '80000 MB' or '0.08 TB' in the GB column
    if integer:
        if number != int(number):
            raise InputError(column, value, "must be a whole number")
        return int(number)
    return number


# a measurement written with its spread: '3,700 ± 50', '3700 +/- 2%'; or as a range: '3700-3800',
# '3.7k–3.8k tok/s', '38 to 40%' (a unit or multiplier written once, after the second number, holds for both)
_SPREAD = re.compile(r"^(?P<value>.*?\d\s*%?)\s*(?:\u00b1|\+/-|\+-)\s*\d[\d.,]*\s*%?(?P<unit>.*)$")
_RANGE = re.compile(r"^\s*(?P<low>[~\u2248]?\s*\d[\d.,]*\s*(?:[kKmM](?![a-zA-Z]))?)\s*(?:-|\u2013|\u2014|\bto\b)\s*"
                    r"(?P<high>[~\u2248]?\s*\d[\d.,]*)(?P<unit>.*)$")
# columns that hold a measured value, where a spread or a range stands for its central value
MEASURED_COLUMNS = ("tokens_per_sec_per_gpu", "tokens_per_sec_total", "step_time_s", "samples_per_sec", "tflops_per_gpu",
                    "mfu", "hfu", "memory_gb", "aggregate_pflops")


def _central_values(out: dict[str, Any]) -> dict[str, str]:
    """A measured cell written with its spread ('3,700 ± 50') is its central value, one written as
    a range ('3700-3800', '3.7k-3.8k tok/s') the range's midpoint (in place; returns what was read).
    A range whose ends are not both numbers, or whose low end exceeds its high end, is left to
    _number, which refuses it naming the column."""
    derived: dict[str, str] = {}
    for column in MEASURED_COLUMNS:
        text = out.get(column)
        if not isinstance(text, str):
            continue
        spread = _SPREAD.match(text)
        if spread:
            out[column] = f"{spread.group('value')}{spread.group('unit')}"
            derived[column] = f"'{text}': its central value"
            continue
        span = _RANGE.match(text)
        if span is None:
            continue
        unit = span.group("unit")
        try:
            low_text = span.group("low") if re.search(r"[kKmM]\s*$", span.group("low")) else span.group("low") + unit
            low, high = _number(column, low_text, False), _number(column, span.group("high") + unit, False)
        except InputError:
            continue
        if low is None or high is None or not 0 < low <= high:
            continue
        out[column] = (low + high) / 2
        derived[column] = f"'{text}': the range's midpoint"
    return derived


# a parallel degree written as off ('off', 'no', 'no CP', 'none', 'no interleaving') is 1
DEGREE_COLUMNS = ("tp", "pp", "cp", "ep", "etp", "vpp")
_DEGREE_OFF = re.compile(r"^\s*(?:off|no|false|none|disabled|not used|n)\b", re.I)  # 'no CP' too


def _cells_with_units(out: dict[str, Any]) -> dict[str, str]:
    """Cells whose text gives their unit (in place): a degree written as off is 1; num_gpus in nodes
    ('8 nodes', '8 nodes x 8 GPUs'; '(64 GPUs)' wins) is nodes x GPUs per node; a global batch
    written in tokens ('4M tokens') is tokens_per_batch; a per-GPU throughput written per node
    ('29.6K tok/s/node') is divided by the node's GPUs. Returns what was derived."""
    derived: dict[str, str] = {}
    for column in DEGREE_COLUMNS:
        if isinstance(out.get(column), str) and _DEGREE_OFF.match(out[column]):
            out[column], derived[column] = 1, f"'{out[column]}' (off) = 1"
    gpus = out.get("num_gpus")
    if isinstance(gpus, str) and re.search(r"\bnodes?\b", gpus, re.I) and not re.search(r"\d\s*gpus?\b", gpus.split("node")[0], re.I):
        stated = re.search(r"(?:^|[(,=])\s*(\d[\d,]*)\s*gpus?\b", gpus, re.I)  # '8 nodes (64 GPUs)', not 'x 4 GPUs' 
        nodes = re.match(r"\s*(\d[\d,]*)\s*nodes?", gpus, re.I)
        per = re.search(r"nodes?\s*[x×*]\s*(\d+)", gpus, re.I)
        if stated:
            out["num_gpus"] = stated.group(1)
        elif nodes:
            count = int(nodes.group(1).replace(",", "")) * int(per.group(1) if per else out.get("gpus_per_node") or 8)
            out["num_gpus"], derived["num_gpus"] = count, f"'{gpus}' x GPUs per node"
    batch = out.get("global_batch_size")
    if isinstance(batch, str) and re.search(r"\btok", batch, re.I) and out.get("tokens_per_batch") is None:
        out["tokens_per_batch"], out["global_batch_size"] = re.sub(r"\s*tok\w*", "", batch, flags=re.I), None
        derived["tokens_per_batch"] = f"global_batch_size '{batch}' (tokens)"
    value = out.get("tokens_per_sec_per_gpu")
    if isinstance(value, str) and re.search(r"/\s*node|per[ -]node", value, re.I):
        number = _number("tokens_per_sec_per_gpu", re.sub(r"\s*(?:/\s*node|per[ -]node)\b", "", value, flags=re.I), False)
        out["tokens_per_sec_per_gpu"] = number / int(out.get("gpus_per_node") or 8) if number else None
        derived["tokens_per_sec_per_gpu"] = f"'{value}' / GPUs per node"
    return derived


def normalize_row(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The row with numeric columns written as text read as numbers, a 'ZeRO-3'-style
    zero_stage read as its stage, an mfu or hfu written as a percentage read as a fraction, a
    missing tp or pp derived from the degrees stated (_missing_degree), and a missing
    global_batch_size derived from tokens_per_batch / seq_len or micro_batch_size x dp x
    grad_accum_steps (what each derivation was is returned, for the report). Raises InputError
    naming the column for a value that is not a number."""
    # a cell a table leaves blank or marks unknown ("", "n/a", "-", "?") is a column not given
    out = {k: (None if isinstance(v, str) and v.strip().lower() in BLANK_CELLS else v) for k, v in row.items()}
    # a utilization is a fraction of peak: "38.2%", or 38.2 (above 1), is a percentage
    written = {c for c in ("mfu", "hfu") if isinstance(out.get(c), str) and out[c].strip().endswith("%")}
    out.update({c: out[c].strip()[:-1] for c in written})
    derived: dict[str, str] = _cells_with_units(out)
    derived.update(_central_values(out))
    for column in INTEGER_COLUMNS + FLOAT_COLUMNS:
        if column in out:
            out[column] = _number(column, out[column], column in INTEGER_COLUMNS)
    for column in ("mfu", "hfu"):
        if column in written or (out.get(column) or 0) > 1:
            out[column] = out[column] / 100
            unit = "percent" if column in written else "percent (above 1)"
            derived[column] = f"{unit}, {derived[column]}" if column in derived else unit
    zero = out.get("zero_stage")
    if isinstance(zero, str):
        named = re.search(r"(?:zero|stage)[\s_=:-]*([0-3])\b", zero, re.I)  # 'DP=32, ZeRO-1', 'stage=2'
        word = next((n for pattern, n in ZERO_WORDS if pattern.search(zero)), None)
        stage = named or (re.search(r"(?<![\d.])[0-3](?![\d.])", zero) if word is None else None)
        if stage is None and word is None and ZERO_ON.match(zero):
            out["zero_stage"] = ZERO_OPEN  # ZeRO used, its stage not given: an open choice (row_plan_fields)
            derived["zero_stage"] = f"'{zero.strip()}': some ZeRO stage, resolved"
        elif stage is None and word is None:
            raise InputError("zero_stage", zero, "must name a ZeRO stage 0-3 (or os / os+g / os+g+p, FSDP, distributed optimizer, none)")
        else:
            out["zero_stage"] = int(stage.group(1 if named else 0)) if stage else word
    derived.update(_dims_from_preset(out))
    derived.update(_missing_num_gpus(out))
    derived.update(_missing_degree(out))
    if out.get("seq_len") is None and out.get("tokens_per_batch") and out.get("global_batch_size"):
        seq, rest = divmod(out["tokens_per_batch"], out["global_batch_size"])
        if not rest and seq > 0:
            out["seq_len"], derived["seq_len"] = int(seq), "tokens_per_batch / global_batch_size"
    for column, rule in REQUIRED_COLUMNS:
        if out.get(column) is None:
            raise InputError(column, None, rule)
    if out.get("global_batch_size") is None and out.get("seq_len"):
        tokens, mbs, steps = out.get("tokens_per_batch"), out.get("micro_batch_size"), out.get("grad_accum_steps")
        ranks = (out.get("tp") or 1) * (out.get("pp") or 1) * (out.get("cp") or 1)
        dp = out.get("dp") or out.get("dp_inferred") or (out.get("num_gpus") or 0) // ranks
        if tokens and tokens % out["seq_len"] == 0:
            out["global_batch_size"] = int(tokens // out["seq_len"])
            derived["global_batch_size"] = "tokens_per_batch / seq_len"
        elif mbs and dp and steps:
            out["global_batch_size"] = int(mbs * dp * steps)
            derived["global_batch_size"] = "micro_batch_size x dp x grad_accum_steps"
        else:
            raise InputError("global_batch_size", None, "required: give it, or tokens_per_batch, or micro_batch_size, dp and grad_accum_steps")
    return out, derived


# a zero_stage cell that says ZeRO ran without its stage ('yes', 'True', 'ZeRO', 'enabled')
ZERO_ON = re.compile(r"^\s*(?:yes|y|true|on|enabled|used|zero|deepspeed zero)\s*$", re.I)
ZERO_OPEN = "open"
# ZeRO stages in words: the ZeRO paper's partitions (Rajbhandari et al. 2020, sec. 5: P_os, P_os+g,
# P_os+g+p), FSDP full sharding (stage 3), Megatron's distributed optimizer (stage 1)
ZERO_WORDS = (
    (re.compile(r"os\s*\+\s*g\s*\+\s*p|full[_ ]?shard|\bfsdp\b", re.I), 3),
    (re.compile(r"os\s*\+\s*g\b", re.I), 2),
    (re.compile(r"^\s*p?_?os\b(?!\s*\+)|dist(?:ributed)?[. _-]*optimi[sz]er|distributedoptimizer|optimizer[- ]state sharding", re.I), 1),
    (re.compile(r"^\s*(?:none|off|no|false|disabled|ddp|plain ddp|n/a)\b|\bno zero\b|\bzero[- ]?(?:disabled|off)\b", re.I), 0),
)
BLANK_CELLS = frozenset({"", "n/a", "na", "nan", "-", "\u2013", "\u2014", "?", "null", "unknown", "not stated", "not reported",
                         "n.a.", "n/r", "tbd", "not available"})
# what no derivation supplies; the rule says where else the value may come from
REQUIRED_COLUMNS = (
    ("num_layers", "required (or a model_name that names a model preset, which gives the architecture)"),
    ("hidden_size", "required (or a model_name that names a model preset, which gives the architecture)"),
    ("num_attention_heads", "required (or a model_name that names a model preset, which gives the architecture)"),
    ("num_gpus", "required (or tp, pp, cp and dp, or tokens_per_sec_total with tokens_per_sec_per_gpu)"),
    ("seq_len", "required (or tokens_per_batch with global_batch_size)"),
)
# the architecture columns a model preset fills when a row states none of the model's shape
PRESET_DIMS = (("num_layers", "num_layers"), ("hidden_size", "hidden_size"), ("num_attention_heads", "num_attention_heads"),
               ("num_kv_heads", "num_kv_heads"), ("ffn_hidden_size", "ffn_hidden_size"), ("vocab_size", "vocab_size"),
               ("moe_num_experts", "num_experts"), ("moe_top_k", "moe_top_k"), ("moe_ffn_hidden_size", "moe_ffn_hidden_size"),
               ("moe_shared_expert_ffn_size", "moe_shared_expert_ffn_size"))


def preset_key_for_name(name: str) -> str | None:
    """The model preset a free-text model name names: its file name, a PRESET_NAMES pattern, or
    the same letters and digits ('Llama-2 70B' is llama2-70b; a LLaMA 3.1, 3.2 or 3.3 size is the
    LLaMA 3 preset of that size: same architecture, Llama 3 paper Table 3); None when none."""
    files, slug = preset_files("models"), _slug(name)
    if slug in files:
        return slug
    key = next((k for pattern, k in PRESET_NAMES if pattern.search(name)), None)
    if key in files:
        return key
    # a Hugging Face repo id names the same model: 'meta-llama/Llama-2-7b-hf', 'mistralai/Mixtral-8x7B-v0.1'
    bare = name.lower().rsplit("/", 1)[-1].replace("\u00d7", "x")
    bare = HF_NAME_SUFFIX.sub("", re.sub(r"\s*\([^)]*\)", "", bare).strip())
    compact = re.sub(r"[^a-z0-9]", "", bare.replace("meta-", "").replace("meta ", ""))
    compact = re.sub(r"^llama3[123]", "llama3", compact)
    keys = {re.sub(r"[^a-z0-9]", "", k): k for k in files}
    if compact in keys:
        return keys[compact]
    # a MoE named by its total size only ('Qwen3-235B'): the one preset that adds its active size ('-a22b')
    active = [k for c, k in keys.items() if c.startswith(compact) and re.fullmatch(r"a\d+b", c[len(compact):])]
    return active[0] if len(active) == 1 and compact else None


# what a Hugging Face repo name adds after the model: '-hf', '-v0.1', '-Instruct', '-Base'
HF_NAME_SUFFIX = re.compile(r"(?:[-_ ](?:hf|v\d+(?:\.\d+)+|instruct|base|chat|fp8|bf16|\d{4}|dense))+$")  # '-2507': a release date


def _dims_from_preset(out: dict[str, Any]) -> dict[str, str]:
    """A row that leaves out the model's layers, width or heads (or, with EP, its experts) takes
    them and the other shape columns it leaves out from the model preset its model_name names (in
    place). A row that states them keeps its own: row_preset matches a preset only to a row of
    the same shape."""
    experts_missing = (out.get("ep") or 1) > 1 and not out.get("moe_num_experts")
    if all(out.get(c) is not None for c in ("num_layers", "hidden_size", "num_attention_heads")) and not experts_missing:
        return {}
    key = preset_key_for_name(str(out.get("model_name") or ""))
    if key is None:
        return {}
    preset, derived = load_model(key), {}
    for column, attribute in PRESET_DIMS:
        value = getattr(preset, attribute)
        if out.get(column) is None and value:
            out[column], derived[column] = value, f"model preset {key}"
    return derived


def _missing_num_gpus(out: dict[str, Any]) -> dict[str, str]:
    """A row without num_gpus: the product of the degrees it states (tp x pp x cp x dp; EP and
    expert TP fold inside them), else its total throughput over its per-GPU throughput (in place)."""
    if out.get("num_gpus") is not None:
        return {}
    dp = out.get("dp") or out.get("dp_inferred")
    if out.get("tp") and out.get("pp") and dp:
        out["num_gpus"] = int(out["tp"] * out["pp"] * (out.get("cp") or 1) * dp)
        return {"num_gpus": "tp x pp x cp x dp"}
    total, per_gpu = out.get("tokens_per_sec_total"), out.get("tokens_per_sec_per_gpu")
    if total and per_gpu and round(total / per_gpu) >= 1 and abs(total / per_gpu - round(total / per_gpu)) < 0.05:
        out["num_gpus"] = int(round(total / per_gpu))
        return {"num_gpus": "tokens_per_sec_total / tokens_per_sec_per_gpu"}
    return {}


def _missing_degree(out: dict[str, Any]) -> dict[str, str]:
    """Fill a tp or pp the row leaves out (in place) from what it does state: model_parallel_size
    is tp x pp (Narayanan et al. 2021 Table 1 gives it beside both; the three runs files agree on
    every row), and a stated dp leaves num_gpus / (dp x cp x the other degree) for the missing one
    (EP and expert TP fold inside those ranks). Defaulting it to 1 instead would cost a different
    layout or break the batch's divisibility. Returns what was derived, for the report."""
    derived: dict[str, str] = {}
    missing = [d for d in ("tp", "pp") if out.get(d) is None]
    if len(missing) != 1:
        return derived
    gone, other = missing[0], "pp" if missing[0] == "tp" else "tp"
    known, mp, gpus = out[other], out.get("model_parallel_size"), out.get("num_gpus")
    ranks = (out.get("dp") or 0) * (out.get("cp") or 1) * known  # 0 when dp is not stated
    if mp and mp % known == 0:
        out[gone], derived[gone] = mp // known, f"model_parallel_size / {other}"
    elif ranks and gpus and gpus % ranks == 0:
        out[gone], derived[gone] = gpus // ranks, f"num_gpus / (dp x cp x {other})"
    return derived


def _text(row: dict[str, Any], *keys: str) -> str:
    return " ".join(str(row.get(k) or "") for k in keys).lower()


def _family_vocab(name: str) -> int:
    low = name.lower()
    return next((v for pattern, v in FAMILY_VOCAB if re.search(pattern, low)), 50257)


# GPU facts a row states in its gpu_type that change the part: the part's own profile, and the GPU
# whose cluster preset the run used. A runs file may label its rows with the nearest GPU of a fixed
# list (fsdp_runs.json: "gpu_normalized H100-80GB is the nearest allowed label"), so a part named
# in gpu_type (A800, H800, H20, GH200, a PCIe card) outranks the label.
STATED_PARTS = (
    # torchtitan Grand Teton, 500 W; written '96GB HBM2e', 'H100 96 GB' (not the 94 GB H100 NVL card)
    (re.compile(r"H100(?![\s-]*NVL).*(\b9[456] ?GB|94-95 ?GB)", re.I), "H100-96GB-500W", "H100"),
    (re.compile(r"H100[\s-]*NVL", re.I), "H100-NVL", "H100"),  # the 94 GB PCIe card (profiles/gpus/h100-nvl.yaml)
    (re.compile(r"B200.*(power[- ]?(?:limited|capped|cap)|\b750 ?W)", re.I), "B200-750W", "B200"),  # torchao MX benchmarks
    (re.compile(r"(\bGH200\b|grace.?hopper).*(14[14] ?GB|HBM3e)", re.I), "GH200-144GB", "GH200"),
    (re.compile(r"\bGH200\b|grace.?hopper", re.I), "GH200", "GH200"),
    (re.compile(r"H100.*\bPCIe", re.I), "H100-PCIe", "H100"),
    (re.compile(r"A100.*(\bPCIe.*\b40 ?GB|\b40 ?GB.*\bPCIe)", re.I), "A100-PCIe-40GB", "A100-80GB"),
    (re.compile(r"A100.*\bPCIe", re.I), "A100-PCIe-80GB", "A100-80GB"),
    (re.compile(r"A100\b(?!-80GB).*\b40 ?GB?\b", re.I), "A100-40GB", "A100-40GB"),
    (re.compile(r"\bA800\b", re.I), "A800", "A800"),
    (re.compile(r"\bH800\b", re.I), "H800", "H800"),
    (re.compile(r"\bH20\b", re.I), "H20", "H20"),
    (re.compile(r"V100.*SXM3|DGX-2H", re.I), "V100-SXM3", "V100"),
    (re.compile(r"V100.*\b16 ?GB", re.I), "V100-16GB", "V100"),
)


def _gpu_name(row: dict[str, Any]) -> tuple[str, str]:
    """(GPU profile, the GPU whose cluster preset the run used)."""
    stated = str(row.get("gpu_type") or "")
    for text in (stated, str(row.get("gpu_normalized") or "")):  # the part as stated, then the label
        for pattern, part, family in STATED_PARTS:
            if pattern.search(text):
                return part, family
    name = str(row.get("gpu_normalized") or stated)
    if name.lower().startswith("ampere"):
        name = "A100-80GB"
    try:
        load_gpu(name)
    except ProfileNotFound:
        # a label that is no preset name or alias ('H100 (80GB)', 'DGX-B200', 'H100-SXM (DGX H100,
        # Eos)'): the GPU it names, looked up in the label and then in gpu_type
        text = f"{row.get('gpu_normalized') or ''} | {stated}"
        name = next((part for pattern, part in GPU_IN_TEXT if pattern.search(text)), name)
    return name, name


# GPU names inside free text, the more specific first (GB200 before B200, GH200 before H200)
GPU_IN_TEXT = (
    (re.compile(r"\bGB300\b", re.I), "GB300"),
    (re.compile(r"\bGB200\b", re.I), "GB200"),
    (re.compile(r"\bB300\b", re.I), "B300"),
    (re.compile(r"(?:\b|\dx)B200s?\b", re.I), "B200"),
    (re.compile(r"\bGH200\b", re.I), "GH200"),
    (re.compile(r"(?:\b|\dx)H200s?\b", re.I), "H200"),
    (re.compile(r"(?:\b|\dx)H100s?\b|\bhopper\b|\bp5e?\.\d+xlarge\b", re.I), "H100"),  # AWS p5: 8x H100
    (re.compile(r"(?:\b|\dx)A100s?\b[^|]*\b40 ?GB?\b|\bp4d\.24xlarge\b", re.I), "A100-40GB"),  # AWS p4d: 8x A100 40 GB
    (re.compile(r"(?:\b|\dx)A100s?\b|\bp4de\.24xlarge\b", re.I), "A100-80GB"),
    (re.compile(r"\bV100\b", re.I), "V100"),
)


def is_2021(row: dict[str, Any]) -> bool:
    """Software from before 2022: Megatron-LM as Narayanan et al. 2021 ran it (no flash attention,
    sequence parallel, distributed optimizer or TP overlap) -- a version or software that names
    2021 or earlier, or the paper's table."""
    if str(row.get("source_group", "")).endswith("2021_table1") or "2021" in _text(row, "software_version", "software"):
        return True
    date = software_date(row)
    return date is not None and date < (2022, 1)


# torch.compile as a row's notes or software version state it ("torch.compile enabled",
# "train_configs/llama3_405b.toml: compile on", "compile from llama3_405b.toml"; "torch.compile off")
COMPILE_OFF = re.compile(r"\b(?:torch\.)?compile\s*(?:off|disabled|=\s*false)|\b(?:without|no)\s+(?:torch\.)?compile\b", re.I)
COMPILE_ON = re.compile(r"\b(?:torch\.)?compile\s*(?:on|enabled|=\s*true)\b|\bcompile from\b|\bwith torch\.compile\b", re.I)


def _states_compile(row: dict[str, Any]) -> bool:
    text = " ".join(str(row.get(k) or "") for k in ("software_version", "notes", "extra_layout"))
    return not COMPILE_OFF.search(text) and bool(COMPILE_ON.search(text))


def row_stack(row: dict[str, Any]) -> Stack:
    software = _text(row, "software")
    if re.search(r"torch[\s_-]*titan", software):
        compiled = (row.get("other_metrics") or {}).get("torch_compile")
        compiled = None if compiled is None else _flag(compiled)
        if compiled is None:
            compiled = "compile" in _text(row, "precision", "variant", "id") or _states_compile(row)
        return Stack.torchtitan_compile if compiled else Stack.torchtitan
    if re.search(r"composer|foundry|mosaic", software):
        return Stack.llm_foundry
    if "deepspeed" in software:
        return Stack.deepspeed
    if PYTORCH_FSDP_TRAINERS.search(software) and not re.search(r"megatron|nemo", software):
        return Stack.pytorch_fsdp
    return Stack.megatron


# Trainers that run a Hugging Face-style model under PyTorch FSDP with eager kernels (the
# pytorch-fsdp stack): HF Trainer / Accelerate, fairscale and metaseq (OPT), IBM fms-fsdp, or a
# row that names PyTorch FSDP as its trainer. Composer / llm-foundry and torchtitan are matched first.
PYTORCH_FSDP_TRAINERS = re.compile(
    r"hugging ?face|\bhf (?:transformers|trainer|accelerate)\b|\btransformers trainer\b|\baccelerate\b|fairscale|metaseq|"
    r"fms[-_ ]fsdp|(?:py)?torch\b[\w .()]*?\bfsdp|torch\.distributed\.fsdp|^\s*fsdp\d?\b|fully_shard|lightning|torchtune|"
    r"\btrl\b|axolotl|llama[- ]?factory|pytorch ddp")


# A per-head width the row's model config states (Megatron --kv-channels, HF head_dim) where it
# is not hidden / heads, e.g. Qwen3-235B-A22B: 64 heads x 128 on a 4,096 hidden
HEAD_DIM_STATED = re.compile(r"\b(?:kv_channels|kv-channels|head_dim)[ =:]*(\d+)", re.I)


def _head_dim(row: dict[str, Any]) -> int | None:
    found = HEAD_DIM_STATED.search(str(row.get("dims_source") or ""))
    return int(found.group(1)) if found else None


# A row names its model but carries only the dims every transformer has (layers, width, heads,
# FFN, experts). What is particular to an architecture -- MLA, a dense prefix before the MoE
# layers, local attention windows, Gated DeltaNet layers, QK norm, the router's scoring -- the
# runs files do not carry: when the row's model is a preset's (by name, and with the preset's
# layers, width and experts), those fields come from the preset. Names that are not the preset's
# file name are matched here.
PRESET_NAMES = (
    (re.compile(r"llama[-_ ]?4[-_ ]?scout", re.I), "llama4-scout"),
    (re.compile(r"llama[-_ ]?4[-_ ]?maverick", re.I), "llama4-maverick"),
    (re.compile(r"deepseek[-_ ]?(?:v3|r1)\b|\bdsv3\b", re.I), "deepseek-v3"),  # DeepSeek-R1: the V3 architecture (R1 paper sec. 2)
    (re.compile(r"nemotron[-_ ]?(?:4[-_ ]?)?340b", re.I), "nemotron4-340b"),
    (re.compile(r"^\s*gpt[-_ ]?3\s*(?:175b)?\s*$|\bgpt[-_ ]?175b\b", re.I), "gpt3-175b"),
    (re.compile(r"^\s*(?:meta[-_ ]?)?llama[-_ ]?405b\s*$", re.I), "llama3-405b"),
    (re.compile(r"gpt[-_ ]?oss[-_ ]?120b", re.I), "gpt-oss-120b"),
    (re.compile(r"gpt[-_ ]?oss[-_ ]?20b", re.I), "gpt-oss-20b"),
    (re.compile(r"kimi[-_ ]?k2", re.I), "kimi-k2"),
    # Mistral 7B v0.2 / v0.3 (any Instruct or Base spelling): the v0.1 dims without its sliding window
    *((re.compile(rf"mistral[-_ ]?7b(?:[-_ ]?(?:instruct|base))?[-_ ]?v0\.{v}\b", re.I), f"mistral-7b-v0.{v}") for v in (2, 3)),
    (re.compile(MISTRAL_NEMO, re.I), "mistral-nemo-12b"),  # also the hub's 'Mistral-Nemo-Base-2407'
    (re.compile(MISTRAL_SMALL_3, re.I), "mistral-small-24b"),
    (re.compile(r"nemotron[-_ ]?h[-_ ]?56b", re.I), "nemotron-h-56b"),
    (re.compile(r"nemotron[-_ ]?h[-_ ]?8b", re.I), "nemotron-h-8b"),
    (re.compile(r"nemotron[-_ ]?(?:3|v3)[-_ ]?nano", re.I), "nemotron-3-nano-30b-a3b"),
    (re.compile(r"nemotron[-_ ]?(?:3|v3)[-_ ]?super", re.I), "nemotron-3-super-120b-a12b"),
    (re.compile(r"nemotron[-_ ]?(?:3|v3)[-_ ]?ultra", re.I), "nemotron-3-ultra-550b-a55b"),
)
ARCHITECTURE_FIELDS = (
    "head_dim", "gated_mlp", "tied_embeddings", "activation", "normalization", "qk_layernorm", "qkv_bias",
    "linear_bias", "mla", "moe_first_k_dense_layers", "moe_layer_freq", "moe_dense_layers", "moe_router_score_function",
    "moe_router_expert_bias", "moe_router_balance", "moe_router_num_groups", "moe_router_group_topk", "moe_router_topk_scaling_factor",
    "moe_router_topk_norm", "moe_shared_expert_gate", "mtp_num_layers", "attention_window", "attention_chunked",
    "global_attention_layers", "attention_output_gate", "attention_sinks", "swiglu_limit", "linear_attention",
    "linear_attention_layers", "mamba", "hybrid_layer_pattern", "position_embedding", "moe_latent_size",
)
# row columns (same names as ModelSpec's) the preset fills when the row leaves them out
FILLED_FROM_PRESET = ("num_kv_heads", "ffn_hidden_size", "vocab_size", "moe_top_k", "moe_ffn_hidden_size",
                      "moe_shared_expert_ffn_size")
# A row that states Gated DeltaNet layers must name a model whose preset fixes their shape
LINEAR_ATTENTION_STATED = re.compile(r"linear attention|gated-?delta-?net", re.I)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def row_preset(row: dict[str, Any], name: str) -> ModelSpec | None:
    """The model preset a row's model is: named by the row (file name or PRESET_NAMES) and with
    the row's layers, width and routed experts; None when there is none."""
    key = preset_key_for_name(name)
    if key is None:
        return None
    preset = load_model(key)
    same = (preset.num_layers, preset.hidden_size, preset.num_experts) == (
        row["num_layers"], row["hidden_size"], row.get("moe_num_experts") or 0)
    return preset if same else None


def _preset_fields(row: dict[str, Any], name: str) -> dict[str, Any]:
    """Architecture fields from the row's model preset (row_preset); the row's own values win
    where it states them (a head width in dims_source, shared-expert width, vocabulary)."""
    preset = row_preset(row, name)
    if preset is None:
        if LINEAR_ATTENTION_STATED.search(_text(row, "extra_layout", "dims_source", "notes")):
            raise InputError("model_name", name, "the row states linear-attention (Gated DeltaNet) layers but no model "
                             f"preset of that name ({_slug(name)}) with its {row['num_layers']} layers gives their shape")
        return {}
    out = {f: getattr(preset, f) for f in ARCHITECTURE_FIELDS}
    out.update({f: getattr(preset, f) for f in FILLED_FROM_PRESET if not row.get(f)})
    if preset.num_attention_heads != row["num_attention_heads"]:
        # the preset's KV heads group its own query heads: a row that states other query heads
        # and no KV heads is read as the ModelSpec default, multi-head attention
        out.pop("num_kv_heads", None)
    return out


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
    fields.update(_preset_fields(row, name))
    fields["head_dim"] = _head_dim(row) or fields.get("head_dim")
    try:
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        raise InputError.from_validation(exc, "model", name) from None


def row_cluster(row: dict[str, Any]) -> ClusterSpec:
    return _row_cluster(row)[0]


def _row_cluster(row: dict[str, Any]) -> tuple[ClusterSpec, str | None]:
    """The row's cluster, and the scale-out network read from its interconnect column (for the
    report; None: the preset's)."""
    part, family = _gpu_name(row)
    gpu = load_gpu(part)
    preset = CLUSTER_FOR_GPU.get(load_gpu(family).name)
    if preset is None:
        raise InputError("gpu_normalized", row.get("gpu_normalized"), f"no cluster preset for {gpu.name}")
    cluster = load_cluster(preset)
    if cluster.gpu.name != gpu.name:
        cluster = cluster.model_copy(update={"gpu": gpu})
        if gpu.nvlink_gb_per_s and cluster.intra_node.kind == "nvlink" and gpu.nvlink_gb_per_s < cluster.intra_node.bandwidth_gb_per_s:
            # a part with less NVLink than the preset's (A800 in a DGX A100 chassis) narrows the
            # node's links; the preset's calibration measured the wider links, so the default
            # efficiencies (profiles/cost/defaults.yaml comm) cost them instead
            narrowed = cluster.intra_node.model_copy(update={"bandwidth_gb_per_s": gpu.nvlink_gb_per_s})
            cluster = cluster.model_copy(update={"intra_node": narrowed, "calibration": None})
        elif gpu.nvlink_gb_per_s is None and gpu.pcie_gb_per_s and cluster.intra_node.kind == "nvlink":
            # a PCIe card (no node-wide NVLink: profiles/gpus/h100-pcie.yaml) in the preset's node
            # talks over PCIe at its own link rate, without NVLS; the calibration measured NVLink
            pcie = IntraNode(kind="pcie", bandwidth_gb_per_s=gpu.pcie_gb_per_s, latency_us=cluster.intra_node.latency_us)
            cluster = cluster.model_copy(update={"intra_node": pcie, "calibration": None})
    per_node = row.get("gpus_per_node")
    # a smaller node than the preset's (e.g. 4-GPU PCIe boxes, an 8-GPU DGX-1 beside the 16-GPU
    # DGX-2) narrows the NVLink domain; an NVL72 rack's 4-GPU compute trays do not (it stays 72)
    if per_node and per_node < cluster.gpus_per_node <= MAX_NIC_NODE_GPUS:
        cluster = cluster.model_copy(update={"gpus_per_node": per_node})
    # the scale-out network the row states (its interconnect column: a rate, or a cloud instance
    # named in profiles/validation/networks.yaml) in place of the preset's NICs
    stated = stated_network(row, cluster.gpus_per_node)
    network = None
    if stated is not None:
        cluster = cluster.model_copy(update={"nic_gb_per_s_per_gpu": stated.nic_gb_per_s_per_gpu})
        network = f"{stated.how}: {stated.nic_gb_per_s_per_gpu:g} GB/s per GPU"
    # a published run is judged against the GPU's physical HBM: an operator's memory headroom
    # in the preset is no part of what the run had
    return cluster.with_gpus(int(row["num_gpus"])).with_memory_headroom(0.0), network


# routing forced to balance, as rows say it: 'force-balanced', '--moe-router-force-load-balancing'
# (Megatron-LM), 'ideal (balanced) routing', 'ideal routing (balanced)', 'uniform routing'
FORCED_BALANCE_STATED = re.compile(r"force[sd]?[ _-]*(?:load[ _-]*)?balanc|forced|ideal \(?balanced\)? routing|"
                                   r"ideal routing|\buniform(?:ly)? rout")


FORCED_BALANCE_DENIED = re.compile(r"\b(?:not|no|without)\s+(?:\w+\s+)?forc|"
                                  r"forc\w*[ _-]*(?:load[ _-]*)?balanc\w*\s*[:=]?\s*(?:false|off|no|0|disabled)\b")


def _moe_training(row: dict[str, Any]) -> dict[str, Any]:
    text = _text(row, "extra_layout", "moe_dispatcher", "notes", "id", "variant")
    out: dict[str, Any] = {}
    if FORCED_BALANCE_STATED.search(text) and not FORCED_BALANCE_DENIED.search(text):
        out["moe_routing"] = MoeRouting.balanced
    # NeMo AutoModel's FakeBalancedGate routes k consecutive experts per token; taken when the
    # row says so (its benchmark recipes set fake_balanced_gate: true, NVIDIA-NeMo/Automodel@36044ad3
    # examples/llm_benchmark/*.yaml, but its performance tables do not restate the gate)
    if "fake_balanced_gate" in text or "fake balanced gate" in text:
        out["moe_routing"] = MoeRouting.contiguous
    # Megatron --moe-expert-capacity-factor: tokens over the capacity are dropped (no factor: dropless)
    drop = re.search(r"(?:capacity[ _-]?factor|\bcf)\b\s*[:=]?\s*([0-9]+(?:\.[0-9]+)?)|"
                     r"(?:token drop|token-drop)[^0-9]{0,40}?capacity\s*([0-9.]+)", text)
    if drop and "dropless" not in _text(row, "id", "variant"):
        out["moe_capacity_factor"] = max(1.0, float((drop.group(1) or drop.group(2)).rstrip(".")))
    return out


# FlashAttention runs on Turing (sm_75, FlashAttention 1.x) and newer only, and bf16 needs Ampere:
# Dao-AILab/flash-attention README ('compatible only with Turing, Ampere, Ada, or Hopper GPUs';
# 'bf16 requires Ampere, Ada, or Hopper GPUs'). A V100 run left its attention unfused and ran fp16.
FLASH_MIN_COMPUTE_CAPABILITY = 7.5


MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
# dates a software version states: 2024-12-26, a nightly's dev20250815, 'Aug 2024', 'April 2024'
STATED_DATES = re.compile(r"(20\d\d)-(\d\d)\b|dev(20\d\d)(\d\d)\d\d|\b(%s)[a-z]*\.?\s+(20\d\d)\b" % "|".join(MONTHS), re.I)
# NVIDIA's containers are versioned YY.MM ('NeMo 26.02.01 container', 'nemo:24.07')
CONTAINER_DATE = re.compile(r"\b(?:nemo|container|pytorch)\b\D{0,12}\b(2\d)\.(0[1-9]|1[0-2])(?:\.\d+)?\b", re.I)
# torchtitan PR #2095 (merged 2025-12-01): per-op SAC saves every SDPA backend's output, cuDNN's included
SAC_SAVES_CUDNN_SINCE = (2025, 12)
# Megatron-Core fuses a clamped GLU into its grouped MLP from 2026-08 (TE ScaledClampedQGeGLU, TE 2.15
# MXFP8 / 2.18 BF16; Megatron-Core 2a75ac12c5 'Complete clamped SwiGLU across expert paths', 2026-08-13;
# the Megatron-Bridge 26.08 perf recipes): earlier containers clamp in eager kernels
FUSED_CLAMPED_GLU_SINCE = (2026, 8)
# torchtitan's launcher sets PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" from a5e57e4a9 ('Use
# expandable segments in run_llama_train.sh', 2024-10-22; run_train.sh after the 2025-02 restructure);
# software_date has month resolution, so a run dated 2024-10 counts as having them
TORCHTITAN_EXPANDABLE_SINCE = (2024, 10)
# NeMo Framework Launcher's launcher_scripts/conf/config.yaml sets env_vars NVTE_FUSED_ATTN: 0 ('Disable
# cudnn FA until we've tested it more', 562dcb45, 2024-02-13) in its 24.01 to 24.07 tags, so Transformer
# Engine runs the flash-attn backend (FlashAttention-2) instead of cuDNN's fused attention; 04b8d098
# ('enable fused attention', 2024-08-29) drops it for 24.09. NeMo's performance pages of those containers
# (24.03.01 long-sequence, 24.07 summary) are launcher runs
NEMO_LAUNCHER_FA2 = ((2024, 1), (2024, 7))


def software_date(row: dict[str, Any]) -> tuple[int, int] | None:
    """The latest (year, month) the row's software version states, None where it states none."""
    dates = []
    for iso_y, iso_m, dev_y, dev_m, month, year in STATED_DATES.findall(str(row.get("software_version") or "")):
        if iso_y or dev_y:
            dates.append((int(iso_y or dev_y), int(iso_m or dev_m)))
        else:
            dates.append((int(year), MONTHS.index(month.lower()[:3]) + 1))
    dates += [(2000 + int(y), int(mo)) for y, mo in CONTAINER_DATE.findall(str(row.get("software_version") or ""))]
    return max(dates) if dates else None


# the GEMM precision a free-text precision column names when the row has no precision_normalized;
# the narrowest format named wins ('FP8 + BF16 mixed': the GEMMs run FP8)
PRECISION_IN_TEXT = (
    (re.compile(r"nvfp4|\bfp4\b|mxfp4", re.I), "fp4"),
    (re.compile(r"fp8|float8|\be4m3\b", re.I), "fp8"),
    (re.compile(r"bf16|bfloat16", re.I), "bf16"),
    (re.compile(r"fp16|float16|\bhalf\b|\bamp\b|\bapex\b|^\s*16(?:-mixed)?\s*$", re.I), "fp16"),  # Lightning '16-mixed' 
)


# a row saying its weights were all-gathered in FP8: torchao 'FSDP float8 all-gather' / 'f8 all-gather',
# Megatron-LM '--fp8-param-gather'
FP8_PARAM_GATHER_STATED = re.compile(r"\b(float8|f8|fp8)[ _-]all[ _-]?gather|fp8[_-]param[_-]gather", re.I)


def _precision_in_text(text: Any) -> str | None:
    text = NEGATED_FORMAT.sub(" ", str(text or ""))  # 'bf16 (no FP8)' names bf16 only
    return next((name for pattern, name in PRECISION_IN_TEXT if pattern.search(text)), None)


# a format the text names only to say it was not used: 'no FP8', 'without fp8', 'non-FP8', 'FP8 off'
NEGATED_FORMAT = re.compile(r"(?:\b(?:no|not|without|non|vs\.?|versus|compared?\s+(?:to|with))\b|\bw/o|\bnon-)[^,;()\[\]]*?"
                            r"(?:nv|mx)?(?:fp8|float8|fp4)\b(?:\s*(?:or|/|and)\s*(?:nv|mx)?(?:fp8|float8|fp4)\b)*|"
                            r"\b(?:te\s+)?(?:nv|mx)?(?:fp8|float8|fp4)(?:[ _-]+(?:training|recipe))?\s*[:=]?\s*"
                            r"(?:off|disabled|false|no\b|not\s+\w+|n/?a\b|unsupported|\u2717|\u2718)", re.I)


def _stated_precision(row: dict[str, Any]) -> str | None:
    """The GEMM precision the row states: precision_normalized when it is one autopar knows (or
    names one: 'bf16 mixed'), else what the free-text precision column names; None when neither
    says (the part's default applies, and an unknown precision_normalized is listed as unused)."""
    normalized = str(row.get("precision_normalized") or "").strip().lower()
    if normalized in PRECISION:
        return normalized
    return _precision_in_text(normalized) or _precision_in_text(row.get("precision"))


def frozen_weights(row: dict[str, Any]) -> bool:
    """Whether the row's task trains adapters on frozen base weights: 'lora', 'QLoRA',
    'LoRA fine-tuning', 'PEFT', 'adapter tuning'."""
    return bool(re.search(r"\b(?:q?lora|peft|adapters?)\b", _text(row, "task")))


def row_training(row: dict[str, Any], gpu: GpuSpec | None = None) -> TrainingSpec:
    """The row's training inputs; gpu (the part that ran) settles what the row leaves out and
    the part cannot do: fp16 where it has no bf16, unfused attention below Turing."""
    stated = _stated_precision(row)
    default = "fp16" if gpu is not None and not gpu.supports("bf16") else "bf16"
    precision = PRECISION.get(stated or default, default)
    flash = not is_2021(row) and (gpu is None or gpu.compute_capability >= FLASH_MIN_COMPUTE_CAPABILITY)
    fields: dict[str, Any] = {
        "seq_len": row["seq_len"], "global_batch_size": row["global_batch_size"], "precision": Precision(precision),
        "flash_attention": flash, "stack": row_stack(row),
        "frozen_weights": frozen_weights(row),
    }
    if precision == "fp8":  # torchao's default was tensorwise until torchtitan dropped it (stack default rowwise)
        fields["fp8_recipe"] = Fp8Recipe.rowwise if "rowwise" in _text(row, "precision") else Fp8Recipe.tensorwise
        fields["fp8_param_gather"] = bool(FP8_PARAM_GATHER_STATED.search(_text(row, "precision", "variant", "notes")))
    if row.get("moe_num_experts"):
        fields.update(_moe_training(row))
    if fields["stack"] == Stack.megatron and "nemo" in _text(row, "software"):
        fields["grad_reduce_bytes_per_param"] = 2.0  # NeMo's performance recipes reduce gradients in bf16
    date = software_date(row)
    if fields["stack"] in (Stack.torchtitan, Stack.torchtitan_compile) and date is not None and date < SAC_SAVES_CUDNN_SINCE:
        fields["sac_saves_cudnn_attention"] = False
    if fields["stack"] == Stack.megatron and "nemo" in _text(row, "software") and date is not None \
            and NEMO_LAUNCHER_FA2[0] <= date <= NEMO_LAUNCHER_FA2[1]:
        fields["attention_kernel"] = AttentionKernel.fa2
    if fields["stack"] in (Stack.torchtitan, Stack.torchtitan_compile) and date is not None and date < TORCHTITAN_EXPANDABLE_SINCE:
        fields["expandable_segments"] = False
    if fields["stack"] == Stack.megatron and "megatron-bridge" in _text(row, "software") and not _fsdp(row)[0]:
        # Megatron-Bridge's perf recipes set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in their
        # env_vars (src/megatron/bridge/perf_recipes/*/<system>/*.py @067f987df); not with Megatron-FSDP's
        # nccl_ub, which Megatron-Core refuses with expandable segments before torch 2.11
        # (megatron/core/distributed/distributed_data_parallel_config.py @d98e8a64dd)
        fields["expandable_segments"] = True
    if fields["stack"] == Stack.megatron and date is not None and date < FUSED_CLAMPED_GLU_SINCE:
        fields["fused_clamped_glu"] = False  # only a model with a clamped GLU (gpt-oss) pays for it
    return TrainingSpec.model_validate(fields)


def _recompute(row: dict[str, Any]) -> Recompute | None:
    value = row.get("recompute")
    if isinstance(value, bool) or value in (0, 1):  # a flag column: checkpointing on (whole blocks) or off
        return Recompute.full if value else Recompute.none
    text = str(value or "").lower().strip()
    if text.startswith("none") or NO_RECOMPUTE_WORDS.search(text):  # before the words a negation names
        return Recompute.none
    if text.startswith("full"):
        return Recompute.full
    if SELECTIVE_RECOMPUTE_WORDS.search(text):  # before the words 'activation checkpointing' of either kind
        return Recompute.selective
    if FULL_RECOMPUTE_WORDS.search(text):
        return Recompute.full
    count = re.fullmatch(r"[\d.]+", text) and text not in ("0", "1")  # '7', '10': layers, no flag
    flag = _flag(text) if text and not count else None
    if flag is not None:
        return Recompute.full if flag else Recompute.none
    return None


# no recompute in words: 'none (trained without activation checkpointing)', 'no gradient checkpointing',
# 'No AC', 'AC off', 'activation checkpointing: off', 'gradient_checkpointing=False'
NO_RECOMPUTE_WORDS = re.compile(
    r"(?:\bwithout|\bno|\bw/o)\s+(?:activation\s+|gradient\s+)?(?:checkpointing|recompute|recomputation|ac|ckpt)\b|"
    r"^\s*(?:not used|unused)\b|\bckpt\s*[:=]?\s*(?:off|false|no)\b|"
    r"\b(?:(?:activation|gradient)[ _]checkpointing|ac|recompute|recomputation)\s*[:=]?\s*(?:off|false|no|none|disabled|0)\b")
# selective recompute in words: torchtitan 'SAC' / 'selective (op)', 'selective activation checkpointing',
# Megatron-LM's --recompute-activations (recompute_granularity = 'selective', arguments.py)
SELECTIVE_RECOMPUTE_WORDS = re.compile(
    r"\b(?:sac|selective)\b|--recompute-activations\b|"
    r"recompute[-_]granularity\s*[ =:]\s*selective")
# full recompute in other trainers' words: HF 'gradient_checkpointing: true', DeepSpeed / FSDP
# 'activation checkpointing' (whole blocks), torchtitan 'AC mode full', Megatron-LM's older
# --checkpoint-activations (whole layers: --recompute-granularity full)
FULL_RECOMPUTE_WORDS = re.compile(
    r"\b(?:gradient|activation)[ _]checkpointing\b|\bac\s*[=:]?\s*full\b|\bfull ac\b|--checkpoint-activations\b|"
    r"recompute[-_]granularity\s*[ =:]\s*full|checkpointing\s*[:=]\s*full|\b(?:act|grad)\.?\s*ckpt\b|^\s*ckpt\s*$|"
    r"^\s*(?:activation\s+)?recompute?(?:ation)?\s*$|^\s*(?:uniform|block)\s*$")  # --recompute-method alone: full


def _recompute_modules(row: dict[str, Any]) -> tuple[str, ...] | None:
    """Megatron --recompute-modules named after 'selective:' ('selective: layernorm, moe'; the
    ModelZoo tables' 'norm, act' are layernorm and moe_act: autopar.specs.plan.module_names)."""
    found = re.match(r"selective\s*:\s*(.+)", str(row.get("recompute") or "").strip().lower())
    if not found:
        return None
    known = {m.value for m in RecomputeModule}
    return tuple(n for n in module_names(found.group(1)) if n in known) or None


def _offload_modules(row: dict[str, Any]) -> tuple[str, ...] | None:
    """Megatron --offload-modules a row names: 'activation offloading required (expert_fc1,
    moe_act)' (ModelZoo GB200 notes) or '--offload-modules expert_fc1 moe_act'."""
    text = " ".join(str(row.get(k) or "") for k in ("extra_layout", "notes")).lower()
    found = re.search(r"activation offloading[^(]*\(([^)]*)\)|--offload-modules\s+([a-z_\s]+)", text)
    if not found:
        return None
    known = {m.value for m in OffloadModule}
    return tuple(n for n in re.split(r"[,\s]+", found.group(1) or found.group(2)) if n in known) or None


def _fsdp(row: dict[str, Any]) -> tuple[bool, int | None, bool]:
    """(FSDP on, shard group size when the column names one smaller than dp x cp, gathered weights
    kept from forward to backward). The column holds 0/1 flags, 'On', text such as 'FSDP2 16-way
    x TP 8', or a PyTorch FSDP ShardingStrategy: HYBRID_SHARD shards within a node and replicates
    across; SHARD_GRAD_OP (and _HYBRID_SHARD_ZERO2) keeps the weights gathered for the forward
    until the backward is done (torch.distributed.fsdp.ShardingStrategy docs), FSDP2's
    reshard_after_forward=False."""
    value = row.get("fsdp")
    text = str(value).lower()
    # 'DDP' or 'DDP + distributed optimizer': plain data parallelism, no FSDP
    ddp_only = re.search(r"\bddp\b", text) and not re.search(r"fsdp|shard|zero", text)
    if value is None or _flag(value) is False or ddp_only or text.strip() in ("n/a", "-", "") or re.search(r"\b(?:no|without|w/o)\s+fsdp", text):
        return False, None, False
    keeps = bool(re.search(r"shard[_ ]?grad[_ ]?op|_zero2|zero-?2|reshard_after_forward\s*[=:]\s*false", text))
    way = re.search(r"(\d+)-way", text) or re.search(r"dp_shard\s*[=:]\s*(\d+)", text)
    if way is None and ("hybrid" in text or "hsdp" in text):
        return True, int(row.get("gpus_per_node") or 8), keeps
    return True, int(way.group(1)) if way and "routed experts" not in text else None, keeps


OFF_WORDS = frozenset({"off", "false", "no", "none", "disabled", "disable", "n", "\u2717", "\u2718"})
ON_WORDS = frozenset({"on", "true", "yes", "enabled", "enable", "y", "\u2713", "\u2714"})
# the leading word of a cell, when a note follows it: 'True (--use-distributed-optimizer)', 'No (DDP)'
_LEADING_WORD = re.compile(r"([a-z]+|[\u2713\u2714\u2717\u2718])(?![a-z0-9/])")


def _flag(value: Any) -> bool | None:
    """A yes/no cell: a boolean, a number (0 is off), a number or an on/off word as text, also
    when a note follows the word ('yes (Megatron distributed optimizer)'); None when the text says
    neither (a description such as 'FSDP2 8-way', or 'n/a')."""
    if isinstance(value, (bool, int, float)):
        return bool(value)
    text = str(value).strip().lower()
    if text in OFF_WORDS or text in ON_WORDS:
        return text in ON_WORDS
    try:
        return float(text) != 0
    except ValueError:
        pass
    lead = _LEADING_WORD.match(text)
    if lead and (lead.group(1) in OFF_WORDS or lead.group(1) in ON_WORDS):
        return lead.group(1) in ON_WORDS
    # said in the negative: 'without SP', 'not used', or one word then 'off' ('SP off'; a longer
    # description ending in 'off' may turn off something else: 'FSDP2, reshard off')
    if re.match(r"(?:without|w/o|not used|unused|not applicable)\b", text) or re.fullmatch(r"[\w.-]+\s+(?:off|disabled|not used)", text):
        return False
    return None


def _zero(row: dict[str, Any], fsdp: bool) -> int:
    if fsdp:
        return 3
    if row.get("zero_stage") == ZERO_OPEN:
        return 1  # a placeholder: the stage is an open choice (row_plan_fields)
    if row.get("zero_stage") is not None:
        return int(row["zero_stage"])
    if row.get("distributed_optimizer") is not None:
        on = _flag(row["distributed_optimizer"])
        if on is None:
            raise InputError("distributed_optimizer", row["distributed_optimizer"], "must be true or false (or on/off, yes/no, 1/0)")
        return 1 if on else 0
    return 0 if is_2021(row) else 1


def _dispatcher(row: dict[str, Any]) -> Dispatcher:
    text = re.sub(r"[^a-z]", "", NEGATED_CHOICE.sub(" ", _text(row, "moe_dispatcher")))  # 'deep_ep', 'Hybrid-EP', 'all-gather'
    if text == "ag":
        return Dispatcher.allgather
    if "deepep" in text or "hybridep" in text or "flex" in text:
        return Dispatcher.deepep
    if "allgather" in text:
        return Dispatcher.allgather
    return Dispatcher.alltoall


EP_OVERLAP_STATED = re.compile(r"a2a[ _-]overlap|overlap[-_]moe[-_]expert[-_]parallel[-_]comm|\bep[ _-](?:comm[ _-])?overlap")
# a choice named only to say it was not taken: 'no DeepEP', 'DeepEP off', 'a2a_overlap=false', 'not flex'
NEGATED_CHOICE = re.compile(r"\b(?:no|not|without|w/o)\s+[\w-]+(?:[ _-]overlap)?|"
                            r"[\w-]+(?:[ _-]overlap\w*)?\s*[:=]?\s*(?:off|false|disabled|0)\b", re.I)


INTERLEAVING_DENIED = re.compile(r"interleav\w*\s*(?:[:=]\s*)?(?:disabled|off|false|not used|no)\b|\b(?:no|without)\s+interleav")
# a virtual pipeline size in words: 'vpp=5', 'VP 5', 'virtual pipeline 5', 'virtual_pipeline_model_parallel_size=5',
# 'interleaved schedule (5 chunks per stage)'
VPP_IN_WORDS = re.compile(r"\b(?:vpp|vp|virtual[ _-]pipeline(?:[ _-]model[ _-]parallel[ _-]size)?(?:[ _-]stages?)?)\s*[:=]?\s*(\d+)\b|"
                          r"\b(\d+)\s+(?:model\s+)?chunks\s+per\s+(?:stage|rank)")


# a zero-bubble pipeline schedule named (Qi et al. 2023 ZB-H1/ZB-H2; torchtitan ScheduleZBVZeroBubble;
# Megatron-LM's and Sea AI's 'zero bubble'); read as the plan's zero-bubble schedule (ZB-H2)
ZERO_BUBBLE_NAMED = re.compile(r"zero[ _-]?bubble|\bzb[ _-]?(?:h[12]|v)\b|zbv")


def row_plan_fields(row: dict[str, Any], model: ModelSpec, training: TrainingSpec) -> tuple[dict[str, Any], list[str]]:
    """Plan fields the row publishes, and the choices it leaves open (resolved by the prediction)."""
    tp, pp = row.get("tp") or 1, row.get("pp") or 1
    sp = None if row.get("sequence_parallel") is None else _flag(row["sequence_parallel"])
    if sp is None:  # not given, or text that is no yes/no ('n/a')
        sp = tp > 1 and not is_2021(row)
    fsdp, shard, keeps_weights = _fsdp(row)
    zero = _zero(row, fsdp)
    text = _text(row, "extra_layout", "variant")
    metrics = row.get("other_metrics") or {}
    fields: dict[str, Any] = {
        "tp": tp, "pp": pp, "cp": row.get("cp") or 1, "ep": row.get("ep") or 1, "etp": row.get("etp"),
        "vpp": row.get("vpp") or 1, "zero": zero, "sp": bool(sp) and tp > 1,
    }
    if keeps_weights:
        fields["reshard"] = False
    if fields["cp"] > 1:
        cp_text = _text(row, "extra_layout", "variant", "notes")
        if re.search(r"a2a\s*\+\s*p2p|hierarchical cp|ulysses[^.;]*ring|ring[^.;]*ulysses", cp_text):
            fields["cp_algo"] = CpAlgo.hybrid  # Megatron cp_comm_type 'a2a+p2p': all-to-all in the node, ring across
        elif re.search(r"ulysses|cp_comm_type\s*[=:]?\s*a2a\b|a2a cp|all-?to-?all cp", cp_text):
            fields["cp_algo"] = CpAlgo.ulysses
    if model.is_moe:
        fields["dispatcher"] = _dispatcher(row)
        # Megatron's 1F1B all-to-all overlap: the ModelZoo tables' 'A2A overlap', the flag
        # --overlap-moe-expert-parallel-comm (Megatron-LM arguments.py), 'EP overlap'
        denied = any("overlap" in m.group(0) for m in NEGATED_CHOICE.finditer(text))  # 'a2a overlap (a2a_overlap=0)'
        fields["ep_overlap"] = bool(EP_OVERLAP_STATED.search(text)) and not denied
    if is_2021(row) or training.stack not in (Stack.megatron,) and tp > 1:
        # --tp-comm-overlap arrived with Megatron-Core (2023); other stacks overlap TP only with async TP
        fields["tp_overlap"] = bool(_flag(metrics.get("async_tp") or False)) or bool(re.search(r"async[ _-]?tp", text))
    # an "N-way" FSDP degree counts data-parallel ranks; FSDP also shards over the CP ranks
    # (torchtitan's dp_shard x cp mesh), so the shard group is N x cp
    if shard and shard * fields["cp"] < (row.get("num_gpus") or 0) // (tp * pp) and zero == 3:
        fields["zero_shard_size"] = shard * fields["cp"]
    pp_schedule = str(metrics.get("pp_schedule") or "").lower()
    if pp_schedule == "dualpipev" or "dualpipev" in text:
        fields["schedule"] = Schedule.dualpipev  # torchtitan's ScheduleDualPipeV: two stages per rank in a V
        fields["vpp"] = 2
    elif (re.search(r"(?<!non-)(?<!non )interleaved", text) and not INTERLEAVING_DENIED.search(text)) or pp_schedule.startswith("interleaved"):
        fields["schedule"] = Schedule.interleaved  # torchtitan's InterleavedZeroBubble too: its chunks, not its filled bubble
        fields["vpp"] = max(fields["vpp"], 2)
    elif pp > 1 and fields["vpp"] == 1 and ZERO_BUBBLE_NAMED.search(f"{pp_schedule} {text}"):
        fields["schedule"] = Schedule.zero_bubble
    elif pp > 1 and fields["vpp"] == 1 and re.search(r"\bgpipe\b|schedulegpipe", f"{pp_schedule} {text}"):
        fields["schedule"] = Schedule.gpipe  # torchtitan/PiPPy 'GPipe': all forwards, then all backwards
    if row.get("vpp") is None and fields.get("schedule") != Schedule.dualpipev:
        stated = VPP_IN_WORDS.search(text)
        vpp = int(stated.group(1) or stated.group(2)) if stated else 1
        if vpp > 1:
            fields["vpp"], fields["schedule"] = vpp, Schedule.interleaved
    if "accounts for embedding and loss" in text and pp > 1:
        layout = megatron_layout(model.num_layers, pp, fields["vpp"], account_for_embedding=True, account_for_loss=True,
                                 mtp_layers=model.mtp_num_layers)
        fields["layout"] = layout.text()
    open_choices = ["zero"] if row.get("zero_stage") == ZERO_OPEN and not fsdp else []
    if model.is_moe and row.get("etp") is None:
        dp = (row.get("num_gpus") or 1) // (tp * pp * fields["cp"])
        if (dp * fields["cp"] * tp) % (fields["ep"] * tp):  # expert TP = TP does not fit: the row folded experts
            open_choices.append("etp")
    recompute = _recompute(row)
    if recompute is None:
        open_choices.append("recompute")
    else:
        fields["recompute"] = recompute
    modules = _recompute_modules(row)
    if recompute == Recompute.selective and modules:
        fields["recompute_modules"] = modules
    offload = _offload_modules(row)
    if offload:
        fields["offload_modules"] = offload
    if recompute == Recompute.selective and training.stack in (Stack.torchtitan, Stack.torchtitan_compile) \
            and re.match(r"selective \(layer", str(row.get("recompute")).lower()):
        # torchtitan 'selective layer' AC checkpoints every n-th block whole, n = 2 by default
        # (activation_checkpoint.selective_ac_option "2": "checkpoint every other layer",
        # torchtitan config_manager.py): full recompute of half the layers of each stage
        fields["recompute"] = Recompute.full
        fields["recompute_num_layers"] = max(1, -(-model.num_layers // pp) // 2)
    mbs = row.get("micro_batch_size")
    dp = max(1, (row.get("num_gpus") or 1) // (tp * pp * fields["cp"]))
    local = row["global_batch_size"] // dp
    if mbs is None and pp > 1 and training.stack in (Stack.torchtitan, Stack.torchtitan_compile) and local % pp == 0:
        # torchtitan splits each rank's batch into pipeline_parallel_degree micro-batches unless
        # told otherwise (torchtitan parallelize_llama: n_microbatches = pipeline_parallel_microbatches
        # or pipeline_parallel_degree)
        fields["mbs"] = local // pp
    elif mbs is None and pp > 1 and metrics.get("local_batch_size") is None:
        open_choices.append("mbs")
    else:
        fields["mbs"] = mbs or 1
    return fields, open_choices


def unused_columns(row: dict[str, Any]) -> list[str]:
    """Columns with a value that the prediction does not read."""
    out = [k for k, v in row.items() if v is not None and k not in META and k not in READ]
    normalized = str(row.get("precision_normalized") or "").strip().lower()
    if normalized and normalized not in PRECISION and _precision_in_text(normalized) is None:
        out.append("precision_normalized")  # a spelling autopar does not know ('mixed'): not read
    out += [f"other_metrics.{k}" for k in (row.get("other_metrics") or {}) if k not in USED_METRICS]
    return sorted(out)


# (what the row's text names, the fact, and when the row's model takes it after all): a hybrid
# Mamba model is modelled when its model is a preset with the Mamba-2 layers (row_preset:
# Nemotron-H 8B / 56B, Nemotron 3 Nano / Super / Ultra); other state-space models are not
NOT_MODELLED = (
    (re.compile(r"mamba|state.space|nemotron[-_ ]?h\b|jamba|zamba|falcon[-_ ]?h1", re.I),
     "hybrid state-space layers (Mamba) are not in the model spec", lambda m: m.mamba is not None),
    # ModelZoo's 'optimizer offload 1', DeepSpeed recipes' '--cpu-optimizer' / offload_optimizer (ZeRO-Offload: the
    # optimizer step on the host, gradients and parameters over PCIe each step)
    (re.compile(r"activation_cpu_offload|optimizer offload [1-9]|\bcpu[-_ ]optimizer|offload_optimizer|"
                r"optimizer (?:states? )?offload(?:ed)? to (?:the )?(?:cpu|host)", re.I), "CPU offload of activations or optimizer states is not modelled",
     lambda m: False),
)


def not_modelled(row: dict[str, Any], model: ModelSpec | None = None) -> str | None:
    """The physical fact of the row the model does not take, if any (`model`: the row's model,
    whose Mamba-2 layers make a hybrid row modelled)."""
    text = " ".join(str(row.get(k) or "") for k in ("model_name", "extra_layout", "notes", "variant"))
    text += " " + " ".join(f"{k}={v}" for k, v in (row.get("other_metrics") or {}).items()
                           if v and str(v).lower() not in ("false", "0", "none", "off", "no"))
    for pattern, reason, taken in NOT_MODELLED:
        if pattern.search(text) and not (model is not None and taken(model)):
            return reason
    return None


def row_inputs(row: dict[str, Any]) -> RowInputs:
    model, (cluster, network) = row_model(row), _row_cluster(row)
    training = row_training(row, cluster.gpu)
    fields, open_choices = row_plan_fields(row, model, training)
    return RowInputs(model, cluster, training, fields, open_choices, unused_columns(row), not_modelled(row, model), network)


def plan_of(fields: dict[str, Any]) -> Plan:
    return Plan.model_validate(fields)
