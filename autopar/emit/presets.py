"""Which preset network a model is. The torchtitan and Megatron-Bridge launchers start from a
model-registry entry or recipe written for one preset's network, so a model gets that entry
when its architecture is the preset's -- an HF config.json of Llama-3 8B under any file name or
checkpoint folder -- and not for carrying a preset's name (a file named llama3-8b with 16
layers would have trained the registry's 32).

A model no entry fits is refused for the model, whatever the plan: ModelRefused names the
model field, and `search --framework` / `--emit` raise it before the search
(autopar.cli.framework)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from autopar.emit.common import RuleViolation, Violation
from autopar.errors import InputError

if TYPE_CHECKING:
    from autopar.specs import ModelSpec


# fields that weigh the training loss, not the network: the launchers write them themselves
# (Megatron-Bridge model.moe_aux_loss_coeff), so a model matches its preset whatever they hold
LOSS_FIELDS = {"moe_aux_loss_coeff", "moe_aux_loss_per_sequence"}


def architecture(model: ModelSpec) -> dict:
    """The fields that define the network: every field but the name, the loss weights (LOSS_FIELDS)
    and, with RoPE (no position table), max_position_embeddings, which says how long the checkpoint
    trained, not what it is."""
    learned = model.position_embedding == "learned_absolute"
    return model.model_dump(exclude={"name", *LOSS_FIELDS} if learned else {"name", "max_position_embeddings", *LOSS_FIELDS})


@lru_cache(maxsize=None)
def _preset_architecture(name: str) -> dict:
    from autopar.specs import load_model

    return architecture(load_model(name))


@lru_cache(maxsize=256)  # a search asks once per plan it checks: the same model each time
def preset_of(model: ModelSpec, names: tuple[str, ...]) -> str | None:
    """The preset of `names` whose architecture `model` has (its own name first), else None."""
    arch = architecture(model)
    ordered = sorted(names, key=lambda n: n != model.name)
    return next((n for n in ordered if _preset_architecture(n) == arch), None)


class ModelRefused(RuleViolation):
    """The framework refuses the model itself, whatever the plan: the error names the model
    field (`model=NAME`), the model's rules first, then any the plan also breaks."""

    def __init__(self, framework: str, model_name: str, violations: list[Violation]):
        self.framework = framework
        self.violations = violations
        InputError.__init__(self, "model", model_name, f"{framework} refuses it: {'; '.join(str(v) for v in violations)}")


def refuse(framework: str, model_name: str, plan_text: str, found: list[Violation], model_rules: set[str]) -> None:
    """Raise ModelRefused when a rule about the model is broken, else RuleViolation for the plan."""
    about_model = [v for v in found if v.rule in model_rules]
    if about_model:
        raise ModelRefused(framework, model_name, about_model + [v for v in found if v.rule not in model_rules])
    if found:
        raise RuleViolation(framework, plan_text, found)
