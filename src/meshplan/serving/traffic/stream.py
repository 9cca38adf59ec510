"""A synthetic workload generated lazily, a chunk of requests at a time, for runs of millions of
requests (a day of traffic) in memory that does not grow with their number.

`stream_workload(spec, seed)` returns a `StreamWorkload`: chunk k of `CHUNK` requests draws its
lengths and inter-arrival gaps from its own generator, seeded by (seed, k), so any chunk can be
rebuilt alone; one pass over the chunks at construction keeps only what the simulator asks of the
whole workload (mean and longest lengths, where each chunk's arrivals start). Its `requests`
build a `Request` when indexed and hold one chunk's arrays. Single-turn requests without shared
prefixes only (no prefix hashes to keep); the same seed gives the same requests, but not the
same as `synthesize` (which draws all lengths from one generator).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from meshplan.errors import ConfigError
from meshplan.serving.traffic.lengths import Pairs, length_sampler
from meshplan.serving.traffic.request import Request
from meshplan.serving.traffic.workload import WorkloadSpec, lengths_source, pair_bound

CHUNK = 1 << 16
"""Requests generated at once (about 2 MB of arrays)."""


class LazyRequests:
    """The requests of a StreamWorkload, built a chunk at a time on access (one chunk kept)."""

    __slots__ = ("_count", "_draw", "_chunk", "_loaded")

    def __init__(self, count: int, draw) -> None:
        self._count, self._draw = count, draw
        self._loaded, self._chunk = -1, []

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> Request:
        if not -self._count <= index < self._count:
            raise IndexError(index)
        index %= self._count
        chunk, at = divmod(index, CHUNK)
        if chunk != self._loaded:
            arrival, inputs, outputs = self._draw(chunk)
            first = chunk * CHUNK
            self._chunk = [Request(id=first + i, arrival_s=t, input_len=a, output_len=b) for i, (t, a, b)
                           in enumerate(zip(arrival.tolist(), inputs.tolist(), outputs.tolist()))]
            self._loaded = chunk
        return self._chunk[at]

    def __iter__(self):
        return (self[i] for i in range(self._count))

    def strided(self, first: int, step: int) -> Iterator[Request]:
        """Requests first, first + step, ... in order, each built when reached (the same Request
        indexing gives). It draws the chunks it crosses itself and keeps one chunk's lengths, so
        readers at different places (the replicas of an offline run) do not evict each other's."""
        loaded, columns = -1, ([], [], [])
        for i in range(first, self._count, step):
            chunk, at = divmod(i, CHUNK)
            if chunk != loaded:
                columns, loaded = [a.tolist() for a in self._draw(chunk)], chunk
            yield Request(id=i, arrival_s=columns[0][at], input_len=columns[1][at], output_len=columns[2][at])


@dataclass(slots=True, kw_only=True)
class StreamWorkload:
    """A lazily generated synthetic workload (see the module docstring); the attributes the
    simulator reads are those of `Workload`, plus the whole-workload facts it would otherwise
    compute by walking every request."""

    requests: LazyRequests
    hash_block_tokens: int = 16
    concurrency: int | None = None
    description: str = ""
    skipped: list[str] = field(default_factory=list)
    lora_popularity: str = "uniform"
    lora_zipf_exponent: float = 1.0
    seed: int = 0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    longest_input: int = 0
    """Longest prompt of any request."""
    longest_kv: int = 0
    """Largest prompt + output of any request."""
    longest_kv_request: int = 0
    """The id of that request."""
    offline: bool = False
    """Every request arrives at t=0."""
    last_arrival: float = 0.0
    """When the last request arrives (open loop), s."""

    def __len__(self) -> int:
        return len(self.requests)


@dataclass(slots=True)
class _Chunks:
    """Draws chunk k of a spec from generator (seed, k); arrivals start at `starts[k]`."""

    spec: WorkloadSpec
    seed: int
    sampler: Pairs
    starts: list[float] = field(default_factory=list)

    def size(self, k: int) -> int:
        return min(CHUNK, self.spec.num_requests - k * CHUNK)

    def raw(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(gaps to each next request, prompt lengths, output lengths) of chunk k."""
        rng = np.random.default_rng([self.seed, k])
        n, spec = self.size(k), self.spec
        inputs, outputs = self.sampler(n, rng)
        if spec.arrival in ("offline", "concurrency"):
            return np.zeros(n), inputs, outputs
        shape = spec.burstiness if spec.arrival == "gamma" else 1.0
        return rng.gamma(shape, 1.0 / (spec.request_rate * shape), size=n), inputs, outputs

    def __call__(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        gaps, inputs, outputs = self.raw(k)
        arrival = self.starts[k] + np.concatenate(([0.0], np.cumsum(gaps[:-1])))
        return arrival, inputs, outputs


def stream_workload(spec: WorkloadSpec, seed: int = 0) -> StreamWorkload:
    """The requests of `spec` as a StreamWorkload (one pass over its chunks now)."""
    if spec.turns != 1 or spec.shared_prefix_len:
        raise ConfigError("a streamed workload (more than a million requests, or --stream) has single-turn "
                          "requests without a shared prefix; drop turns / shared_prefix_len")
    sampler = length_sampler(spec.dataset, input_len=spec.input_len, output_len=spec.output_len,
                             range_ratio=spec.range_ratio, input_std=spec.input_std,
                             output_std=spec.output_std, max_len=pair_bound(spec), source=lengths_source(spec))
    chunks = _Chunks(spec, seed, sampler)
    made = StreamWorkload(requests=LazyRequests(spec.num_requests, chunks), hash_block_tokens=spec.hash_block_tokens,
                          concurrency=spec.concurrency, lora_popularity=spec.lora_popularity,
                          lora_zipf_exponent=spec.lora_zipf_exponent, seed=seed,
                          offline=spec.arrival == "offline")
    start = 0.0
    for k in range(-(-spec.num_requests // CHUNK)):
        chunks.starts.append(start)
        gaps, inputs, outputs = chunks.raw(k)
        made.last_arrival = float((start + np.concatenate(([0.0], np.cumsum(gaps[:-1]))))[-1])
        start += float(gaps.sum())
        _tally(made, k, inputs, outputs)
    made.description = (f"synthetic, streamed: {spec.num_requests} requests, {spec.dataset} lengths, "
                        f"{_arrival(spec)}, seed {seed}")
    return made


def _tally(made: StreamWorkload, k: int, inputs: np.ndarray, outputs: np.ndarray) -> None:
    """Fold one chunk's lengths into the whole-workload facts."""
    made.total_input_tokens += int(inputs.sum())
    made.total_output_tokens += int(outputs.sum())
    made.longest_input = max(made.longest_input, int(inputs.max()))
    kv = inputs + outputs
    at = int(np.argmax(kv))
    if kv[at] > made.longest_kv:
        made.longest_kv, made.longest_kv_request = int(kv[at]), k * CHUNK + at


def _arrival(spec: WorkloadSpec) -> str:
    return {"offline": "offline (all at t=0)", "concurrency": f"{spec.concurrency} closed-loop clients",
            "poisson": f"poisson at {spec.request_rate} req/s",
            "gamma": f"gamma at {spec.request_rate} req/s, burstiness {spec.burstiness}"}[spec.arrival]
