"""A launcher framework as a search constraint: the plan filter that asks the framework's
emitter (autopar/emit/) whether it would refuse the plan, so `search --framework F` (and
`--emit F`) ranks only plans F runs and the emitted plan is the best one F runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from autopar.errors import AutoparError, InputError

if TYPE_CHECKING:
    from autopar.emit.common import EmitJob, Rules
    from autopar.specs import ClusterSpec, ModelSpec, Plan, TrainingSpec
    from autopar.specs.estimate import Estimate


def _checks() -> dict[str, Callable[["EmitJob"], "Rules"]]:
    """Each emitter's own refusal check (the one it runs before writing a config)."""
    from autopar.emit.bridge import check_bridge
    from autopar.emit.deepspeed import check_deepspeed
    from autopar.emit.megatron import check_megatron
    from autopar.emit.torchtitan import check_torchtitan

    return {
        "megatron": check_megatron,
        "deepspeed": lambda job: check_deepspeed(job)[0],
        "torchtitan": lambda job: check_torchtitan(job)[0],
        "megatron-bridge": lambda job: check_bridge(job)[0],
    }


def framework_filter(framework: str, model: ModelSpec, cluster: ClusterSpec,
                     training: TrainingSpec) -> Callable[[Plan, Estimate], str | None]:
    """plan, estimate -> the rules `framework` refuses the plan by, or None when it runs it."""
    from autopar.emit.common import EmitJob

    checks = _checks()
    if framework not in checks:
        raise InputError("framework", framework, f"must be one of {', '.join(checks)}")
    refuse_model(framework, model, training.seq_len)  # before the search: no plan of a model the launcher cannot build would pass
    check = checks[framework]

    def refusal(plan: Plan, estimate: Estimate) -> str | None:
        try:
            found = check(EmitJob(model, cluster, training, plan, estimate)).found
        except AutoparError as exc:
            return str(exc)
        return "; ".join(str(v) for v in found) if found else None

    return refusal


def refuse_model(framework: str, model: ModelSpec, seq_len: int) -> None:
    """ModelRefused (model=NAME) when the framework's launcher cannot build the model whatever the
    plan: Megatron-LM's flags cannot say some features (sinks, other activations, per-layer RoPE),
    torchtitan's registry and Megatron-Bridge's recipes hold a few architectures, DeepSpeed's
    helper writes a few transformers families (its config depends on the sequence length)."""
    from autopar.emit.bridge import model_violations as bridge_model
    from autopar.emit.deepspeed import model_refusals as deepspeed_model
    from autopar.emit.megatron import model_violations as megatron_model
    from autopar.emit.presets import ModelRefused
    from autopar.emit.torchtitan import model_violations as titan_model

    hooks = {"megatron": megatron_model, "torchtitan": titan_model, "megatron-bridge": bridge_model, "deepspeed": lambda m: deepspeed_model(m, seq_len)}
    found = hooks.get(framework, lambda _: [])(model)
    if found:
        raise ModelRefused(framework, model.name, found)


def resolve_framework(framework: str | None, emit_format: str | None) -> str | None:
    """--emit F implies --framework F; the two must agree when both are given."""
    if framework and emit_format and framework != emit_format:
        raise InputError("framework", framework, f"differs from --emit {emit_format}; the emitted plan must be one the framework runs")
    return framework or emit_format
