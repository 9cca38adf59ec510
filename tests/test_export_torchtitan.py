"""The torchtitan export launches torchtitan 0.3.0: bash runs the script (with a stub torchrun) and
every flag `torchtitan.train` receives is one the release accepts (always, against the list taken
from it); in the torch tier torchtitan's own ConfigManager parses those exact arguments (tyro
rejects an unknown flag or a bad value), ParallelDims checks the degrees against the GPU count and
each pipeline chunk's module names are checked against the model the config function builds."""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meshplan import Cluster, load_model
from meshplan.export import RunSettings, torchtitan
from meshplan.training import TrainingPlan, resolve_plan
from tests.test_export import build

DATA = Path(__file__).parent / "data" / "export" / "torchtitan_flags.txt"
FLAGS = {line for line in DATA.read_text().splitlines() if line and not line.startswith("#")}
VERSION = "0.3.0"
CASES = [("llama70b_tt_3d", {}), ("llama8b_fsdp", {}), ("mixtral_tt_ep", {}),
         ("llama8b_fsdp", dict(precision="fp8", tp=2, tp_comm_overlap=True)),
         ("llama8b_fsdp", dict(dp_sharding="gradients", offload_optimizer=True, recompute="selective")),
         ("llama70b_tt_3d", dict(vpp=None, schedule="gpipe", pipeline_split=(18, 22, 22, 18))),
         ("llama405b", dict(recompute="none")),
         ("llama70b_tt_3d", dict(dp_sharding="none"))]  # replicated: HSDP with shard degree 1
ENV = {"HF_ASSETS_PATH": "./assets/hf/model", "DATASET": "c4", "NODE_RANK": "0",
       "MASTER_ADDR": "node0", "TRAIN_STEPS": "300",
       # mixtral has no torchtitan config function: parse its flags against an MoE one that has
       "TITAN_MODULE": "qwen3", "TITAN_CONFIG": "qwen3_30b_a3b"}
AC_CLASSES = {"none": "NoneType", "selective": "SelectiveAC", "full": "FullAC"}


MORE = {"llama405b": ("llama-3.1-405b", 128, dict(tp=8, pp=8, micro_batch_size=1, global_batch_size=64,
                                                  seq_len=8192, recompute="full")),
        "qwen3_moe_ep": ("qwen3-30b-a3b", 16, dict(tp=2, ep=8, etp=1, micro_batch_size=1,
                                                   global_batch_size=64, seq_len=4096, recompute="full")),
        "gpt_oss_pp": ("gpt-oss-20b", 16, dict(pp=2, micro_batch_size=1, global_batch_size=64,
                                               seq_len=4096, recompute="selective"))}
"""Plans of models tests.test_export has none of (torchtitan 0.3 config functions of other families)."""
CASES += [("qwen3_moe_ep", {}), ("gpt_oss_pp", {})]


def plan_of(name: str, overrides: dict):
    if name in MORE:
        model_name, gpus, fields = MORE[name]
        model, cluster = load_model(model_name), Cluster.build("h100-sxm-80gb", gpus)
        plan = TrainingPlan(**(fields | {"framework": "torchtitan"} | overrides))
        return model, cluster, resolve_plan(plan, model, cluster)
    return build(name, framework="torchtitan", **overrides)


def exported(name: str, overrides: dict, tokens: float | None = None):
    model, cluster, plan = plan_of(name, overrides)
    return model, cluster, plan, torchtitan.export(model, cluster, plan, RunSettings(train_tokens=tokens))


def launch(tmp_path: Path, text: str, env: dict = ENV) -> subprocess.CompletedProcess:
    """Run the script under bash in `tmp_path` with a torchrun/srun/scontrol that print their
    arguments, one a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in {"torchrun": 'printf "%s\\n" "$@"', "srun": '"$@"', "scontrol": "echo node0"}.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "launch.sh").write_text(text)
    return subprocess.run(["bash", "launch.sh"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:{os.environ['PATH']}", **env}, timeout=30)


def trainer_args(tmp_path: Path, text: str, env: dict = ENV) -> list[str]:
    """What torchtitan.train receives (the words after `-m torchtitan.train`)."""
    done = launch(tmp_path, text, env)
    assert done.returncode == 0, done.stderr
    words = done.stdout.splitlines()
    start = words.index("-m")
    assert words[start + 1] == "torchtitan.train"
    return words[start + 2:]


def spelled(flag: str) -> str:
    return "--" + flag[2:].replace("-", "_") if flag.startswith("--") else flag


def test_the_flag_list_names_its_source():
    head = "\n".join(DATA.read_text().splitlines()[:8])
    assert "torchtitan==0.3.0" in head and "sha256" in head
    assert f"torchtitan {VERSION}" in torchtitan.TARGET_VERSION
    assert {"--parallelism.module_fqns_per_model_part", "--compile.enable_async_tensor_parallel",
            "activation-checkpoint:selective"} <= FLAGS


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_every_flag_is_one_torchtitan_accepts(tmp_path, name, overrides):
    *_, plan, text = exported(name, overrides)
    assert f"targets torchtitan {VERSION}" in text.splitlines()[2]
    args = trainer_args(tmp_path, text)
    unknown = {spelled(a) for a in args if a.startswith("--")} - FLAGS
    assert not unknown, f"not torchtitan {VERSION} flags: {sorted(unknown)}"
    assert args[-1] == f"activation-checkpoint:{plan.recompute}" and args[-1] in FLAGS


def test_a_missing_placeholder_stops_the_script(tmp_path):
    *_, text = exported("llama8b_fsdp", {})
    done = launch(tmp_path, text, {k: v for k, v in ENV.items() if k != "HF_ASSETS_PATH"})
    assert done.returncode != 0 and "set HF_ASSETS_PATH to" in done.stderr


def test_train_tokens_set_the_steps_and_the_schedule(tmp_path):
    *_, text = exported("llama70b_tt_3d", {}, tokens=1e9)
    args = trainer_args(tmp_path, text, {k: v for k, v in ENV.items() if k != "TRAIN_STEPS"})
    value = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    steps = -(-int(1e9) // (64 * 8192))
    assert value["--training.steps"] == str(steps)
    assert value["--lr_scheduler.warmup_steps"] == str(max(1, round(steps * 0.01)))
    assert value["--checkpoint.interval"] == str(min(500, steps))
    assert "TRAIN_STEPS" not in text


def test_without_tokens_the_schedule_follows_train_steps(tmp_path):
    *_, text = exported("llama70b_tt_3d", {})
    args = trainer_args(tmp_path, text, ENV | {"TRAIN_STEPS": "260"})
    value = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    assert (value["--training.steps"], value["--lr_scheduler.warmup_steps"],
            value["--checkpoint.interval"]) == ("260", "3", "260")


@pytest.mark.parametrize(("name", "overrides", "source", "float8"), [
    ("llama8b_fsdp", {}, ("llama3", "llama3_8b"), None),
    ("llama8b_fsdp", dict(precision="fp8"), (torchtitan.JOB_MODULE, "meshplan_job"), True),
    ("llama405b", {}, (torchtitan.JOB_MODULE, "meshplan_job"), False),
    ("llama405b", dict(precision="fp8"), ("llama3", "llama3_405b"), None),
    ("mixtral_tt_ep", {}, ("qwen3", "qwen3_30b_a3b"), None),  # ENV's TITAN_MODULE/TITAN_CONFIG
])
def test_precision_picks_the_config_function(tmp_path, name, overrides, source, float8):
    *_, text = exported(name, overrides)
    args = trainer_args(tmp_path, text)
    assert (args[args.index("--module") + 1], args[args.index("--config") + 1]) == source
    module = tmp_path / f"{torchtitan.JOB_MODULE}.py"
    assert module.exists() == (float8 is not None)
    if float8 is not None:
        assert ("Float8LinearConverter" in module.read_text()) == float8


# ---- torch tier: torchtitan 0.3.0's own parser -------------------------------------------------

@pytest.fixture(scope="module")
def titan():
    """torchtitan 0.3.0's ConfigManager and ParallelDims (the config registries import datasets,
    tensorboard, torchdata, triton and spmd_types at module level: see the README's test command)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("torchtitan")
    except PackageNotFoundError:
        pytest.skip(f"torchtitan is not installed (the README's test command installs {VERSION})")
    if installed != VERSION:
        pytest.skip(f"torchtitan {installed} installed; the export targets {VERSION}")
    try:
        importlib.import_module("torchtitan.models.llama3.config_registry")
    except ImportError as error:
        pytest.skip(f"torchtitan {VERSION}'s config registry does not import here: {error}")
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims

    return ConfigManager, ParallelDims


def parse(manager, tmp_path: Path, args: list[str]):
    """ConfigManager.parse_args(args) with the script's directory importable (as torchrun's
    `python -m` has it), the job module imported afresh."""
    sys.modules.pop(torchtitan.JOB_MODULE, None)
    sys.path.insert(0, str(tmp_path))
    try:
        return manager().parse_args(args)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(torchtitan.JOB_MODULE, None)


def _as_builtin(model, args: list[str]) -> list[str]:
    """A float8 job module cannot be built without torchao and an SM89+ GPU: parse the same flags
    against the built-in config function it derives from (the module has its own test)."""
    found = torchtitan.builtin(model)
    args = list(args)
    args[args.index("--module") + 1], args[args.index("--config") + 1] = found.module, found.config
    return args


def _check_fqns(config, parts: list[list[str]]) -> None:
    model = config.model_spec.model
    for name in (n for part in parts for n in part):
        top, _, index = name.partition(".")
        if top == "layers":
            assert int(index) < len(model.layers), name
        else:
            assert getattr(model, top, None) is not None, f"{name} is no module of the model"


@pytest.mark.torch
@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_torchtitans_config_manager_parses_the_launch(titan, tmp_path, name, overrides):
    manager, parallel_dims = titan
    model, cluster, plan, text = exported(name, overrides, tokens=1e10)
    args = trainer_args(tmp_path, text)
    if plan.precision == "fp8" and not torchtitan.builtin(model).float8:
        args = _as_builtin(model, args)
    config = parse(manager, tmp_path, args)
    par = config.parallelism
    assert (par.tensor_parallel_degree, par.pipeline_parallel_degree, par.context_parallel_degree) == (
        plan.tp, plan.pp, plan.cp)
    assert par.expert_parallel_degree == (plan.ep if model.is_moe else 1)
    dims = parallel_dims.from_config(par, cluster.num_gpus)  # asserts the product is the world size
    assert dims.dp_replicate * dims.dp_shard == plan.dp
    assert config.training.steps == RunSettings(train_tokens=1e10).steps(plan)
    assert config.training.global_batch_size == plan.global_batch_size
    assert type(config.activation_checkpoint).__qualname__.split(".")[0] == AC_CLASSES[plan.recompute]
    assert config.compile.enable_async_tensor_parallel == plan.tp_comm_overlap
    assert config.optimizer.param_groups[0].optimizer_kwargs["lr"] == torchtitan.LR
    if plan.pp > 1:
        assert len(par.module_fqns_per_model_part) == plan.pp * plan.vpp
        _check_fqns(config, par.module_fqns_per_model_part)


@pytest.mark.torch
def test_the_float8_module_reaches_torchtitans_converter(titan, tmp_path):
    """Its imports and converter arguments are torchtitan 0.3.0's: building it gets as far as the
    converter's own hardware check (torchao and an SM89+ GPU), or succeeds where those exist."""
    *_, text = exported("llama8b_fsdp", dict(precision="fp8"))
    trainer_args(tmp_path, text)
    manager, _ = titan
    try:
        config = parse(manager, tmp_path, ["--module", torchtitan.JOB_MODULE, "--config", "meshplan_job"])
    except (ImportError, ValueError) as error:
        assert "torchao is not installed" in str(error) or "SM89" in str(error), error
    else:
        assert "Float8Linear" in repr(config.model_spec.model)


def test_model_names_cannot_break_out_of_the_script(tmp_path):
    model, cluster, plan = build("llama8b_fsdp", framework="torchtitan")
    odd = dataclasses.replace(model, name="x\nrm -rf /; $(id)")
    text = torchtitan.export(odd, cluster, plan, RunSettings(launcher="slurm"))
    assert "\nrm -rf" not in text and "$(id)" not in text.split("set -euo pipefail")[1]
