"""Load the compute constants of a GPU family (defaults, then fitted overrides if present), and
scale its GEMM efficiencies to a GPU model's own measured matmul ceiling where one exists."""

from __future__ import annotations

import functools
from dataclasses import replace
from importlib import resources

from meshplan.yamlread import load_packaged

from meshplan.costs.ops import ComputeConstants
from meshplan.hardware import GPUSpec

FIELDS = ("gemm_efficiency", "fp8_gemm_efficiency", "gemm_half_dim", "attention_efficiency", "fused_attention_efficiency",
          "attention_backward_ratio",
          "hbm_efficiency", "launch_s")
CEILINGS = ("gemm_efficiency", "fp8_gemm_efficiency")
"""Constants whose family value a GPU model's own measured ceiling rescales."""


@functools.cache
def _data() -> dict:
    text = resources.files("meshplan.costs").joinpath("data").joinpath("compute_constants.yaml").read_text()
    return load_packaged(text)


def _families() -> dict[str, dict]:
    return _data()["families"]


@functools.cache
def compute_constants(architecture: str) -> ComputeConstants:
    """The constants of one GPU architecture family (e.g. `hopper`)."""
    row = _families().get(architecture) or _families()["hopper"]
    return ComputeConstants(**{name: float(row[name]["value"]) for name in FIELDS})


def upper_bound(architecture: str, name: str) -> float | None:
    """The measured ceiling of a constant (e.g. best matmul efficiency), when there is one."""
    row = _families().get(architecture, {})
    return row.get(name, {}).get("max")


def gpu_ceiling(gpu: GPUSpec, name: str) -> float | None:
    """The best measured matmul efficiency of this GPU model (`gpus:` rows), else its family's."""
    row = _data().get("gpus", {}).get(gpu.name, {})
    return row[name]["value"] if name in row else upper_bound(gpu.architecture, name)


@functools.cache
def _for_model(gpu: GPUSpec) -> ComputeConstants:
    c = compute_constants(gpu.architecture)
    scaled = {}
    for name in CEILINGS:
        own, family = gpu_ceiling(gpu, name), upper_bound(gpu.architecture, name)
        if own and family:
            scaled[name] = getattr(c, name) * own / family
    return replace(c, **scaled)


def constants_for(gpu: GPUSpec) -> ComputeConstants:
    """Compute constants of `gpu`: its family's, with the GEMM efficiencies scaled by the ratio of
    the model's own measured matmul ceiling to the family's (GB200 reaches 72.9% of its listed
    peak where B200 reaches 77.6%)."""
    return _for_model(gpu)
