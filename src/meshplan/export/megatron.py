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
- `_add_data_args` / `_add_tokenizer_args`: --seq-length, --mock-data, --tokenizer-type, --vocab-size
- `_add_moe_args`: --num-experts, --moe-layer-freq, --moe-router-topk, --moe-ffn-hidden-size,
  --moe-shared-expert-intermediate-size, --expert-model-parallel-size,
  --expert-tensor-parallel-size, --moe-token-dispatcher-type, --moe-grouped-gemm,
  --moe-expert-capacity-factor
- `_add_mla_args`: --multi-latent-attention (network size), --q-lora-rank, --kv-lora-rank,
  --qk-head-dim, --qk-pos-emb-head-dim, --v-head-dim; `_add_vision_args`: --qk-layernorm

The pipeline layout string ("E" embedding, "t" decoder layer, "L" loss, stages split by "|") is
parsed by `PipelineParallelLayerLayout.parse_str_to_list` in
megatron/core/transformer/pipeline_parallel_layer_layout.py. The data and tokenizer flags are a
mock-data stand-in: replace them with --data-path and your tokenizer.
"""

from __future__ import annotations

from meshplan.export.shell import Raw, comment_text, word
from meshplan.hardware import Cluster
from meshplan.model.spec import DenseMLP, ModelSpec, MoEMLP
from meshplan.training.layout.resolve import ResolvedPlan

TARGET_VERSION = "Megatron-LM core_r0.14+ (main @ 000c4ac24f61159c138b0975def722c65245983c)"

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
        flags.append(("--moe-layer-freq", Raw(f'"{freq}"')))
    flags += [("--moe-router-topk", moe.top_k),
              ("--moe-ffn-hidden-size", moe.expert.intermediate_size)]
    if moe.shared is not None:
        flags.append(("--moe-shared-expert-intermediate-size", moe.shared.intermediate_size))
    flags.append(("--moe-token-dispatcher-type", "alltoall" if plan.ep > 1 else "allgather"))
    if plan.precision in ("bf16", "fp8", "fp4"):
        flags.append(("--moe-grouped-gemm", None))
    if plan.capacity_factor is not None:
        flags.append(("--moe-expert-capacity-factor", plan.capacity_factor))
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
    return [("--pipeline-model-parallel-layout", Raw(f'"{"|".join(stages)}"'))]


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


def _launcher(cluster: Cluster, plan: ResolvedPlan) -> list[str]:
    env = ""
    if (plan.tp > 1 or plan.cp > 1) and plan.dp_sharding in ("none", "optimizer"):
        env = "CUDA_DEVICE_MAX_CONNECTIONS=1 "
    per_node = min(cluster.gpus_per_node, cluster.num_gpus)
    return [f"{env}torchrun", f"--nproc_per_node {per_node}", f"--nnodes {cluster.num_nodes}",
            "--node_rank $NODE_RANK", "--master_addr $MASTER_ADDR", "--master_port 6000",
            "pretrain_gpt.py"]


def flags(model: ModelSpec, plan: ResolvedPlan) -> Flags:
    """The pretrain_gpt.py arguments for `plan`, in order."""
    out = _model_flags(model, plan)
    out += _parallel_flags(model, plan)
    out += [("--micro-batch-size", plan.micro_batch_size),
            ("--global-batch-size", plan.global_batch_size)]
    out += _recompute_flags(plan)
    out += _precision_flags(plan)
    out += [("--mock-data", None), ("--tokenizer-type", "NullTokenizer"),
            ("--vocab-size", model.vocab_size)]
    return out


def _word(value: object) -> str:
    """A flag value as one shell word (floats as Python writes them: 8.0)."""
    return word(value if isinstance(value, str) else str(value))


def export(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan) -> str:
    """A torchrun command line launching Megatron-LM's pretrain_gpt.py with `plan`."""
    args = [name if value is None else f"{name} {_word(value)}" for name, value in flags(model, plan)]
    lines = _launcher(cluster, plan) + args
    header = [f"# Megatron-LM launch for {comment_text(model.name)} on {cluster.num_gpus} x "
              f"{comment_text(cluster.gpu.name)}",
              f"# flags checked against {TARGET_VERSION}",
              "# run on every node; set NODE_RANK and MASTER_ADDR"]
    body = [lines[0] + " \\"] + [f"  {line} \\" for line in lines[1:-1]] + [f"  {lines[-1]}"]
    return "\n".join(header + body) + "\n"
