"""Fast-forward of an engine replica's pure-decode iterations (a mixin of `Replica`).

Between events, a replica whose queue cannot change runs decode steps whose outcome depends only
on time and blocks; they are costed here without the event loop, one at a time or in vectorised
stretches, with the same arithmetic, blocks, token times and log rows as `start` and `finish`
(tests/test_serving_skip.py)."""

from __future__ import annotations

import numpy as np

STRETCH = 256
"""Most pure-decode steps the fast-forward costs in one vectorised call."""
MIN_STRETCH = 8
"""Fewest steps (of the last step's length) before the next event for which the vectorised call
beats costing step by step (numpy's per-call overhead is a few scalar steps' worth)."""


class DecodeFastForward:
    """The fast-forward half of `Replica` (its state: decode, pool, cost, cfg, waiting, log)."""

    def skip_decodes(self, now: float, horizon: float) -> tuple[float, int]:
        """Run, without the event loop, the pure-decode iterations that would end before
        `horizon` (the next event that could reach this replica): nothing prefills, the
        waiting queue would admit nothing, every step's blocks fit and no request finishes.
        Each is the iteration `start` and `finish` would run (the same cost-model arithmetic,
        blocks, token times and log row), so results are unchanged (tests/test_serving_skip.py);
        returns (the time the last one ended, how many ran)."""
        d, ran = self.decode, 0
        if (self.prefilling or self.recorded is not None or self.cfg.speculative_tokens
                or d.tokens_per_step != 1.0 or self.lora is not None or self.cpu is not None
                or self._run.ghosts):
            return now, 0
        while d.count and d.step not in d.finishing:
            count, need = d.count, d.blocks_needed()
            t = self.cost(count, count, count, d.context_tokens(), 0, 0, count)
            if now + t >= horizon or need > self.pool.available():
                return now, ran
            if not self._run.pos and not self._nothing_to_admit(need):  # (mid-run: no scheduler call)
                return now, ran
            self.pool.allocate(need)
            d.grown_for = d.step
            self.decode_end_s.append(now + t)
            d.advance()
            self.log.append(self.index, now, now + t, 0, count, len(self.running), 0,
                            self.pool.used, self.pool.total, preempted=0, kind="decode")
            if self.cfg.num_scheduler_steps > 1:
                self._run.pos = (self._run.pos + 1) % self.cfg.num_scheduler_steps
            now, ran = now + t, ran + 1
            if (self._admission_frozen() and hasattr(self.cost, "batch")
                    and horizon - now > MIN_STRETCH * t):
                return self._skip_stretches(now, horizon, ran, t)
        return now, ran

    def _admission_frozen(self) -> bool:
        """Whether no decode step can change the waiting queue before the next event: none
        waits, the batch is full, or the head of the queue needs more blocks than are free now.
        Pure decode steps only take blocks (nothing finishes inside a stretch), so a head that
        does not fit now fits at none of them -- unless the engine keeps room for the running
        requests' future tokens (SGLang's new-token ratio), which shrinks as they decode.
        Then a run of steps depends only on time and blocks."""
        if not self.waiting or len(self.running) >= self.cfg.max_num_seqs:
            return True
        if self.cfg.future_token_ratio:
            return False
        if (self.cfg.mixed_batches and not self.waiting[0].prefilled
                and self.cfg.max_num_batched_tokens <= self.decode.count):
            return True  # no token budget left for a prefill while this batch decodes
        return self._blocks_to_admit(self.waiting[0]) > self.pool.available()

    def _skip_stretches(self, now: float, horizon: float, ran: int, step_s: float) -> tuple[float, int]:
        """`skip_decodes` for a frozen queue, costing up to STRETCH steps at once: the step
        times from the cost model's vectorised form (`IterationCost.batch`, the same arithmetic
        per row), their running sum from `now`, and the blocks each step allocates. A stretch
        is sized to the steps of `step_s` (the last step's time) that fit before `horizon`;
        when all of them fit, the next stretch goes on from there."""
        d, pool = self.decode, self.pool
        while d.count and d.step not in d.finishing:
            upcoming = [k for k in d.finishing if k > d.step]
            fit = (horizon - now) / step_s + 1.0
            k = min(STRETCH, (min(upcoming) if upcoming else d.step + STRETCH) - d.step,
                    int(fit) if fit < STRETCH else STRETCH)
            steps = d.step + np.arange(k)
            need = np.asarray(d.phase)[steps % d.period]
            calls = np.zeros((k, 7))
            calls[:, [0, 1, 2, 6]] = d.count
            calls[:, 3] = d.sum_offset + d.count * steps
            ends = np.cumsum(np.concatenate(([now], self.cost.batch(calls))))[1:]
            grown = np.cumsum(need)
            n = int(np.argmin((ends < horizon) & (grown <= pool.available())))
            n = k if ends[n] < horizon and grown[n] <= pool.available() else n
            if n:
                self._record_stretch(now, ends[:n], grown[:n])
                now, ran = float(ends[n - 1]), ran + n
            if n < k:
                break
            step_s = float(ends[-1] - ends[-2]) if k > 1 else step_s
        return now, ran

    def _record_stretch(self, now: float, ends: np.ndarray, grown: np.ndarray) -> None:
        """Apply `len(ends)` pure-decode steps: blocks, token times, the step counter, the log."""
        d, n = self.decode, len(ends)
        used = self.pool.used + grown
        self.pool.allocate(int(grown[-1]))
        d.step += n
        d.grown_for = d.step - 1
        self._run.pos = (self._run.pos + n) % self.cfg.num_scheduler_steps
        self.decode_end_s.frombytes(ends.astype(float).tobytes())
        starts = np.concatenate(([now], ends[:-1]))
        self.log.extend(n, replica=self.index, start_s=starts, end_s=ends, prefill_tokens=0,
                        decode_seqs=d.count, num_seqs=len(self.running), waiting=0,
                        kv_used_blocks=used, kv_total_blocks=self.pool.total, preempted=0,
                        kind="decode")

    def _nothing_to_admit(self, need: int) -> bool:
        """Whether the next step's scheduling would leave the waiting queue as it is, its
        decodes growing by `need` blocks first (the checks `start` makes, in its order)."""
        if not self.waiting or len(self.running) >= self.cfg.max_num_seqs:
            return True
        seq = self.waiting[0]
        if seq.prefilled:  # _admit_arrived, before the step's blocks are grown
            return self._blocks_to_admit(seq) > self.pool.available()
        free = self._free_for_admission() - need
        if not self.cfg.mixed_batches:  # SGLang's prefill batch (_prefill_fits)
            return self._blocks_to_admit(seq) > free
        budget = self.cfg.max_num_batched_tokens - self.decode.count
        if budget <= 0 or self._blocks_to_admit(seq) > free:
            return True
        hit = self._prefix_hit(seq)
        n = min(seq.prompt - hit * self.pool.hash_tokens, budget)
        return n < seq.prompt - hit * self.pool.hash_tokens and not self.cfg.chunked_prefill
