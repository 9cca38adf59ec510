"""The requests an offline run has given a replica but not yet built (issue #32 item 7).

In an offline run every request arrives at t=0, so a replica's FCFS waiting queue would hold its
whole share of the workload from the start: millions of requests, each with its engine state and
record, before the first iteration ends. The scheduler only ever looks at the head of the queue,
so the queue keeps the requests already built (its head, and the ones preemption puts back in
front) and a `Backlog` builds the next one each time the queue runs empty: memory stays flat in the
number of requests, and every scheduling decision sees the same queue it would see in full.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from meshplan.serving.engine.sequence import Seq


class Backlog:
    """The unbuilt tail of one replica's waiting queue: `count` requests, built in FCFS order."""

    __slots__ = ("count", "_next")

    def __init__(self, count: int, seqs: Iterator[Seq]) -> None:
        self.count = count
        """Requests still to build (they count as waiting: queue length, outstanding requests)."""
        self._next = seqs

    def refill(self, waiting: deque[Seq]) -> None:
        """Put the next request at the back of an empty `waiting` queue, if any is left."""
        if not waiting and self.count:
            self.count -= 1
            waiting.append(next(self._next))
