"""torchtitan exporter: a TOML job config (`--job.config_file`) for a resolved plan.

Targets torchtitan 0.2.2, the newest release that reads a TOML job config (0.3 replaced it with
Python config registries and CLI overrides). Every section and key is a field of the `JobConfig`
dataclasses in torchtitan/config/job_config.py of pytorch/torchtitan at v0.2.2
(https://github.com/pytorch/torchtitan/blob/73a0e6979dd10b6b1904098eb3c8f62c18ab87ce/torchtitan/config/job_config.py;
tests/data/export/torchtitan_job_config_fields.txt lists them all), where `ConfigManager` rejects
any other key ("Invalid field names"):

- `Job`: description, dump_folder; `Model`: name, flavor, hf_assets_path (tokenizer),
  converters (["quantize.linear.float8"], registered in components/quantization/float8.py)
- `Optimizer`: name, lr, weight_decay; `LRScheduler`: warmup_steps, decay_type, min_lr_factor
- `Training`: local_batch_size, global_batch_size, seq_len, steps, max_norm, dataset,
  mixed_precision_param ("bfloat16" | "float32"), enable_cpu_offload
- `Parallelism`: data_parallel_replicate_degree, data_parallel_shard_degree,
  fsdp_reshard_after_forward ("default" | "always" | "never"), tensor_parallel_degree,
  enable_async_tensor_parallel, pipeline_parallel_degree, module_fqns_per_model_part (the
  modules of each model chunk; it replaced v0.1's pipeline_parallel_split_points),
  pipeline_parallel_schedule (a class name in torch.distributed.pipelining.schedules:
  "GPipe", "1F1B", "Interleaved1F1B", ...), pipeline_parallel_microbatch_size,
  context_parallel_degree, expert_parallel_degree
- `Compile`: enable, components (async TP needs the compiled model; v0.1's training.compile)
- `Checkpoint`: enable, folder, interval
- `ActivationCheckpoint`: mode ("selective" | "full" | "none"), selective_ac_option ("op" or an int)
- `Float8Linear` (`[quantize.linear.float8]`): recipe_name, enable_fsdp_float8_all_gather,
  precompute_float8_dynamic_scale_for_fsdp

The number of pipeline micro-batches is local_batch_size / pipeline_parallel_microbatch_size;
without pipelining, global_batch_size > local_batch_size x dp gives gradient accumulation.
Values meshplan cannot know (tokenizer path, dataset, and the step count without --train-tokens)
carry a `# PLACEHOLDER` comment.
"""

from __future__ import annotations

import json

from meshplan.export.run import RunSettings
from meshplan.export.shell import comment
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.layout.resolve import ResolvedPlan

TARGET_VERSION = "torchtitan 0.2.2 (v0.2.2 @ 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce)"
LR, MIN_LR_FACTOR, WARMUP_FRACTION = 3e-4, 0.1, 0.01
"""A common starting schedule (cosine to a tenth after 1% warmup): tune it."""
DEFAULT_STEPS = 10_000
"""torchtitan's own default training.steps, written as a placeholder without --train-tokens."""
CHECKPOINT_INTERVAL = 500

FLAVORS = {("llama", 4096, 32): ("llama3", "8B"), ("llama", 8192, 80): ("llama3", "70B"),
           ("llama", 16384, 126): ("llama3", "405B")}
"""(family, hidden_size, num_layers) -> torchtitan (model.name, model.flavor)."""
SCHEDULES = {("gpipe", False): "GPipe", ("1f1b", False): "1F1B", ("interleaved", True): "Interleaved1F1B"}
"""(meshplan schedule, more than one stage per rank) -> torchtitan schedule class name."""
PRECISION = {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32"}
OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}

Table = dict[str, object]
"""What a TOML basic string cannot hold as is (a newline would end it and start a new key)."""


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def _render(tables: dict[str, Table], comments: dict[str, str]) -> str:
    out: list[str] = []
    for name, table in tables.items():
        out.append(f"[{name}]")
        for key, value in table.items():
            note = comments.get(f"{name}.{key}")
            out.append(f"{key} = {_toml_value(value)}" + (f"  # {note}" if note else ""))
        out.append("")
    return "\n".join(out)


def _dp_degrees(plan: ResolvedPlan) -> dict[str, object]:
    if plan.dp_sharding == "none":
        return {"data_parallel_replicate_degree": plan.dp, "data_parallel_shard_degree": 1}
    shard = plan.shard_group // plan.cp
    out: dict[str, object] = {"data_parallel_replicate_degree": plan.dp // shard,
                              "data_parallel_shard_degree": shard}
    if plan.dp_sharding == "gradients":
        out["fsdp_reshard_after_forward"] = "never"
    return out


def _expert_degree(model: ModelSpec, plan: ResolvedPlan) -> dict[str, object]:
    if not model.is_moe:
        return {}
    return {"expert_parallel_degree": plan.ep}


def _pipeline(plan: ResolvedPlan) -> dict[str, object]:
    if plan.pp == 1:
        return {"pipeline_parallel_degree": 1}
    schedule = SCHEDULES[(plan.schedule, plan.vpp > 1)]
    parts = [[f"layers.{i}" for i in chunk] for chunk in plan.chunk_layers]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return {"pipeline_parallel_degree": plan.pp, "module_fqns_per_model_part": parts,
            "pipeline_parallel_schedule": schedule,
            "pipeline_parallel_microbatch_size": plan.micro_batch_size}


def _training(plan: ResolvedPlan, steps: int) -> Table:
    local = plan.micro_batch_size * (plan.num_microbatches if plan.pp > 1 else 1)
    table: Table = {"local_batch_size": local, "global_batch_size": plan.global_batch_size,
                    "seq_len": plan.seq_len, "steps": steps, "max_norm": 1.0, "dataset": "c4",
                    "mixed_precision_param": PRECISION[plan.precision]}
    if plan.offload_optimizer:
        table["enable_cpu_offload"] = True
    return table


def _schedule_tables(plan: ResolvedPlan, steps: int) -> dict[str, Table]:
    """Optimizer, learning-rate schedule and checkpoints."""
    return {"optimizer": {"name": OPTIMIZERS[plan.optimizer], "lr": LR, "weight_decay": 0.1},
            "lr_scheduler": {"warmup_steps": max(1, round(steps * WARMUP_FRACTION)),
                             "decay_type": "cosine", "min_lr_factor": MIN_LR_FACTOR},
            "checkpoint": {"enable": True, "folder": "checkpoint",
                           "interval": min(CHECKPOINT_INTERVAL, steps)}}


def _activation_checkpoint(plan: ResolvedPlan) -> Table:
    table: Table = {"mode": plan.recompute}
    if plan.recompute == "selective":
        table["selective_ac_option"] = "op"
    return table


def _model(model: ModelSpec, plan: ResolvedPlan) -> tuple[Table, str | None]:
    key = (model.family, model.hidden_size, model.num_layers)
    name, flavor = FLAVORS.get(key, (model.family, model.name))
    table: Table = {"name": name, "flavor": flavor}
    table["hf_assets_path"] = f"./assets/hf/{model.name}"
    if plan.precision == "fp8":
        table["converters"] = ["quantize.linear.float8"]
    note = None if key in FLAVORS else "no built-in torchtitan flavor: register this shape"
    return table, note


def _comments(flavor_note: str | None, steps_known: bool) -> dict[str, str]:
    out = {"model.hf_assets_path": "PLACEHOLDER: the tokenizer files of your model",
           "training.dataset": "PLACEHOLDER: a dataset registered in torchtitan.datasets",
           "optimizer.lr": "a common starting point; tune it"}
    if not steps_known:
        out["training.steps"] = "PLACEHOLDER: the run's steps (export with --train-tokens)"
    if flavor_note:
        out["model.flavor"] = flavor_note
    return out


def tables(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan, steps: int) -> tuple[dict, str | None]:
    """The TOML tables of `plan` in order, and the note on the model flavor (if any)."""
    model_table, flavor_note = _model(model, plan)
    parallelism: Table = {**_dp_degrees(plan), "tensor_parallel_degree": plan.tp}
    if plan.tp_comm_overlap:
        parallelism["enable_async_tensor_parallel"] = True
    parallelism |= _pipeline(plan)
    parallelism["context_parallel_degree"] = plan.cp
    parallelism |= _expert_degree(model, plan)
    out: dict[str, Table] = {
        "job": {"description": f"{model.name} on {cluster.num_gpus} x {cluster.gpu.name}",
                "dump_folder": "./outputs"},
        "model": model_table, **_schedule_tables(plan, steps),
        "training": _training(plan, steps), "parallelism": parallelism,
        "activation_checkpoint": _activation_checkpoint(plan),
    }
    if plan.tp_comm_overlap:
        out["compile"] = {"enable": True, "components": ["model", "loss"]}
    if plan.precision == "fp8":
        fsdp = plan.dp_sharding in ("full", "gradients")
        out["quantize.linear.float8"] = {"recipe_name": "tensorwise",
                                         "enable_fsdp_float8_all_gather": fsdp,
                                         "precompute_float8_dynamic_scale_for_fsdp": fsdp}
    return out, flavor_note


def export(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan,
           run: RunSettings = RunSettings()) -> str:
    """A torchtitan TOML job config for `plan` (run with `--job.config_file`)."""
    steps = run.steps(plan)
    found, flavor_note = tables(model, cluster, plan, steps or DEFAULT_STEPS)
    header = (f"{comment(f'torchtitan job config for {model.name} on {cluster.num_gpus} x {cluster.gpu.name}')}"
              f"\n# targets {TARGET_VERSION}; every key is a JobConfig "
              f"field there\n# launch on every node: NGPU={min(cluster.gpus_per_node, cluster.num_gpus)} "
              f"torchrun --nnodes {cluster.num_nodes} --node_rank $NODE_RANK --rdzv_endpoint "
              f"$MASTER_ADDR:29500 -m torchtitan.train --job.config_file <this file>\n"
              f"# fill in every PLACEHOLDER below first\n\n")
    return header + _render(found, _comments(flavor_note, steps is not None))
