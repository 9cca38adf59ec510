"""Stragglers: a synchronous step waits for the slowest of N GPUs. With per-GPU speed spread
normally (coefficient of variation `cv`), the expected slowdown is cv times the expected maximum
of N standard normal draws (Blom's approximation of the largest order statistic)."""

from __future__ import annotations

from statistics import NormalDist


def expected_max_z(n: int) -> float:
    """Expected largest of `n` standard normal draws (0 for one GPU)."""
    if n < 2:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def straggler_slowdown(n: int, cv: float) -> float:
    """Fractional step-time increase from waiting on the slowest of `n` GPUs."""
    return cv * expected_max_z(n)
