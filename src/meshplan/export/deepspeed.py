"""DeepSpeed exporter: the `ds_config.json` passed to `deepspeed.initialize(config=...)`.

Keys were checked against the DeepSpeed configuration reference, docs/_pages/config-json.md of
microsoft/DeepSpeed (https://www.deepspeed.ai/docs/config-json/, source
https://github.com/microsoft/DeepSpeed/blob/01f31a835dec509a48859161344f19d85ae6c31a/docs/_pages/config-json.md),
and `DeepSpeedZeroConfig` in deepspeed/runtime/zero/config.py:

- batch: train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
  (train_batch_size = micro x accumulation x data-parallel GPUs)
- precision: fp16.enabled, fp16.loss_scale (0 = dynamic), bf16.enabled
- zero_optimization: stage (0-3), offload_optimizer.device / pin_memory (stage 2 and 3),
  overlap_comm, contiguous_gradients, mics_shard_size (ZeRO-3 sharded within groups of this
  size and replicated across them; the model must be built under deepspeed.zero.MiCS_Init)
- activation_checkpointing: partition_activations, cpu_checkpointing,
  contiguous_memory_optimization, synchronize_checkpoint_boundary (used by
  deepspeed.checkpointing.checkpoint, which the model code must call per layer)

Tensor, pipeline, context and expert parallelism are not set by this JSON (they are
Megatron-DeepSpeed or model-code arguments), so plans using them raise ConfigError.
"""

from __future__ import annotations

import json

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.resolve import ResolvedPlan

TARGET_VERSION = "DeepSpeed 0.16+ (config-json docs @ 01f31a835dec509a48859161344f19d85ae6c31a)"

ZERO_STAGE = {"none": 0, "optimizer": 1, "gradients": 2, "full": 3}


def _check_expressible(plan: ResolvedPlan) -> None:
    outside = {name: size for name, size in
               (("tp", plan.tp), ("pp", plan.pp), ("cp", plan.cp), ("ep", plan.ep)) if size > 1}
    if outside:
        sizes = ", ".join(f"{k}={v}" for k, v in outside.items())
        raise ConfigError(f"{sizes}: DeepSpeed's JSON config holds only data parallelism (ZeRO); "
                          f"tensor/pipeline/context/expert parallelism need Megatron-DeepSpeed or "
                          f"model code; export this plan to 'megatron' or set them to 1")
    if plan.precision in ("fp8", "fp4"):
        raise ConfigError(f"precision={plan.precision!r} has no DeepSpeed config key (low-precision "
                          f"GEMMs come from Transformer Engine in model code); use bf16 or fp16")
    if plan.recompute == "selective" or plan.recompute_num_layers is not None:
        raise ConfigError("DeepSpeed's activation_checkpointing recomputes the layers the model "
                          "wraps; a selective or partial policy is model code: use recompute='full'")


def _zero(plan: ResolvedPlan) -> dict:
    stage = ZERO_STAGE[plan.dp_sharding]
    zero: dict = {"stage": stage}
    if stage > 0:
        zero |= {"overlap_comm": True, "contiguous_gradients": True}
    if plan.offload_optimizer:
        if stage < 2:
            raise ConfigError(f"offload_optimizer needs ZeRO stage 2 or 3 in DeepSpeed; "
                              f"dp_sharding={plan.dp_sharding!r} is stage {stage}")
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.shard_group != plan.dp:
        if stage != 3:
            raise ConfigError(f"dp_shard_size={plan.shard_group} (hybrid sharding) is expressed "
                              f"with MiCS, which needs dp_sharding='full' (ZeRO-3)")
        zero["mics_shard_size"] = plan.shard_group
    return zero


def config(model: ModelSpec, plan: ResolvedPlan) -> dict:
    """The DeepSpeed config as a dict."""
    _check_expressible(plan)
    accumulation = plan.global_batch_size // (plan.micro_batch_size * plan.dp)
    cfg: dict = {"train_batch_size": plan.global_batch_size,
                 "train_micro_batch_size_per_gpu": plan.micro_batch_size,
                 "gradient_accumulation_steps": accumulation}
    if plan.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0}
    cfg["bf16"] = {"enabled": plan.precision == "bf16"}
    cfg["zero_optimization"] = _zero(plan)
    if plan.recompute == "full":
        cfg["activation_checkpointing"] = {
            "partition_activations": False, "cpu_checkpointing": plan.offload_activations,
            "contiguous_memory_optimization": False, "synchronize_checkpoint_boundary": False}
    elif plan.offload_activations:
        raise ConfigError("offload_activations in DeepSpeed is activation_checkpointing."
                          "cpu_checkpointing, which needs recompute='full'")
    return cfg


def export(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan) -> str:
    """A DeepSpeed JSON config for `plan` (data parallelism over all GPUs of `cluster`)."""
    return json.dumps(config(model, plan), indent=2) + "\n"
