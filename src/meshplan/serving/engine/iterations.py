"""`IterationLog`: what every engine iteration of a serving simulation did, one row each.

The simulator appends 10^5..10^6 rows, so the log is columnar and append-only: one typed
`array.array` buffer per column, copied into numpy only when read (`column`).

All replicas share one log with a `replica` column (the decode replica, or the prefill instance,
when disaggregated); `replicas()` lists them and `column(name, replica=r)` selects one.
Rows of kind "transfer" are KV-cache transfers between pools in disaggregated serving, not
engine iterations: `busy_s` and the binned means (`time_bins`, `binned_means`, behind the
utilization and queue series of `meshplan.serving.metrics.summary`) leave them out.
"""

from __future__ import annotations

from array import array

import numpy as np

from meshplan.errors import ConfigError

KINDS: tuple[str, ...] = ("mixed", "prefill", "decode", "transfer")
"""Iteration kinds; the `kind` column holds the index into this tuple."""
TRANSFER = KINDS.index("transfer")
_KIND_CODES = {name: code for code, name in enumerate(KINDS)}

COLUMNS: tuple[str, ...] = ("replica", "start_s", "end_s", "prefill_tokens", "decode_seqs",
                            "num_seqs", "waiting", "kv_used_blocks", "kv_total_blocks",
                            "preempted", "kind")
"""Column names, in `append` order."""


class IterationLog:
    """Append-only columnar log of engine iterations (all replicas, `replica` column).

    Columns: replica, start_s, end_s (seconds from the start), prefill_tokens (prompt tokens
    computed), decode_seqs (requests that produced a decode token), num_seqs (requests in the
    batch), waiting (queue length after scheduling), kv_used_blocks, kv_total_blocks,
    preempted (preemptions this iteration) and kind (index into `KINDS`).

    Each column is a typed `array.array`; `append` pushes one value on each (~0.8 us a row,
    no numpy call) and `column` copies a buffer into numpy.
    """

    __slots__ = ("_cols", "_push")

    def __init__(self) -> None:
        typecodes = {"start_s": "d", "end_s": "d", "kind": "b"}
        self._cols = {name: array(typecodes.get(name, "q")) for name in COLUMNS}
        self._push = tuple(self._cols[name].append for name in COLUMNS)

    def append(self, replica: int, start_s: float, end_s: float, prefill_tokens: int,
               decode_seqs: int, num_seqs: int, waiting: int, kv_used_blocks: int,
               kv_total_blocks: int, preempted: int = 0, kind: str | int = "mixed") -> None:
        """Add one iteration (or, kind="transfer", one KV transfer) at the end of the log."""
        code = _KIND_CODES.get(kind) if isinstance(kind, str) else kind
        if code.__class__ is not int or not 0 <= code < len(KINDS):
            raise ConfigError(f"iteration kind {kind!r} is not one of {', '.join(KINDS)}")
        p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10 = self._push
        try:
            p0(replica)
            p1(start_s)
            p2(end_s)
            p3(prefill_tokens)
            p4(decode_seqs)
            p5(num_seqs)
            p6(waiting)
            p7(kv_used_blocks)
            p8(kv_total_blocks)
            p9(preempted)
            p10(code)
        except (TypeError, OverflowError) as exc:
            self._undo_partial_row(exc)

    def extend(self, n: int, **values) -> None:
        """Add `n` rows at once: each column (every one of `COLUMNS`) given as one value for
        all rows or a numpy array of `n` (the decode fast-forward's stretch of iterations)."""
        kind = values["kind"]
        values["kind"] = _KIND_CODES[kind] if isinstance(kind, str) else kind
        for name in COLUMNS:
            col, v = self._cols[name], values[name]
            if isinstance(v, np.ndarray):
                width = {"d": np.float64, "q": np.int64, "b": np.int8}[col.typecode]
                col.frombytes(np.ascontiguousarray(v[:n], dtype=width).tobytes())
            else:  # one value repeated: a C-level copy (a list of n objects cost ~70 ns a row)
                col.extend(array(col.typecode, [v]) * n)

    def sort_rows(self) -> None:
        """Reorder rows by end time, then replica, start time and kind (a total order over
        distinct rows: two runs appending the same rows in different orders end equal)."""
        cols = [np.frombuffer(self._cols[n], dtype={"d": np.float64, "q": np.int64, "b": np.int8}
                              [self._cols[n].typecode]) for n in ("kind", "start_s", "replica", "end_s")]
        order = np.lexsort(cols)
        for name, col in self._cols.items():
            values = np.frombuffer(col, dtype={"d": np.float64, "q": np.int64, "b": np.int8}[col.typecode])
            self._cols[name] = array(col.typecode, values[order].tobytes())
        self._push = tuple(self._cols[name].append for name in COLUMNS)

    def _undo_partial_row(self, exc: Exception) -> None:
        """Drop the values a failed `append` pushed, then name the column it failed on."""
        rows = min(len(c) for c in self._cols.values())
        bad = next(name for name, c in self._cols.items() if len(c) == rows)
        for c in self._cols.values():
            del c[rows:]
        kind = "a number" if self._cols[bad].typecode == "d" else "an integer"
        raise ConfigError(f"iteration log column {bad!r} needs {kind} ({exc})") from None

    def __len__(self) -> int:
        return len(self._cols["start_s"])

    def column(self, name: str, replica: int | None = None) -> np.ndarray:
        """One column as a numpy array (a copy), all rows or only those of `replica`."""
        if name not in self._cols:
            raise ConfigError(f"iteration log has no column {name!r}; columns: "
                              f"{', '.join(COLUMNS)}")
        values = np.array(self._cols[name])
        if replica is None:
            return values
        return values[np.frombuffer(self._cols["replica"], dtype=np.int64) == replica]

    def columns(self) -> dict[str, np.ndarray]:
        """Every column as a numpy array, keyed by name in `COLUMNS` order."""
        return {name: self.column(name) for name in COLUMNS}

    def kinds(self) -> np.ndarray:
        """The `kind` column as strings ("mixed", "prefill", "decode", "transfer")."""
        return np.asarray(KINDS, dtype=object)[self.column("kind")]

    def replicas(self) -> list[int]:
        """Replica ids present in the log, ascending."""
        return np.unique(self.column("replica")).tolist()

    def busy_s(self, replica: int | None = None) -> float:
        """Seconds spent in iterations (KV transfers excluded), summed over replicas when
        `replica` is None."""
        keep = self.column("kind", replica) != TRANSFER
        durations = self.column("end_s", replica) - self.column("start_s", replica)
        return float(durations[keep].sum())

    def kv_utilization(self) -> np.ndarray:
        """Per row: kv_used_blocks / kv_total_blocks (nan when the total is 0)."""
        used = self.column("kv_used_blocks").astype(float)
        total = self.column("kv_total_blocks").astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(total > 0, used / total, np.nan)


def time_bins(log: IterationLog, bins: int | np.ndarray) -> np.ndarray:
    """Bin edges in s: `bins` equal bins over [0, last end], or `bins` itself as edges."""
    if np.ndim(bins) == 0:
        if int(bins) < 1:
            raise ConfigError(f"bins={bins!r} must be a positive number of time bins")
        end = float(log.column("end_s").max()) if len(log) else 0.0
        return np.linspace(0.0, end, int(bins) + 1)
    edges = np.asarray(bins, dtype=float)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise ConfigError("bins must be a count or at least two increasing edges in seconds")
    return edges


def _pieces(start: np.ndarray, end: np.ndarray,
            edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows cut at the bin edges: (row index, bin index, seconds in the bin) per piece."""
    nb = edges.size - 1
    first = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, nb - 1)
    last = np.clip(np.searchsorted(edges, end, side="left") - 1, 0, nb - 1)
    counts = np.maximum(last - first + 1, 0)
    row = np.repeat(np.arange(start.size), counts)
    offset = np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts)
    bin_ = first[row] + offset
    seconds = np.minimum(end[row], edges[bin_ + 1]) - np.maximum(start[row], edges[bin_])
    return row, bin_, np.maximum(seconds, 0.0)


def binned_means(log: IterationLog, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(replicas x bins): each replica's mean of a per-row quantity over the bins between
    `edges`, weighted by iteration time in the bin; nan where idle (transfers left out)."""
    keep = (log.column("kind") != TRANSFER) & ~np.isnan(values)
    replicas, which = np.unique(log.column("replica")[keep], return_inverse=True)
    row, bin_, seconds = _pieces(log.column("start_s")[keep], log.column("end_s")[keep], edges)
    nb = edges.size - 1
    slot, size = which.reshape(-1)[row] * nb + bin_, replicas.size * nb
    area = np.bincount(slot, weights=values[keep][row] * seconds, minlength=size)
    busy = np.bincount(slot, weights=seconds, minlength=size)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(busy > 0, area / busy, np.nan).reshape(replicas.size, nb)
