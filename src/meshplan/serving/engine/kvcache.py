"""The KV-cache block pool of one replica, with prefix caching on chained block hashes.

Blocks are either free, held privately by a request, or hold a cached prefix unit (the KV of
`unit_blocks` blocks whose content a hash names). Cached units are reference-counted while
requests use them and kept on an LRU list when no request does, evicted only when a free
block is needed. Invariant (tested): free + private + cached == total at every step.
"""

from __future__ import annotations

import math
from collections import OrderedDict


class BlockPool:
    """Block accounting of one replica's KV cache."""

    def __init__(self, total: int, block_size: int, hash_block_tokens: int, caching: bool):
        self.total, self.block_size, self.caching = total, block_size, caching
        # A cached unit spans whole blocks: lcm(hash block, KV block) tokens, named by the hash
        # of its last hash block (hashes are chained), e.g. two 16-token hashes per 32-token block.
        unit = math.lcm(hash_block_tokens, block_size)
        self.stride = unit // hash_block_tokens
        self.hash_tokens = unit
        """Tokens of one cached unit."""
        self.unit_blocks = unit // block_size
        self.free = total
        self.private = 0
        self.refs: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()

    @property
    def cached(self) -> int:
        """Blocks holding cached prefix units (in use or evictable)."""
        return (len(self.refs) + len(self.lru)) * self.unit_blocks

    @property
    def used(self) -> int:
        """Blocks held by running requests (private plus referenced prefix units)."""
        return self.private + len(self.refs) * self.unit_blocks

    def available(self) -> int:
        """Blocks an allocation can get: free ones plus evictable cached ones."""
        return self.free + len(self.lru) * self.unit_blocks

    def allocate(self, n: int) -> bool:
        """Take `n` private blocks, evicting least-recently-used cached units if needed."""
        if n > self.available():
            return False
        while self.free < n:
            self.lru.popitem(last=False)
            self.free += self.unit_blocks
        self.free -= n
        self.private += n
        return True

    def release(self, n: int) -> None:
        """Return `n` private blocks to the free pool."""
        self.private -= n
        self.free += n

    def units(self, hashes: tuple[int, ...]) -> tuple[int, ...]:
        """The unit hashes of a request's prefix hashes (every `stride`-th, chained)."""
        return hashes[self.stride - 1::self.stride] if self.stride > 1 else hashes

    def match(self, hashes: tuple[int, ...]) -> int:
        """Leading prefix units of `hashes` present in the cache."""
        if not self.caching:
            return 0
        hit = 0
        for h in hashes:
            if h not in self.refs and h not in self.lru:
                break
            hit += 1
        return hit

    def acquire(self, hashes: tuple[int, ...]) -> None:
        """Reference cached units (from `match`) for a request now using them."""
        for h in hashes:
            if h in self.lru:
                del self.lru[h]
                self.refs[h] = 1
            else:
                self.refs[h] += 1

    def register(self, hashes: tuple[int, ...]) -> tuple[int, ...]:
        """After a request computed these units privately, turn them into cached units it
        references (units someone cached meanwhile stay private). Returns the units taken."""
        if not self.caching:
            return ()
        taken = tuple(h for h in hashes if h not in self.refs and h not in self.lru)
        for h in taken:
            self.refs[h] = 1
        self.private -= len(taken) * self.unit_blocks
        return taken

    def drop(self, hashes: tuple[int, ...]) -> None:
        """A request stops using these units; unreferenced ones become evictable (LRU)."""
        for h in hashes:
            left = self.refs[h] - 1
            if left:
                self.refs[h] = left
            else:
                del self.refs[h]
                self.lru[h] = None
