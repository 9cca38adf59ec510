"""Document lengths of a training corpus: a named distribution or a file of measured lengths.

A spec is a string the plan carries (so plans stay hashable and the caches key on it):
`fixed` (every sequence is one document of seq_len tokens: no document masking, the default),
`lognormal:mean=1500,sigma=1.2`, `zipf:s=1.2,min=64,max=65536`, or the path of a file of
lengths (one integer per line, a JSON list, or a CSV column named `length`). Sampling is seeded
(`seed=N` in a named spec, 0 by default), so the same spec always gives the same documents.
"""

from __future__ import annotations

import csv
import functools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from meshplan.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

DISTRIBUTIONS = {"lognormal": ("mean", "sigma"), "zipf": ("s", "min", "max")}
"""Named distributions and the parameters each takes (`seed` is accepted by all)."""
DEFAULTS = {"zipf": {"min": 1.0}, "lognormal": {}}
"""Parameters a distribution may leave out."""
EXAMPLE = "fixed, lognormal:mean=1500,sigma=1.2, zipf:s=1.2,min=64,max=65536, or a file of lengths"


def is_fixed(spec: str | None) -> bool:
    """True when the spec means today's behaviour: one document per sequence."""
    return spec is None or spec.strip() == "fixed"


def check_spec(spec: str | None) -> None:
    """Raise ConfigError unless `spec` can be sampled (parses parameters, reads files)."""
    if not is_fixed(spec):
        sample_lengths(spec, 1)


def _parse_named(spec: str) -> tuple[str, dict[str, float]]:
    name, _, rest = spec.partition(":")
    name = name.strip()
    params: dict[str, float] = dict(DEFAULTS[name])
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        allowed = (*DISTRIBUTIONS[name], "seed")
        if not eq or key.strip() not in allowed:
            raise ConfigError(f"--doc-lengths {spec!r}: {item!r} is not a parameter of {name} "
                              f"(takes {', '.join(f'{a}=' for a in allowed)})")
        try:
            params[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"--doc-lengths {spec!r}: {key.strip()}={value!r} is not a number") from None
    missing = [a for a in DISTRIBUTIONS[name] if a not in params]
    if missing:
        raise ConfigError(f"--doc-lengths {spec!r}: {name} needs {', '.join(missing)} "
                          f"(e.g. {EXAMPLE})")
    for key, value in params.items():
        if not math.isfinite(value) or value < 0 or (value == 0 and key != "seed"):
            need = "zero or more" if key == "seed" else "positive"
            raise ConfigError(f"--doc-lengths {spec!r}: {key}={value:g} must be {need}")
    if name == "zipf" and params["min"] > params["max"]:
        raise ConfigError(f"--doc-lengths {spec!r}: min={params['min']:g} exceeds max={params['max']:g}")
    return name, params


def _draw(name: str, params: dict[str, float], n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` lengths from a named distribution (continuous draws rounded, at least 1 token)."""
    import numpy as np
    if name == "lognormal":
        sigma = params["sigma"]
        mu = math.log(params["mean"]) - sigma**2 / 2  # so that the mean length is `mean`
        x = rng.lognormal(mu, sigma, n)
    else:  # bounded power law p(l) ~ l^-s on [min, max], by inverting its CDF
        s, lo, hi = params["s"], params["min"], params["max"]
        u = rng.random(n)
        if abs(s - 1.0) < 1e-9:
            x = lo * (hi / lo) ** u
        else:
            a, b = lo ** (1 - s), hi ** (1 - s)
            x = (a + u * (b - a)) ** (1 / (1 - s))
    return np.maximum(1, np.rint(x)).astype(np.int64)


MAX_VALUES = 10_000_000
"""Most values (lines) a --doc-lengths or --expert-skew file may hold."""


@functools.lru_cache(maxsize=16)
def read_lengths(path: str) -> tuple[int, ...]:
    """Measured document lengths from a file: one integer per line, a JSON list (or an object
    with a `lengths` list), or a CSV with a `length` column (or a single column)."""
    text = read_text(path, "--doc-lengths")
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        data = load_json(text, path, "--doc-lengths")
        values = data.get("lengths") if isinstance(data, dict) else data
        if not isinstance(values, list):
            raise ConfigError(f"--doc-lengths {path}: expected a JSON list of lengths "
                              f"(or {{\"lengths\": [...]}})")
        rows = [(i + 1, v) for i, v in enumerate(values)]
    elif suffix == ".csv":
        rows = _csv_rows(path, text)
    else:
        rows = [(i + 1, line.strip()) for i, line in enumerate(text.splitlines()) if line.strip()]
    return tuple(_positive_int(path, where, value) for where, value in rows) or _empty(path)


def read_text(path: str, flag: str) -> str:
    """A user's data file as text: a regular file of at most MAX_BYTES, UTF-8, at most MAX_VALUES
    lines (each failure a ConfigError naming the flag)."""
    from meshplan.userfiles import MAX_BYTES, check_readable

    check_readable(Path(path), flag)
    size = Path(path).stat().st_size
    if size > MAX_BYTES:
        raise ConfigError(f"{flag} {path}: {size:,} bytes; the limit is {MAX_BYTES:,}")
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"{flag} {path}: not a text file") from None
    if (lines := text.count("\n")) > MAX_VALUES:
        raise ConfigError(f"{flag} {path}: {lines:,} lines; the limit is {MAX_VALUES:,} values")
    return text


def load_json(text: str, path: str, flag: str):
    """Parsed JSON of a user's data file, or a ConfigError naming the flag and the position."""
    from meshplan.userfiles import HugeNumber, loads

    try:
        return loads(text)
    except HugeNumber as exc:
        raise ConfigError(f"{flag} {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} {path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def _csv_rows(path: str, text: str) -> list[tuple[int, str]]:
    reader = csv.DictReader(text.splitlines())
    columns = reader.fieldnames or []
    column = "length" if "length" in columns else (columns[0] if len(columns) == 1 else None)
    if column is None:
        raise ConfigError(f"--doc-lengths {path}: name the CSV column `length` "
                          f"(columns: {', '.join(columns)})")
    return [(i + 2, row[column]) for i, row in enumerate(reader)]


def _positive_int(path: str, line: int, value) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"--doc-lengths {path}: line {line} has {value!r}; every document "
                          f"length must be a positive integer (tokens)")
    return n


def _empty(path: str):
    raise ConfigError(f"--doc-lengths {path}: the file holds no lengths")


def sample_lengths(spec: str, n: int) -> np.ndarray:
    """`n` document lengths drawn from `spec` (deterministic: seeded)."""
    import numpy as np
    name = spec.partition(":")[0].strip()
    if name in DISTRIBUTIONS:
        name, params = _parse_named(spec)
        rng = np.random.default_rng(int(params.pop("seed", 0)))
        return _draw(name, params, n, rng)
    if not Path(spec).is_file():
        raise ConfigError(f"--doc-lengths {spec!r}: neither a distribution nor a file "
                          f"(use {EXAMPLE})")
    measured = np.asarray(read_lengths(str(Path(spec).resolve())), dtype=np.int64)
    return np.random.default_rng(0).choice(measured, size=n, replace=True)


def documents_for(spec: str, tokens: int) -> np.ndarray:
    """Documents totalling at least `tokens` tokens, drawn in a stable order (a longer draw
    starts with the same documents as a shorter one)."""
    import numpy as np
    n = 1024
    while True:
        lengths = sample_lengths(spec, n)
        total = np.cumsum(lengths)
        if total[-1] >= tokens:
            return lengths[: int(np.searchsorted(total, tokens)) + 1]
        n *= 4
