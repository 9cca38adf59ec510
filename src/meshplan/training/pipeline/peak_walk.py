"""The activation peak of one pipeline stage found by walking its schedule's op order.

A forward keeps its chunk's activations until that chunk's backward frees them; the peak is the
op after which the stored bytes (plus the logits the LM head holds) are largest. The walk was a
numpy matrix product, and importing numpy alone took longer than a whole plan search; here it is
plain Python wherever that gives the same bits: with whole-number chunk bytes whose weighted sums
stay below 2**53, every product and partial sum is exact, so any summation order (BLAS's or
Python's) yields the same float; and only the rows that can be the first peak are visited
(`peak_candidates`). Other inputs still take the numpy product over every row, as before.
"""

from __future__ import annotations

from functools import lru_cache
from operator import mul

from meshplan.training.pipeline.orders import F, W, cached_orders, decode

EXACT_LIMIT = 2.0**53
"""Whole numbers below this are exact in a float64, and so are their sums while they stay below."""


@lru_cache(maxsize=256)
def alive_counts(schedule: str, pp: int, vpp: int, m: int, stage: int) -> tuple[tuple[int, ...], ...]:
    """After each op of `stage`'s order, how many micro-batches of each chunk have run their
    forward but not yet their backward (rows: ops; columns: chunks)."""
    rows, now = [], [0] * vpp
    for code in cached_orders(schedule, pp, vpp, m)[stage]:
        kind, _, virtual = decode(code, pp * vpp)
        if kind == W:
            continue
        now[virtual // pp] += 1 if kind == F else -1
        rows.append(tuple(now))
    return tuple(rows) if rows else ((0,) * vpp,)


def peak_candidates(schedule: str, pp: int, vpp: int, m: int, stage: int) -> tuple[tuple[int, ...], ...]:
    """The rows of `alive_counts` that can be the (first) peak, in order: the first row and those
    after a forward, each the first time it occurs. A row after a backward is no larger in any chunk than the row
    before it, and a repeat equals its first occurrence; for non-negative chunk sizes either holds
    no more bytes than an earlier row, so the first peak is never one of them."""
    return _order_walk(schedule, pp, vpp, m, stage)[0]


@lru_cache(maxsize=256)
def _order_walk(schedule: str, pp: int, vpp: int, m: int, stage: int) -> tuple[tuple, tuple[int, ...]]:
    """(`peak_candidates`, `_largest_counts`) from one walk of the stage's op order (op codes
    decoded inline: this loop runs once per schedule shape, over every op)."""
    kept: dict[tuple[int, ...], None] = {}
    now, top = [0] * vpp, [0] * vpp
    nv = pp * vpp
    for code in cached_orders(schedule, pp, vpp, m)[stage]:
        kind = code % 3
        if kind == W:
            continue
        c = (code // 3) % nv // pp  # the op's chunk on this stage (see pipeline_orders.decode)
        now[c] += 1 if kind == F else -1
        top[c] = max(top[c], abs(now[c]))
        if kind == F or not kept:  # the first row has no row before it
            kept.setdefault(tuple(now))
    return tuple(kept) or ((0,) * vpp,), tuple(top)


def walk_peak(key: tuple[str, int, int, int, int], chunk_bytes: list[float],
              head_bytes: float) -> tuple[float, int, int]:
    """At the peak of activations plus held logits over one stage's op order, `key` being
    (schedule, pp, vpp, num_microbatches, stage): (activation bytes, chunks alive, logits held).
    Logits belong to the stage's last chunk when `head_bytes` > 0."""
    return _walk(key, tuple(chunk_bytes), head_bytes)


@lru_cache(maxsize=4096)
def _walk(key: tuple[str, int, int, int, int], chunk_bytes: tuple[float, ...],
          head_bytes: float) -> tuple[float, int, int]:
    """`walk_peak`, once per input: plans differing only in fields the activations do not read
    (expert parallelism, sharding) walk the same order with the same chunk sizes."""
    rows = peak_candidates(*key)
    if not _exact(key, chunk_bytes):
        return _numpy_peak(alive_counts(*key), chunk_bytes, head_bytes)
    weights = [float(w) for w in chunk_bytes]
    best, peak = None, 0.0
    for row in rows:
        live = float(sum(map(mul, row, weights)))
        total = live + (row[-1] if head_bytes > 0 else 0) * head_bytes
        if best is None or total > peak:
            best, peak = (live, row), total
    if peak <= 0.0:
        return 0.0, 0, 0
    live, row = best
    return live, sum(row), row[-1] if head_bytes > 0 else 0


def _exact(key: tuple[str, int, int, int, int], chunk_bytes: list[float]) -> bool:
    """Every weighted sum of `chunk_bytes` by a row of `alive_counts(*key)` is computed exactly
    in any order, and grows with the counts: non-negative whole numbers, and the largest count
    of each chunk times its bytes, summed over the chunks (a bound on every row's sum), below
    2**53."""
    if not all(float(w).is_integer() and w >= 0 for w in chunk_bytes):
        return False
    return sum(c * abs(w) for c, w in zip(_largest_counts(*key), chunk_bytes)) < EXACT_LIMIT


def _largest_counts(schedule: str, pp: int, vpp: int, m: int, stage: int) -> tuple[int, ...]:
    """The largest magnitude each column of `alive_counts` takes (walking the order without
    building its rows)."""
    return _order_walk(schedule, pp, vpp, m, stage)[1]


def _numpy_peak(alive: tuple[tuple[int, ...], ...], chunk_bytes: list[float],
                head_bytes: float) -> tuple[float, int, int]:
    """`walk_peak` as a matrix product over every op (for chunk bytes that are not exact)."""
    import numpy as np
    counts = np.array(alive, dtype=float)
    weights = np.asarray(chunk_bytes, dtype=float)
    live = counts @ weights
    held = counts[:, -1] if head_bytes > 0 else np.zeros(len(counts))
    total = live + held * head_bytes
    k = int(np.argmax(total))
    if total[k] <= 0.0:
        return 0.0, 0, 0
    return float(live[k]), int(counts[k].sum()), int(held[k])
