"""Engine constants of the serving iteration-time model (defaults, then fitted overrides)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from importlib import resources

from meshplan.serving.versions import resolve_version
from meshplan.yamlread import load_packaged


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConstants:
    """What one serving engine adds to the GPU's op costs (see data/serving_constants.yaml)."""

    iteration_s: float
    """Fixed CPU and launch time of one engine step (scheduling, input preparation)."""
    per_seq_s: float
    """Extra time per request in the batch (bookkeeping, sampling, detokenization)."""
    layer_s: float
    """Kernel gaps and tails per decoder layer per step."""
    kv_read_efficiency: float
    """Fraction of HBM bandwidth paged decode attention reaches reading the KV cache."""
    weight_read_efficiency: float
    """Fraction of HBM bandwidth GEMMs reach streaming weights (memory-bound decode GEMMs)."""
    collective_s: float
    """Fixed time each tensor- or expert-parallel collective adds inside an iteration
    (synchronisation across ranks, launch and skew) beyond its latency + bandwidth cost."""
    grouped_gemm_efficiency: float
    """Fraction of the dense GEMM compute rate the MoE expert GEMMs reach (grouped GEMMs over
    many small per-expert problems, with token permutation and per-expert activation
    quantization around them); 1 = as fast as one dense GEMM of the same shape."""


FIELDS = tuple(f.name for f in fields(EngineConstants))

def constants_key(engine: str, version: str | None = None) -> str:
    """The row of the constants files an engine release uses. TensorRT-LLM is two engines
    under one name: releases before 1.0 compile TensorRT engines run by the C++ executor
    ("tensorrt-llm"); 1.0 made the PyTorch backend the default ("tensorrt-llm-pytorch").
    The version is read as the engine defaults read it (serving.engine.versions): a backend
    named in it wins ("trtllm-cpp 0.21", "1.0 (PyTorch)"); one without a release number is
    the latest release, the PyTorch backend, and `version_note` says so."""
    if engine != "tensorrt-llm":
        return engine
    backend = resolve_version(engine, version).backend
    return "tensorrt-llm" if backend == "cpp" else "tensorrt-llm-pytorch"


def version_note(engine: str, version: str | None) -> str | None:
    """The note to show when `version` has no release number (which defaults and constants
    were chosen instead), else None."""
    return resolve_version(engine, version).note


def _read(name: str) -> dict:
    path = resources.files("meshplan.serving").joinpath("data").joinpath(name)
    return load_packaged(path.read_text()) if path.is_file() else {}


@functools.cache
def _rows() -> dict:
    return _read("serving_constants.yaml")["engines"]


def resolve(engine: str, fitted: dict) -> EngineConstants:
    """Constants of `engine` given a fitted table {engine: {name: value}}: the fitted values,
    else the defaults file's, else (for a generation row naming `inherits`) what its parent
    row resolves to, fitted values included (same kernels, another host runtime)."""
    row = _rows()[engine]
    values = {}
    if "inherits" in row:
        parent = resolve(row["inherits"], fitted)
        values = {k: getattr(parent, k) for k in FIELDS}
    values.update({k: float(row[k]["value"]) for k in FIELDS if k in row})
    values.update({k: float(v) for k, v in fitted.get(engine, {}).items() if k in FIELDS})
    missing = [k for k in FIELDS if k not in values]
    if missing:
        raise KeyError(f"serving_constants.yaml engine {engine!r} lacks {', '.join(missing)} and inherits nothing")
    return EngineConstants(**values)


@functools.cache
def packaged_fit() -> dict:
    """The fitted table {engine: {name: value}} shipped in fitted_serving.yaml (read once;
    callers merge it, never mutate it)."""
    return _read("fitted_serving.yaml").get("engines", {})


@functools.cache
def engine_constants(engine: str) -> EngineConstants:
    """Constants of `engine`: the defaults file, overridden by the fitted file when present."""
    return resolve(engine, packaged_fit())


def upper_bound(engine: str, name: str) -> float | None:
    """The ceiling a constant may be fitted to, when the defaults file (or, for a constant it
    inherits, the parent row) gives one."""
    row = _rows()[engine]
    if name not in row and "inherits" in row:
        return upper_bound(row["inherits"], name)
    return row[name].get("max")
