"""Megatron-LM exporter: a `torchrun ... pretrain_gpt.py` command line for a resolved plan.

Every flag below was checked against `megatron/training/arguments.py` of NVIDIA/Megatron-LM
(https://github.com/NVIDIA/Megatron-LM/blob/000c4ac24f61159c138b0975def722c65245983c/megatron/training/arguments.py,
a main-branch commit after core_r0.14.0). Where each flag is defined there:

- `_add_network_size_args`: --num-layers, --hidden-size, --ffn-hidden-size, --num-attention-heads,
  --kv-channels, --group-query-attention, --num-query-groups, --max-position-embeddings,
  --position-embedding-type, --rotary-base, --use-rope-scaling, --rope-scaling-factor,
  --normalization, --swiglu, --untie-embeddings-and-output-weights
- `_add_training_args`: --micro-batch-size, --global-batch-size, --recompute-granularity,
  --recompute-method, --recompute-num-layers, --tp-comm-overlap, --disable-bias-linear,
  --add-qkv-bias, --sequence-parallel, --optimizer, --optimizer-cpu-offload,
  --optimizer-offload-fraction
- `_add_distributed_args`: --tensor-model-parallel-size, --pipeline-model-parallel-size,
  --pipeline-model-parallel-layout, --num-virtual-stages-per-pipeline-rank,
  --context-parallel-size, --use-distributed-optimizer, --num-distributed-optimizer-instances,
  --use-megatron-fsdp, --data-parallel-sharding-strategy, --use-tp-pp-dp-mapping
- `_add_checkpointing_args`: --ckpt-format (Megatron FSDP requires `fsdp_dtensor`)
- `_add_mixed_precision_args`: --bf16, --fp16; `_add_transformer_engine_args`: --fp8-format,
  --fp4-format (e2m1, the NVFP4 recipe; seen in a later main-branch arguments.py)
- `_add_experimental_args`: --use-precision-aware-optimizer (required by --optimizer-cpu-offload)
- `_add_data_args` / `_add_tokenizer_args`: --seq-length, --data-path, --tokenizer-type
  (HuggingFaceTokenizer), --tokenizer-model
- `_add_training_args`: --train-iters or --train-samples (one is required: training.py raises
  "either train-iters or train-samples should be provided"), --clip-grad, --adam-beta1,
  --adam-beta2, --weight-decay (`_add_regularization_args`)
- `_add_learning_rate_args`: --lr (required by the optimizer), --min-lr (<= --lr),
  --lr-decay-style, --lr-warmup-fraction (valid with either iteration- or sample-based training)
- `_add_checkpointing_args`: --save, --load, --save-interval (required with --save);
  `_add_logging_args`: --log-interval
- `_add_moe_args`: --num-experts, --moe-layer-freq, --moe-router-topk, --moe-ffn-hidden-size,
  --moe-shared-expert-intermediate-size, --expert-model-parallel-size,
  --expert-tensor-parallel-size, --moe-token-dispatcher-type (and --moe-flex-dispatcher-backend,
  --overlap-moe-expert-parallel-comm), --moe-grouped-gemm,
  --moe-expert-capacity-factor
- `_add_mla_args`: --multi-latent-attention (network size), --q-lora-rank, --kv-lora-rank,
  --qk-head-dim, --qk-pos-emb-head-dim, --v-head-dim; `_add_vision_args`: --qk-layernorm

The pipeline layout string ("E" embedding, "t" decoder layer, "L" loss, stages split by "|") is
parsed by `PipelineParallelLayerLayout.parse_str_to_list` in
megatron/core/transformer/pipeline_parallel_layer_layout.py. Data, tokenizer, checkpoint directory
and (without --train-tokens) the step count are placeholders the script refuses to run without.
tests/data/export/megatron_arguments_flags.txt is every flag of that arguments.py.
"""

from __future__ import annotations

from meshplan.export import shell
from meshplan.export.run import RunSettings
from meshplan.hardware import Cluster
from meshplan.model.spec import DenseMLP, ModelSpec, MoEMLP
from meshplan.training.layout.resolve import ResolvedPlan

TARGET_VERSION = "Megatron-LM core_r0.14+ (main @ 000c4ac24f61159c138b0975def722c65245983c)"

ARGUMENTS = "megatron/training/arguments.py"
LR, MIN_LR, WARMUP_FRACTION = 3e-4, 3e-5, 0.01
"""A common starting schedule (cosine from LR to MIN_LR after a 1% warmup): tune it."""
SAVE_INTERVAL = 1000
"""Steps between checkpoints (at most the run's length)."""

Flags = list[tuple[str, object]]
"""(flag, value) pairs; value None for a store_true flag."""

RANK_ORDERS = {"tp-cp-ep-dp-pp": None, "tp-cp-ep-pp-dp": "--use-tp-pp-dp-mapping"}
FSDP_STRATEGY = {"gradients": "optim_grads", "full": "optim_grads_params"}


def _attention_flags(model: ModelSpec) -> Flags:
    attn = model.layers[0].attention
    flags: Flags = [("--num-attention-heads", attn.num_heads)]
    if attn.mla is not None:
        mla = attn.mla
        flags += [("--multi-latent-attention", None), ("--kv-lora-rank", mla.kv_lora_rank),
                  ("--qk-head-dim", mla.qk_nope_head_dim),
                  ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim), ("--v-head-dim", mla.v_head_dim)]
        if mla.q_lora_rank is not None:
            flags.append(("--q-lora-rank", mla.q_lora_rank))
        return flags
    if attn.num_kv_heads != attn.num_heads:
        flags += [("--group-query-attention", None), ("--num-query-groups", attn.num_kv_heads)]
    if attn.head_dim * attn.num_heads != model.hidden_size:
        flags.append(("--kv-channels", attn.head_dim))
    if attn.qk_norm == "per_head":
        flags.append(("--qk-layernorm", None))
    if attn.qkv_bias:
        flags.append(("--add-qkv-bias", None))
    return flags


def _moe_layer_freq(model: ModelSpec) -> str | None:
    """--moe-layer-freq pattern like "([0]*3+[1]*58)", or None when every layer is MoE."""
    kinds = [int(isinstance(layer.mlp, MoEMLP)) for layer in model.layers]
    if all(kinds):
        return None
    runs: list[list[int]] = []
    for k in kinds:
        if runs and runs[-1][0] == k:
            runs[-1][1] += 1
        else:
            runs.append([k, 1])
    return "(" + "+".join(f"[{k}]*{n}" for k, n in runs) + ")"


def _mlp_flags(model: ModelSpec, plan: ResolvedPlan) -> Flags:
    mlps = [layer.mlp for layer in model.layers]
    moe = next((m for m in mlps if isinstance(m, MoEMLP)), None)
    dense = next((m for m in mlps if isinstance(m, DenseMLP)), None)
    shape = dense or moe.expert  # type: ignore[union-attr]
    flags: Flags = [("--ffn-hidden-size", shape.intermediate_size)]
    if shape.gated:
        flags.append(("--swiglu", None))
    if moe is None:
        return flags
    flags += [("--num-experts", moe.num_experts)]
    if (freq := _moe_layer_freq(model)) is not None:
        flags.append(("--moe-layer-freq", freq))
    flags += [("--moe-router-topk", moe.top_k),
              ("--moe-ffn-hidden-size", moe.expert.intermediate_size)]
    if moe.shared is not None:
        flags.append(("--moe-shared-expert-intermediate-size", moe.shared.intermediate_size))
    flags += _dispatcher_flags(plan)
    if plan.precision in ("bf16", "fp8", "fp4"):
        flags.append(("--moe-grouped-gemm", None))
    if plan.capacity_factor is not None:
        flags.append(("--moe-expert-capacity-factor", plan.capacity_factor))
    return flags


def _dispatcher_flags(plan: ResolvedPlan) -> Flags:
    """The plan's token dispatcher when experts are spread (flex with DeepEP's backend) and the
    1F1B all-to-all overlap; allgather without expert parallelism."""
    if plan.ep == 1:
        return [("--moe-token-dispatcher-type", "allgather")]
    flags: Flags = [("--moe-token-dispatcher-type", plan.moe_dispatcher)]
    if plan.moe_dispatcher == "flex":
        flags.append(("--moe-flex-dispatcher-backend", "deepep"))
    if plan.moe_a2a_overlap:
        flags.append(("--overlap-moe-expert-parallel-comm", None))
    return flags


def _model_flags(model: ModelSpec, plan: ResolvedPlan) -> Flags:
    flags: Flags = [("--num-layers", model.num_layers), ("--hidden-size", model.hidden_size)]
    flags += _mlp_flags(model, plan)
    flags += _attention_flags(model)
    flags += [("--seq-length", plan.seq_len)]
    if model.learned_position_embeddings:
        flags.append(("--max-position-embeddings", model.learned_position_embeddings))
    else:
        flags += [("--max-position-embeddings", max(plan.seq_len, model.max_position_embeddings or 0)),
                  ("--position-embedding-type", "rope"),
                  ("--rotary-base", int(model.rope_theta or 10000))]
        scaling = model.rope_scaling or {}
        if scaling.get("rope_type", scaling.get("type")) == "llama3":
            flags += [("--use-rope-scaling", None), ("--rope-scaling-factor", scaling["factor"])]
    if model.norm == "rmsnorm":
        flags.append(("--normalization", "RMSNorm"))
    if not model.tie_word_embeddings:
        flags.append(("--untie-embeddings-and-output-weights", None))
    layer = model.layers[0]
    mlp_bias = (layer.mlp.bias if isinstance(layer.mlp, DenseMLP) else layer.mlp.expert.bias)
    if not (mlp_bias or layer.attention.o_bias):
        flags.append(("--disable-bias-linear", None))
    return flags


def _pipeline_flags(model: ModelSpec, plan: ResolvedPlan) -> Flags:
    if plan.pp == 1:
        return []
    sizes = [len(chunk) for chunk in plan.chunk_layers]
    if len(set(sizes)) == 1:
        return [("--num-virtual-stages-per-pipeline-rank", plan.vpp)] if plan.vpp > 1 else []
    stages = ["t" * n for n in sizes]
    stages[0], stages[-1] = "E" + stages[0], stages[-1] + "L"
    return [("--pipeline-model-parallel-layout", "|".join(stages))]


def _sharding_flags(plan: ResolvedPlan) -> Flags:
    group = plan.dp * plan.cp
    if plan.dp_sharding == "none":
        return []
    if plan.dp_sharding == "optimizer":
        flags: Flags = [("--use-distributed-optimizer", None)]
        if plan.shard_group != group:
            flags.append(("--num-distributed-optimizer-instances", group // plan.shard_group))
        return flags
    return [("--use-megatron-fsdp", None),
            ("--data-parallel-sharding-strategy", FSDP_STRATEGY[plan.dp_sharding]),
            ("--ckpt-format", "fsdp_dtensor")]


def _parallel_flags(model: ModelSpec, plan: ResolvedPlan) -> Flags:
    flags: Flags = [("--tensor-model-parallel-size", plan.tp),
                    ("--pipeline-model-parallel-size", plan.pp)]
    flags += _pipeline_flags(model, plan)
    flags.append(("--context-parallel-size", plan.cp))
    if model.is_moe:
        flags += [("--expert-model-parallel-size", plan.ep),
                  ("--expert-tensor-parallel-size", plan.etp)]
    if plan.sequence_parallel:
        flags.append(("--sequence-parallel", None))
    if plan.tp_comm_overlap:
        flags.append(("--tp-comm-overlap", None))
    if (mapping := RANK_ORDERS[plan.rank_order]) is not None:
        flags.append((mapping, None))
    return flags + _sharding_flags(plan)


def _recompute_flags(plan: ResolvedPlan) -> Flags:
    if plan.recompute == "none":
        return []
    if plan.recompute == "selective":
        return [("--recompute-granularity", "selective")]
    if plan.recompute_num_layers is None:
        return [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                ("--recompute-num-layers", 1)]
    return [("--recompute-granularity", "full"), ("--recompute-method", "block"),
            ("--recompute-num-layers", plan.recompute_num_layers)]


def _precision_flags(plan: ResolvedPlan) -> Flags:
    flags: Flags = {"bf16": [("--bf16", None)], "fp16": [("--fp16", None)],
                    "fp8": [("--bf16", None), ("--fp8-format", "hybrid")],
                    "fp4": [("--bf16", None), ("--fp4-format", "e2m1")], "fp32": []}[plan.precision]
    flags.append(("--optimizer", "adam"))
    if plan.offload_optimizer:
        flags += [("--use-precision-aware-optimizer", None), ("--optimizer-cpu-offload", None),
                  ("--optimizer-offload-fraction", 1.0)]
    return flags


def _run_flags(plan: ResolvedPlan, run: RunSettings) -> Flags:
    """Training length, learning-rate schedule, optimizer hyper-parameters and checkpoints."""
    steps = run.steps(plan)
    if steps is None:
        flags: Flags = [("--train-iters", "$TRAIN_ITERS")]
    else:
        flags = [("--train-samples", steps * plan.global_batch_size)]
    flags += [("--lr", LR), ("--min-lr", MIN_LR), ("--lr-decay-style", "cosine"),
              ("--lr-warmup-fraction", WARMUP_FRACTION), ("--weight-decay", 0.1),
              ("--adam-beta1", 0.9), ("--adam-beta2", 0.95), ("--clip-grad", 1.0)]
    interval = SAVE_INTERVAL if steps is None else min(SAVE_INTERVAL, steps)
    return flags + [("--save", "$CHECKPOINT_DIR"), ("--load", "$CHECKPOINT_DIR"),
                    ("--save-interval", interval), ("--log-interval", 10)]


def flags(model: ModelSpec, plan: ResolvedPlan, run: RunSettings = RunSettings()) -> Flags:
    """The pretrain_gpt.py arguments for `plan`, in order."""
    out = _model_flags(model, plan)
    out += _parallel_flags(model, plan)
    out += [("--micro-batch-size", plan.micro_batch_size),
            ("--global-batch-size", plan.global_batch_size)]
    out += _recompute_flags(plan)
    out += _precision_flags(plan)
    out += _run_flags(plan, run)
    return out + [("--data-path", "$DATA_PATH"), ("--tokenizer-type", "HuggingFaceTokenizer"),
                  ("--tokenizer-model", "$TOKENIZER_MODEL")]


def _placeholders(plan: ResolvedPlan, run: RunSettings) -> list[tuple[str, str]]:
    out = [("DATA_PATH", "your tokenized data prefix (tools/preprocess_data.py output, no .bin/.idx)"),
           ("TOKENIZER_MODEL", "the Hugging Face tokenizer name or path of that data"),
           ("CHECKPOINT_DIR", "a shared directory for checkpoints (saved to and resumed from)")]
    if run.steps(plan) is None:
        tokens = plan.global_batch_size * plan.seq_len
        out.append(("TRAIN_ITERS", f"the run's optimizer steps ({tokens:,} tokens each; "
                                   "or export with --train-tokens)"))
    return out


def export(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan,
           run: RunSettings = RunSettings()) -> str:
    """A bash script launching Megatron-LM's pretrain_gpt.py with `plan` (torchrun or Slurm)."""
    env = {}
    if (plan.tp > 1 or plan.cp > 1) and plan.dp_sharding in ("none", "optimizer"):
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    steps = run.steps(plan)
    length = ("training length: set TRAIN_ITERS (no --train-tokens given)" if steps is None else
              f"training length: {steps:,} steps of {plan.global_batch_size} x {plan.seq_len} "
              f"tokens (--train-tokens {run.train_tokens:.4g})")
    script = shell.Script(
        title=f"Megatron-LM launch for {model.name} on {cluster.num_gpus} x {cluster.gpu.name}",
        notes=[f"targets {TARGET_VERSION}", f"every flag is defined in its {ARGUMENTS}",
               "run from the Megatron-LM checkout (pretrain_gpt.py is at its top level)", length,
               f"learning rate: cosine {LR:g} -> {MIN_LR:g}, {WARMUP_FRACTION:.0%} warmup "
               "(a common starting point; tune it)"],
        placeholders=_placeholders(plan, run), program="pretrain_gpt.py",
        args=flags(model, plan, run), env=env)
    if run.launcher == "slurm":
        return shell.slurm(script, cluster, f"megatron-{model.name}")
    return shell.torchrun(script, cluster)
