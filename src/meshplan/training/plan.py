"""`TrainingPlan`: the decisions of a training run (parallel layout, batch, recompute, precision).

A plan never holds a hardware number. Fields left as None are chosen by meshplan the way a
competent engineer would (see `meshplan.training.defaults`) and reported as chosen.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Framework = Literal["megatron", "nemo", "torchtitan", "deepspeed", "fsdp", "llm-foundry",
                    "maxtext", "hf", "other"]
DPSharding = Literal["none", "optimizer", "gradients", "full"]
Recompute = Literal["none", "selective", "full"]
Precision = Literal["fp32", "fp16", "bf16", "fp8", "fp4"]
QUANTIZED = ("fp8", "fp4")
"""Precisions whose GEMM inputs are cast and scaled on the fly (attention stays bf16)."""
Optimizer = Literal["adamw", "adam", "sgd", "adafactor"]
Schedule = Literal["gpipe", "1f1b", "interleaved", "zero-bubble"]
Attention = Literal["flash", "sdpa", "eager"]
Implementation = Literal["eager", "compiled", "fused"]
MoEDispatcher = Literal["alltoall", "allgather", "flex"]
Method = Literal["full", "lora", "qlora"]
Balance = Literal["none", "sort", "per-doc-cp", "reassign"]
MoEBalance = Literal["none", "aux-free", "eplb"]
OffloadTarget = Literal["cpu", "nvme"]


class TrainingPlan(BaseModel):
    """How one training step is laid out over the GPUs of a cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    tp: int = Field(1, ge=1)
    """Tensor-parallel size (Megatron --tensor-model-parallel-size)."""
    pp: int = Field(1, ge=1)
    """Pipeline-parallel stages (Megatron --pipeline-model-parallel-size)."""
    vpp: int | None = Field(None, ge=1)
    """Model chunks per pipeline rank for the interleaved schedule (virtual stages); None: 1."""
    dp: int | None = Field(None, ge=1)
    """Data-parallel size; None: whatever the GPU count leaves after tp x cp x pp."""
    cp: int = Field(1, ge=1)
    """Context-parallel size: each sequence is split over cp GPUs (load-balanced causal split)."""
    ep: int = Field(1, ge=1)
    """Expert-parallel size: routed experts are divided over ep GPUs."""
    etp: int | None = Field(None, ge=1)
    """Tensor-parallel size inside each expert; None: tp (Megatron-Core's default)."""
    sequence_parallel: bool | None = None
    """Split norms, dropout and residual activations over the TP group; None: on when tp > 1."""
    dp_sharding: DPSharding | None = None
    """What data parallelism shards: none (DDP), optimizer (ZeRO-1), gradients (ZeRO-2), full
    (ZeRO-3/FSDP); None: the framework's usual choice."""
    dp_shard_size: int | None = Field(None, ge=1)
    """Hybrid sharding: shard over groups of this many DP ranks and replicate across groups
    (HSDP); None: shard over the whole DP (x CP) group."""
    micro_batch_size: int | None = Field(None, ge=1)
    """Sequences per micro-batch per GPU; None: chosen by meshplan."""
    global_batch_size: int | None = Field(None, ge=1)
    """Sequences per optimizer step; None: one micro-batch per DP rank and pipeline stage."""
    seq_len: int = Field(4096, ge=1)
    """Tokens per sequence."""
    recompute: Recompute = "none"
    """Activation recomputation: none, selective (the framework's selective policy), full."""
    recompute_num_layers: int | None = Field(None, ge=0)
    """With full recompute: recompute only this many layers per pipeline chunk; None: all."""
    offload_activations: bool = False
    """Keep checkpointed layer inputs in CPU memory instead of on the GPU."""
    offload_optimizer: bool = False
    """Keep master weights and optimizer states in CPU memory (DeepSpeed/Megatron offload)."""
    offload_params: bool = False
    """Keep the sharded 16-bit parameters off the GPU and fetch each layer's before it runs
    (ZeRO-Infinity, DeepSpeed offload_param; needs dp_sharding full)."""
    offload_target: OffloadTarget = "cpu"
    """Where offloaded parameters and optimizer states live: cpu (host DRAM) or nvme
    (ZeRO-Infinity's NVMe tier, swapped through host memory)."""
    precision: Precision = "bf16"
    """Compute precision of matmuls; fp8 keeps bf16 weights plus fp8 copies; fp4 runs the
    linear layers' GEMMs in NVFP4 (Blackwell) with bf16 weights and attention."""
    optimizer: Optimizer = "adamw"
    """Optimizer whose states are kept per parameter."""
    schedule: Schedule | None = None
    """Pipeline schedule; None: interleaved when vpp > 1, else 1f1b."""
    pipeline_split: tuple[int, ...] | None = None
    """Decoder layers per pipeline chunk (pp x vpp entries); None: an even split."""
    rank_order: str = "tp-cp-ep-dp-pp"
    """Order in which parallel dimensions are laid over ranks, innermost first (Megatron's)."""
    framework: Framework = "megatron"
    """Training framework; selects the activation kernel profile and defaults."""
    attention: Attention | None = None
    """Attention kernel: flash (fused, Megatron/TE), sdpa, or eager; None: the framework's."""
    implementation: Implementation | None = None
    """How the trainer launches its kernels: eager (PyTorch modules dispatched op by op from
    Python; Transformer Engine's fused modules for Megatron/NeMo), compiled (torch.compile's
    fused Triton kernels, XLA for MaxText) or fused (a hand-fused C/CUDA trainer such as llm.c:
    a few kernels per layer launched from C, a fused classifier that never writes fp32 logits);
    None: the framework's (compiled for maxtext, else eager)."""
    tp_comm_overlap: bool | None = None
    """Overlap tensor-parallel communication with GEMMs (Megatron/TE tp-comm-overlap, torchtitan
    async TP); None: the framework's usual choice (on for NeMo recipes, else off)."""
    capacity_factor: float | None = Field(None, gt=0)
    """MoE token dropping: each expert takes at most this multiple of its fair share."""
    moe_dispatcher: MoEDispatcher | None = None
    """MoE token dispatcher (Megatron-Core's --moe-token-dispatcher-type): alltoall (NCCL
    all-to-all of every routed copy), allgather, or flex (DeepEP / HybridEP: one network copy
    per remote node, fp8 dispatch under fp8 training); None: alltoall, every framework's
    default."""
    moe_a2a_overlap: bool | None = None
    """Overlap expert-parallel dispatch/combine with another micro-batch's compute (Megatron's
    --overlap-moe-expert-parallel-comm, 1F1B all-to-all overlap; DualPipe); None: off."""
    method: Method = "full"
    """What is trained: full (every weight), lora (low-rank adapters on a frozen 16-bit base) or
    qlora (adapters on a frozen NF4 4-bit base with double quantization, bitsandbytes)."""
    lora_rank: int = Field(8, ge=1)
    """LoRA rank r of every adapter (PEFT's default 8)."""
    lora_targets: tuple[str, ...] | None = None
    """Linear layers that get adapters: q, k, v, o, gate, up, down (qkv, kv, gate_up where the
    family fuses them); None: q,v (PEFT's default; q,kv for MLA, qkv when fused)."""
    doc_lengths: str | None = None
    """Document lengths of the training data, packed into sequences with a document mask:
    fixed (one document per sequence), lognormal:mean=1500,sigma=1.2, zipf:s=1.2,min=64,max=65536
    (seed=N optional), or a file of lengths; None: fixed."""
    balance: Balance = "none"
    """Balancing of document attention work over ranks: none, sort (sequences over DP ranks by
    work), per-doc-cp (each document split over the CP ranks), reassign (documents re-packed by
    work); only read with doc_lengths."""
    expert_skew: str | None = None
    """MoE routing skew: zipf:s=1.2 (seed=N optional), uniform, or a file of per-expert token
    shares; None: the fitted dropless imbalance."""
    moe_balance: MoEBalance = "none"
    """MoE load balancing: none, aux-free (DeepSeek-V3 bias balancing), eplb (replicas of hot
    experts on redundant slots); only read with expert_skew."""
