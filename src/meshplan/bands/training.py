"""The bands of one training estimate: tokens/s per GPU, MFU, step time and peak memory, and
whether the question extrapolates."""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.bands.band import Band, memory_band, step_time_band, throughput_band
from meshplan.bands.regime import regime_of


@dataclass(frozen=True, slots=True)
class EstimateBands:
    """p10-p90 bands of one estimate's predicted numbers (keys as in `train estimate --json`)."""

    tokens_per_s_per_gpu: Band
    step_time_s: Band
    mfu: Band
    peak_bytes: Band | None
    extrapolating: tuple[str, ...]

    def to_dict(self) -> dict:
        """`{"intervals": {quantity: {low, high}}, "extrapolating": [reasons]}`."""
        names = ("tokens_per_s_per_gpu", "step_time_s", "mfu", "peak_bytes")
        intervals = {n: getattr(self, n).to_dict() for n in names if getattr(self, n) is not None}
        return {"intervals": intervals, "extrapolating": list(self.extrapolating)}


def estimate_bands(model, cluster, est) -> EstimateBands:
    """The bands of a StepEstimate of `model` on `cluster` (peak memory when it was estimated)."""
    regime = regime_of(model, cluster, est.plan)
    tokens = throughput_band(regime, est.tokens_per_s_per_gpu)
    memory = memory_band(regime, est.memory.peak_bytes) if est.memory is not None else None
    return EstimateBands(tokens, step_time_band(tokens, est.tokens_per_s_per_gpu, est.step_time_s),
                         tokens.scaled(est.mfu / est.tokens_per_s_per_gpu), memory,
                         tokens.extrapolating)


def plus_minus(value: float, band: Band) -> str:
    """A band as the percentages a table's ±% column shows: '-12/+9'."""
    return f"{(band.low / value - 1) * 100:+.0f}/{(band.high / value - 1) * 100:+.0f}"


def memory_bands(model, cluster, mem) -> dict:
    """`{"intervals": {"peak_bytes": {low, high}}, "extrapolating": [...]}` of a MemoryEstimate."""
    band = memory_band(regime_of(model, cluster, mem.plan), mem.peak_bytes)
    return {"intervals": {"peak_bytes": band.to_dict()}, "extrapolating": list(band.extrapolating)}
