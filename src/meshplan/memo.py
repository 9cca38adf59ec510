"""Memos keyed by object identity, for the questions a plan search asks thousands of times.

Hashing a frozen dataclass (a ModelSpec, its layers, a Cluster, a GPU) hashes every nested
field, which costs more than many of the answers. The plan search passes the very same objects
to every candidate, so these memos key on `id(obj)` instead. An id is reused once its object is
freed: each entry keeps its objects alive, and a hit is taken only for those objects. A memo is
emptied when it holds more than `limit` entries (a long session sees many models and plans).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

MISS = object()
"""What `IdentityMemo.find` returns when nothing is stored (None is a value like any other)."""


class IdentityMemo(dict):
    """key -> (objects, value), the key built by the caller from `id()` of the objects and any
    plain values the answer depends on: `memo.find(key, *objects)`, then on a miss
    `memo.keep(key, objects, value)`."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def find(self, key: Hashable, *objects: object) -> Any:
        """The value stored under `key` for these very objects, else MISS."""
        hit = self.get(key)
        if hit is not None and hit[0] == objects:  # tuple equality: `is` first, per element
            return hit[1]
        return MISS

    def keep(self, key: Hashable, objects: tuple, value: Any) -> Any:
        """Store `value` under `key` with the objects it was computed from; return it."""
        if len(self) > self.limit:
            self.clear()
        self[key] = (objects, value)
        return value
