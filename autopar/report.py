"""Human-readable tables for estimates and validation reports (plain text, stable for tests)."""

from __future__ import annotations

import math

from autopar.specs.estimate import Estimate
from autopar.specs.hardware import gb_gib, usable_hbm_text


COUNT_UNITS = ("", "K", "M", "G", "T", "P")  # the suffixes autopar reads back (parse_count, --tokens)
MONEY_UNITS = ("", "K", "M", "B", "T")  # dollars: $1.2B, as --budget reads it


def _scaled(value: float, base: float, units: tuple[str, ...], digits: int) -> tuple[float, int]:
    """(value in its unit, the unit's index): the unit that leaves 1 to 999 of it at `digits`
    significant digits, up while the rounded value has four digits (999,600 is 1M, not 1e+03K;
    1,000 x 2**10 is 0.977M)."""
    scaled, unit = float(value), 0
    while unit < len(units) - 1 and _rounded(scaled, digits) >= 1000:
        scaled, unit = scaled / base, unit + 1
    return scaled, unit


def _rounded(x: float, digits: int) -> float:
    return abs(float(f"{x:.{digits}g}"))


def human_count(value: float, binary: bool = False, units: tuple[str, ...] = COUNT_UNITS, digits: int = 3) -> str:
    """A count or size for people: `digits` significant digits in the unit that leaves 1 to 999
    of it (10M, 1.05T, 512, 128K), never %g's 1e-05T or 1.04858e+06M. binary=True steps by
    1,024, as batches in tokens are read (16M = 2**24 tokens, --global-batch-tokens)."""
    scaled, unit = _scaled(value, 1024.0 if binary else 1000.0, units, digits)
    # past the top unit, whole numbers with separators: 999.5P rounds to 1,000P, not %g's 1e+03P
    if _rounded(scaled, digits) >= 1000:
        return f"{scaled:,.0f}{units[unit]}"
    # below 1e-3, positional digits: $0.0000444 a step, not %g's 4.44e-05
    if 0 < abs(scaled) < 1e-3:
        text = f"{scaled:.{digits - 1 - math.floor(math.log10(abs(scaled)))}f}".rstrip("0")  # %g drops trailing zeros too
        return f"{text}{units[unit]}"
    return f"{scaled:.{digits}g}{units[unit]}"


def human_tokens(value: float) -> str:
    """A batch in tokens, in powers of two as --batch-tokens, --global-batch-tokens and the plan
    table's legend read them (batch K/M/G = 2^10/2^20/2^30): 2**24 is 16M, DeepSeek's fitted
    7.68e6-token critical batch 7.32M (not a decimal 7.68M beside binary batches)."""
    return human_count(value, binary=True)


def dollars(usd: float | None, digits: int = 3) -> str:
    """$70.2K, $5.12M, $1.2B; '-' when the cluster has no price."""
    if usd is None:
        return "-"
    return ("-" if usd < 0 else "") + "$" + human_count(abs(usd), units=MONEY_UNITS, digits=digits)  # -$1.2K, not $-1.2K


def plural(count: int, word: str, words: str | None = None) -> str:
    """'1 point', '2 points', '1,024 GPUs'."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"


def _gb(x: float) -> str:
    return f"{x / 1e9:8.2f} GB"


def _share(x: float, total: float) -> str:
    return f"{100 * x / total:5.1f}%" if total else "  -  "


# below this ratio of causal to non-causal MFU the convention is worth a line: long sequences
# (LLaMA-3 8B: 0.89 at 8k tokens, 0.73 at 32k)
CAUSAL_NOTE_RATIO = 0.8


def causal_note(e: Estimate) -> str:
    """A line on the MFU convention where it matters: MFU and HFU count attention non-causally
    (Narayanan et al. 2021, Megatron-LM), so at long sequences they exceed what the GPUs execute
    under the causal mask (a 1M-token LLaMA-3 8B plan reads MFU 75%, HFU 92%)."""
    if e.mfu_causal is None or not e.mfu or e.mfu_causal >= CAUSAL_NOTE_RATIO * e.mfu:
        return ""
    return (f"MFU and HFU count attention non-causally, as Megatron-LM and published MFUs do; counted causally, "
            f"as the kernels run it: MFU {100 * e.mfu_causal:.1f}%")


def estimate_table(e: Estimate, title: str = "") -> str:
    lines = []
    if title:
        lines.append(title)
    lines.append(f"plan        {e.plan}")
    lines.append(f"layout      {e.num_gpus} GPUs, dp={e.dp}, {e.num_microbatches} micro-batches, stage layers {_stages(e.stage_layers)}")
    lines.append(f"feasible    {'yes' if e.feasible else 'NO: ' + '; '.join(e.reasons)}")
    lines.append("")
    lines.append(f"step        {e.step_seconds:10.4f} s     bottleneck: {e.bottleneck.value}")
    lines.append(f"throughput  {e.tokens_per_second:12,.0f} tokens/s   {e.tokens_per_second_per_gpu:,.1f} tokens/s/GPU")
    lines.append(f"model       {e.model_tflops_per_gpu:8.1f} TFLOP/s/GPU   MFU {100 * e.mfu:5.1f}%   HFU {100 * e.hfu:5.1f}%   bubble {100 * e.bubble_fraction:5.1f}%")
    note = causal_note(e)
    if note:
        lines.append(f"            {note}")
    if e.validated is not None:
        lines.append(f"validated   {trust_line(e.validated)}")
    if e.time_to_train_seconds is not None:
        cost = f"   cost ${e.cost_usd:,.0f}" if e.cost_usd is not None else ""
        lines.append(f"to train    {e.time_to_train_seconds / 86400:8.2f} days{cost}")
    lines.append("")
    lines.append("time per step                      seconds   share")
    for key, value in e.time_breakdown.items():
        if value:
            lines.append(f"  {key:<30} {value:10.4f}  {_share(value, e.step_seconds)}")
    lines.append(f"  {'total':<30} {e.step_seconds:10.4f}")
    lines.append("")
    lines.append(f"memory per GPU (stage {e.worst_stage})            bytes   share")
    for key, value in e.memory_breakdown.items():
        if value:
            lines.append(f"  {key:<30} {_gb(value)}  {_share(value, e.memory_bytes_per_gpu)}")
    limit = (usable_hbm_text(e.memory_capacity_bytes, e.memory_headroom_bytes) if e.memory_headroom_bytes
             else gb_gib(e.memory_capacity_bytes))
    lines.append(f"  {'total':<30} {_gb(e.memory_bytes_per_gpu)}  of {limit}")
    if e.host_memory_bytes_per_gpu:
        room = f"of {e.host_memory_capacity_bytes / 1e9:g} GB host share" if e.host_memory_capacity_bytes else "host capacity unknown"
        lines.append(f"  {'offloaded to host (pinned)':<30} {_gb(e.host_memory_bytes_per_gpu)}  {room}; not in the total")
    return "\n".join(lines)


def trust_line(v) -> str:
    """How far to trust an estimate: its family's error over the published runs (autopar validate),
    and over the held-out runs no coefficient was fitted to."""
    if v.mape is None and not v.holdout_rows:
        return v.warning or f"{v.family}: no published runs"
    parts = [f"mean error {100 * v.mape:.1f}% over {v.num_rows} published runs"] if v.mape is not None else []
    if v.holdout_rows:
        sign = v.holdout_mean_signed_error
        lean = "optimistic" if sign > 0 else "pessimistic" if sign < 0 else "unbiased"
        parts.append(f"{100 * v.holdout_mape:.1f}% over {v.holdout_rows} held-out runs ({100 * sign:+.1f}% signed: {lean})")
    return f"{v.family}: " + "; ".join(parts)


def _stages(layers: list[int]) -> str:
    if len(set(layers)) == 1:
        return f"{len(layers)} x {layers[0]}"
    return "[" + ", ".join(map(str, layers)) + "]"
