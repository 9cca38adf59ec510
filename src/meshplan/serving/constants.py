"""Engine constants of the serving iteration-time model (defaults, then fitted overrides)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from importlib import resources

import yaml


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


FIELDS = tuple(f.name for f in fields(EngineConstants))


def _read(name: str) -> dict:
    path = resources.files("meshplan.serving").joinpath("data").joinpath(name)
    return yaml.safe_load(path.read_text()) if path.is_file() else {}


@functools.cache
def engine_constants(engine: str) -> EngineConstants:
    """Constants of `engine`: the defaults file, overridden by the fitted file when present."""
    row = _read("serving_constants.yaml")["engines"][engine]
    base = EngineConstants(**{k: float(row[k]["value"]) for k in FIELDS})
    fitted = _read("fitted_serving.yaml").get("engines", {}).get(engine, {})
    return replace(base, **{k: float(v) for k, v in fitted.items() if k in FIELDS})


def upper_bound(engine: str, name: str) -> float | None:
    """The ceiling a constant may be fitted to, when the defaults file gives one."""
    return _read("serving_constants.yaml")["engines"][engine][name].get("max")
