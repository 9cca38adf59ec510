"""Exporters: golden files per engine, engine-level invariants and unexpressible plans.

Regenerate the golden files with MESHPLAN_UPDATE_GOLDEN=1 python -m pytest tests/test_export.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from meshplan import Cluster, load_model
from meshplan.errors import ConfigError, UnknownNameError
from meshplan.export import EXPORTERS, deepspeed, export_plan, megatron, torchtitan
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.layout.capabilities import feature_problems, problems

GOLDEN = Path(__file__).parent / "golden" / "export"
EXTENSION = {"megatron": "sh", "torchtitan": "sh", "deepspeed": "json"}

# name -> (model, gpus, plan fields); the framework field picks the engine's sharding default.
PLANS = {
    "llama70b_3d": ("llama-3.1-70b", 64, dict(
        tp=8, pp=4, vpp=2, micro_batch_size=1, global_batch_size=64, seq_len=8192,
        recompute="selective")),
    "llama8b_fsdp": ("llama-3.1-8b", 16, dict(
        dp_sharding="full", micro_batch_size=2, global_batch_size=64, seq_len=8192,
        recompute="full")),
    "mixtral_ep": ("mixtral-8x7b", 32, dict(
        tp=2, pp=2, ep=8, etp=1, micro_batch_size=1, global_batch_size=128, seq_len=4096,
        recompute="selective")),
    "mixtral_tt_ep": ("mixtral-8x7b", 32, dict(
        tp=2, ep=8, etp=1, dp_sharding="full", micro_batch_size=1, global_batch_size=64, seq_len=4096,
        recompute="full", framework="torchtitan")),
    "llama70b_tt_3d": ("llama-3.1-70b", 64, dict(
        tp=8, pp=4, vpp=2, micro_batch_size=1, global_batch_size=64, seq_len=8192,
        recompute="selective", framework="torchtitan")),
    "mixtral_zero3_offload": ("mixtral-8x7b", 32, dict(
        dp_sharding="full", offload_optimizer=True, micro_batch_size=1, global_batch_size=64,
        seq_len=4096, recompute="full", framework="deepspeed")),
}
GOLDEN_CASES = [
    ("megatron", "llama70b_3d"), ("megatron", "llama8b_fsdp"), ("megatron", "mixtral_ep"),
    ("torchtitan", "llama70b_tt_3d"), ("torchtitan", "llama8b_fsdp"),
    ("torchtitan", "mixtral_tt_ep"),
    ("deepspeed", "llama8b_fsdp"), ("deepspeed", "mixtral_zero3_offload"),
]


def build(name: str, **overrides):
    model_name, gpus, fields = PLANS[name]
    model, cluster = load_model(model_name), Cluster.build("h100-sxm-80gb", gpus)
    return model, cluster, resolve_plan(TrainingPlan(**(fields | overrides)), model, cluster)


@pytest.mark.parametrize(("target", "name"), GOLDEN_CASES)
def test_golden(target: str, name: str) -> None:
    text = export_plan(target, *build(name))
    path = GOLDEN / f"{target}_{name}.{EXTENSION[target]}"
    if os.environ.get("MESHPLAN_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path.name} differs; MESHPLAN_UPDATE_GOLDEN=1 rewrites it"


def test_registry_and_versions() -> None:
    assert set(EXPORTERS) == {"megatron", "torchtitan", "deepspeed"}
    for module in (megatron, torchtitan, deepspeed):
        assert module.TARGET_VERSION and "https://github.com/" in module.__doc__


def test_megatron_extra_options() -> None:
    model, cluster, plan = build("llama70b_3d", recompute="full", recompute_num_layers=2,
                                 precision="fp8", offload_optimizer=True, tp_comm_overlap=True,
                                 rank_order="tp-cp-ep-pp-dp")
    text = megatron.export(model, cluster, plan)
    for flag in ("--recompute-method block", "--fp8-format hybrid", "--optimizer-cpu-offload",
                 "--tp-comm-overlap", "--use-tp-pp-dp-mapping"):
        assert flag in text


def test_megatron_uneven_pipeline_uses_layout() -> None:
    split = (18, 22, 22, 18)
    model, cluster, plan = build("llama70b_3d", vpp=None, pipeline_split=split)
    text = megatron.export(model, cluster, plan)
    layout = re.search(r"--pipeline-model-parallel-layout '([^']+)'", text).group(1)
    stages = layout.split("|")
    assert stages[0].startswith("E") and stages[-1].endswith("L")
    assert [s.count("t") for s in stages] == list(split)
    assert "--num-virtual-stages-per-pipeline-rank" not in text


def titan_flags(text: str) -> dict[str, object]:
    """The flags of a torchtitan launch script's trainer command: flag -> its value(s) (None for
    a switch; a list for a flag taking several words)."""
    words = shlex.split(text[text.index("-m torchtitan.train"):].replace("\\\n", " "))[2:]
    out: dict[str, object] = {}
    for i, w in enumerate(words):
        if w.startswith("--"):
            values = []
            for v in words[i + 1:]:
                if v.startswith("--") or v.startswith("activation-checkpoint:"):
                    break
                values.append(v)
            out[w] = None if not values else values[0] if len(values) == 1 else values
    return out


@pytest.mark.parametrize("name", ["llama70b_tt_3d", "llama8b_fsdp", "mixtral_tt_ep"])
def test_torchtitan_degrees_multiply_to_gpus(name: str) -> None:
    model, cluster, plan = build(name)
    flags = titan_flags(torchtitan.export(model, cluster, plan))
    product = 1
    for axis in ("data_parallel_replicate", "data_parallel_shard", "tensor_parallel",
                 "pipeline_parallel", "context_parallel"):
        product *= int(flags[f"--parallelism.{axis}_degree"])
    assert product == cluster.num_gpus
    assert int(flags["--training.global_batch_size"]) == plan.global_batch_size
    if plan.pp > 1:
        assert int(flags["--training.local_batch_size"]) == plan.micro_batch_size * plan.num_microbatches
        parts = [p.split(",") for p in flags["--parallelism.module_fqns_per_model_part"]]
        assert len(parts) == plan.pp * plan.vpp
        assert sum(len(p) for p in parts) == model.num_layers + 3  # + embedding, norm, lm_head


@pytest.mark.parametrize("name", ["llama8b_fsdp", "mixtral_zero3_offload"])
def test_deepspeed_batch_arithmetic(name: str) -> None:
    model, cluster, plan = build(name)
    cfg = json.loads(deepspeed.export(model, cluster, plan))
    assert cfg["train_batch_size"] == (cfg["train_micro_batch_size_per_gpu"]
                                       * cfg["gradient_accumulation_steps"] * plan.dp)
    assert cfg["zero_optimization"]["stage"] == 3


def test_deepspeed_zero_stages() -> None:
    stages = {}
    for sharding in ("none", "optimizer", "gradients", "full"):
        cfg = deepspeed.config(*build("llama8b_fsdp", dp_sharding=sharding)[::2])
        stages[sharding] = cfg["zero_optimization"]["stage"]
    assert stages == {"none": 0, "optimizer": 1, "gradients": 2, "full": 3}
    with pytest.raises(ConfigError, match="dp_shard_size=8"):  # MiCS left DeepSpeed in 0.19
        export_plan("deepspeed", *build("llama8b_fsdp", dp_shard_size=8, framework="deepspeed"))


UNEXPRESSIBLE = [
    ("megatron", "llama70b_3d", dict(vpp=None, schedule="gpipe")),
    ("megatron", "llama70b_3d", dict(offload_activations=True)),
    ("megatron", "llama8b_fsdp", dict(dp_shard_size=8)),
    ("torchtitan", "llama8b_fsdp", dict(precision="fp16")),
    ("torchtitan", "llama8b_fsdp", dict(dp_sharding="optimizer")),
    ("torchtitan", "mixtral_tt_ep", dict(dp_shard_size=2)),  # ep 8 > dp_shard x cp x tp = 4
    ("torchtitan", "mixtral_tt_ep", dict(etp=2)),  # 0.3 shards routed experts over EP only
    ("deepspeed", "llama70b_3d", {}),
    ("deepspeed", "mixtral_ep", dict(tp=1, pp=1, etp=None)),
    ("deepspeed", "llama8b_fsdp", dict(precision="fp8")),
    ("deepspeed", "llama8b_fsdp", dict(recompute="selective")),
    ("deepspeed", "llama8b_fsdp", dict(dp_sharding="optimizer", offload_optimizer=True)),
    ("deepspeed", "llama8b_fsdp", dict(offload_activations=True, recompute="none")),
    ("megatron", "llama70b_3d", dict(rank_order="pp-dp-cp-ep-tp")),
    ("megatron", "llama70b_3d", dict(sequence_parallel=False, tp_comm_overlap=True)),
    ("megatron", "llama8b_fsdp", dict(optimizer="sgd")),
    ("torchtitan", "llama8b_fsdp", dict(offload_activations=True)),
    ("torchtitan", "llama8b_fsdp", dict(dp_sharding="none", offload_optimizer=True)),
]


@pytest.mark.parametrize(("target", "name", "overrides"), UNEXPRESSIBLE)
def test_unexpressible_plans_raise(target: str, name: str, overrides: dict) -> None:
    with pytest.raises(ConfigError):
        export_plan(target, *build(name, **overrides))


@pytest.mark.parametrize(("target", "name", "overrides"), UNEXPRESSIBLE)
def test_the_capability_table_not_the_exporter_rejects(target: str, name: str, overrides: dict) -> None:
    """The search skips what problems() lists, so every exporter refusal must come from it
    (or, for a feature the framework lacks altogether, from feature_problems at resolve)."""
    fields = PLANS[name][2] | overrides
    if feature_problems(fields.get("framework", "megatron"), TrainingPlan(**fields)):
        return
    model, _, plan = build(name, **overrides)
    assert problems(target, plan, model)


def test_model_code_rules_live_in_the_table() -> None:
    model, _, plan = build("llama8b_fsdp")
    layers = tuple(dataclasses.replace(layer, attention=dataclasses.replace(layer.attention,
                                                                            qk_norm="full_width"))
                   for layer in model.layers)
    full = dataclasses.replace(model, layers=layers)
    assert any("qk_norm='full_width'" in p for p in problems("megatron", plan, full))
    assert not problems("torchtitan", plan, full)
    with pytest.raises(ConfigError, match="qk_norm='full_width'"):
        export_plan("megatron", full, build("llama8b_fsdp")[1], plan)


def test_unknown_target() -> None:
    with pytest.raises(UnknownNameError, match="export target 'megatorn'.*megatron"):
        export_plan("megatorn", *build("llama8b_fsdp"))


def test_nvfp4_plans_export_to_megatron_only() -> None:
    model, cluster = load_model("llama-3.1-8b"), Cluster.build("b200-180gb", 8)
    plan = resolve_plan(TrainingPlan(precision="fp4", dp_sharding="full", micro_batch_size=1,
                                     global_batch_size=8, seq_len=4096), model, cluster)
    text = megatron.export(model, cluster, plan)
    assert "--fp4-format e2m1" in text and "--bf16" in text
    for target in ("torchtitan", "deepspeed"):
        with pytest.raises(ConfigError, match="fp4"):
            export_plan(target, model, cluster, plan)
