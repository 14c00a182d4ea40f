"""`autopar emit`: write the launcher artefacts of one plan of a results file (or of a plan
given on the command line) for Megatron-LM, DeepSpeed, torchtitan or Megatron-Bridge."""

from __future__ import annotations

import click

from autopar.cli import main
from autopar.cli.common import FRAMEWORKS, MEMORY_HEADROOM_HELP, PRECISIONS, checked_plan, flush_notes, resolve_inputs, resolve_training
from autopar.errors import InputError, Missing


def _job_from_options(model_name, cluster_name, gpus, seq_len, global_batch, global_batch_tokens, precision, plan_text,
                      grad_reduce_bytes=None, framework=None, memory_headroom=None):
    from autopar import __version__
    from autopar.cost import estimate as cost_estimate  # only this path needs the cost model
    from autopar.emit.common import EmitJob

    missing = [name for name, value in (("--model", model_name), ("--cluster", cluster_name), ("--plan", plan_text)) if value is None]
    if len(missing) == 3:
        raise InputError("results", Missing(), "give a RESULTS.json file (from `autopar search --out`), or a hand-written plan "
                         "with --model, --cluster and --plan (see `autopar emit --help`)")
    if missing:
        raise InputError(missing[0].removeprefix("--"), Missing(), f"a hand-written plan needs --model, --cluster and --plan "
                         f"(missing {', '.join(missing)}); or give a RESULTS.json file")
    model, cluster = resolve_inputs(model_name, cluster_name, gpus, extrapolate_fabric=True, memory_headroom=memory_headroom)
    training = resolve_training(model, seq_len, global_batch, global_batch_tokens, precision, framework=framework)  # the launcher's stack
    if grad_reduce_bytes is not None:  # torchtitan reduces gradients in fp32 only: plan with 4
        # the gradient buffer follows from the stack (cost.step.gradient_bytes_per_param: Megatron holds
        # it in the reduction dtype; FSDP2's fp32 gradient shard is inside the 16-byte convention)
        training = training.model_copy(update={"grad_reduce_bytes_per_param": grad_reduce_bytes})
    plan = checked_plan(plan_text, model, training, cluster.num_gpus)
    return EmitJob(model, cluster, training, plan, cost_estimate(model, cluster, training, plan), rank=1, version=__version__)


@main.command()
@click.argument("results", required=False, type=click.Path(dir_okay=False))
@click.option("--rank", type=click.IntRange(min=1), default=1, show_default=True, help="Which plan of the results file (1 = best)")
@click.option("--format", "fmt", type=click.Choice(FRAMEWORKS), required=True, help="Launcher to write")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, help="Folder to write into; default: print to stdout")
@click.option("--model", "model_name", default=None,
              help="Instead of RESULTS: model preset, autopar model file, HF config.json or checkpoint directory (with --cluster, --plan)")
@click.option("--cluster", "cluster_name", default=None, help="Instead of RESULTS: cluster preset or YAML file")
@click.option("--gpus", type=int, default=None, help="Instead of RESULTS: total GPUs; default: the cluster file's size")
@click.option("--memory-headroom", default=None, help="Instead of RESULTS: " + MEMORY_HEADROOM_HELP
              + " (with RESULTS: the search's)")
@click.option("--seq-len", type=int, default=None,
              help="Instead of RESULTS: sequence length, tokens; default: the model's max_position_embeddings, at most 8192")
@click.option("--global-batch", type=int, default=None, help="Instead of RESULTS: global batch in sequences")
@click.option("--global-batch-tokens", default=None,
              help="Instead of RESULTS: global batch in tokens, K/M/G/T powers of two, B the same as G; default: about 4M tokens")
@click.option("--precision", type=click.Choice(PRECISIONS), default="bf16", show_default=True, help="Instead of RESULTS: GEMM precision")
@click.option("--plan", "plan_text", default=None,
              help="Instead of RESULTS: the plan to launch, as for `autopar estimate`, e.g. tp=8,pp=4,vpp=5,zero=1,recompute=selective")
@click.option("--grad-reduce-bytes", type=click.FloatRange(min=1, max=4), default=None, hidden=True)
def emit(results, rank, fmt, out_dir, model_name, cluster_name, gpus, memory_headroom, seq_len, global_batch, global_batch_tokens, precision, plan_text,
         grad_reduce_bytes):
    """Write runnable launcher configs for a plan of RESULTS.json (from `autopar search --out`).

    Or for a hand-written plan: --model, --cluster and --plan instead of RESULTS (sequence and
    batch default as in `autopar estimate`); the plan is costed on the launcher's stack.

    Each config is re-checked against the framework's own rules; a plan the framework would
    reject is refused with the rule it breaks.
    """
    from autopar.emit import emit as emit_artefacts, job_from_results, write_artefacts
    from autopar.specs.results import load_results

    if results is not None:
        if plan_text is not None or model_name is not None:
            raise InputError("emit", results, "give either RESULTS.json or --model/--cluster/--plan, not both")
        if memory_headroom is not None:
            raise InputError("memory-headroom", memory_headroom, "applies to a hand-written plan; a results file keeps its "
                             "search's headroom (rerun `autopar search --memory-headroom`)")
        job = job_from_results(load_results(results), rank)
    else:
        job = _job_from_options(model_name, cluster_name, gpus, seq_len, global_batch, global_batch_tokens, precision, plan_text,
                                grad_reduce_bytes, framework=fmt, memory_headroom=memory_headroom)
    artefacts = emit_artefacts(job, fmt)
    flush_notes()
    if out_dir is None:
        for art in artefacts:
            click.echo(f"==> {art.name} <==")
            click.echo(art.text, nl=False)
        return
    try:
        paths = write_artefacts(artefacts, out_dir)
    except OSError as exc:
        raise InputError("out", out_dir, f"cannot write ({exc.strerror})") from None
    for path in paths:
        click.echo(str(path))
