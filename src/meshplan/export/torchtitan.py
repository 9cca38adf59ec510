"""torchtitan exporter: a bash launch script running `torchtitan.train` with command-line overrides.

Targets torchtitan 0.3.0 (PyPI `torchtitan==0.3.0`; https://github.com/pytorch/torchtitan, the
release's torchtitan/config/manager.py and configs.py). 0.3 reads no TOML job config: its
`ConfigManager` loads a Python config function (`--module llama3 --config llama3_70b`, a function
of `torchtitan/models/<module>/config_registry.py` returning a `Trainer.Config`) and tyro applies
`--section.field value` overrides to it, rejecting any flag that is not a field. The fields used
(torchtitan/config/configs.py, trainer.py and the component configs):

- top level: `--hf_assets_path` (tokenizer files), `--dump_folder`; `--dataloader.dataset`
- `--optimizer.param_groups.0.optimizer_name` / `.optimizer_kwargs.lr` / `.weight_decay`
- `--lr_scheduler.warmup_steps`, `.decay_type` ("linear" | "sqrt" | "cosine"), `.min_lr_factor`
- `--training.local_batch_size`, `.global_batch_size`, `.seq_len`, `.steps`, `.max_norm`,
  `.mixed_precision_param` ("bfloat16" | "float32"), `.enable_cpu_offload`,
  `.disable_cuda_graphs` (0.3 captures CUDA graphs by default and refuses them with pipeline
  parallelism and with the default expert-parallel token dispatcher)
- `--parallelism.data_parallel_replicate_degree`, `.data_parallel_shard_degree`,
  `.fsdp_reshard_after_forward` ("default" | "always" | "never"), `.tensor_parallel_degree`,
  `.pipeline_parallel_degree`, `.module_fqns_per_model_part` (one comma-separated word of module
  names per model chunk: tok_embeddings, layers.N, norm, lm_head, the 0.3 name of v0.2's output),
  `.pipeline_parallel_schedule` (a torch.distributed.pipelining schedule class name),
  `.pipeline_parallel_microbatch_size`, `.context_parallel_degree`, `.expert_parallel_degree`
- `--compile.enable`, `.components`, `.enable_async_tensor_parallel` (async TP moved here from
  parallelism in 0.3 and needs the compiled model); `--checkpoint.enable`, `.folder`, `.interval`
- activation checkpointing is a tyro subcommand, the last word: `activation-checkpoint:none`,
  `activation-checkpoint:selective` (0.3 dropped v0.2's selective_ac_option) or `...:full`.

Float8 is no flag in 0.3: it is a converter in the model spec that the config function builds
(`Float8LinearConverter`, recipe rowwise; built-in only in `llama3_405b`). When the plan's precision
differs from the built-in function's, the script writes a small config module and points
`--module` at it: the function's config with the float8 converter applied, or (405B in bf16,
whose function cannot even be built without float8 hardware) llama3_70b's config with the 405B
model spec. A model torchtitan has no
config function for gets TITAN_MODULE/TITAN_CONFIG placeholders: 0.3 takes the architecture from
Python only. The number of pipeline micro-batches is local_batch_size / microbatch size; without
pipelining, global_batch_size > local_batch_size x dp gives gradient accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.export import shell
from meshplan.export.run import RunSettings
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.layout.resolve import ResolvedPlan

TARGET_VERSION = "torchtitan 0.3.0 (PyPI torchtitan==0.3.0)"
LR, MIN_LR_FACTOR, WARMUP_FRACTION = 3e-4, 0.1, 0.01
"""A common starting schedule (cosine to a tenth after 1% warmup): tune it."""
CHECKPOINT_INTERVAL = 500
JOB_MODULE = "meshplan_torchtitan_job"
"""The config module the script writes when the built-in config function needs changing."""


@dataclass(frozen=True, slots=True)
class Builtin:
    """A config function of torchtitan 0.3.0's config registries for one model shape."""

    module: str
    config: str
    flavor: str
    float8_from: str | None = None
    """When the function's model spec converts linears to float8 (building it then needs torchao
    and an SM89+ GPU): a float8-free function of the same family and vocabulary whose config the
    bf16 job module takes, with this flavor's model spec swapped in."""

    @property
    def float8(self) -> bool:
        return self.float8_from is not None


BUILTINS = {("llama", 4096, 32): Builtin("llama3", "llama3_8b", "8B"),
            ("llama", 8192, 80): Builtin("llama3", "llama3_70b", "70B"),
            ("llama", 16384, 126): Builtin("llama3", "llama3_405b", "405B", float8_from="llama3_70b"),
            ("qwen3", 5120, 64): Builtin("qwen3", "qwen3_32b", "32B"),
            ("qwen3_moe", 2048, 48): Builtin("qwen3", "qwen3_30b_a3b", "30B-A3B"),
            ("deepseek_v3", 7168, 61): Builtin("deepseek_v3", "deepseek_v3_671b", "671B"),
            ("gpt_oss", 2880, 24): Builtin("gpt_oss", "gpt_oss_20b", "20b"),
            ("gpt_oss", 2880, 36): Builtin("gpt_oss", "gpt_oss_120b", "120b")}
"""(family, hidden_size, num_layers) -> the torchtitan 0.3.0 config function of that shape
(dim and len(layers) of its model spec, read from the release)."""
SCHEDULES = {("gpipe", False): "GPipe", ("1f1b", False): "1F1B", ("interleaved", True): "Interleaved1F1B"}
"""(meshplan schedule, more than one stage per rank) -> torchtitan schedule class name."""
PRECISION = {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32"}
OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}

Args = list[tuple[str, object]]


def builtin(model: ModelSpec) -> Builtin | None:
    """torchtitan's own config function for `model`'s shape, if it has one."""
    return BUILTINS.get((model.family, model.hidden_size, model.num_layers))


def job_module(found: Builtin, float8: bool) -> str:
    """A config module returning `found`'s config with float8 linears on (lm_head stays in bf16,
    as in torchtitan's own llama3_405b) or off (from found.float8_from, its model swapped)."""
    base = found.config if float8 else found.float8_from
    head = [f'"""{found.config} of torchtitan 0.3.0 with float8 linears {"on" if float8 else "off"}'
            ' (written by meshplan)."""', ""]
    if float8:
        head += ["import dataclasses", "",
                 "from torchtitan.components.quantization import Float8LinearConverter"]
    else:
        head += [f"from torchtitan.models.{found.module} import model_registry"]
    head += [f"from torchtitan.models.{found.module}.config_registry import {base}", "", "",
             "def meshplan_job():", f"    config = {base}()"]
    if float8:
        body = ['    converter = Float8LinearConverter.Config(filter_fqns=["lm_head"], '
                "model_compile_enabled=True).build()",
                "    model = converter.convert(config.model_spec.model)",
                "    config.model_spec = dataclasses.replace(config.model_spec, model=model)"]
    else:
        body = [f"    config.model_spec = model_registry({found.flavor!r})"]
    return "\n".join(head + body + ["    return config", ""])


def _source(model: ModelSpec, plan: ResolvedPlan) -> tuple[Args, dict[str, str]]:
    """--module/--config, and the config module to write when the precision needs one."""
    found = builtin(model)
    if found is None:
        return [("--module", "$TITAN_MODULE"), ("--config", "$TITAN_CONFIG")], {}
    float8 = plan.precision == "fp8"
    if float8 == found.float8:
        return [("--module", found.module), ("--config", found.config)], {}
    files = {f"{JOB_MODULE}.py": job_module(found, float8)}
    return [("--module", JOB_MODULE), ("--config", "meshplan_job")], files


def _parallelism(model: ModelSpec, plan: ResolvedPlan) -> Args:
    if plan.dp_sharding == "none":
        replicate, shard = plan.dp, 1
    else:
        shard = plan.shard_group // plan.cp
        replicate = plan.dp // shard
    reshard = "never" if plan.dp_sharding == "gradients" else "default"
    out: Args = [("--parallelism.data_parallel_replicate_degree", replicate),
                 ("--parallelism.data_parallel_shard_degree", shard),
                 ("--parallelism.fsdp_reshard_after_forward", reshard),
                 ("--parallelism.tensor_parallel_degree", plan.tp),
                 ("--parallelism.pipeline_parallel_degree", plan.pp)]
    out += _pipeline(plan)
    out.append(("--parallelism.context_parallel_degree", plan.cp))
    out.append(("--parallelism.expert_parallel_degree", plan.ep if model.is_moe else 1))
    return out


def _pipeline(plan: ResolvedPlan) -> Args:
    if plan.pp == 1:
        return []
    parts = [[f"layers.{i}" for i in chunk] for chunk in plan.chunk_layers]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "lm_head"]
    words = shell.Raw(" ".join(shell.word(",".join(p)) for p in parts))
    return [("--parallelism.module_fqns_per_model_part", words),
            ("--parallelism.pipeline_parallel_schedule", SCHEDULES[(plan.schedule, plan.vpp > 1)]),
            ("--parallelism.pipeline_parallel_microbatch_size", plan.micro_batch_size)]


def _training(model: ModelSpec, plan: ResolvedPlan, steps: int | None) -> Args:
    local = plan.micro_batch_size * (plan.num_microbatches if plan.pp > 1 else 1)
    out: Args = [("--training.local_batch_size", local),
                 ("--training.global_batch_size", plan.global_batch_size),
                 ("--training.seq_len", plan.seq_len),
                 ("--training.steps", "$TRAIN_STEPS" if steps is None else steps),
                 ("--training.max_norm", 1.0),
                 ("--training.mixed_precision_param", PRECISION[plan.precision])]
    if plan.offload_optimizer:
        out.append(("--training.enable_cpu_offload", None))
    if plan.pp > 1 or (model.is_moe and plan.ep > 1):
        out.append(("--training.disable_cuda_graphs", None))
    return out


def _schedule(plan: ResolvedPlan, steps: int | None) -> Args:
    """Optimizer, learning-rate schedule and checkpoints (from TRAIN_STEPS by shell arithmetic
    when the length is a placeholder)."""
    if steps is None:
        warmup = shell.Raw('"$(( (TRAIN_STEPS + 50) / 100 > 1 ? (TRAIN_STEPS + 50) / 100 : 1 ))"')
        interval = shell.Raw(f'"$(( TRAIN_STEPS < {CHECKPOINT_INTERVAL} ? TRAIN_STEPS : '
                             f'{CHECKPOINT_INTERVAL} ))"')
    else:
        warmup, interval = max(1, round(steps * WARMUP_FRACTION)), min(CHECKPOINT_INTERVAL, steps)
    group = "--optimizer.param_groups.0"
    return [(f"{group}.optimizer_name", OPTIMIZERS[plan.optimizer]),
            (f"{group}.optimizer_kwargs.lr", LR), (f"{group}.optimizer_kwargs.weight_decay", 0.1),
            ("--lr_scheduler.warmup_steps", warmup), ("--lr_scheduler.decay_type", "cosine"),
            ("--lr_scheduler.min_lr_factor", MIN_LR_FACTOR), ("--checkpoint.enable", None),
            ("--checkpoint.folder", "checkpoint"), ("--checkpoint.interval", interval)]


def _compile(plan: ResolvedPlan) -> Args:
    """Async TP and float8 need the compiled model; otherwise compile stays off (as meshplan
    prices eager kernels), whatever the config function chose."""
    if not (plan.tp_comm_overlap or plan.precision == "fp8"):
        return [("--compile.no-enable", None), ("--compile.no-enable-async-tensor-parallel", None)]
    out: Args = [("--compile.enable", None), ("--compile.components", "model,loss")]
    overlap = "" if plan.tp_comm_overlap else "no-"
    return out + [(f"--compile.{overlap}enable-async-tensor-parallel", None)]


def flags(model: ModelSpec, plan: ResolvedPlan, steps: int | None) -> tuple[Args, dict[str, str]]:
    """Every torchtitan.train argument of `plan` in order (the activation-checkpoint subcommand
    last), and the files the script writes first."""
    source, files = _source(model, plan)
    out = source + [("--hf_assets_path", "$HF_ASSETS_PATH"), ("--dump_folder", "./outputs"),
                    ("--dataloader.dataset", "$DATASET")]
    out += _schedule(plan, steps) + _training(model, plan, steps) + _parallelism(model, plan)
    out += _compile(plan)
    return out + [(f"activation-checkpoint:{plan.recompute}", None)], files


def _placeholders(model: ModelSpec, plan: ResolvedPlan, steps: int | None) -> list[tuple[str, str]]:
    out = [("HF_ASSETS_PATH", "the directory of the model's Hugging Face tokenizer files "
                              "(torchtitan: scripts/download_hf_assets.py --assets tokenizer)"),
           ("DATASET", "a dataset registered in torchtitan.hf_datasets (c4 to try)")]
    if builtin(model) is None:
        out += [("TITAN_MODULE", "a Python module whose config function builds this model"),
                ("TITAN_CONFIG", "that function's name (it returns a torchtitan Trainer.Config)")]
    if steps is None:
        tokens = plan.global_batch_size * plan.seq_len
        out.append(("TRAIN_STEPS", f"the run's optimizer steps ({tokens:,} tokens each; "
                                   "or export with --train-tokens)"))
    return out


def _notes(model: ModelSpec, plan: ResolvedPlan, run: RunSettings, steps: int | None) -> list[str]:
    found = builtin(model)
    notes = [f"targets {TARGET_VERSION}; every flag is a field of its Trainer.Config "
             "(torchtitan/config/manager.py parses them with tyro)"]
    if found is None:
        notes.append(f"torchtitan has no config function for {model.name}: write one "
                     "(see torchtitan/models/*/config_registry.py) and set TITAN_MODULE/TITAN_CONFIG")
    elif plan.precision == "fp8" and not found.float8:
        notes.append(f"float8: the script writes {JOB_MODULE}.py, {found.config} with float8 "
                     "linears (needs torchao and an SM89+ GPU)")
    elif found.float8 and plan.precision != "fp8":
        notes.append(f"{found.config} trains in float8; the script writes {JOB_MODULE}.py without it")
    notes.append("training length: set TRAIN_STEPS (no --train-tokens given)" if steps is None else
                 f"training length: {steps:,} steps of {plan.global_batch_size} x {plan.seq_len} "
                 f"tokens (--train-tokens {run.train_tokens:.4g})")
    notes.append(f"learning rate: cosine {LR:g} -> {LR * MIN_LR_FACTOR:g}, {WARMUP_FRACTION:.0%} "
                 "warmup (a common starting point; tune it)")
    return notes


def export(model: ModelSpec, cluster: Cluster, plan: ResolvedPlan,
           run: RunSettings = RunSettings()) -> str:
    """A bash script launching torchtitan 0.3's trainer with `plan` (torchrun or Slurm)."""
    steps = run.steps(plan)
    args, files = flags(model, plan, steps)
    script = shell.Script(
        title=f"torchtitan launch for {model.name} on {cluster.num_gpus} x {cluster.gpu.name}",
        notes=_notes(model, plan, run, steps), placeholders=_placeholders(model, plan, steps),
        program="-m torchtitan.train", args=args, files=files)
    if run.launcher == "slurm":
        return shell.slurm(script, cluster, f"torchtitan-{model.name}")
    return shell.torchrun(script, cluster)
