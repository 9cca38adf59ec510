"""Length distributions of synthetic workloads: how many prompt and output tokens requests have.

Each distribution is built once and then draws `(n, rng) -> np.ndarray` of ints >= 1;
`sample_lengths` picks one by the name a `WorkloadSpec` uses and returns (inputs, outputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal

import numpy as np
from scipy import stats

from meshplan.errors import ConfigError

LengthKind = Literal["fixed", "random", "sharegpt", "normal", "lognormal"]
LENGTH_KINDS: tuple[str, ...] = ("fixed", "random", "sharegpt", "normal", "lognormal")
Sampler = Callable[[int, np.random.Generator], np.ndarray]

_EPS = 1e-9  # float slack so 100 * (1 + 0.1) rounds to 110, not 111
_REDRAW_ROUNDS = 64


def fixed(length: int) -> Sampler:
    """Every request has `length` tokens."""
    def draw(n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, length, dtype=np.int64)
    return draw


def uniform_range(length: int, range_ratio: float) -> Sampler:
    """vLLM's `random` dataset: uniform integers on [floor(L(1-r)), ceil(L(1+r))], inclusive."""
    low = max(1, math.floor(length * (1 - range_ratio) + _EPS))
    high = max(low, math.ceil(length * (1 + range_ratio) - _EPS))

    def draw(n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(low, high + 1, size=n, dtype=np.int64)
    return draw


def normal(mean: float, std: float, max_len: int) -> Sampler:
    """Normal lengths, rounded and clipped to [1, max_len]."""
    def draw(n: int, rng: np.random.Generator) -> np.ndarray:
        return _to_lengths(rng.normal(mean, std, size=n), max_len)
    return draw


def lognormal(mean: float, std: float, max_len: int) -> Sampler:
    """Lognormal lengths whose own mean and std are `mean`, `std`; clipped to [1, max_len]."""
    sigma2 = math.log1p((std / mean) ** 2)
    mu = math.log(mean) - sigma2 / 2

    def draw(n: int, rng: np.random.Generator) -> np.ndarray:
        return _to_lengths(rng.lognormal(mu, math.sqrt(sigma2), size=n), max_len)
    return draw


def _to_lengths(values: np.ndarray, max_len: int) -> np.ndarray:
    return np.clip(np.rint(values), 1, max_len).astype(np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class EmpiricalLengths:
    """A joint length distribution: a quantile table per side and a Gaussian copula."""

    probs: np.ndarray
    """Cumulative probabilities of the table rows, from 0 to 1."""
    input_quantiles: np.ndarray
    """Prompt tokens at each probability."""
    output_quantiles: np.ndarray
    """Output tokens at each probability."""
    spearman: float
    """Spearman rank correlation between prompt and output length."""

    @property
    def implied_input_mean(self) -> float:
        """Mean prompt length of the table (interpolated linearly between quantiles)."""
        return _table_mean(self.probs, self.input_quantiles)

    @property
    def implied_output_mean(self) -> float:
        """Mean output length of the table (interpolated linearly between quantiles)."""
        return _table_mean(self.probs, self.output_quantiles)

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n (prompt, output) pairs by inverse CDF at copula-correlated uniforms."""
        r = 2 * math.sin(math.pi * self.spearman / 6)  # Gaussian r giving this Spearman rho
        z = rng.standard_normal((2, n))
        u_in = stats.norm.cdf(z[0])
        u_out = stats.norm.cdf(r * z[0] + math.sqrt(1 - r * r) * z[1])
        inputs = np.interp(u_in, self.probs, self.input_quantiles)
        outputs = np.interp(u_out, self.probs, self.output_quantiles)
        return _to_lengths(inputs, 2**62), _to_lengths(outputs, 2**62)


def _table_mean(probs: np.ndarray, values: np.ndarray) -> float:
    return float(np.sum(np.diff(probs) * (values[1:] + values[:-1]) / 2))


@lru_cache(maxsize=1)
def sharegpt_table() -> EmpiricalLengths:
    """The ShareGPT-like table of serving/data/sharegpt_lengths.yaml, read once."""
    from meshplan.yamlread import load_packaged

    text = resources.files("meshplan.serving").joinpath("data", "sharegpt_lengths.yaml").read_text()
    data = load_packaged(text)
    table = EmpiricalLengths(
        probs=np.array(data["probs"]["values"], dtype=float),
        input_quantiles=np.array(data["input_tokens"]["quantiles"]["values"], dtype=float),
        output_quantiles=np.array(data["output_tokens"]["quantiles"]["values"], dtype=float),
        spearman=float(data["spearman"]["value"]),
    )
    _check_table(table, "sharegpt_lengths.yaml")
    return table


def _check_table(table: EmpiricalLengths, origin: str) -> None:
    probs = table.probs
    if probs[0] != 0 or probs[-1] != 1 or np.any(np.diff(probs) <= 0):
        raise ConfigError(f"{origin}: probs must rise strictly from 0 to 1, got {probs.tolist()}")
    for side, values in (("input", table.input_quantiles), ("output", table.output_quantiles)):
        if len(values) != len(probs) or values[0] < 1 or np.any(np.diff(values) < 0):
            raise ConfigError(f"{origin}: {side}_tokens quantiles must be {len(probs)} "
                              f"non-decreasing values >= 1, got {values.tolist()}")
    if not -1 < table.spearman < 1:
        raise ConfigError(f"{origin}: spearman must lie in (-1, 1), got {table.spearman}")


def sharegpt(max_len: int = 4096) -> Callable[[int, np.random.Generator], tuple[np.ndarray, np.ndarray]]:
    """ShareGPT-like pairs; a pair with input + output > max_len is redrawn (vLLM's filter)."""
    table = sharegpt_table()
    floor = int(table.input_quantiles[0] + table.output_quantiles[0])
    if max_len < floor:
        raise ConfigError(f"max_len = {max_len} is below the shortest ShareGPT pair "
                          f"({floor} tokens); use max_len >= {floor}")

    def draw(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        inputs, outputs = table.draw(n, rng)
        for _ in range(_REDRAW_ROUNDS):
            over = np.flatnonzero(inputs + outputs > max_len)
            if over.size == 0:
                return inputs, outputs
            inputs[over], outputs[over] = table.draw(over.size, rng)
        return _shrink_to_fit(inputs, outputs, max_len)
    return draw


def _shrink_to_fit(inputs: np.ndarray, outputs: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Scale pairs still over max_len (a very small max_len) down to fit, keeping their ratio."""
    total = inputs + outputs
    over = total > max_len
    scale = max_len / total[over]
    inputs[over] = np.maximum(1, np.floor(inputs[over] * scale)).astype(np.int64)
    outputs[over] = np.maximum(1, max_len - inputs[over])
    return inputs, outputs


def sample_lengths(
    kind: str, n: int, rng: np.random.Generator, *, input_len: int = 1024, output_len: int = 128,
    range_ratio: float = 0.0, input_std: float | None = None, output_std: float | None = None,
    max_len: int = 4096,
) -> tuple[np.ndarray, np.ndarray]:
    """n prompt lengths and n output lengths (int64 arrays, values >= 1) of one distribution.

    input_len/output_len are the fixed length, the centre of `random`, or the mean of
    `normal`/`lognormal`; `sharegpt` ignores them. max_len clips each length of
    normal/lognormal and bounds input + output for sharegpt.
    """
    if kind == "sharegpt":
        return sharegpt(max_len)(n, rng)
    if kind in ("normal", "lognormal"):
        if input_std is None or output_std is None:
            missing = "input_std" if input_std is None else "output_std"
            raise ConfigError(f"dataset={kind!r} needs {missing} (the std of the lengths, tokens)")
        make = normal if kind == "normal" else lognormal
        return make(input_len, input_std, max_len)(n, rng), make(output_len, output_std, max_len)(n, rng)
    if kind == "random":
        return uniform_range(input_len, range_ratio)(n, rng), uniform_range(output_len, range_ratio)(n, rng)
    if kind == "fixed":
        return fixed(input_len)(n, rng), fixed(output_len)(n, rng)
    raise ConfigError(f"unknown length distribution {kind!r}; valid: {', '.join(LENGTH_KINDS)}")
