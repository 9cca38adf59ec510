"""The decoding requests of a replica, advanced together in O(1) per step.

Every decoding request adds one KV slot and emits one token per decode step, so the set keeps
only sums: the count, the total cached context (sum of offsets + count x step), how many
requests cross a block boundary at each step phase, and which requests finish at which step.
Per-request work happens only when a request joins, finishes or is preempted.
"""

from __future__ import annotations

import math
from collections import defaultdict

from meshplan.serving.engine.sequence import Seq


class DecodeSet:
    """Aggregate state of the requests in the decode phase."""

    def __init__(self, block_size: int, tokens_per_step: float = 1.0):
        self.tokens_per_step = tokens_per_step
        self.period = block_size if tokens_per_step == 1.0 else max(1, round(block_size / tokens_per_step))
        self.block_size = block_size
        self.step = 0
        """Decode steps run so far (the index of the next step)."""
        self.count = 0
        self.sum_offset = 0
        self.phase = [0] * self.period
        self.finishing: dict[int, list[Seq]] = defaultdict(list)
        self.grown_for = -1
        """The step whose new blocks have been allocated (set by the replica)."""

    def context_tokens(self) -> float:
        """Cached tokens the next step's attention reads, over all members."""
        return self.sum_offset + self.count * self.step

    def blocks_needed(self) -> int:
        """New blocks the next step must allocate (members starting a new block)."""
        return self.phase[self.step % self.period]

    def join(self, seq: Seq) -> None:
        """Add a request whose prompt is computed and first token emitted."""
        steps = math.ceil(seq.remaining_output / self.tokens_per_step)
        seq.c0 = self.step
        if self.tokens_per_step == 1.0:
            seq.offset = seq.computed
        else:
            seq.offset = math.ceil(seq.computed / self.block_size) * self.period
        seq.finish_c = self.step + steps - 1
        self.count += 1
        self.sum_offset += seq.computed - self.step
        if not seq.reserved_full:
            self.phase[(seq.c0 - seq.offset) % self.period] += 1
        self.finishing[seq.finish_c].append(seq)

    def leave(self, seq: Seq, finished: bool) -> int:
        """Remove a member; returns the private blocks it held. Records its decode run."""
        steps = self.step - seq.c0
        seq.segments.append((seq.c0, steps))
        self.count -= 1
        self.sum_offset -= seq.computed - seq.c0
        if not finished:
            self.finishing[seq.finish_c].remove(seq)
        if seq.reserved_full:
            return seq.private
        self.phase[(seq.c0 - seq.offset) % self.period] -= 1
        span = steps + (1 if self.grown_for == self.step else 0)
        grown = -(-(seq.offset + span) // self.period) - (-(-seq.offset // self.period))
        return seq.private + grown

    def advance(self) -> list[Seq]:
        """End one decode step; returns the members that emitted their last token."""
        done = self.finishing.pop(self.step, [])
        self.step += 1
        return done
