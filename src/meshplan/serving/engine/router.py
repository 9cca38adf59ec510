"""How requests are spread over replicas: round-robin, least outstanding, prefix affinity."""

from __future__ import annotations

from collections.abc import Sequence

from meshplan.serving.engine.replica import Replica
from meshplan.serving.traffic.request import Request


class Router:
    """Picks the replica for each new request."""

    def __init__(self, policy: str, replicas: Sequence[Replica]):
        self.policy, self.replicas = policy, replicas
        self._next = 0

    def pick(self, req: Request) -> Replica:
        """The replica that serves `req`."""
        if len(self.replicas) == 1:
            return self.replicas[0]
        if self.policy == "round-robin":
            replica = self.replicas[self._next % len(self.replicas)]
            self._next += 1
            return replica
        if self.policy == "prefix-affinity":
            key = req.session if req.session is not None else (req.prefix_hashes[0] if req.prefix_hashes else None)
            if key is not None:
                return self.replicas[hash(key) % len(self.replicas)]
        return min(self.replicas, key=lambda r: (r.outstanding, r.index))
