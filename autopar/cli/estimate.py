"""`autopar estimate`: cost one plan and print its breakdown."""

from __future__ import annotations

import click

from autopar.cli import main
from autopar.cli.common import (check_attention_kernel, checked_plan, dump_json, flush_notes, model_cluster_options, note, resolve_inputs, resolve_training,
                                training_options)


@main.command()
@model_cluster_options
@training_options
@click.option("--plan", "plan_text", required=True, help="e.g. tp=8,pp=8,dp=16,vpp=5,mbs=1,zero=1,recompute=selective")
@click.option("--no-flash", is_flag=True, help="Unfused attention (stores the score matrix)")
@click.option("--allow-tp-across-nodes", is_flag=True, help="Let tp exceed the NVLink domain (as in search): such a plan is judged by memory alone")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object")
def estimate(model_name, cluster_name, gpus, extrapolate_fabric, memory_headroom, seq_len, global_batch, global_batch_tokens, precision, fp8_recipe, stack,
             moe_routing, fp8_param_gather, expandable_segments, attention_kernel, plan_text, no_flash, allow_tp_across_nodes, as_json):
    """Predict step time, throughput, MFU and memory of one plan."""
    from autopar.cost import estimate as cost_estimate
    from autopar.report import estimate_table
    from autopar.specs.costparams import params_for_cluster

    model, cluster = resolve_inputs(model_name, cluster_name, gpus, extrapolate_fabric, memory_headroom)
    training = resolve_training(model, seq_len, global_batch, global_batch_tokens, precision, stack, fp8_recipe=fp8_recipe,
                                flash_attention=not no_flash, moe_routing=moe_routing,
                                fp8_param_gather=fp8_param_gather, expandable_segments=expandable_segments, attention_kernel=attention_kernel)
    check_attention_kernel(training, cluster)
    plan = checked_plan(plan_text, model, training, cluster.num_gpus)
    result = allow_tp_span(cost_estimate(model, cluster, training, plan, params_for_cluster(cluster)), plan, cluster, allow_tp_across_nodes)
    flush_notes()
    if as_json:
        click.echo(dump_json(result.model_dump(mode="json")), nl=False)
    else:
        click.echo(estimate_table(result, f"{model.name} on {cluster.name} ({cluster.num_gpus} x {cluster.gpu.name}), seq {training.seq_len}, "
                                          f"batch {training.global_batch_size} x {training.seq_len} tokens, {training.precision_label}, {training.stack.value}"
                                          + (f", attention {training.attention_kernel.value}" if training.attention_kernel else "")))


def allow_tp_span(result, plan, cluster, allowed: bool):
    """A tp group wider than a node: the cost model costs it over the network and lists "tp=N
    spans nodes" among the reasons it does not fit. `search --allow-tp-across-nodes` ranks such
    plans by memory alone (autopar.space), so the same flag here drops that reason; without it,
    a note names the flag."""
    if plan.tp <= cluster.gpus_per_node:
        return result
    if not allowed:
        note(f"tp={plan.tp} spans nodes of {cluster.gpus_per_node} GPUs: --allow-tp-across-nodes judges the plan by memory alone, "
             "as search does with it")
        return result
    from autopar.cost.estimate import tp_span_reason
    reasons = [r for r in result.reasons if not r.startswith(tp_span_reason(plan.tp))]
    return result.model_copy(update={"reasons": reasons, "feasible": not reasons})
