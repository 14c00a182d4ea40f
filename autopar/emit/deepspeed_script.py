"""The Python helper emitted beside ds_config.json: the plan's network as a transformers config
(autopar.emit.deepspeed_model), which the training script builds; DeepSpeed reads the pipeline partition, the
activation-checkpoint interval and the Ulysses sequence-parallel groups from the training script,
not from the JSON (PipelineModule takes num_stages, partition_method and
activation_checkpoint_interval as constructor arguments and computes self.parts in
_partition_layers; Ulysses groups come from an mpu such as
deepspeed.runtime.sequence_parallel.parallel_state_sp, whose initialize_sequence_parallel builds
them). Read in DeepSpeed 0.19.8 deepspeed/runtime/pipe/module.py and runtime/sequence_parallel/."""

from __future__ import annotations

from autopar.emit.common import EmitJob, comment_block, header_lines
from autopar.emit.deepspeed_model import hf_config
from autopar.specs.plan import Recompute

HELPER = "autopar_deepspeed.py"


def partition_bounds(job: EmitJob) -> list[int]:
    """PipelineModule.parts for the plan: layer specs are [embedding, decoder 0..L-1, head]; stage
    s holds parts[s]:parts[s+1]; the embedding joins the first stage, the head the last."""
    ranks = job.plan.model_layout(job.model).rank_decoders()
    bounds = [0]
    for s, n in enumerate(ranks):
        bounds.append(bounds[-1] + n + (1 if s == 0 else 0) + (1 if s == len(ranks) - 1 else 0))
    return bounds


_MODEL_CONFIG = '''def model_config():
    """The plan's network as a transformers config: AutoModelForCausalLM.from_config(model_config())."""
    from transformers import AutoConfig

    keys = dict(MODEL_CONFIG)
    return AutoConfig.for_model(keys.pop("model_type"), **keys)
'''
_PIPELINE_MODULE = '''def pipeline_module(layer_specs, loss_fn=None, **kwargs):
    """A PipelineModule split as the plan says (DeepSpeed's 'uniform'/'parameters' methods would not)."""
    from deepspeed.pipe import PipelineModule

    class PlanPipelineModule(PipelineModule):
        def _partition_layers(self, method="uniform"):
            if len(self._layer_specs) != PARTS[-1]:
                raise ValueError(f"the plan partitions {PARTS[-1]} layer specs, the model has {len(self._layer_specs)}")
            self.parts = list(PARTS)
            stage_id = self._topo.get_coord(self.global_rank).pipe
            self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])

    return PlanPipelineModule(layers=layer_specs, num_stages=PIPELINE_STAGES, loss_fn=loss_fn,
                              activation_checkpoint_interval=ACTIVATION_CHECKPOINT_INTERVAL, **kwargs)
'''
# without pipeline stages the recompute a PipelineModule would apply (activation_checkpoint_interval)
# is the training script's: each decoder layer's forward runs again in backward
_CHECKPOINTED = '''def checkpointed(layer):
    """The decoder layer, its forward recomputed in backward when the plan recomputes (full)."""
    if not ACTIVATION_CHECKPOINT_INTERVAL:
        return layer
    import functools

    from torch.utils.checkpoint import checkpoint

    forward = layer.forward

    @functools.wraps(forward)
    def recomputed(*args, **kwargs):
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    layer.forward = recomputed
    return layer
'''


def render_helper(job: EmitJob) -> str:
    plan = job.plan
    if plan.pp > 1:
        notes = ["Import from the training script: build the model with pipeline_module(specs, loss_fn) (specs = "
                 "[embedding, one LayerSpec per decoder layer, head], the layers those of AutoModelForCausalLM.from_config("
                 "model_config())) and pass mpu=sequence_parallel_mpu() to deepspeed.initialize."]
    else:  # a PipelineModule even of one stage refuses ZeRO-2/3 and an mpu (runtime/pipe/engine.py, deepspeed/__init__.py)
        notes = ["Import from the training script: build the model as a plain torch module, AutoModelForCausalLM.from_config("
                 "model_config()) (not a PipelineModule: with one stage too, DeepSpeed refuses it with ZeRO-2/3 and with an mpu), "
                 "wrap each decoder layer with checkpointed(layer), "
                 "and pass mpu=sequence_parallel_mpu() to deepspeed.initialize."]
    interval = 1 if plan.recompute == Recompute.full else 0
    model_builder = _PIPELINE_MODULE if plan.pp > 1 else _CHECKPOINTED
    model_keys = "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in hf_config(job.model, job.training.seq_len).items()) + "}"
    return f'''{comment_block(header_lines(job, "deepspeed", notes)).rstrip()}
"""The plan's network, pipeline partition, activation checkpointing and Ulysses groups, where DeepSpeed reads them."""

import os

# The network the plan was costed for, as transformers config.json keys: its MLP activation
# (hidden_act / activation_function) and RoPE (rope_theta, rope_scaling) included
MODEL_CONFIG = {model_keys}

NUM_GPUS = {job.num_gpus}
PIPELINE_STAGES = {plan.pp}
# PipelineModule.parts: stage s runs layer specs PARTS[s]:PARTS[s+1] of [embedding, decoders..., head]
PARTS = {partition_bounds(job)!r}
ACTIVATION_CHECKPOINT_INTERVAL = {interval}  # 1 = every decoder layer recomputed in backward
SEQUENCE_PARALLEL_SIZE = {plan.cp}  # Ulysses all-to-all group size (ds_config sequence_parallel_size)


def check_world_size():
    world = int(os.environ.get("WORLD_SIZE", NUM_GPUS))
    if world != NUM_GPUS:
        raise SystemExit(f"this plan needs {{NUM_GPUS}} GPUs; WORLD_SIZE={{world}}")


{_MODEL_CONFIG}

{model_builder}

def sequence_parallel_mpu():
    """DeepSpeed's Ulysses groups (consecutive ranks); None without sequence parallelism."""
    if SEQUENCE_PARALLEL_SIZE == 1:
        return None
    import deepspeed.runtime.sequence_parallel.parallel_state_sp as mpu

    mpu.initialize_sequence_parallel(sequence_parallel_size=SEQUENCE_PARALLEL_SIZE)
    return mpu
'''
