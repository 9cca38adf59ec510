"""torchtitan exporter: a TOML job config (`--job.config_file`) for a resolved plan.

Section and key names were checked against the `JobConfig` dataclasses of
`torchtitan/config/job_config.py` in pytorch/torchtitan
(https://github.com/pytorch/torchtitan/blob/000204a4a8bf3d0f31adc44fc29855fbb6ea13d8/torchtitan/config/job_config.py,
the v0.1 TOML schema with `local_batch_size`/`global_batch_size`) and the shipped preset
`torchtitan/models/llama3/train_configs/llama3_70b.toml`:

- `Job`: description, dump_folder
- `Model`: name, flavor, converters (["float8"] turns on Float8Linear)
- `Optimizer`: name
- `Training`: local_batch_size, global_batch_size, seq_len, mixed_precision_param
  ("bfloat16" | "float32"), enable_cpu_offload, compile
- `Parallelism`: data_parallel_replicate_degree, data_parallel_shard_degree,
  fsdp_reshard_after_forward ("default" | "always" | "never"), tensor_parallel_degree,
  enable_async_tensor_parallel, pipeline_parallel_degree, pipeline_parallel_split_points,
  pipeline_parallel_schedule (a class name in torch.distributed.pipelining.schedules:
  "GPipe", "1F1B", "Interleaved1F1B", ...), pipeline_parallel_microbatch_size,
  context_parallel_degree, expert_parallel_degree
- `ActivationCheckpoint`: mode ("selective" | "full" | "none"), selective_ac_option ("op" or an int)
- `Float8`: recipe_name, enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp

The number of pipeline micro-batches is local_batch_size / pipeline_parallel_microbatch_size;
without pipelining, global_batch_size > local_batch_size x dp gives gradient accumulation.
"""

from __future__ import annotations

from meshplan.export.shell import comment_text
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.layout.resolve import ResolvedPlan

TARGET_VERSION = "torchtitan v0.1 TOML schema (main @ 000204a4a8bf3d0f31adc44fc29855fbb6ea13d8)"

FLAVORS = {("llama", 4096, 32): ("llama3", "8B"), ("llama", 8192, 80): ("llama3", "70B"),
           ("llama", 16384, 126): ("llama3", "405B")}
"""(family, hidden_size, num_layers) -> torchtitan (model.name, model.flavor)."""
SCHEDULES = {("gpipe", False): "GPipe", ("1f1b", False): "1F1B", ("interleaved", True): "Interleaved1F1B"}
"""(meshplan schedule, more than one stage per rank) -> torchtitan schedule class name."""
PRECISION = {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32"}
OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}

Table = dict[str, object]
_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', **{chr(c): f"\\u{c:04x}" for c in [*range(0x20), 0x7F]}}
"""What a TOML basic string cannot hold as is (a newline would end it and start a new key)."""


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):  # a TOML basic string; a control character (newline) as \uXXXX
        return '"' + "".join(_TOML_ESCAPES.get(ch, ch) for ch in value) + '"'
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
    starts = [chunk[0] for chunk in plan.chunk_layers[1:]]
    return {"pipeline_parallel_degree": plan.pp,
            "pipeline_parallel_split_points": [f"layers.{i}" for i in starts],
            "pipeline_parallel_schedule": schedule,
            "pipeline_parallel_microbatch_size": plan.micro_batch_size}


def _training(plan: ResolvedPlan) -> Table:
    local = plan.micro_batch_size * (plan.num_microbatches if plan.pp > 1 else 1)
    table: Table = {"local_batch_size": local, "global_batch_size": plan.global_batch_size,
                    "seq_len": plan.seq_len, "mixed_precision_param": PRECISION[plan.precision]}
    if plan.offload_optimizer:
        table["enable_cpu_offload"] = True
    if plan.tp_comm_overlap:
        table["compile"] = True
    return table


def _activation_checkpoint(plan: ResolvedPlan) -> Table:
    table: Table = {"mode": plan.recompute}
    if plan.recompute == "selective":
        table["selective_ac_option"] = "op"
    return table


def _model(model: ModelSpec, plan: ResolvedPlan) -> tuple[Table, str | None]:
    key = (model.family, model.hidden_size, model.num_layers)
    name, flavor = FLAVORS.get(key, (model.family, model.name))
    table: Table = {"name": name, "flavor": flavor}
    if plan.precision == "fp8":
        table["converters"] = ["float8"]
    note = None if key in FLAVORS else "no built-in torchtitan flavor: register this shape"
    return table, note


def export(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan) -> str:
    """A torchtitan TOML job config for `plan` (run with `--job.config_file`)."""
    model_table, flavor_note = _model(model, plan)
    parallelism: Table = {**_dp_degrees(plan), "tensor_parallel_degree": plan.tp}
    if plan.tp_comm_overlap:
        parallelism["enable_async_tensor_parallel"] = True
    parallelism |= _pipeline(plan)
    parallelism["context_parallel_degree"] = plan.cp
    parallelism |= _expert_degree(model, plan)
    tables: dict[str, Table] = {
        "job": {"description": f"{model.name} on {cluster.num_gpus} x {cluster.gpu.name}",
                "dump_folder": "./outputs"},
        "model": model_table,
        "optimizer": {"name": OPTIMIZERS[plan.optimizer]},
        "training": _training(plan),
        "parallelism": parallelism,
        "activation_checkpoint": _activation_checkpoint(plan),
    }
    if plan.precision == "fp8":
        fsdp = plan.dp_sharding in ("full", "gradients")
        tables["float8"] = {"recipe_name": "tensorwise", "enable_fsdp_float8_all_gather": fsdp,
                            "precompute_float8_dynamic_scale_for_fsdp": fsdp}
    comments = {"model.flavor": flavor_note} if flavor_note else {}
    header = (f"# torchtitan job config for {comment_text(model.name)} on {cluster.num_gpus} x "
              f"{comment_text(cluster.gpu.name)}\n# keys checked against {TARGET_VERSION}\n"
              f"# launch: NGPU={min(cluster.gpus_per_node, cluster.num_gpus)} "
              f"torchrun --nnodes {cluster.num_nodes} ... -m torchtitan.train "
              f"--job.config_file <this file>\n\n")
    return header + _render(tables, comments)
