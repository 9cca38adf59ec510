"""A quantile sketch of bounded size: a fixed log-bucket histogram with a stated relative accuracy.

Bucket i holds the values in (gamma^(i-1), gamma^i] with gamma = (1 + a) / (1 - a), and reports
them as 2 gamma^i / (gamma + 1), which lies within a relative distance `a` of every value in the
bucket (the DDSketch construction, Masson et al., VLDB 2019). Buckets cover 1e-6 to 1e12 (in
whatever unit is added, ms here) in a few thousand float counters, however many values are added;
zeros are counted apart. A percentile interpolates between neighbouring order statistics as
numpy's default (linear) method does, each order statistic replaced by its bucket's value, so it
is within a relative `a` of `np.percentile` of the same values. The mean is kept exactly (a
running sum).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

RELATIVE_ACCURACY = 0.005
"""Largest relative error of a sketched percentile (0.5%)."""
LOWEST, HIGHEST = 1e-6, 1e12
"""The range of positive values the buckets cover; values outside count in the end buckets."""


class LogHistogram:
    """Counts of values in logarithmic buckets (weights allowed), plus their exact sum."""

    __slots__ = ("accuracy", "_log_gamma", "_offset", "counts", "zeros", "total", "n")

    def __init__(self, accuracy: float = RELATIVE_ACCURACY) -> None:
        if not 0 < accuracy < 1:
            raise ValueError(f"relative accuracy {accuracy!r} must lie in (0, 1)")
        self.accuracy = accuracy
        self._log_gamma = math.log((1 + accuracy) / (1 - accuracy))
        self._offset = math.floor(math.log(LOWEST) / self._log_gamma)
        size = math.ceil(math.log(HIGHEST) / self._log_gamma) - self._offset + 1
        self.counts = np.zeros(size)
        self.zeros = 0.0
        """Weight of the values equal to 0."""
        self.total = 0.0
        """Sum of the values (each times its weight)."""
        self.n = 0.0
        """Weight of all values added."""

    def add(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Add values >= 0 (nan ignored), each once or `weights` times."""
        values = np.asarray(values, dtype=float)
        weights = np.ones(values.shape) if weights is None else np.asarray(weights, dtype=float)
        keep = ~np.isnan(values)
        values, weights = values[keep], weights[keep]
        if values.size == 0:
            return
        if np.any(values < 0):
            raise ValueError("a log-bucket sketch holds values >= 0 only")
        zero = values == 0
        self.zeros += float(weights[zero].sum())
        positive, w = values[~zero], weights[~zero]
        index = np.ceil(np.log(np.clip(positive, LOWEST, HIGHEST)) / self._log_gamma) - self._offset
        self.counts += np.bincount(index.astype(np.int64), weights=w, minlength=self.counts.size)
        self.total += float(np.dot(values, weights))
        self.n += float(weights.sum())

    def merge(self, other: LogHistogram) -> None:
        """Add every value of `other` (same accuracy)."""
        self.counts += other.counts
        self.zeros += other.zeros
        self.total += other.total
        self.n += other.n

    def _value(self, index: np.ndarray) -> np.ndarray:
        gamma = math.exp(self._log_gamma)
        return 2 * np.exp((index + self._offset) * self._log_gamma) / (gamma + 1)

    def order_statistics(self, ranks: np.ndarray) -> np.ndarray:
        """The sketched k-th smallest values (0-based ranks)."""
        cum = np.cumsum(np.concatenate(([self.zeros], self.counts)))
        slot = np.searchsorted(cum, np.asarray(ranks, dtype=float), side="right")
        return np.where(slot == 0, 0.0, self._value(np.maximum(slot - 1, 0)))

    def percentiles(self, q: Sequence[float]) -> list[float]:
        """numpy's linear-method percentiles of the added values, to the sketch's accuracy (nan
        when nothing was added)."""
        count = int(round(self.n))
        if count == 0:
            return [math.nan] * len(q)
        virtual = (count - 1) * np.asarray(q, dtype=float) / 100
        below = np.floor(virtual)
        above = np.minimum(below + 1, count - 1)
        a, b = self.order_statistics(below), self.order_statistics(above)
        return (a + (b - a) * (virtual - below)).tolist()

    def mean(self) -> float:
        """The exact mean of the added values (nan when none)."""
        return self.total / self.n if self.n else math.nan
