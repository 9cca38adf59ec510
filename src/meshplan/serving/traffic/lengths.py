"""Length distributions of synthetic workloads: how many prompt and output tokens requests have.

Each distribution is built once and then draws `(n, rng) -> np.ndarray` of ints >= 1;
`sample_lengths` picks one by the name a `WorkloadSpec` uses and returns (inputs, outputs).
Named public datasets (sharegpt, sharegpt_vllm, sharegpt_sglang, openorca, cnn_dailymail,
longbench) are packaged quantile tables (serving/data/NAME_lengths.yaml, each citing its
sources); a user's own lengths file or histogram is read by meshplan.serving.traffic.empirical.
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

LengthKind = Literal["fixed", "random", "sharegpt", "sharegpt_vllm", "sharegpt_sglang", "normal", "lognormal",
                     "openorca", "cnn_dailymail", "longbench", "file", "histogram"]
NAMED_TABLES: tuple[str, ...] = ("sharegpt", "sharegpt_vllm", "sharegpt_sglang", "openorca", "cnn_dailymail",
                                 "longbench")
"""Public datasets with a packaged length table (serving/data/NAME_lengths.yaml): sharegpt is the
vLLM paper's ShareGPT; sharegpt_vllm and sharegpt_sglang are ShareGPT as `vllm bench serve` and
SGLang's `bench_serving` sample it (their length filters, measured means)."""
LENGTH_KINDS: tuple[str, ...] = ("fixed", "random", "sharegpt", "sharegpt_vllm", "sharegpt_sglang", "normal",
                                 "lognormal", "openorca", "cnn_dailymail", "longbench", "file", "histogram")
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
    max_total: int | None = None
    """The dataset sampler's own bound on prompt + output (vLLM's ShareGPT sampler: 2048);
    longer pairs are always redrawn. None: only a given max_len bounds them."""

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


@lru_cache(maxsize=None)
def dataset_table(name: str) -> EmpiricalLengths:
    """The packaged table serving/data/NAME_lengths.yaml of a named dataset, read once."""
    from meshplan.yamlread import load_packaged

    if name not in NAMED_TABLES:
        raise ConfigError(f"no packaged length table {name!r}; valid: {', '.join(NAMED_TABLES)}")
    origin = f"{name}_lengths.yaml"
    data = load_packaged(resources.files("meshplan.serving").joinpath("data", origin).read_text())
    table = EmpiricalLengths(
        probs=np.array(data["probs"]["values"], dtype=float),
        input_quantiles=np.array(data["input_tokens"]["quantiles"]["values"], dtype=float),
        output_quantiles=np.array(data["output_tokens"]["quantiles"]["values"], dtype=float),
        spearman=float(data["spearman"]["value"]),
        max_total=data.get("max_total_tokens", {}).get("value"),
    )
    _check_table(table, origin)
    return table


def sharegpt_table() -> EmpiricalLengths:
    """The ShareGPT-like table of serving/data/sharegpt_lengths.yaml."""
    return dataset_table("sharegpt")


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
    floor = table.input_quantiles[0] + table.output_quantiles[0]
    if table.max_total is not None and (not isinstance(table.max_total, int) or table.max_total < floor):
        raise ConfigError(f"{origin}: max_total_tokens must be a whole number >= {floor:g} (the shortest "
                          f"pair), got {table.max_total!r}")


Pairs = Callable[[int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def sharegpt(max_len: int = 4096) -> Pairs:
    """ShareGPT-like pairs; a pair with input + output > max_len is redrawn (vLLM's filter)."""
    return named("sharegpt", max_len)


def named(name: str, max_len: int | None) -> Pairs:
    """Pairs of a named dataset's table; pairs longer than max_len or than the table's own
    max_total (the smaller, where both are set) are redrawn (vLLM's filter)."""
    table = dataset_table(name)
    bounds = [b for b in (max_len, table.max_total) if b is not None]
    bound = min(bounds) if bounds else None
    return pair_limited(table.draw, bound, int(table.input_quantiles[0] + table.output_quantiles[0]), name)


def pair_limited(draw: Pairs, max_len: int | None, floor: int, name: str) -> Pairs:
    """`draw` with pairs of input + output > max_len redrawn (then shrunk, if still over)."""
    if max_len is None:
        return draw
    if max_len < floor:
        raise ConfigError(f"max_len = {max_len} is below the shortest {name} pair "
                          f"({floor} tokens); use max_len >= {floor}")

    def limited(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        inputs, outputs = draw(n, rng)
        for _ in range(_REDRAW_ROUNDS):
            over = np.flatnonzero(inputs + outputs > max_len)
            if over.size == 0:
                return inputs, outputs
            inputs[over], outputs[over] = draw(over.size, rng)
        return _shrink_to_fit(inputs, outputs, max_len)
    return limited


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
    max_len: int | None = 4096, source=None,
) -> tuple[np.ndarray, np.ndarray]:
    """n prompt lengths and n output lengths (int64 arrays, values >= 1) of one distribution.

    input_len/output_len are the fixed length, the centre of `random`, or the mean of
    `normal`/`lognormal`; the named tables ignore them. max_len clips each length of
    normal/lognormal and bounds input + output for the tables, files and histograms (None:
    no bound). `source` is what file/histogram draw from (`lengths_source`).
    """
    return length_sampler(kind, input_len=input_len, output_len=output_len, range_ratio=range_ratio,
                          input_std=input_std, output_std=output_std, max_len=max_len, source=source)(n, rng)


def length_sampler(kind: str, *, input_len: int = 1024, output_len: int = 128, range_ratio: float = 0.0,
                   input_std: float | None = None, output_std: float | None = None,
                   max_len: int | None = 4096, source=None) -> Pairs:
    """The `(n, rng) -> (inputs, outputs)` sampler `sample_lengths` draws from."""
    if kind in NAMED_TABLES:
        return named(kind, max_len)
    if kind in ("file", "histogram"):
        if source is None:
            raise ConfigError(f"dataset={kind!r} needs a lengths file or histogram")
        return pair_limited(source.draw, max_len, 2, kind)
    if kind in ("normal", "lognormal"):
        if input_std is None or output_std is None:
            missing = "input_std" if input_std is None else "output_std"
            raise ConfigError(f"dataset={kind!r} needs {missing} (the std of the lengths, tokens)")
        make = normal if kind == "normal" else lognormal
        bound = 4096 if max_len is None else max_len
        ins, outs = make(input_len, input_std, bound), make(output_len, output_std, bound)
    elif kind == "random":
        ins, outs = uniform_range(input_len, range_ratio), uniform_range(output_len, range_ratio)
    elif kind == "fixed":
        ins, outs = fixed(input_len), fixed(output_len)
    else:
        raise ConfigError(f"unknown length distribution {kind!r}; valid: {', '.join(LENGTH_KINDS)}")
    return lambda n, rng: (ins(n, rng), outs(n, rng))
