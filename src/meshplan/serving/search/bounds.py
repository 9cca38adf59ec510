"""Fast analytical bounds of a serving replica, used to prune the plan search before simulating.

From the same cost model the simulator uses: the latency of a lone request (TTFT of a prompt
and TPOT at batch 1 cannot be beaten under load), and an upper bound on the sustainable request
rate: each request needs its prompt prefilled at the best prefill rate and its output decoded
at the best per-token share of a decode step, with the decode batch limited by the KV cache,
max_num_seqs and the TPOT objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshplan.serving.search.capacity import Targets
from meshplan.serving.cost.iteration import IterationCost
from meshplan.serving.engine.deployment import Pool
from meshplan.serving.traffic.workload import Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaBounds:
    """Best-case figures of one replica for a workload's mean lengths."""

    ttft_ms: float
    """Time to first token of a lone mean-length request."""
    tpot_ms: float
    """Decode step time of a lone request."""
    max_rate: float
    """Requests/s the replica cannot exceed within the TPOT objective (prefill and decode work
    share iterations, so the slower of the two bounds it)."""
    prefill_rate: float
    """Requests/s if it only prefilled (disaggregated prefill pool)."""
    decode_rate: float
    """Requests/s if it only decoded (disaggregated decode pool)."""


def uncached_input_tokens(unit: Workload) -> float:
    """Mean prompt tokens a request must prefill at best: leading hash blocks that an earlier
    request already had count as cached (as with prefix caching), one token always computed."""
    seen: set[int] = set()
    total = 0
    for r in unit.requests:
        hit = next((i for i, h in enumerate(r.prefix_hashes) if h not in seen), len(r.prefix_hashes))
        total += r.input_len - min(hit * unit.hash_block_tokens, r.input_len - 1)
        seen.update(r.prefix_hashes)
    return total / len(unit)


def prefill_time(cost: IterationCost, prompt: int, budget: int) -> float:
    """Seconds to prefill one prompt alone, in chunks of the token budget."""
    done, total = 0, 0.0
    while done < prompt:
        n = min(budget, prompt - done)
        total += cost(n, 1, 0, 0.0, n, n * (done + (n + 1) / 2), 1 if done + n >= prompt else 0)
        done += n
    return total


def decode_step(cost: IterationCost, batch: int, context: float) -> float:
    """Seconds of a decode-only step of `batch` requests with `context` cached tokens each."""
    return cost(batch, batch, batch, batch * context, 0, 0.0, batch)


def replica_bounds(pool: Pool, cost: IterationCost, mean_in: float, mean_out: float,
                   t: Targets) -> ReplicaBounds:
    """Bounds of one replica of `pool` for requests of the given mean lengths."""
    s, prompt = pool.scheduler, max(1, round(mean_in))
    ctx = mean_in + mean_out / 2
    ttft = prefill_time(cost, prompt, s.max_num_batched_tokens)
    lone = decode_step(cost, 1, ctx)
    seats = max(1, min(s.max_num_seqs, int(pool.memory.kv_tokens // max(1.0, mean_in + mean_out))))
    batch = _largest_batch(cost, seats, ctx, t.tpot_ms)
    per_token = decode_step(cost, batch, ctx) / batch
    per_prompt_token = prefill_time(cost, s.max_num_batched_tokens, s.max_num_batched_tokens) / s.max_num_batched_tokens
    return ReplicaBounds(
        ttft_ms=ttft * 1e3, tpot_ms=lone * 1e3,
        max_rate=1.0 / max(mean_in * per_prompt_token, max(mean_out - 1, 1) * per_token),
        prefill_rate=1.0 / (mean_in * per_prompt_token),
        decode_rate=1.0 / (max(mean_out - 1, 1) * per_token))


def _largest_batch(cost: IterationCost, seats: int, ctx: float, tpot_ms: float | None) -> int:
    """The largest decode batch (<= seats) whose step meets the TPOT objective (binary search;
    step time grows with the batch)."""
    if tpot_ms is None or decode_step(cost, seats, ctx) * 1e3 <= tpot_ms:
        return seats
    lo, hi = 1, seats
    while hi - lo > max(1, lo // 32):
        mid = (lo + hi) // 2
        if decode_step(cost, mid, ctx) * 1e3 <= tpot_ms:
            lo = mid
        else:
            hi = mid
    return lo


def replicas_needed(rate: float, max_rate: float) -> int:
    """Replicas a rate needs when each sustains at most `max_rate` (inf-safe)."""
    return math.inf if max_rate <= 0 else max(1, math.ceil(rate / max_rate - 1e-9))
