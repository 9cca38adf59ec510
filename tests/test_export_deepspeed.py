"""The DeepSpeed export is a config DeepSpeed accepts: every key is one its config modules read
(always checked, against the list extracted from its source), and in the torch tier DeepSpeed's
own DeepSpeedConfig (pydantic sections that forbid unknown keys, the batch arithmetic, the
removed-feature checks) builds from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshplan.export import RunSettings, deepspeed
from tests.test_export import build

DATA = Path(__file__).parent / "data" / "export" / "deepspeed_config_keys.txt"
KEYS = {line for line in DATA.read_text().splitlines() if line and not line.startswith("#")}
VERSION = "0.19.8"
CASES = [("llama8b_fsdp", {}), ("mixtral_zero3_offload", {}),
         ("llama8b_fsdp", dict(dp_sharding="optimizer")), ("llama8b_fsdp", dict(dp_sharding="none")),
         ("llama8b_fsdp", dict(precision="fp16", dp_sharding="gradients", offload_optimizer=True)),
         ("mixtral_zero3_offload", dict(offload_params=True, offload_target="nvme",
                                        offload_activations=True))]


def exported(name: str, overrides: dict, tokens: float | None = None) -> tuple[dict, object]:
    model, cluster, plan = build(name, **({"framework": "deepspeed"} | overrides))
    return json.loads(deepspeed.export(model, cluster, plan, RunSettings(train_tokens=tokens))), plan


def key_paths(cfg: dict, prefix: str = "") -> set[str]:
    """Keys DeepSpeed parses (optimizer params go to the optimizer's constructor)."""
    out = set()
    for key, value in cfg.items():
        out.add(key)
        if isinstance(value, dict) and f"{prefix}{key}" != "optimizer.params":
            out |= key_paths(value, f"{prefix}{key}.")
    return out


def test_the_key_list_names_its_source():
    head = DATA.read_text().splitlines()[:3]
    assert any(f"deepspeed {VERSION}" in line for line in head)
    assert VERSION in deepspeed.TARGET_VERSION


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_every_key_is_one_deepspeed_reads(name, overrides):
    cfg, _ = exported(name, overrides)
    assert f"DeepSpeed {VERSION}" in cfg["_comment"][1]
    unknown = key_paths({k: v for k, v in cfg.items() if k != "_comment"}) - KEYS
    assert not unknown, f"not DeepSpeed {VERSION} config keys: {sorted(unknown)}"


def test_train_tokens_set_the_schedule_length():
    cfg, _ = exported("llama8b_fsdp", {}, tokens=1e9)
    steps = -(-int(1e9) // (64 * 8192))
    assert cfg["scheduler"]["params"]["total_num_steps"] == steps
    assert not any("PLACEHOLDER: scheduler" in line for line in cfg["_comment"])
    placeholder, _ = exported("llama8b_fsdp", {})
    assert any("PLACEHOLDER: scheduler" in line for line in placeholder["_comment"])


class DataParallel:
    """The one mpu method DeepSpeedConfig asks: the data-parallel world size."""

    def __init__(self, size: int):
        self.size = size

    def get_data_parallel_world_size(self) -> int:
        return self.size


@pytest.mark.torch
@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_deepspeeds_config_class_accepts_the_export(monkeypatch, name, overrides):
    try:
        from deepspeed.runtime import config as ds_config
    except ImportError as error:
        pytest.skip(f"deepspeed does not import here ({error}); "
                    f"pip install --no-deps deepspeed=={VERSION} hjson einops ninja")
    from importlib.metadata import version

    if version("deepspeed") != VERSION:
        pytest.skip(f"deepspeed {version('deepspeed')} installed; the export targets {VERSION}")
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda: 0)  # no process group on CPU
    cfg, plan = exported(name, overrides, tokens=1e10)
    parsed = ds_config.DeepSpeedConfig(cfg, mpu=DataParallel(plan.dp))
    assert parsed.train_batch_size == plan.global_batch_size
    assert parsed.zero_optimization_stage == cfg["zero_optimization"]["stage"]
    assert parsed.scheduler_name == "WarmupCosineLR"
