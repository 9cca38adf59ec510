"""The torchtitan export loads in torchtitan: every section and key is a JobConfig field of the
targeted release (always checked, against the list extracted from its source), and in the torch
tier torchtitan's own ConfigManager parses the exported file."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tomllib
import types
from pathlib import Path

import pytest

from meshplan.export import RunSettings, torchtitan
from tests.test_export import build

DATA = Path(__file__).parent / "data" / "export" / "torchtitan_job_config_fields.txt"
FIELDS = {line for line in DATA.read_text().splitlines() if line and not line.startswith("#")}
VERSION = "0.2.2"
CASES = [("llama70b_tt_3d", {}), ("llama8b_fsdp", {}), ("mixtral_tt_ep", {}),
         ("llama8b_fsdp", dict(precision="fp8", tp=2, tp_comm_overlap=True)),
         ("llama8b_fsdp", dict(dp_sharding="gradients", offload_optimizer=True, recompute="selective")),
         ("llama70b_tt_3d", dict(vpp=None, schedule="gpipe", pipeline_split=(18, 22, 22, 18)))]


def keys(table: dict, prefix: str = "") -> set[str]:
    """Every dotted key of a parsed TOML document (nested tables recursed)."""
    out = set()
    for name, value in table.items():
        if isinstance(value, dict):
            out |= keys(value, f"{prefix}{name}.")
        else:
            out.add(f"{prefix}{name}")
    return out


def exported(name: str, overrides: dict, tokens: float | None = None) -> str:
    model, cluster, plan = build(name, framework="torchtitan", **overrides)
    return torchtitan.export(model, cluster, plan, RunSettings(train_tokens=tokens))


def test_the_field_list_names_its_source():
    head = DATA.read_text().splitlines()[:3]
    assert any("github.com/pytorch/torchtitan/blob/" in line for line in head)
    assert VERSION in torchtitan.TARGET_VERSION and "parallelism.module_fqns_per_model_part" in FIELDS


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_every_key_is_a_jobconfig_field(name, overrides):
    text = exported(name, overrides)
    assert f"torchtitan {VERSION}" in text.splitlines()[1]
    unknown = keys(tomllib.loads(text)) - FIELDS
    assert not unknown, f"not JobConfig fields in torchtitan {VERSION}: {sorted(unknown)}"


def test_train_tokens_set_the_steps_and_the_schedule():
    config = tomllib.loads(exported("llama70b_tt_3d", {}, tokens=1e9))
    steps = -(-int(1e9) // (64 * 8192))
    assert config["training"]["steps"] == steps
    assert config["lr_scheduler"]["warmup_steps"] == max(1, round(steps * 0.01))
    assert config["checkpoint"]["interval"] == min(500, steps)
    assert "PLACEHOLDER: the run's steps" not in exported("llama70b_tt_3d", {}, tokens=1e9)


@pytest.fixture
def config_manager():
    """torchtitan's ConfigManager; torchtitan/__init__ only registers quantization converters,
    whose MoE kernels import triton (absent from CPU torch), so without triton the config
    package is imported without that __init__ (sys.modules restored after)."""
    saved = {k: v for k, v in sys.modules.items() if k == "torchtitan" or k.startswith("torchtitan.")}
    try:
        try:
            from torchtitan.config import ConfigManager
        except ImportError:
            spec = importlib.util.find_spec("torchtitan")
            if spec is None:
                pytest.skip(f"torchtitan is not installed (pip install --no-deps torchtitan=={VERSION} tyro)")
            for k in [k for k in sys.modules if k == "torchtitan" or k.startswith("torchtitan.")]:
                del sys.modules[k]
            package = types.ModuleType("torchtitan")
            package.__path__ = list(spec.submodule_search_locations)
            sys.modules["torchtitan"] = package
            try:
                ConfigManager = importlib.import_module("torchtitan.config").ConfigManager
            except ImportError as error:
                pytest.skip(f"torchtitan.config does not import here: {error}")
        from importlib.metadata import version

        if version("torchtitan") != VERSION:
            pytest.skip(f"torchtitan {version('torchtitan')} installed; the export targets {VERSION}")
        yield ConfigManager
    finally:
        for k in [k for k in sys.modules if k == "torchtitan" or k.startswith("torchtitan.")]:
            del sys.modules[k]
        sys.modules.update(saved)


@pytest.mark.torch
@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_torchtitans_config_manager_loads_the_export(config_manager, tmp_path, name, overrides):
    path = tmp_path / "job.toml"
    path.write_text(exported(name, overrides, tokens=1e10))
    config = config_manager().parse_args(["--job.config_file", str(path)])
    expected = tomllib.loads(path.read_text())
    assert config.parallelism.tensor_parallel_degree == expected["parallelism"]["tensor_parallel_degree"]
    assert config.training.steps == expected["training"]["steps"]
    assert config.activation_checkpoint.mode == expected["activation_checkpoint"]["mode"]
