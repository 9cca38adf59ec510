"""The serving simulation: requests arrive, a router places them, replicas iterate.

One `heapq` of plain tuples (time, order, kind, payload) drives everything: the next arrival,
the end of each replica's current iteration, and KV transfers between prefill and decode pools
when disaggregated. Nothing happens per token; a replica's iteration is one event.
Deterministic: the workload carries its own seed and ties break by insertion order.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from meshplan.costs.comm import p2p_time
from meshplan.errors import ConfigError
from meshplan.gcpause import cyclic_gc_paused
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.serving.engine.backlog import Backlog
from meshplan.serving.engine.deployment import Pool, build_replicas, resolve_pools
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.cost.lora import assign_adapters
from meshplan.serving.metrics.summary import (
    SLO, ServingMetrics, compute_metrics, kv_utilization_over_time, queue_length_over_time,
)
from meshplan.serving.plan import ServingPlan
from meshplan.serving.engine.replica import Replica
from meshplan.serving.traffic.request import RequestRecord
from meshplan.serving.engine.router import Router
from meshplan.serving.engine.sequence import Seq
from meshplan.serving.metrics.token_times import SimulatedRecord
from meshplan.serving.metrics.stream import StreamingLog, StreamingMetrics
from meshplan.serving.traffic.request import Request
from meshplan.serving.traffic.stream import StreamWorkload
from meshplan.serving.traffic.workload import Workload

ARRIVAL, ITERATION, TRANSFER = 0, 1, 2


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    """Per-request records, the iteration log, metrics and what was resolved."""

    records: list[RequestRecord]
    log: IterationLog
    metrics: ServingMetrics
    pools: list[Pool]
    iterations: int
    simulated_s: float
    wall_s: float
    adapter_loads: int = 0
    """LoRA adapters copied host -> GPU over the run (multi-LoRA serving)."""
    streamed: bool = False
    """Metrics were folded as the run went (sketched percentiles, within 0.5%); `records` is
    empty and `log` keeps totals (meshplan.serving.metrics.stream)."""

    def to_dict(self) -> dict:
        """`metrics`, `simulation` and `deployment` as plain data (the CLI's --json)."""
        return {"metrics": self.metrics.to_dict(),
                "simulation": {"requests": self.metrics.completed if self.streamed else len(self.records),
                               "iterations": self.iterations, "streamed": self.streamed,
                               "simulated_s": self.simulated_s, "wall_s": self.wall_s,
                               "simulated_s_per_wall_s": self.simulated_s / max(self.wall_s, 1e-9),
                               "adapter_loads": self.adapter_loads},
                "deployment": [p.to_dict() for p in self.pools],
                "timeseries": self.timeseries()}

    def timeseries(self, bins: int = 50) -> dict:
        """KV-cache utilization (mean over busy replicas) and waiting requests (summed over
        replicas) in `bins` equal time bins (a streamed run: its folded bins, grouped)."""
        if isinstance(self.log, StreamingLog):
            return self.log.timeseries(bins)
        if len(self.log) == 0:
            return {"t_s": [], "kv_utilization": [], "waiting": []}
        t, kv = kv_utilization_over_time(self.log, bins)
        _, waiting = queue_length_over_time(self.log, bins)
        clean = lambda a: [None if v != v else round(float(v), 4) for v in a]  # noqa: E731
        return {"t_s": clean(t), "kv_utilization": clean(kv), "waiting": clean(waiting)}


class Simulation:
    """One run of a deployment over a workload."""

    def __init__(self, model: ModelSpec, cluster: Cluster, plan: ServingPlan, workload: Workload,
                 engine=None, streaming: bool | None = None):
        self.model, self.cluster, self.plan, self.workload = model, cluster, plan, workload
        self.pools = resolve_pools(model, cluster, plan, workload)
        for pool in self.pools:
            check_servable(pool, workload)
        self.streaming = isinstance(workload, StreamWorkload) if streaming is None else streaming
        """Fold finished requests into sketches and iterations into totals as the run goes
        (meshplan.serving.metrics.stream) instead of keeping them: memory flat in the requests."""
        self.log = StreamingLog() if self.streaming else IterationLog()
        self.sink: StreamingMetrics | None = None
        self.groups: list[list[Replica]] = []
        for pool in self.pools:
            first = sum(len(g) for g in self.groups)
            self.groups.append(build_replicas(model, cluster, pool, workload, self.log, first, engine))
        self.entry = Router(plan.router, self.groups[0])
        self.decode = Router("least-outstanding", self.groups[-1]) if len(self.groups) > 1 else None
        self.phase = plan.disaggregated.phase if plan.disaggregated is not None else None
        self.adapters = (assign_adapters(len(workload.requests), plan.lora_adapters, workload.lora_popularity,
                                         workload.lora_zipf_exponent, workload.seed).tolist()
                         if plan.lora_adapters else None)
        """The LoRA adapter of each request (multi-LoRA serving), or None."""
        """The one pool of a disaggregated deployment simulated alone ("prefill", "decode"), or None."""
        self.heap: list[tuple] = []
        self.order = 0
        self.independent = self.decode is None and not workload.concurrency
        """Replicas meet only at arrivals (open loop, one pool): a replica's decode steps may
        then run ahead of other replicas' events, up to the next arrival."""
        self.next_arrival = math.inf
        self.backlogs = isinstance(workload, StreamWorkload) and workload.offline and self.adapters is None
        """An offline streamed run: each replica's share of the requests is built only as its queue
        reaches it (meshplan.serving.engine.backlog); multi-LoRA admission scans the whole queue."""
        self.records: list[RequestRecord] = []
        self.iterations = 0
        self.done = 0
        """Requests finished so far."""

    def _push(self, t: float, kind: int, payload) -> None:
        self.order += 1
        heapq.heappush(self.heap, (t, self.order, kind, payload))

    def run(self, progress: Callable[[int, int], None] | None = None, slo: SLO | None = None) -> SimulationResult:
        """Simulate until every request has finished."""
        with cyclic_gc_paused():
            return self._run(progress, slo)

    def _run(self, progress: Callable[[int, int], None] | None, slo: SLO | None) -> SimulationResult:
        wall = time.perf_counter()
        if self.streaming:
            self.sink = StreamingMetrics(slo, window_end=self._last_arrival())
        reqs, closed = self.workload.requests, self.workload.concurrency
        sent = self._first_arrivals()
        now, total = 0.0, len(reqs)
        while self.heap:
            now, _, kind, payload = heapq.heappop(self.heap)
            if kind == ARRIVAL:
                upcoming = reqs[payload + 1].arrival_s if not closed and payload + 1 < total else math.inf
                self.next_arrival = upcoming
                self._arrive(payload, now, upcoming)
                if not closed and payload + 1 < total:
                    self._push(reqs[payload + 1].arrival_s, ARRIVAL, payload + 1)
            elif kind == ITERATION:
                done = self._iteration_end(payload, now)
                if closed:
                    for _ in range(done):
                        if sent < total:
                            self._push(now, ARRIVAL, sent)
                            sent += 1
                if progress and done:
                    progress(self.done, total)
            else:
                seq, replica = payload
                replica.add(seq)
                self._kick(replica, now)
        return self._result(now, wall, slo)

    def _first_arrivals(self) -> int:
        """Queue the run's first events: a closed loop's first `concurrency` requests, an offline
        stream's per-replica backlogs, or an open loop's first arrival; returns the requests sent."""
        reqs, closed = self.workload.requests, self.workload.concurrency
        sent = min(closed, len(reqs)) if closed else 0
        if closed:
            for i in range(sent):
                self._push(0.0, ARRIVAL, i)
        elif self.backlogs:
            self._arrive_offline()
        elif reqs:
            self._push(reqs[0].arrival_s, ARRIVAL, 0)
            self.next_arrival = reqs[0].arrival_s
        return sent

    def _result(self, now: float, wall: float, slo: SLO | None) -> SimulationResult:
        """The run's metrics (streamed, or from every record) and what else the result carries."""
        if self.sink is not None:
            metrics = self.sink.metrics(self.log)
        else:
            if self.independent and sum(len(g) for g in self.groups) > 1:
                self._canonical_order()
            metrics = compute_metrics(self.records, self.log, slo)
        loads = sum(r.lora.loads for g in self.groups for r in g if r.lora is not None)
        return SimulationResult(records=self.records, log=self.log, metrics=metrics, pools=self.pools,
                                iterations=self.iterations, simulated_s=now,
                                wall_s=time.perf_counter() - wall, adapter_loads=loads,
                                streamed=self.streaming)

    def _last_arrival(self) -> float | None:
        """When the last request arrives, if known before the run (open loop)."""
        w = self.workload
        if w.concurrency or not len(w.requests):
            return None
        return w.last_arrival if isinstance(w, StreamWorkload) else w.requests[-1].arrival_s

    def _arrive(self, index: int, now: float, upcoming: float = math.inf) -> None:
        req = self.workload.requests[index]
        replica = self.entry.pick(req)
        replica.add(self._seq(req, now))
        self._kick(replica, now, upcoming)

    def _seq(self, req: Request, now: float) -> Seq:
        """The engine state and record of a request arriving at `now`."""
        arrival = now if self.workload.concurrency else req.arrival_s
        record = SimulatedRecord(id=req.id, arrival_s=arrival, input_len=req.input_len, output_len=req.output_len)
        seq = Seq(req, record)
        if self.phase == "decode":  # its prompt's KV is already there: it only decodes
            seq.computed, seq.prefilled = req.input_len, True
        if self.adapters is not None:
            seq.adapter = self.adapters[req.id]
        return seq

    def _arrive_offline(self) -> None:
        """Every request at t=0, as the arrival events would bring them, without building them
        all: the first request of each entry replica arrives and starts its first iteration,
        then request i waits on replica i mod n (what each router policy picks while every queue
        grows by one per arrival and nothing finishes; streamed requests carry no prefix-affinity
        key), unbuilt in that replica's backlog until its queue reaches it."""
        reqs, group = self.workload.requests, self.groups[0]
        total, n = len(reqs), len(group)
        for i in range(min(n, total)):
            self.next_arrival = 0.0 if i + 1 < total else math.inf
            self._arrive(i, 0.0, self.next_arrival)
        for r, replica in enumerate(group):
            share = len(range(r + n, total, n))
            replica.feed(Backlog(share, (self._seq(req, 0.0) for req in reqs.strided(r + n, n))))
        self.next_arrival = math.inf

    def _kick(self, replica: Replica, now: float, horizon: float = math.inf) -> None:
        """Start an iteration on an idle replica that has work: first the pure-decode steps that
        end before the next event (`horizon`, or the heap's next), run in place."""
        if replica.busy:
            return
        if self.independent:
            horizon = min(horizon, self.next_arrival)
        elif self.heap:
            horizon = min(horizon, self.heap[0][0])
        now, skipped = replica.skip_decodes(now, horizon)
        self.iterations += skipped
        end = replica.start(now)
        if end is not None:
            self._push(end, ITERATION, replica)

    def _canonical_order(self) -> None:
        """Records by arrival, log rows by end time: when replicas run ahead of each other's
        events, the order things were appended in depends on how far each ran ahead, and
        equal times (identical replicas) would otherwise tie-break differently."""
        self.records.sort(key=lambda r: (r.arrival_s, r.id))
        self.log.sort_rows()

    def _iteration_end(self, replica: Replica, now: float) -> int:
        self.iterations += 1
        replica.finish(now)
        if self.phase is not None:
            self._phase_pool_ends(replica, now)
        done = len(replica.finished)
        self.done += done
        if self.sink is None:
            self.records.extend(replica.finished)
        elif self.sink.add(replica.finished):
            for group in self.groups:  # the records that referenced old decode steps are folded
                for each in group:
                    each.trim_steps()
        replica.finished.clear()
        if self.streaming:
            self.log.maybe_fold()
        for seq in replica.handoff:
            self._transfer(seq, now)
        replica.handoff.clear()
        # a closed loop sends the finished clients' next requests at `now`, after this kick
        self._kick(replica, now, now if done and self.workload.concurrency else math.inf)
        return done

    def _phase_pool_ends(self, replica: Replica, now: float) -> None:
        """A phase pool measured alone: a prefill pool's requests end with the token their
        prefill samples (one output token each); a decode pool's first token is its first
        decode step's."""
        for seq in replica.handoff:
            record = seq.record
            record.output_len, record.finish_s, record.replica = 1, now, replica.index
            record.token_times_s = np.array([record.first_token_s])
            replica.finished.append(record)
        replica.handoff.clear()
        for record in replica.finished:
            if record.first_token_s != record.first_token_s and len(record.token_times_s):
                record.first_token_s = float(record.token_times_s[0])

    def _log_transfer(self, seq: Seq, start: float, end: float, target: Replica) -> None:
        pool = target.pool
        self.log.append(target.index, start, end, 0, 0, 1, len(target.waiting),
                        pool.used, pool.total, kind="transfer")

    def _transfer(self, seq: Seq, now: float) -> None:
        """Ship a prefilled request's KV to a decode replica; it arrives after the transfer."""
        target = self.decode.pick(seq.req)
        size = seq.computed * self.pools[0].memory.kv.bytes_per_token
        cross = self.plan.num_gpus > self.cluster.gpus_per_node
        arrive = now + p2p_time(size, cross, self.cluster) if size else now
        seq.prefilled, seq.units, seq.private = True, (), 0
        seq.record.first_token_s = arrive
        seq.segments = [(arrive, -1)]
        self._log_transfer(seq, now, arrive, target)
        self._push(arrive, TRANSFER, (seq, target))


def check_servable(pool: Pool, workload: Workload) -> None:
    """Refuse, as the engines do, a request no replica of `pool` could ever run: more KV than
    the whole cache holds, or (without chunked prefill) a prompt over the token budget."""
    s, capacity = pool.scheduler, pool.memory.kv_tokens
    requests = workload.requests
    if isinstance(workload, StreamWorkload):  # its longest requests, found when it was generated
        requests = [requests[workload.longest_kv_request],
                    Request(id=-1, arrival_s=0.0, input_len=workload.longest_input, output_len=1)]
    for req in requests:
        kv = req.input_len + (req.output_len if pool.role != "prefill" else 1)
        if kv > capacity:
            raise ConfigError(
                f"request {req.id} needs KV for {kv:,} tokens ({req.input_len:,} prompt + output) but "
                f"{'a' if pool.role == 'both' else 'a ' + pool.role} replica's KV cache holds {capacity:,}; "
                "raise tp/pp, use an fp8 KV cache or "
                f"cap the lengths (the engines refuse such a max_model_len at start-up)")
        if not s.chunked_prefill and pool.role != "decode" and req.input_len > s.max_num_batched_tokens:
            raise ConfigError(
                f"request {req.id} has a {req.input_len:,}-token prompt but max_num_batched_tokens is "
                f"{s.max_num_batched_tokens:,} with chunked prefill off; enable chunked prefill or raise "
                f"max_num_batched_tokens")


def simulate(model: ModelSpec, cluster: Cluster, plan: ServingPlan, workload: Workload, *,
             slo: SLO | None = None, progress: Callable[[int, int], None] | None = None,
             engine=None, streaming: bool | None = None) -> SimulationResult:
    """Simulate serving `workload` with `plan` on `cluster` (see `Simulation`); `streaming`
    (default: when the workload is a StreamWorkload) folds metrics as the run goes."""
    return Simulation(model, cluster, plan, workload, engine, streaming).run(progress, slo)
