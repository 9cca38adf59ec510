"""Load the compute constants of a GPU family (defaults, then fitted overrides if present)."""

from __future__ import annotations

import functools
from importlib import resources

import yaml

from meshplan.costs.ops import ComputeConstants
from meshplan.hardware import GPUSpec

FIELDS = ("gemm_efficiency", "fp8_gemm_efficiency", "gemm_half_dim", "attention_efficiency", "fused_attention_efficiency",
          "attention_backward_ratio",
          "hbm_efficiency", "launch_s")


@functools.cache
def _families() -> dict[str, dict]:
    text = resources.files("meshplan.costs").joinpath("data").joinpath("compute_constants.yaml").read_text()
    return yaml.safe_load(text)["families"]


@functools.cache
def compute_constants(architecture: str) -> ComputeConstants:
    """The constants of one GPU architecture family (e.g. `hopper`)."""
    row = _families().get(architecture) or _families()["hopper"]
    return ComputeConstants(**{name: float(row[name]["value"]) for name in FIELDS})


def upper_bound(architecture: str, name: str) -> float | None:
    """The measured ceiling of a constant (e.g. best matmul efficiency), when there is one."""
    row = _families().get(architecture, {})
    return row.get(name, {}).get("max")


def constants_for(gpu: GPUSpec) -> ComputeConstants:
    """Compute constants of `gpu`'s family."""
    return compute_constants(gpu.architecture)
