"""One engine replica: its queue, KV blocks and the iteration loop's two halves.

`start(now)` schedules the next iteration under the engine's rules and returns its end time;
`finish(end)` applies what the iteration produced (tokens, finished requests). The simulator
calls them alternately; nothing here knows about other replicas or the clock beyond `now`.
"""

from __future__ import annotations

import math
from array import array
from collections import deque


from meshplan.serving.cost.iteration import IterationCost
from meshplan.serving.engine.backlog import Backlog
from meshplan.serving.engine.decodeset import DecodeSet
from meshplan.serving.engine.fastforward import DecodeFastForward
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.engine.kvcache import BlockPool
from meshplan.serving.engine.kvtier import CpuTier
from meshplan.serving.cost.lora import AdapterSlots
from meshplan.serving.traffic.request import RequestRecord
from meshplan.serving.engine.scheduler import MultiStepRun, SchedulerConfig
from meshplan.serving.engine.sequence import Seq, rebased


class Replica(DecodeFastForward):
    """The scheduler state of one engine replica (role: both, prefill or decode)."""

    def __init__(self, index: int, cfg: SchedulerConfig, pool: BlockPool, cost: IterationCost,
                 log: IterationLog, role: str = "both", window_blocks: int = 0):
        self.index, self.cfg, self.pool, self.cost, self.log = index, cfg, pool, cost, log
        self.role, self.window_blocks = role, window_blocks
        self.decode = DecodeSet(pool.block_size, cfg.tokens_per_step)
        self.decode_end_s = array("d")
        """End time of every decode step from step `step_base` on, in order (a request's token
        times are a slice)."""
        self.step_base = 0
        """Decode steps dropped from the front of `decode_end_s` (`trim_steps`, streamed runs)."""
        self.waiting: deque[Seq] = deque()
        self.backlog: Backlog | None = None
        """Offline runs: the requests queued behind `waiting`, not yet built (see `feed`)."""
        self.running: dict[int, Seq] = {}
        self.prefilling: dict[int, Seq] = {}
        self.busy = False
        self.finished: list[RequestRecord] = []
        self.handoff: list[Seq] = []
        self._chunks: list[tuple[Seq, int]] = []
        self._decoded = False
        self._start = 0.0
        self._preempted = 0
        self._ndec = 0
        self._prefill = 0
        """Prompt tokens of the iteration scheduled last (set with its duration)."""
        self.recorded: list[tuple] | None = None
        """When a list, each iteration's cost-model arguments are appended (schedule replay)."""
        self.lora: AdapterSlots | None = None
        """Resident LoRA adapters (multi-LoRA serving); None: the base model only."""
        self.cpu: CpuTier | None = None
        """The host-memory KV tier (kv_offload=cpu); None: the GPU cache only."""
        self._loaded = 0
        """Prompt tokens this iteration copies back from the CPU tier."""
        self._run = MultiStepRun()
        """vLLM V0 multi-step: the current decode batch's run of `num_scheduler_steps`."""

    @property
    def queued(self) -> int:
        """Requests waiting here, built or not."""
        return len(self.waiting) + (self.backlog.count if self.backlog is not None else 0)

    @property
    def outstanding(self) -> int:
        """Requests queued or running here."""
        return self.queued + len(self.running)

    def add(self, seq: Seq) -> None:
        """Queue a request (FCFS)."""
        self.waiting.append(seq)

    def feed(self, backlog: Backlog) -> None:
        """Queue `backlog`'s requests behind the waiting ones, built one at a time as the queue
        empties (an offline run: nothing else is queued here after them)."""
        self.backlog = backlog
        backlog.refill(self.waiting)

    def has_work(self) -> bool:
        """Whether an iteration can run now."""
        return bool(self.running or self.waiting)

    # ------------------------------------------------------------------ scheduling

    def start(self, now: float) -> float | None:
        """Schedule one iteration at `now`; returns its end time, or None when idle."""
        self._chunks, self._preempted, self._start = [], 0, now
        if self._run.pos:
            return self._start_group_step(now)
        self._admit_arrived()
        budget = self.cfg.max_num_batched_tokens
        prefill_only = not self.cfg.mixed_batches and self._prefill_fits()
        self._decoded = self.decode.count > 0 and not prefill_only
        if self._decoded:
            self._grow_decodes()
            self.decode.grown_for = self.decode.step
            budget -= self.decode.count * (1 + self.cfg.speculative_tokens)
        if self.cfg.mixed_batches or prefill_only:
            budget = self._schedule_prefills(budget)
            if not self._preempted:
                self._admit(budget)
        self._decoded = self.decode.count > 0 and not prefill_only
        self._ndec = self.decode.count if self._decoded else 0
        if not self._chunks and not self._decoded:
            return None
        self.busy = True
        return now + self._duration()

    def _start_group_step(self, now: float) -> float | None:
        """vLLM V0 multi-step: the next step of a decode batch's run, without a scheduler call
        (nothing is admitted; members that finished in the run are still computed)."""
        if self.decode.count:
            self._grow_decodes()
            self.decode.grown_for = self.decode.step
        if not self.decode.count and not self._run.ghosts:  # every member preempted
            self._run.pos = 0
            return self.start(now)
        self._decoded, self._ndec = True, self.decode.count
        self.busy = True
        return now + self._duration()

    def _end_group_step(self, done: list[Seq]) -> None:
        """Multi-step: count a decode step into its run; `done` (finished at it) stay in the batch
        until the run's last step, their context growing by one token a step."""
        run = self._run
        run.pos = (run.pos + 1) % self.cfg.num_scheduler_steps
        if not run.pos:
            run.ghosts, run.ghost_ctx = 0, 0.0
            return
        run.ghost_ctx += run.ghosts + sum(seq.computed for seq in done)
        run.ghosts += len(done)

    def _prefill_fits(self) -> bool:
        """SGLang: run a prefill batch when a request is mid-prefill or a waiting one fits."""
        if self.prefilling:
            return True
        if not self.waiting or len(self.running) >= self.cfg.max_num_seqs:
            return False
        return self._blocks_to_admit(self.waiting[0]) <= self._free_for_admission()

    def _grow_decodes(self) -> None:
        """Allocate the blocks this decode step needs, preempting the newest requests first."""
        while self.decode.count:
            need = self.decode.blocks_needed()
            if self.pool.allocate(need):
                return
            self._preempt_newest()

    def _schedule_prefills(self, budget: int) -> int:
        """Continue running prefills in admission order within the budget."""
        for seq in list(self.prefilling.values()):
            if budget <= 0 or seq.req.id not in self.prefilling:
                continue
            n = min(seq.remaining_prompt, budget)
            while not self._reserve(seq, seq.computed + n):
                if self._preempt_newest() is seq:
                    n = 0
                    break
            if n:
                self._chunks.append((seq, n))
                budget -= n
        return budget

    def _admit(self, budget: int) -> None:
        """Admit waiting requests FCFS while seats, budget and blocks allow; with LoRA adapters,
        requests whose adapter would exceed the batch's slots wait and later ones go first."""
        if self.lora is None:
            return self._admit_fcfs(budget)
        queue, active = list(self.waiting), self._adapters()
        room = self.cfg.max_num_seqs - len(self.running)
        eligible = []
        for seq in queue:
            if len(eligible) >= room:
                break
            if self.lora.admissible(seq.adapter, active):
                active.add(seq.adapter)
                eligible.append(seq)
        self.waiting = deque(eligible)
        self._admit_fcfs(budget)
        self.waiting = deque(s for s in queue if s.req.id not in self.running)

    def _adapters(self) -> set[int]:
        """Distinct adapters of the running requests."""
        return {s.adapter for s in self.running.values()}

    def _admit_fcfs(self, budget: int) -> None:
        """Admit waiting requests FCFS while seats, budget and blocks allow."""
        while self.waiting and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            if seq.prefilled:  # joins at the next iteration's start (see _admit_arrived)
                return
            if budget <= 0 or self._blocks_to_admit(seq) > self._free_for_admission():
                return  # (checked before the prefix look-up: a blocked queue costs no hashing)
            hit = self._prefix_hit(seq)
            cpu = self._cpu_hit(seq, hit) if self.cpu is not None else 0
            left = seq.prompt - hit * self.pool.hash_tokens - cpu
            n = min(left, budget)
            if n < left and not self.cfg.chunked_prefill:
                return
            self.waiting.popleft()
            if self.backlog is not None:
                self.backlog.refill(self.waiting)
            self._take(seq, hit)
            if cpu:
                seq.computed += cpu
                seq.record.cached_tokens = max(seq.record.cached_tokens, seq.computed)
                self._loaded += cpu
            if not self._reserve(seq, seq.computed + n):  # undo the admission entirely
                self._loaded -= cpu
                del self.running[seq.req.id], self.prefilling[seq.req.id]
                self._release(seq)
                self.waiting.appendleft(seq)
                return
            self._chunks.append((seq, n))
            budget -= n

    def _prefix_hit(self, seq: Seq) -> int:
        """Cached leading units usable by `seq` (at least one prompt token is recomputed)."""
        hit = self.pool.match(self.pool.units(seq.req.prefix_hashes))
        return min(hit, (seq.prompt - 1) // self.pool.hash_tokens)

    def _cpu_hit(self, seq: Seq, hit: int) -> int:
        """Prompt tokens after the GPU hit that the CPU tier holds (copied back, not computed)."""
        units = self.pool.units(seq.req.prefix_hashes)
        return self.cpu.found(units, seq.prompt, hit * self.pool.hash_tokens, self.pool.hash_tokens)

    def _take(self, seq: Seq, hit: int) -> None:
        """Move `seq` from waiting to running with its cached prefix and window blocks."""
        seq.units = self.pool.units(seq.req.prefix_hashes)[:hit]
        self.pool.acquire(seq.units)
        seq.computed = hit * self.pool.hash_tokens
        seq.record.cached_tokens = max(seq.record.cached_tokens, seq.computed)
        seq.private = 0
        if self.window_blocks:
            self.pool.allocate(self.window_blocks)
        seq.window_blocks = self.window_blocks
        self.running[seq.req.id] = seq
        self.prefilling[seq.req.id] = seq
        if self.cfg.reserve_full:
            seq.reserved_full = True
            self._reserve(seq, seq.prompt + seq.remaining_output)

    def _blocks_to_admit(self, seq: Seq) -> int:
        """Blocks a waiting request needs to start (all of prompt + output when reserving)."""
        tokens = seq.prompt + (seq.remaining_output if self.cfg.reserve_full else 0)
        clip = self.cfg.admission_clip
        if clip and not seq.prefilled:  # SGLang: the whole prompt and the clipped output
            tokens = seq.prompt + min(seq.remaining_output, clip)
        elif not self.cfg.reserve_full and not seq.prefilled:
            tokens = min(tokens, self.cfg.max_num_batched_tokens)
        return math.ceil(tokens / self.pool.block_size) + self.window_blocks

    def _free_for_admission(self) -> float:
        """Blocks free for new requests after room for the running requests' future tokens."""
        keep = 0.0
        if self.cfg.future_token_ratio:
            clip = self.cfg.admission_clip or math.inf
            left = sum(min(s.remaining_output, clip) for s in self.running.values())
            keep = self.cfg.future_token_ratio * left / self.pool.block_size
        return self.pool.available() - keep

    def _reserve(self, seq: Seq, tokens: int) -> bool:
        """Hold private blocks for the first `tokens` tokens of `seq` (beyond its units)."""
        covered = len(seq.units) * self.pool.hash_tokens
        need = math.ceil(max(0, tokens - covered) / self.pool.block_size) - seq.private
        if need <= 0:
            return True
        if not self.pool.allocate(need):
            return False
        seq.private += need
        return True

    def _admit_arrived(self) -> None:
        """Decode pool: requests whose KV arrived join decoding (FCFS) before the step's blocks
        are grown, so the step allocates their next block and runs their decode."""
        while self.waiting and self.waiting[0].prefilled and len(self.running) < self.cfg.max_num_seqs:
            if not self._admit_prefilled(self.waiting[0]):
                return

    def _admit_prefilled(self, seq: Seq) -> bool:
        """Decode pool: a request whose KV arrived joins decoding once its blocks fit."""
        if self._blocks_to_admit(seq) > self.pool.available():
            return False
        self.waiting.popleft()
        if self.backlog is not None:
            self.backlog.refill(self.waiting)
        self.pool.allocate(self.window_blocks)
        seq.window_blocks = self.window_blocks
        self.running[seq.req.id] = seq
        seq.reserved_full = self.cfg.reserve_full
        tokens = seq.computed + (seq.remaining_output if seq.reserved_full else 0)
        self._reserve(seq, tokens)
        self.decode.join(seq)
        return True

    # ------------------------------------------------------------------ preemption

    def _preempt_newest(self) -> Seq:
        """Preempt the most recently admitted running request (recompute later)."""
        _, seq = self.running.popitem()
        self._preempted += 1
        if seq.req.id in self.prefilling:
            del self.prefilling[seq.req.id]
            self._chunks = [(s, n) for s, n in self._chunks if s is not seq]
        else:
            self._leave_decode(seq, finished=False)
        self._release(seq)
        seq.record.preemptions += 1
        seq.prompt = seq.req.input_len + seq.generated
        seq.computed = 0
        seq.prefilled = False
        self.waiting.appendleft(seq)
        return seq

    def _leave_decode(self, seq: Seq, finished: bool) -> None:
        """Take `seq` out of the decode set, crediting its emitted tokens."""
        held = self.decode.leave(seq, finished)
        steps = seq.segments[-1][1]
        emitted = min(seq.remaining_output, math.floor(steps * self.cfg.tokens_per_step + 1e-9))
        seq.generated += emitted
        seq.computed += emitted
        seq.private = held

    def _release(self, seq: Seq) -> None:
        """Free every block `seq` holds."""
        self.pool.release(seq.private + seq.window_blocks)
        self.pool.drop(seq.units)
        seq.private, seq.window_blocks, seq.units = 0, 0, ()

    # ------------------------------------------------------------------ execution

    def _duration(self) -> float:
        decodes, chunks = self._ndec, self._chunks
        prefill, pairs, sampling = 0, 0, decodes
        if chunks:  # (a pure decode step has none: no sums to set up)
            prefill = sum(n for _, n in chunks)
            pairs = sum(n * (s.computed + (n + 1) / 2) for s, n in chunks)
            sampling += sum(1 for s, n in chunks if s.computed + n >= s.prompt)
        self._prefill = prefill
        k = self.cfg.speculative_tokens
        tokens = decodes * (1 + k) + prefill
        ctx = self.decode.context_tokens() * (1 + k) if decodes else 0.0
        if self._run.ghosts:  # multi-step: finished members computed to the end of the run
            g = self._run.ghosts
            tokens, decodes, sampling, ctx = tokens + g, decodes + g, sampling + g, ctx + self._run.ghost_ctx
        args = (tokens, decodes + len(self._chunks), decodes, ctx, prefill, pairs, sampling)
        if self.recorded is not None:
            self.recorded.append(args)
        t = self.cost(*args)
        if k and decodes:
            t += k * self.cost.draft(decodes)
        if self._loaded:  # prompt KV copied back from the CPU tier before the forward
            t += self._loaded * self.cpu.load_s_per_token
            self.cpu.loaded_tokens += self._loaded
            self._loaded = 0
        if self.lora is not None:  # batched adapter kernels, and copies of adapters not resident
            active = self._adapters()
            t += self.cost.lora(tokens, len(active)) + self.lora.make_resident(active) * self.lora.load_s
        return t

    def finish(self, end: float) -> None:
        """Apply the iteration that ends at `end`: emit tokens, complete requests."""
        self.busy = False
        if self._decoded:
            self.decode_end_s.append(end)
            done = self.decode.advance()
            for seq in done:
                self._leave_decode(seq, finished=True)
                self._complete(seq, end)
            if self.cfg.num_scheduler_steps > 1:
                self._end_group_step(done)
        for seq, n in self._chunks:
            seq.computed += n
            if seq.computed >= seq.prompt:
                self._prefill_done(seq, end)
        self._log(end)

    def _prefill_done(self, seq: Seq, end: float) -> None:
        del self.prefilling[seq.req.id]
        self._emit(seq, end)
        units = self.pool.units(seq.req.prefix_hashes)
        taken = self.pool.register(units[len(seq.units):seq.computed // self.pool.hash_tokens])
        if self.cpu is not None:
            self.cpu.store(units[:seq.computed // self.pool.hash_tokens])
        seq.private -= len(taken) * self.pool.unit_blocks
        seq.units = seq.units + taken
        if seq.remaining_output == 0:
            self._complete(seq, end)
        elif self.role == "prefill":
            del self.running[seq.req.id]
            self._release(seq)
            self.handoff.append(seq)
        else:
            self.decode.join(seq)

    def _emit(self, seq: Seq, end: float) -> None:
        """The token sampled at the end of a prefill (the first, or the next after a recompute)."""
        if seq.generated == 0:
            seq.record.first_token_s = end
        seq.generated += 1
        seq.segments.append((end, -1))

    def _complete(self, seq: Seq, end: float) -> None:
        self.running.pop(seq.req.id, None)
        self._release(seq)
        seq.record.finish_s = end
        seq.record.replica = self.index
        seq.record.set_decode_source(self.decode_end_s, rebased(seq.segments, self.step_base),
                                     self.cfg.tokens_per_step, seq.req.output_len)
        self.finished.append(seq.record)

    def trim_steps(self) -> None:
        """Drop the decode-step times before any live request's decode runs (a streamed run,
        once the records finished so far are folded into its metrics: they are not read after)."""
        first = self.decode.step
        for seq in (*self.running.values(), *self.waiting):
            if seq.req.id in self.running and seq.req.id not in self.prefilling:
                first = min(first, seq.c0)  # decoding now: its current run starts at c0
            for a, b in seq.segments:
                if b != -1:
                    first = min(first, a)
        keep = first - self.step_base
        if keep > 0:
            self.decode_end_s = self.decode_end_s[keep:]
            self.step_base = first

    def _log(self, end: float) -> None:
        waiting = len(self.waiting) if self.backlog is None else self.queued
        self.log.append(self.index, self._start, end, self._prefill, self._ndec,
                        len(self.running), waiting, self.pool.used, self.pool.total, preempted=self._preempted,
                        kind="mixed" if self._chunks and self._decoded else "prefill" if self._chunks else "decode")
