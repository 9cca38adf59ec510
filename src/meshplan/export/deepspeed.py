"""DeepSpeed exporter: the `ds_config.json` passed to `deepspeed.initialize(config=...)`.

Targets DeepSpeed 0.19.8 (PyPI; https://github.com/deepspeedai/DeepSpeed/tree/v0.19.8), whose
`deepspeed.runtime.config.DeepSpeedConfig` the torch-tier test builds from the export (its
pydantic sections forbid unknown keys); tests/data/export/deepspeed_config_keys.txt lists the
keys its config modules read, so the default run catches an unknown key too. Keys (also in the
configuration reference, https://www.deepspeed.ai/docs/config-json/):

- `_comment`: meshplan's header (target version, launch line, placeholders); DeepSpeed reads
  only the keys it knows at the top level, so the comment rides along
- batch: train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps
  (train_batch_size = micro x accumulation x data-parallel GPUs)
- optimizer: type AdamW with params lr, betas, eps, weight_decay; scheduler: WarmupCosineLR
  with total_num_steps, warmup_num_steps, cos_min_ratio (deepspeed/runtime/lr_schedules.py);
  gradient_clipping; steps_per_print
- precision: fp16.enabled, fp16.loss_scale (0 = dynamic), bf16.enabled
- zero_optimization: stage (0-3), offload_optimizer.device / pin_memory (stage 2 and 3),
  offload_param.device (stage 3), device cpu or nvme with nvme_path (ZeRO-Infinity),
  overlap_comm, contiguous_gradients (MiCS's mics_shard_size was removed in 0.19: DeepSpeed
  rejects it, so hybrid-sharded ZeRO-3 is not offered)
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

TARGET_VERSION = "DeepSpeed 0.19.8"
LR, MIN_LR_RATIO, WARMUP_FRACTION = 3e-4, 0.1, 0.01
"""A common starting schedule (cosine to a tenth after 1% warmup): tune it."""
DEFAULT_STEPS = 10_000
"""The scheduler's length without --train-tokens (a placeholder the header names)."""

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
    return zero


def _training(plan: ResolvedPlan, steps: int) -> dict:
    """Optimizer, learning-rate schedule and clipping."""
    return {"optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": [0.9, 0.95], "eps": 1e-8,
                                                      "weight_decay": 0.1}},
            "scheduler": {"type": "WarmupCosineLR", "params": {
                "total_num_steps": steps, "warmup_num_steps": max(1, round(steps * WARMUP_FRACTION)),
                "cos_min_ratio": MIN_LR_RATIO}},
            "gradient_clipping": 1.0, "steps_per_print": 10}


def _comment(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan, steps: int | None) -> list[str]:
    per_node = min(cluster.gpus_per_node, cluster.num_gpus)
    lines = [f"DeepSpeed config for {model.name} on {cluster.num_gpus} x {cluster.gpu.name}",
             f"targets {TARGET_VERSION} (deepspeed.runtime.config.DeepSpeedConfig)",
             f"launch: deepspeed --num_nodes {cluster.num_nodes} --num_gpus {per_node} "
             "--hostfile HOSTFILE YOUR_TRAINING_SCRIPT --deepspeed ds_config.json",
             f"learning rate: cosine {LR:g} to {MIN_LR_RATIO:g} of it after {WARMUP_FRACTION:.0%} warmup "
             "(a common starting point; tune it)"]
    if steps is None:
        lines.append(f"PLACEHOLDER: scheduler.params.total_num_steps = {DEFAULT_STEPS} "
                     "(set the run's steps, or export with --train-tokens)")
    if plan.offload_target == "nvme" and (plan.offload_optimizer or plan.offload_params):
        lines.append(f"PLACEHOLDER: nvme_path {NVME_PATH} (the node's NVMe mount)")
    return lines


def config(model: ModelSpec, plan: ResolvedPlan, steps: int | None = None) -> dict:
    """The DeepSpeed config as a dict (without the `_comment` header)."""
    accumulation = plan.global_batch_size // (plan.micro_batch_size * plan.dp)
    cfg: dict = {"train_batch_size": plan.global_batch_size,
                 "train_micro_batch_size_per_gpu": plan.micro_batch_size,
                 "gradient_accumulation_steps": accumulation,
                 **_training(plan, steps or DEFAULT_STEPS)}
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
    steps = run.steps(plan)
    cfg = {"_comment": _comment(model, cluster, plan, steps), **config(model, plan, steps)}
    return json.dumps(cfg, indent=2) + "\n"
