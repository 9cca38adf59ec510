"""A request of a serving workload, and the record the simulator keeps of how it was served."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class Request:
    """One inference request: when it arrives, how long its prompt and answer are."""

    id: int
    """Position in the workload, 0-based."""
    arrival_s: float
    """Arrival time in seconds from the start (ignored in closed-loop concurrency mode)."""
    input_len: int
    """Prompt tokens (>= 1)."""
    output_len: int
    """Tokens to generate (>= 1), the first of which comes out of prefill."""
    prefix_hashes: tuple[int, ...] = ()
    """Hashes of the prompt's leading blocks of `Workload.hash_block_tokens` tokens each,
    chained (a block's hash covers every token before it), for prefix caching; () = unique."""
    session: int | None = None
    """Conversation id for multi-turn workloads (prefix-affinity routing keys on it)."""


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request in the simulation (times in seconds from the start)."""

    id: int
    arrival_s: float
    input_len: int
    output_len: int
    replica: int = 0
    """Replica (decode replica when disaggregated) that served it."""
    cached_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache."""
    first_token_s: float = float("nan")
    """When the first output token was produced (end of the iteration finishing its prefill,
    or arrival of its KV on the decode pool when disaggregated)."""
    finish_s: float = float("nan")
    """When the last output token was produced."""
    preemptions: int = 0
    """Times the request was preempted and its KV recomputed."""
    token_times_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    """Emission time of every output token, first token included (len == output_len, except
    with speculative decoding where several tokens can share one time)."""

    @property
    def ttft_s(self) -> float:
        """Time to first token."""
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        """End-to-end latency."""
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        """vLLM's time per output token: (E2E - TTFT) / (output tokens - 1); nan for 1 token."""
        if self.output_len <= 1:
            return float("nan")
        return (self.finish_s - self.first_token_s) / (self.output_len - 1)
