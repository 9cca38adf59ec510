"""The scheduling rules of each engine, as data the replica's loop reads.

vLLM V1: every iteration mixes decodes and (chunked) prefills within one token budget; running
requests first, then waiting ones FCFS while blocks, budget and `max_num_seqs` allow; when
blocks run out the most recently admitted request is preempted and later recomputed.
TensorRT-LLM: in-flight batching of context and generation requests within `max_num_tokens`;
the default guaranteed-no-evict policy admits a request only when the blocks of its whole
prompt + output are free, so nothing is ever evicted. SGLang: an iteration is either a prefill
batch (new requests, up to the chunked-prefill size) or a decode batch; prefill goes first
whenever a waiting request fits, with room kept for the running requests' future tokens.
vLLM V0 multi-step (`num_scheduler_steps` N > 1): V0's default scheduler (prefill batches of
whole prompts first, else a decode batch) called once per N decode steps: the decode batch is
fixed for its N steps, so arrivals wait for its last step and requests that finish inside it
stay in the batch (computed, their tokens dropped) until then.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    """The knobs of one replica's scheduler, resolved from the plan and engine defaults."""

    engine: str
    max_num_seqs: int
    """Most requests in a batch (TensorRT-LLM max_batch_size, SGLang max_running_requests)."""
    max_num_batched_tokens: int
    """Token budget of one iteration (TensorRT-LLM max_num_tokens, SGLang chunked_prefill_size)."""
    chunked_prefill: bool
    """Prompts longer than the remaining budget are split over iterations."""
    reserve_full: bool
    """Admit only when the KV of prompt + whole output fits (guaranteed-no-evict)."""
    mixed_batches: bool
    """Prefill chunks and decodes share an iteration (False: SGLang's separate batches)."""
    future_token_ratio: float
    """Share of running requests' remaining output kept free when admitting (SGLang's
    new_token_ratio); 0 for engines that admit greedily."""
    admission_clip: int = 0
    """SGLang's PrefillAdder (schedule_policy.py, CLIP_MAX_NEW_TOKENS = 4096 in the 0.5.6.post2
    wheel): a new request is admitted only when its whole uncached prompt plus min(its output,
    clip) fits in the free KV left after min(each running request's remaining output, clip) x
    `future_token_ratio`; 0: other engines, whose first prefill chunk need only fit."""
    speculative_tokens: int = 0
    """Draft tokens verified per decode step."""
    tokens_per_step: float = 1.0
    """Mean tokens a decode step emits (1 without speculative decoding)."""
    num_scheduler_steps: int = 1
    """Decode steps per scheduler call (vLLM V0 multi-step); 1: every step is scheduled."""


def expected_tokens_per_step(k: int, acceptance: float) -> float:
    """Mean tokens per verification step with k drafts, each accepted with probability
    `acceptance` until the first rejection, plus the target model's own token."""
    if k == 0:
        return 1.0
    return (1 - acceptance ** (k + 1)) / (1 - acceptance)


def acceptance_for_length(k: int, length: float) -> float:
    """The per-draft acceptance probability p whose mean tokens per step,
    (1 - p^(k+1)) / (1 - p), equals `length` (a published mean accepted length that counts the
    target model's own token); the inverse of `expected_tokens_per_step` on 1 <= length < k + 1,
    found by bisection (the mean rises strictly with p)."""
    if k < 1 or not 1 <= length < k + 1:
        raise ValueError(f"an accepted length with {k} draft tokens lies in [1, {k + 1}); got {length}")
    low, high = 0.0, 1.0
    for _ in range(60):  # 2^-60: far below any published precision
        mid = (low + high) / 2
        if expected_tokens_per_step(k, mid) < length:
            low = mid
        else:
            high = mid
    return (low + high) / 2


class MultiStepRun:
    """vLLM V0 multi-step: where a decode batch's run of `num_scheduler_steps` stands. One
    replica attribute for the three (a 30th instance attribute slows every attribute read of a
    class on CPython 3.11, and the replica's are read every step)."""

    __slots__ = ("pos", "ghosts", "ghost_ctx")

    def __init__(self) -> None:
        self.pos = 0
        """Decode steps run so far in the current run (0: the next iteration calls the scheduler)."""
        self.ghosts = 0
        """Members that finished inside the current run, still computed to its end."""
        self.ghost_ctx = 0.0
        """The context those members' attention reads."""
