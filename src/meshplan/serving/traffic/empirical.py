"""Length distributions a user brings: a file of (prompt, output) lengths, or a histogram.

A lengths file (CSV or JSONL, two columns: prompt tokens, output tokens) is resampled with
replacement, so draws keep its joint shape exactly. A histogram (edges and counts per side,
inline in a record or in a YAML file) is sampled by inverse CDF, uniform inside each bin, the
two sides joined by a Gaussian copula with an optional Spearman rank correlation.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from scipy import stats

from meshplan.errors import ConfigError
from meshplan.userfiles import parse_json, parse_yaml, read_text

MAX_LENGTHS_BYTES = 64 * 2**20
"""Largest lengths file read (64 MiB: about five million CSV rows of two numbers)."""
MAX_LENGTH_ROWS = 1_000_000
"""Most (prompt, output) rows a lengths file may hold; sample a larger log down first."""
MAX_BINS = 10_000
"""Most bins per side of a histogram."""
MAX_LEN = 2**22
"""Longest prompt or output a file or histogram may state (WorkloadSpec's token limit)."""
PAIR_KEYS = (("input_len", "output_len"), ("input_tokens", "output_tokens"))
"""Accepted key pairs of a JSONL row (or a CSV header)."""


class Bins(BaseModel):
    """One side of a length histogram: bin i holds the lengths edges[i] <= L < edges[i+1]."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    edges: list[int] = Field(min_length=2, max_length=MAX_BINS + 1)
    """Bin edges in tokens, strictly increasing, the first >= 1."""
    counts: list[float] = Field(min_length=1, max_length=MAX_BINS)
    """Requests (or any weight >= 0) per bin; len(edges) - 1 of them, summing to > 0."""

    @model_validator(mode="after")
    def _check(self) -> Bins:
        e, c = self.edges, self.counts
        if len(c) != len(e) - 1:
            raise ValueError(f"{len(e)} edges need {len(e) - 1} counts, got {len(c)}")
        if e[0] < 1 or e[-1] > MAX_LEN + 1 or any(b <= a for a, b in zip(e, e[1:])):
            raise ValueError(f"edges must rise strictly from >= 1 to <= {MAX_LEN + 1}")
        if any(not (x >= 0 and math.isfinite(x)) for x in c) or not sum(c) > 0:
            raise ValueError("counts must be finite, >= 0 and not all 0")
        return self

    def inverse(self, u: np.ndarray) -> np.ndarray:
        """Lengths at cumulative probabilities `u` in [0, 1): uniform inside the chosen bin."""
        counts = np.asarray(self.counts, dtype=float)
        edges = np.asarray(self.edges, dtype=float)
        used = counts > 0  # empty bins are never drawn; the others keep their own edges
        lo, hi, counts = edges[:-1][used], edges[1:][used], counts[used]
        cum = np.cumsum(counts)
        target = u * cum[-1]
        k = np.minimum(np.searchsorted(cum, target, side="right"), counts.size - 1)
        frac = np.clip((target - (cum[k] - counts[k])) / counts[k], 0.0, 1.0)
        value = np.floor(lo[k] + frac * (hi[k] - lo[k]))
        return np.clip(value, lo[k], hi[k] - 1).astype(np.int64)

    def mean(self) -> float:
        """Mean length (bin midpoints of the integers each bin holds, weighted by counts)."""
        e = np.asarray(self.edges, dtype=float)
        return float(np.average((e[:-1] + e[1:] - 1) / 2, weights=self.counts))


class LengthHistogram(BaseModel):
    """A joint length distribution given as one histogram per side."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    input: Bins
    """Prompt-token histogram."""
    output: Bins
    """Output-token histogram."""
    spearman: float = Field(0.0, gt=-1, lt=1)
    """Spearman rank correlation of prompt and output length (0: independent)."""

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n (prompt, output) pairs: inverse CDF of each side at copula-correlated uniforms."""
        u_in, u_out = copula_uniforms(n, self.spearman, rng)
        return self.input.inverse(u_in), self.output.inverse(u_out)


def copula_uniforms(n: int, spearman: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays of n uniforms whose Gaussian copula has this Spearman rank correlation."""
    r = 2 * math.sin(math.pi * spearman / 6)
    z = rng.standard_normal((2, n))
    return stats.norm.cdf(z[0]), stats.norm.cdf(r * z[0] + math.sqrt(1 - r * r) * z[1])


def histogram_from(data: object, where: str) -> LengthHistogram:
    """A LengthHistogram from parsed data; a bad one is one ConfigError naming the field."""
    try:
        return LengthHistogram.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(histogram)"
        raise ConfigError(f"{where}: histogram field {field}: {err['msg']} (expected input: "
                          f"{{edges, counts}}, output: {{edges, counts}}, optional spearman)") from None


def read_histogram(path: Path) -> LengthHistogram:
    """The histogram of a YAML (or JSON) file: {input: {edges, counts}, output: {...}}."""
    text = read_text(path, "lengths histogram", MAX_LENGTHS_BYTES)
    return histogram_from(parse_yaml(text, str(path)), str(path))


class LengthPairs:
    """The (prompt, output) rows of a lengths file, resampled with replacement."""

    __slots__ = ("inputs", "outputs")

    def __init__(self, inputs: np.ndarray, outputs: np.ndarray) -> None:
        self.inputs, self.outputs = inputs, outputs

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n rows drawn uniformly with replacement."""
        rows = rng.integers(self.inputs.size, size=n)
        return self.inputs[rows].copy(), self.outputs[rows].copy()


def read_pairs(path: Path) -> LengthPairs:
    """The rows of a CSV or JSONL lengths file (by extension: .csv, .jsonl, .json)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".json"):
        raise ConfigError(f"lengths file {str(path)!r}: expected a .csv or .jsonl file of (prompt, "
                          f"output) lengths, or a .yaml histogram")
    text = read_text(path, "lengths file", MAX_LENGTHS_BYTES)
    rows = _csv_rows(text, path) if suffix == ".csv" else _jsonl_rows(text, path)
    if not rows:
        raise ConfigError(f"lengths file {str(path)!r} holds no (prompt, output) rows")
    table = np.array(rows, dtype=np.int64)
    return LengthPairs(table[:, 0].copy(), table[:, 1].copy())


def _length(value: object, where: str, column: str) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(f"{where}: {column} = {value!r} is not a whole number of tokens") from None
    if isinstance(value, bool) or not 1 <= number <= MAX_LEN:
        raise ConfigError(f"{where}: {column} = {value!r} must be a whole number of tokens in "
                          f"[1, {MAX_LEN:,}]")
    return number


def _count_row(rows: list, where: str) -> None:
    if len(rows) >= MAX_LENGTH_ROWS:
        raise ConfigError(f"{where}: more than {MAX_LENGTH_ROWS:,} rows; the limit is "
                          f"{MAX_LENGTH_ROWS:,} (sample the file down, or give a histogram)")


def _csv_rows(text: str, path: Path) -> list[tuple[int, int]]:
    rows: list[tuple[int, int]] = []
    for line, cells in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not cells or all(not c.strip() for c in cells):
            continue
        where = f"{path}:{line}"
        if len(cells) != 2:
            raise ConfigError(f"{where}: expected two columns (prompt tokens, output tokens), got "
                              f"{len(cells)}")
        if line == 1 and tuple(c.strip() for c in cells) in PAIR_KEYS:
            continue  # a header
        _count_row(rows, str(path))
        rows.append((_length(cells[0], where, "prompt tokens"), _length(cells[1], where, "output tokens")))
    return rows


def _jsonl_rows(text: str, path: Path) -> list[tuple[int, int]]:
    rows: list[tuple[int, int]] = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{line}"
        item = parse_json(raw, where)
        keys = next((k for k in PAIR_KEYS if isinstance(item, dict) and set(k) <= set(item)), None)
        if keys is not None:
            pair = (item[keys[0]], item[keys[1]])
        elif isinstance(item, list) and len(item) == 2:
            pair = tuple(item)
        else:
            raise ConfigError(f"{where}: expected {{\"input_len\": N, \"output_len\": M}} or [N, M]")
        _count_row(rows, str(path))
        rows.append((_length(pair[0], where, "prompt tokens"), _length(pair[1], where, "output tokens")))
    return rows


def read_lengths(path: Path) -> LengthPairs | LengthHistogram:
    """A lengths file: pairs from .csv/.jsonl, a histogram from .yaml/.yml."""
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        return read_histogram(Path(path))
    return read_pairs(Path(path))
