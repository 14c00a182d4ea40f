"""Megatron-LM's own checks, applied to the emitted arguments (parsed back with Megatron's
names and defaults). Rules and their sources: docs/reference/launchers.md 1.4 (AR =
megatron/training/arguments.py validate_args, TC = transformer_config.py, PS = parallel_state.py,
NMC = num_microbatches_calculator.py, SCH = schedules.py; hybrid: HLA, MM, MCP at _hybrid); the Megatron-FSDP rules were read in
a copy of AR validate_args (not in launchers.md); FGO = Megatron-LM
docs/user-guide/features/fine_grained_activation_offloading.md (the switch and its module list);
TE = Transformer Engine transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
attn_forward_func_with_cp (TE 2.17.1, the revision Megatron-LM d98e8a6's pyproject.toml pins)."""

from __future__ import annotations

from argparse import Namespace

from autopar.emit.common import Rules
from autopar.emit.megatron_parse import layout_stage_layers, parse_megatron_argv
from autopar.specs.plan import OffloadModule

# TransformerConfig.__post_init__ (Megatron-LM d98e8a6 and later): 'Invalid choices for offload_modules'
# unless each is one of these; autopar's layer_input (the checkpointed layer input) is not among them
MEGATRON_OFFLOAD_MODULES = frozenset({"core_attn", "attn_proj", "expert_fc1", "fused_group_mlp", "moe_act", "attn_norm", "mlp_norm",
                                      "qkv_linear", "gdp_qkv"})


def validate_megatron(argv: list[str], world_size: int, env: dict[str, str], compute_capability: float, rules: Rules) -> Rules:
    """Record every rule the arguments break (world size, divisibility, batch, options)."""
    raw = parse_megatron_argv(argv, resolve_hybrid=False)
    if raw.hybrid_layer_pattern:
        _hybrid(raw, rules)
    ns = parse_megatron_argv(argv)
    dp = _world(ns, world_size, rules)
    if dp:
        _batch(ns, dp, rules)
    _layers(ns, rules)
    _attention(ns, rules)
    _cp_attention(ns, rules)
    _sequence(ns, env, compute_capability, rules)
    _optimizer(ns, rules)
    _precision_and_recompute(ns, rules)
    _moe(ns, world_size, dp, rules)
    return rules


def _world(ns: Namespace, world: int, r: Rules) -> int:
    tp, pp, cp = ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size
    if not r.check(world % (tp * pp * cp) == 0, "world_size % (TP*PP*CP) == 0",
                   f"world_size({world}) % (tp({tp}) * pp({pp}) * cp({cp})) = {world % (tp * pp * cp)}", "AR"):
        return 0
    return world // (tp * pp * cp)


def _batch(ns: Namespace, dp: int, r: Rules) -> None:
    mbs, gbs = ns.micro_batch_size, ns.global_batch_size
    if not r.check(mbs is not None and mbs > 0, "micro_batch_size > 0", f"micro_batch_size={mbs}", "AR"):
        return
    gbs = gbs if gbs is not None else mbs * dp
    if not r.check(gbs % (mbs * dp) == 0, "GBS % (MBS * DP) == 0",
                   f"global_batch_size({gbs}) % (micro_batch_size({mbs}) * dp({dp})) = {gbs % (mbs * dp)}", "NMC"):
        return
    m = gbs // (mbs * dp)
    r.check(m >= 1, "num_microbatches >= 1", f"num_microbatches={m}", "NMC")
    vpp = _vpp(ns)
    if vpp and vpp > 1:
        pp = ns.pipeline_model_parallel_size
        group = ns.microbatch_group_size_per_virtual_pipeline_stage or pp
        r.check(pp <= group <= m, "PP <= microbatch_group_size_per_vp_stage <= num_microbatches",
                f"pp({pp}), group size({group}), num_microbatches({m})", "SCH")
        r.check(m % group == 0 or m % group >= pp, "interleaved: num_microbatches % group_size == 0 or >= PP",
                f"num_microbatches({m}) % group size({group}) = {m % group} with pp({pp})", "SCH")


def _vpp(ns: Namespace) -> int | None:
    pp = ns.pipeline_model_parallel_size
    if ns.pipeline_model_parallel_layout:
        return layout_stage_layers(ns.pipeline_model_parallel_layout, pp)[1]
    if ns.num_virtual_stages_per_pipeline_rank:
        return ns.num_virtual_stages_per_pipeline_rank
    if ns.num_layers_per_virtual_pipeline_stage and ns.num_layers and ns.num_layers % pp == 0:
        return ns.num_layers // pp // ns.num_layers_per_virtual_pipeline_stage
    return None


def _layers(ns: Namespace, r: Rules) -> None:
    pp, layers = ns.pipeline_model_parallel_size, ns.num_layers
    options = [ns.num_layers_per_virtual_pipeline_stage, ns.num_virtual_stages_per_pipeline_rank, ns.pipeline_model_parallel_layout]
    r.check(sum(o is not None for o in options) <= 1, "at most one VPP option",
            "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank and "
            "--pipeline-model-parallel-layout are mutually exclusive", "AR")
    first, last = ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers
    uneven = first is not None or last is not None
    vpp = _vpp(ns) or 1
    if ns.pipeline_model_parallel_layout:
        r.check(not uneven and not ns.account_for_embedding_in_pipeline_split and not ns.account_for_loss_in_pipeline_split,
                "layout excludes first/last counts and account_for_*", "a layout string cannot be combined with them", "TC")
        stages, _ = layout_stage_layers(ns.pipeline_model_parallel_layout, pp)
        r.check(sum(stages) == layers, "layout decoder layers == num_layers",
                f"layout has {sum(stages)} decoder layers, num_layers={layers}", "TC")
        text = ns.pipeline_model_parallel_layout
        r.check(text.startswith("E") and text.endswith("L"), "layout starts with E and ends with L",
                f"layout {text!r}", "TC")
    elif uneven:
        r.check(ns.num_layers_per_virtual_pipeline_stage is None, "uneven stages exclude --num-layers-per-virtual-pipeline-stage",
                "use --num-virtual-stages-per-pipeline-rank with uneven first/last stages", "AR")
        ends = [x for x in (first, last) if x is not None]
        r.check(all(x > 0 and x % vpp == 0 for x in ends), "first/last stage layers > 0 and % VPP == 0",
                f"first={first}, last={last}, vpp={vpp}", "TC")
        rest, middle = layers - sum(ends), pp - len(ends)
        ok = rest == 0 if middle == 0 else rest > 0 and rest % middle == 0 and (rest // middle) % vpp == 0
        r.check(ok, "middle layers split evenly (and % VPP == 0)",
                f"{rest} layers over {middle} middle stages with vpp={vpp}", "TC")
    else:
        extra = int(ns.account_for_embedding_in_pipeline_split) + int(ns.account_for_loss_in_pipeline_split)
        total = layers + extra
        if r.check(total % pp == 0, "num_layers % PP == 0", f"num_layers({total}) % pp({pp}) = {total % pp}", "AR"):
            r.check((total // pp) % vpp == 0, "(num_layers / PP) % VPP == 0",
                    f"layers per stage({total // pp}) % vpp({vpp}) = {(total // pp) % vpp}", "TB")
    if vpp > 1:
        need = 1 if ns.overlap_p2p_comm else 2
        r.check(pp > need, "interleaving needs PP > 1 (PP > 2 without p2p overlap)", f"pp={pp} with vpp={vpp}", "AR")


# TE attn_forward_func_with_cp: 'assert not sliding_window_attn or cp_comm_type in ["a2a", "all_gather"]'
# (since TE v2.0, commit 560bccf8d; still in 2.17.1 and 2.18), where sliding_window_attn is a window_size
# other than (-1, 0) and (-1, -1)
SWA_CP_TYPES = ("a2a", "all_gather")
SWA_CP_RULE = "sliding-window attention with CP > 1 needs cp_comm_type a2a or all_gather"


def te_cp_comm_type(comm_type: str, hierarchical: list[int] | None) -> str:
    """The CP type TE runs: attn_forward_func_with_cp turns a2a+p2p into p2p when its a2a group
    has one rank, into a2a when its p2p group has one (before its other checks)."""
    if comm_type == "a2a+p2p" and hierarchical and len(hierarchical) == 2:
        if hierarchical[0] == 1:
            return "p2p"
        if hierarchical[1] == 1:
            return "a2a"
    return comm_type


def _cp_attention(ns: Namespace, r: Rules) -> None:
    """Transformer Engine's CP limits on the attention the flags build (TE)."""
    cp, window = ns.context_parallel_size, ns.window_size
    if cp <= 1 or window is None or window in ((-1, 0), (-1, -1)):
        return
    for written in ns.cp_comm_type:
        runs = te_cp_comm_type(written, ns.hierarchical_context_parallel_sizes)
        shown = written if runs == written else f"{written} (runs as {runs})"
        r.check(runs in SWA_CP_TYPES, SWA_CP_RULE,
                f"--window-size {','.join(map(str, window))} with --context-parallel-size {cp} and --cp-comm-type {shown}: "
                "Transformer Engine asserts 'Context parallelism does not support sliding window attention with "
                f"cp_comm_type={runs!r}' on the first forward (cp_algo=ulysses writes a2a, which it runs)",
                "TE context_parallel.py attn_forward_func_with_cp (TE >= 2.0)")


# Megatron-Core hybrid_layer_allocation.py Symbols: Mamba, GDN, attention, DSA, MLA, MLP, MoE
HYBRID_SYMBOLS = set("MG*D+-E")


def _hybrid(ns: Namespace, r: Rules) -> None:
    """A hybrid layer pattern as written (AR's hybrid block, hybrid_layer_allocation.py HLA,
    mamba_mixer.py MM, mamba_context_parallel.py MCP)."""
    main, *mtp = ns.hybrid_layer_pattern.split("/")
    segments = main.split("|")
    pp, tp, cp = ns.pipeline_model_parallel_size, ns.tensor_model_parallel_size, ns.context_parallel_size
    r.check(set("".join(segments)) <= HYBRID_SYMBOLS and all(set(x) <= HYBRID_SYMBOLS for x in mtp),
            "hybrid pattern letters in {M, G, *, D, +, -, E} ('|' in the main pattern only)", f"pattern {ns.hybrid_layer_pattern!r}", "HLA")
    r.check(len(set(mtp)) <= 1, "every MTP pattern after '/' is the same", f"MTP patterns {mtp}", "HLA")
    written = {"--num-layers-per-virtual-pipeline-stage": ns.num_layers_per_virtual_pipeline_stage,
               "--num-virtual-stages-per-pipeline-rank": ns.num_virtual_stages_per_pipeline_rank,
               "--pipeline-model-parallel-layout": ns.pipeline_model_parallel_layout,
               "--account-for-embedding-in-pipeline-split": ns.account_for_embedding_in_pipeline_split or None,
               "--account-for-loss-in-pipeline-split": ns.account_for_loss_in_pipeline_split or None}
    if len(segments) > 1:
        written["--decoder-first-pipeline-num-layers"] = ns.decoder_first_pipeline_num_layers
        written["--decoder-last-pipeline-num-layers"] = ns.decoder_last_pipeline_num_layers
        r.check(len(segments) % pp == 0, "pipeline segments ('|') % PP == 0", f"{len(segments)} segments, pp={pp}", "AR")
    clash = [flag for flag, value in written.items() if value is not None]
    r.check(not clash, "a hybrid pattern's '|' segments are its pipeline layout: no other layout flags",
            f"{', '.join(clash)} with --hybrid-layer-pattern", "AR")
    if "M" not in main:
        return
    heads = ns.mamba_num_heads or 2 * ns.hidden_size // ns.mamba_head_dim  # Megatron's default: d_inner 2h
    groups = ns.mamba_num_groups
    r.check(heads % tp == 0 and groups % tp == 0 and heads % groups == 0, "mamba heads and groups % TP == 0, heads % groups == 0",
            f"mamba_num_heads({heads}), mamba_num_groups({groups}), tp({tp})", "MM")
    if cp > 1 and heads % tp == 0 and groups % tp == 0:
        local = groups // tp
        r.check((heads // tp) % cp == 0 and (cp % local == 0 if local < cp else local % cp == 0),
                "Mamba CP: (heads/TP) % CP == 0, and groups/TP divides or is divided by CP",
                f"mamba_num_heads({heads}), mamba_num_groups({groups}), tp({tp}), cp({cp})", "MCP")
    if ns.fp8:
        inner = heads * ns.mamba_head_dim
        width = 2 * inner + 2 * groups * ns.mamba_state_dim + heads
        r.check(width % 16 == 0, "FP8: the Mamba in-projection width % 16 == 0", f"2 d_inner + 2 groups N + heads = {width}", "MM")


def _attention(ns: Namespace, r: Rules) -> None:
    tp, heads = ns.tensor_model_parallel_size, ns.num_attention_heads
    r.check(heads % tp == 0, "num_attention_heads % TP == 0", f"num_attention_heads({heads}) % tp({tp}) = {heads % tp}", "TC")
    if ns.group_query_attention:
        g = ns.num_query_groups
        r.check(g % tp == 0 or tp % g == 0, "num_query_groups % TP == 0 or TP % num_query_groups == 0",
                f"num_query_groups({g}), tp({tp})", "TC")
        r.check(not ns.multi_latent_attention, "MLA and GQA are mutually exclusive",
                "--multi-latent-attention with --group-query-attention", "TC")
    if ns.kv_channels is None:
        r.check(ns.hidden_size % heads == 0, "hidden_size % num_attention_heads == 0 (no --kv-channels)",
                f"hidden_size({ns.hidden_size}) % heads({heads})", "AR")
    if ns.experimental_attention_variant in ("gdn", "gated_delta_net"):
        # TC __post_init__ asserts the GDN shape is set; the GDN module splits its key heads over TP
        # and, for the recurrence, over CP (megatron/core/ssm/gated_delta_net)
        r.check(ns.linear_attention_freq is not None, "linear_attention_freq is set for gated delta net",
                "--experimental-attention-variant gated_delta_net without --linear-attention-freq", "TC")
        split = tp * ns.context_parallel_size
        r.check(ns.linear_num_key_heads % split == 0, "linear_num_key_heads % (TP*CP) == 0",
                f"linear_num_key_heads({ns.linear_num_key_heads}) % (tp({tp}) * cp({ns.context_parallel_size}))", "TC")
        r.check(ns.linear_num_value_heads % ns.linear_num_key_heads == 0, "linear_num_value_heads % linear_num_key_heads == 0",
                f"linear_num_value_heads({ns.linear_num_value_heads}), linear_num_key_heads({ns.linear_num_key_heads})", "TC")


def _sequence(ns: Namespace, env: dict[str, str], cc: float, r: Rules) -> None:
    tp, cp, seq = ns.tensor_model_parallel_size, ns.context_parallel_size, ns.seq_length
    if cp > 1:
        r.check(seq % (2 * cp) == 0, "seq_length % (2*CP) == 0", f"seq_length({seq}) % (2 * cp({cp})) = {seq % (2 * cp)}", "AR")
    r.check(ns.max_position_embeddings is not None and ns.max_position_embeddings >= seq,
            "max_position_embeddings >= seq_length", f"max_position_embeddings={ns.max_position_embeddings}, seq_length={seq}", "AR")
    if ns.sequence_parallel and tp > 1:
        r.check((seq // cp) % tp == 0, "sequence parallel: (seq/CP) % TP == 0",
                f"seq/cp({seq // cp}) % tp({tp}) = {(seq // cp) % tp}", "mappings.py _split_along_first_dim")
    r.check(not ns.tp_comm_overlap or (ns.sequence_parallel and tp > 1), "--tp-comm-overlap requires --sequence-parallel",
            "tp-comm-overlap without sequence parallelism", "AR")
    fsdp = ns.use_megatron_fsdp or ns.use_torch_fsdp2
    if (tp > 1 or cp > 1) and cc < 10 and not fsdp:
        r.check(env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1", "CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP > 1 before Blackwell",
                f"tp={tp}, cp={cp}, compute capability {cc}, CUDA_DEVICE_MAX_CONNECTIONS={env.get('CUDA_DEVICE_MAX_CONNECTIONS')}", "AR")
    if ns.use_megatron_fsdp:
        r.check(env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1", "Megatron-FSDP: CUDA_DEVICE_MAX_CONNECTIONS != 1",
                "Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is not 1", "AR (copy)")
    types = ns.cp_comm_type
    if cp > 1 and "a2a+p2p" in types:
        sizes = ns.hierarchical_context_parallel_sizes or []
        prod = 1
        for s in sizes:
            prod *= s
        r.check(bool(sizes) and prod == cp, "a2a+p2p needs hierarchical CP sizes whose product is CP",
                f"hierarchical_context_parallel_sizes={sizes}, cp={cp}", "AR")


def _optimizer(ns: Namespace, r: Rules) -> None:
    sharded = ns.use_distributed_optimizer or ns.use_megatron_fsdp
    if ns.overlap_param_gather:
        r.check(sharded and ns.overlap_grad_reduce, "--overlap-param-gather needs the distributed optimizer (or Megatron-FSDP) and --overlap-grad-reduce",
                f"distributed optimizer={ns.use_distributed_optimizer}, megatron-fsdp={ns.use_megatron_fsdp}, overlap-grad-reduce={ns.overlap_grad_reduce}", "AR")
    if ns.overlap_param_gather_with_optimizer_step:
        r.check(ns.use_distributed_optimizer and ns.overlap_param_gather and (_vpp(ns) or 1) > 1,
                "--overlap-param-gather-with-optimizer-step needs the distributed optimizer, overlap-param-gather and VPP", "", "AR")
    if ns.fp8_param_gather:
        r.check(sharded or ns.use_torch_fsdp2, "--fp8-param-gather needs the distributed optimizer or FSDP", "", "AR")
    if ns.use_megatron_fsdp:
        r.check(ns.ckpt_format == "fsdp_dtensor", "Megatron-FSDP only supports ckpt format fsdp_dtensor",
                f"ckpt_format={ns.ckpt_format}", "AR (copy)")
    if ns.use_torch_fsdp2:
        r.check(ns.pipeline_model_parallel_size == 1 and ns.expert_model_parallel_size == 1 and not ns.use_distributed_optimizer and not ns.fp16,
                "--use-torch-fsdp2 excludes PP>1, EP>1, the distributed optimizer and fp16", "", "AR")


def _precision_and_recompute(ns: Namespace, r: Rules) -> None:
    # argument_utils.py: bias_activation_fusion = --bias-gelu-fusion (off without linear biases, AR)
    # unless --swiglu; TC __post_init__ allows the fusion with gelu, swiglu or quick_geglu only
    fused = ns.bias_gelu_fusion and ns.add_bias_linear and not ns.swiglu
    r.check(not (ns.squared_relu and fused), "bias-activation fusion only with gelu, swiglu or quick_geglu",
            "--squared-relu with linear biases and --bias-gelu-fusion (give --no-bias-gelu-fusion)", "TC")
    r.check(not (ns.bf16 and ns.fp16), "bf16 and fp16 are mutually exclusive", "--bf16 with --fp16", "AR")
    r.check(not (ns.fp8 and ns.fp4), "fp8 and fp4 are mutually exclusive", "--fp8-format with --fp4-format", "AR")
    r.check(not ns.fp4_param_gather or ns.fp4, "--fp4-param-gather requires --fp4-format", "", "AR")
    granularity = ns.recompute_granularity
    if granularity == "full":
        r.check(ns.recompute_method is not None and ns.recompute_num_layers is not None,
                "full recompute needs --recompute-method and --recompute-num-layers",
                f"method={ns.recompute_method}, num_layers={ns.recompute_num_layers}", "TC")
    elif granularity == "selective":
        r.check(ns.recompute_method is None and ns.recompute_num_layers is None,
                "selective recompute takes no method or num_layers",
                f"method={ns.recompute_method}, num_layers={ns.recompute_num_layers}", "TC")
    offload = ns.offload_modules or []
    if ns.fine_grained_activation_offloading or offload:
        r.check(ns.fine_grained_activation_offloading and bool(offload), "--offload-modules goes with --fine-grained-activation-offloading",
                f"fine_grained_activation_offloading={ns.fine_grained_activation_offloading}, offload_modules={offload}", "FGO")
        known = [m.value for m in OffloadModule if m.value in MEGATRON_OFFLOAD_MODULES]  # what autopar costs and Megatron offloads
        r.check(all(m in known for m in offload), "offload modules in {" + ", ".join(known) + "}", f"offload_modules={offload}", "TC")
    if ns.cpu_offloading_num_layers:
        # TransformerConfig.__post_init__ (docs/reference/launchers.md: CPU offloading is incompatible with PP>1 and recompute)
        r.check(0 < ns.cpu_offloading_num_layers < ns.num_layers, "--cpu-offloading-num-layers below the model's layers",
                f"cpu_offloading_num_layers={ns.cpu_offloading_num_layers}, num_layers={ns.num_layers}", "TC")
        r.check(ns.pipeline_model_parallel_size == 1, "CPU offloading needs pipeline parallel 1",
                f"pipeline_model_parallel_size={ns.pipeline_model_parallel_size}", "TC")
        r.check(granularity is None, "CPU offloading does not work with activation recomputation", f"recompute_granularity={granularity}", "TC")
        r.check(not ns.fine_grained_activation_offloading, "layer-level and fine-grained activation offloading exclude each other",
                "--cpu-offloading-num-layers with --fine-grained-activation-offloading", "FGO")
    if ns.distribute_saved_activations:
        r.check(ns.tensor_model_parallel_size > 1 and granularity == "full" and ns.recompute_method and not ns.sequence_parallel,
                "--distribute-saved-activations needs TP>1, full recompute with a method, and no SP", "", "AR")


def _moe(ns: Namespace, world: int, dp: int, r: Rules) -> None:
    tp, pp, cp, ep = ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size, ns.expert_model_parallel_size
    experts = ns.num_experts or None
    etp = ns.expert_tensor_parallel_size or tp
    if ep > 1:
        if r.check(experts is not None, "EP > 1 requires --num-experts", f"expert_model_parallel_size={ep}", "AR"):
            r.check(experts % ep == 0, "num_experts % EP == 0", f"num_experts({experts}) % ep({ep}) = {experts % ep}", "AR")
    if ns.moe_latent_size is not None:  # arguments.py validate_args, 'MoE latent projections'
        r.check(ns.moe_latent_size > 0 and experts is not None, "--moe-latent-size > 0 and only with --num-experts",
                f"moe_latent_size={ns.moe_latent_size}, num_experts={experts}", "AR")
    if experts is None:
        return
    if r.check(world % (etp * ep * pp) == 0, "world_size % (ETP*EP*PP) == 0",
               f"world_size({world}) % (etp({etp}) * ep({ep}) * pp({pp})) = {world % (etp * ep * pp)}", "PS") and dp:
        if ns.use_tp_pp_dp_mapping and pp > 1:
            r.check(etp * ep == tp * cp, "with --use-tp-pp-dp-mapping and PP>1: expert_dp == dp (ETP*EP == TP*CP)",
                    f"etp({etp}) * ep({ep}) = {etp * ep}, tp({tp}) * cp({cp}) = {tp * cp}", "PS")
    r.check(not (ns.add_bias_linear and etp > 1), "MoE with linear bias needs ETP == 1 (pass --disable-bias-linear)",
            f"expert_tensor_parallel_size={etp} with add_bias_linear", "TC")
    if ns.moe_router_topk == 1 and ns.moe_router_score_function == "softmax" and "sinkhorn" not in ns.moe_router_load_balancing_type:
        r.check(ns.moe_router_pre_softmax, "topk 1 with softmax scoring requires --moe-router-pre-softmax", "", "AR")
    if ns.moe_router_enable_expert_bias:
        r.check(ns.moe_router_score_function in ("sigmoid", "sqrtsoftplus"), "expert bias needs sigmoid or sqrtsoftplus scoring",
                f"moe_router_score_function={ns.moe_router_score_function}", "AR")
    if ns.moe_router_group_topk is not None:
        groups = ns.moe_router_num_groups
        if r.check(groups is not None, "moe_router_group_topk requires moe_router_num_groups", "", "AR"):
            r.check(experts % groups == 0 and ns.moe_router_group_topk <= groups, "num_experts % num_groups == 0 and group_topk <= num_groups",
                    f"num_experts={experts}, num_groups={groups}, group_topk={ns.moe_router_group_topk}", "AR")
    if ns.overlap_moe_expert_parallel_comm:
        # read in a public copy of AR validate_args (dcu_megatron's adapter of it, with the
        # pipeline rule it states as "only supported with vpp or dualpipev")
        r.check(ep > 1, "--overlap-moe-expert-parallel-comm needs EP > 1", f"expert_model_parallel_size={ep}", "AR (copy)")
        r.check(ns.moe_token_dispatcher_type in ("alltoall", "flex"), "--overlap-moe-expert-parallel-comm needs the alltoall or flex dispatcher",
                f"moe_token_dispatcher_type={ns.moe_token_dispatcher_type}", "AR (copy)")
        r.check(ns.recompute_granularity != "full", "--overlap-moe-expert-parallel-comm excludes full recompute",
                "recompute_granularity=full", "AR (copy)")
        r.check(pp == 1 or (_vpp(ns) or 1) > 1, "--overlap-moe-expert-parallel-comm with PP > 1 needs virtual pipeline stages",
                f"pipeline_model_parallel_size={pp} without a virtual pipeline", "AR (copy)")
    if ns.moe_grouped_gemm:
        r.check(ns.bf16, "--moe-grouped-gemm requires bf16", "grouped GEMM without --bf16", "AR (copy)")
