"""DeepSpeed exporter: the `ds_config.json` passed to `deepspeed.initialize(config=...)`.

Keys were checked against the DeepSpeed configuration reference, docs/_pages/config-json.md of
microsoft/DeepSpeed (https://www.deepspeed.ai/docs/config-json/, source
https://github.com/microsoft/DeepSpeed/blob/01f31a835dec509a48859161344f19d85ae6c31a/docs/_pages/config-json.md),
and `DeepSpeedZeroConfig` in deepspeed/runtime/zero/config.py:

- batch: train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
  (train_batch_size = micro x accumulation x data-parallel GPUs)
- precision: fp16.enabled, fp16.loss_scale (0 = dynamic), bf16.enabled
- zero_optimization: stage (0-3), offload_optimizer.device / pin_memory (stage 2 and 3),
  offload_param.device (stage 3), device cpu or nvme with nvme_path (ZeRO-Infinity),
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

from meshplan.export.run import RunSettings
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.layout.resolve import ResolvedPlan

TARGET_VERSION = "DeepSpeed 0.16+ (config-json docs @ 01f31a835dec509a48859161344f19d85ae6c31a)"

NVME_PATH = "/local_nvme"
"""Placeholder mount point of the node's NVMe drives (DeepSpeed's docs use this path); edit it."""
ZERO_STAGE = {"none": 0, "optimizer": 1, "gradients": 2, "full": 3}


def _zero(plan: ResolvedPlan) -> dict:
    stage = ZERO_STAGE[plan.dp_sharding]
    zero: dict = {"stage": stage}
    if stage > 0:
        zero |= {"overlap_comm": True, "contiguous_gradients": True}
    device = {"device": plan.offload_target, "pin_memory": True}
    if plan.offload_target == "nvme":
        device["nvme_path"] = NVME_PATH
    if plan.offload_optimizer:
        zero["offload_optimizer"] = dict(device)
    if plan.offload_params:
        zero["offload_param"] = dict(device)
    if plan.shard_group != plan.dp:
        zero["mics_shard_size"] = plan.shard_group
    return zero


def config(model: ModelSpec, plan: ResolvedPlan) -> dict:
    """The DeepSpeed config as a dict."""
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
    return cfg


def export(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan,
           run: RunSettings = RunSettings()) -> str:
    """A DeepSpeed JSON config for `plan` (data parallelism over all GPUs of `cluster`)."""
    return json.dumps(config(model, plan), indent=2) + "\n"
