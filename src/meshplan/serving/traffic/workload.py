"""Serving workloads: the requests a simulated deployment receives, synthetic or from a trace.

`WorkloadSpec` is what a user writes; `synthesize(spec, seed)` turns it into a `Workload`
(deterministic for a seed); `from_trace` builds one from rows a trace reader parsed.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from meshplan.errors import ConfigError
from meshplan.serving.traffic.empirical import LengthHistogram, LengthPairs, read_lengths
from meshplan.serving.traffic.lengths import NAMED_TABLES, sample_lengths
from meshplan.serving.traffic.request import Request

Arrival = Literal["offline", "poisson", "gamma", "concurrency"]
Dataset = Literal["fixed", "random", "sharegpt", "sharegpt_vllm", "sharegpt_sglang", "normal", "lognormal",
                  "openorca", "cnn_dailymail", "longbench", "file", "histogram"]
TABLE_KINDS = (*NAMED_TABLES, "file", "histogram")
"""Datasets whose lengths come from data (a packaged table, a file, a histogram), not from
input_len/output_len."""
LoraPopularity = Literal["uniform", "zipf"]


MAX_REQUESTS = 1_000_000
"""Most requests one workload may hold: a simulation costs ~50 us per request (a million take
about a minute), so larger counts would look like a hang; sample a trace window instead."""
MAX_STREAM_REQUESTS = 100_000_000
"""Most requests of a streamed workload (meshplan.serving.traffic.stream), generated a chunk at a
time and folded into sketches as they finish: 10^7 (a busy day) take about as long per request as
a million do."""
MAX_TOKENS = 2**22
"""Longest prompt, output or shared prefix (4,194,304 tokens), above every model's context."""
MAX_TURNS = 1000
"""Most turns per multi-turn session."""


class WorkloadSpec(BaseModel):
    """A synthetic workload: how requests arrive, how long they are, what prompts they share.

    A field given as None takes its default; bad values raise ConfigError naming the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    arrival: Arrival = "offline"
    """offline: every request at t=0; poisson / gamma: open-loop arrivals at request_rate;
    concurrency: closed loop, `concurrency` clients each send the next request when one ends."""
    request_rate: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Mean requests per second (poisson and gamma arrivals)."""
    burstiness: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Gamma shape of inter-arrival times (vLLM --burstiness): < 1 burstier, 1 = Poisson."""
    concurrency: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    """Clients of the closed loop (arrival=concurrency), like vLLM --max-concurrency."""
    num_requests: int = Field(1000, ge=1, le=MAX_STREAM_REQUESTS)
    """Requests in the workload (all turns of all sessions); above MAX_REQUESTS only streamed
    (`stream_workload`)."""
    dataset: Dataset = "random"
    """Length distribution: fixed, random (vLLM's uniform range), normal, lognormal; a named
    public dataset's packaged table (sharegpt: the vLLM paper's ShareGPT; sharegpt_vllm and
    sharegpt_sglang: ShareGPT as `vllm bench serve` and SGLang's bench_serving sample it; openorca,
    cnn_dailymail, longbench: serving/data/NAME_lengths.yaml); file (resample the rows of `lengths_file`, CSV or JSONL);
    histogram (`histogram`, or a YAML `lengths_file`)."""
    input_len: int = Field(1024, ge=1, le=MAX_TOKENS)
    """Prompt tokens of each request's own text (after any shared prefix): the fixed value,
    the centre of `random` or the mean of normal/lognormal."""
    output_len: int = Field(128, ge=1, le=MAX_TOKENS)
    """Output tokens: the fixed value, the centre of `random` or the mean of normal/lognormal."""
    range_ratio: float = Field(0.0, ge=0, lt=1)
    """`random` draws from [floor(L(1-r)), ceil(L(1+r))] (vLLM --random-range-ratio)."""
    input_std: float | None = Field(None, ge=0, allow_inf_nan=False)
    """Standard deviation of prompt lengths (normal, lognormal), tokens."""
    output_std: float | None = Field(None, ge=0, allow_inf_nan=False)
    """Standard deviation of output lengths (normal, lognormal), tokens."""
    max_len: int = Field(4096, ge=2, le=MAX_TOKENS)
    """sharegpt (default 4096), the other named tables, file and histogram (unbounded unless
    given; sharegpt_vllm always at most vLLM's 2048): longest prompt + output (longer pairs are
    redrawn); normal/lognormal: longest single length (clipped)."""
    lengths_file: str | None = None
    """dataset=file: a CSV or JSONL file of (prompt tokens, output tokens) rows;
    dataset=histogram: a YAML file {input: {edges, counts}, output: {edges, counts}}."""
    histogram: LengthHistogram | None = None
    """dataset=histogram: the histogram itself (instead of a YAML lengths_file)."""
    shared_prefix_len: int = Field(0, ge=0, le=MAX_TOKENS)
    """Tokens of a system prompt put before every request's own prompt; 0: none."""
    num_prefixes: int = Field(1, ge=1, le=MAX_REQUESTS)
    """Distinct system prompts; each session picks one uniformly."""
    turns: int = Field(1, ge=1, le=MAX_TURNS)
    """Requests per session; turn k+1's prompt = turn k's prompt + its output + new input."""
    think_time_s: float = Field(0.0, ge=0, allow_inf_nan=False)
    """Seconds between the arrivals of consecutive turns of a session."""
    hash_block_tokens: int = Field(16, ge=1)
    """Tokens per prefix hash block (vLLM's KV block size is 16)."""
    lora_popularity: LoraPopularity = "uniform"
    """How requests pick among the plan's LoRA adapters (multi-LoRA serving): uniform, or
    zipf (adapter k with probability ~ 1 / (k+1)^lora_zipf_exponent)."""
    lora_zipf_exponent: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Exponent of the zipf adapter popularity (S-LoRA's experiments use power laws)."""

    def __init__(self, **data: Any) -> None:
        fields = type(self).model_fields
        given = {k: v for k, v in data.items()
                 if v is not None or getattr(fields.get(k), "default", None) is None}
        try:
            super().__init__(**given)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(spec)"
            raise ConfigError(f"workload field {where} = {err.get('input')!r}: {err['msg']}") from None

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        problem = next(_combination_problems(self), None)
        if problem is not None:
            raise ConfigError(f"workload: {problem}")
        return self


def _combination_problems(spec: WorkloadSpec) -> Iterator[str]:
    """One sentence per field that does not fit the others."""
    chosen = spec.model_fields_set
    if spec.arrival in ("poisson", "gamma") and spec.request_rate is None:
        yield f"arrival={spec.arrival!r} needs request_rate (requests per second, > 0)"
    if spec.arrival in ("offline", "concurrency") and spec.request_rate is not None:
        yield f"request_rate={spec.request_rate} is only used with arrival='poisson' or 'gamma'"
    if spec.arrival == "concurrency" and spec.concurrency is None:
        yield "arrival='concurrency' needs concurrency (number of closed-loop clients, >= 1)"
    if spec.arrival != "concurrency" and spec.concurrency is not None:
        yield f"concurrency={spec.concurrency} is only used with arrival='concurrency'"
    if spec.arrival != "gamma" and spec.burstiness != 1.0:
        yield f"burstiness={spec.burstiness} is only used with arrival='gamma' (1 = Poisson)"
    yield from _dataset_problems(spec, chosen)
    if spec.num_prefixes > 1 and spec.shared_prefix_len == 0:
        yield f"num_prefixes={spec.num_prefixes} needs shared_prefix_len > 0"
    if spec.think_time_s > 0 and spec.turns == 1:
        yield f"think_time_s={spec.think_time_s} needs turns > 1"
    if spec.lora_popularity != "zipf" and "lora_zipf_exponent" in chosen:
        yield "lora_zipf_exponent is only used with lora_popularity='zipf'"


def _dataset_problems(spec: WorkloadSpec, chosen: set[str]) -> Iterator[str]:
    kind = spec.dataset
    for name in ("input_std", "output_std"):
        given = getattr(spec, name) is not None
        if kind in ("normal", "lognormal") and not given:
            yield f"dataset={kind!r} needs {name} (standard deviation of the lengths, tokens)"
        if kind not in ("normal", "lognormal") and given:
            yield f"{name} is only used with dataset='normal' or 'lognormal', not {kind!r}"
    if kind != "random" and spec.range_ratio != 0:
        yield f"range_ratio={spec.range_ratio} is only used with dataset='random', not {kind!r}"
    if kind in TABLE_KINDS:
        for name in sorted({"input_len", "output_len"} & chosen):
            yield f"{name} is not used with dataset={kind!r} (lengths come from its data)"
    if kind in ("fixed", "random") and "max_len" in chosen:
        yield f"max_len is only used with a table, file, histogram, normal or lognormal dataset, not {kind!r}"
    yield from _source_problems(spec)


def _source_problems(spec: WorkloadSpec) -> Iterator[str]:
    kind, path, hist = spec.dataset, spec.lengths_file, spec.histogram
    yaml = path is not None and path.lower().endswith((".yaml", ".yml"))
    if kind == "file" and (path is None or yaml):
        yield "dataset='file' needs lengths_file, a .csv or .jsonl file of (prompt, output) lengths"
    if kind == "histogram" and (hist is None) == (path is None or not yaml):
        yield "dataset='histogram' needs either histogram (edges and counts) or a .yaml lengths_file, not both"
    if kind not in ("file", "histogram") and (path is not None or hist is not None):
        yield f"lengths_file and histogram are only used with dataset='file' or 'histogram', not {kind!r}"


def lengths_source(spec: WorkloadSpec) -> LengthPairs | LengthHistogram | None:
    """What dataset=file/histogram draws from: the file read now, or the inline histogram."""
    if spec.histogram is not None:
        return spec.histogram
    return read_lengths(spec.lengths_file) if spec.lengths_file is not None else None


def pair_bound(spec: WorkloadSpec) -> int | None:
    """The max_len a sampler applies: always for sharegpt, normal and lognormal (their defaults),
    for the other tables, files and histograms only when given."""
    if spec.dataset in ("sharegpt", "normal", "lognormal") or "max_len" in spec.model_fields_set:
        return spec.max_len
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Requests sorted by arrival, and how the simulator should feed them."""

    requests: list[Request]
    """Requests sorted by arrival time; ids are their positions."""
    hash_block_tokens: int = 16
    """Tokens per entry of Request.prefix_hashes (16 for synthetic workloads, 512 for Mooncake)."""
    concurrency: int | None = None
    """Closed loop: keep this many requests outstanding and ignore arrival_s; None: open loop."""
    description: str = ""
    """One line saying where the workload came from."""
    skipped: list[str] = field(default_factory=list)
    """One note per trace row that was not used (malformed, or a failed request)."""
    lora_popularity: str = "uniform"
    """How requests pick LoRA adapters (see WorkloadSpec.lora_popularity)."""
    lora_zipf_exponent: float = 1.0
    """Exponent of a zipf adapter popularity."""
    seed: int = 0
    """Seed of the synthetic workload (adapters are drawn from a stream of their own)."""

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def total_input_tokens(self) -> int:
        """Prompt tokens over all requests."""
        return sum(r.input_len for r in self.requests)

    @property
    def total_output_tokens(self) -> int:
        """Output tokens over all requests."""
        return sum(r.output_len for r in self.requests)


def block_hashes(segments: Sequence[tuple[int, int]], block_tokens: int, *, salt: int = 0,
                 known: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Chained hashes of the full blocks of a prompt made of (segment id, tokens) pieces.

    Block i's hash covers every token up to its end, so two prompts share it iff they share
    their first (i+1) * block_tokens tokens. `known` are hashes already computed for the
    same leading blocks (a previous turn); they are kept and hashing resumes after them.
    """
    hashes = list(known)
    prev = hashes[-1] if hashes else salt
    for i, pieces in enumerate(_blocks(segments, block_tokens)):
        if i < len(known):
            continue
        flat = [v for piece in pieces for v in piece]
        data = struct.pack(f"<{len(flat) + 1}Q", prev, *flat)
        prev = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
        hashes.append(prev)
    return tuple(hashes)


def _blocks(segments: Sequence[tuple[int, int]], block: int) -> Iterator[list[tuple[int, int, int]]]:
    """The (segment, start, end) pieces of each full block, in order."""
    pieces: list[tuple[int, int, int]] = []
    filled = 0
    for seg, length in segments:
        pos = 0
        while pos < length:
            take = min(block - filled, length - pos)
            pieces.append((seg, pos, pos + take))
            pos, filled = pos + take, filled + take
            if filled == block:
                yield pieces
                pieces, filled = [], 0


def _session_starts(spec: WorkloadSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """Session start times: 0 for offline/concurrency, else a gamma renewal process from 0."""
    if spec.arrival in ("offline", "concurrency"):
        return np.zeros(n)
    shape = spec.burstiness if spec.arrival == "gamma" else 1.0
    rate = spec.request_rate / spec.turns  # sessions per second: requests/s over all turns
    gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    return np.concatenate(([0.0], np.cumsum(gaps[:-1])))  # first request at 0, like vLLM


def synthesize(spec: WorkloadSpec, seed: int = 0) -> Workload:
    """Draw the requests of `spec`; the same seed gives the same workload."""
    if spec.num_requests > MAX_REQUESTS:
        raise ConfigError(f"num_requests = {spec.num_requests:,} is over {MAX_REQUESTS:,}, the most a workload "
                          f"holds in memory; stream it (meshplan.serving.traffic.stream.stream_workload, "
                          f"or serve simulate, which streams such runs by itself)")
    rng = np.random.default_rng(seed)
    sessions = math.ceil(spec.num_requests / spec.turns)
    users, outputs = sample_lengths(
        spec.dataset, sessions * spec.turns, rng, input_len=spec.input_len,
        output_len=spec.output_len, range_ratio=spec.range_ratio, input_std=spec.input_std,
        output_std=spec.output_std, max_len=pair_bound(spec), source=lengths_source(spec))
    starts = _session_starts(spec, sessions, rng)
    prefixes = rng.integers(spec.num_prefixes, size=sessions)
    if spec.turns == 1 and not spec.shared_prefix_len:
        drafts = _single_turns(spec, starts, users, outputs)
    else:
        drafts = _sessions(spec, seed, starts, prefixes, users, outputs)
    return Workload(requests=_sorted(drafts), hash_block_tokens=spec.hash_block_tokens,
                    concurrency=spec.concurrency, description=_describe_spec(spec, seed),
                    lora_popularity=spec.lora_popularity, lora_zipf_exponent=spec.lora_zipf_exponent, seed=seed)


def _sessions(spec: WorkloadSpec, seed: int, starts: np.ndarray, prefixes: np.ndarray,
              users: np.ndarray, outputs: np.ndarray) -> list[Request]:
    """The requests of every session, turn by turn, their prompts hashed for prefix caching."""
    builder = _SessionBuilder(spec=spec, salt=seed % 2**64, next_segment=spec.num_prefixes)
    drafts: list[Request] = []
    for s in range(len(starts)):
        turns = min(spec.turns, spec.num_requests - s * spec.turns)
        rows = slice(s * spec.turns, s * spec.turns + turns)
        drafts += builder.session(s, float(starts[s]), int(prefixes[s]), users[rows], outputs[rows])
    return drafts


def _single_turns(spec: WorkloadSpec, starts: np.ndarray, users: np.ndarray,
                  outputs: np.ndarray) -> list[Request]:
    """Sessions of one turn and no shared system prompt: one unhashed request each, as
    `_SessionBuilder.session` makes them, without its per-turn segment bookkeeping (the
    offline benchmarks' thousands of requests)."""
    first_turn = 0 * spec.think_time_s  # the turn offset `session` adds (k = 0)
    return [Request(id=0, arrival_s=start + first_turn, input_len=user, output_len=out)
            for start, user, out in zip(starts.tolist(), users.tolist(), outputs.tolist())]


@dataclass(slots=True, kw_only=True)
class _SessionBuilder:
    """Builds the turns of sessions, handing out fresh segment ids for unique content."""

    spec: WorkloadSpec
    salt: int
    next_segment: int
    system: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Hashes of each system prompt's own full blocks, computed once."""

    def session(self, index: int, start_s: float, prefix: int, users: np.ndarray,
                outputs: np.ndarray) -> list[Request]:
        spec = self.spec
        hashing = spec.shared_prefix_len > 0 or spec.turns > 1
        segments = [(prefix, spec.shared_prefix_len)] if spec.shared_prefix_len else []
        hashes = self._system(prefix) if spec.shared_prefix_len else ()
        made: list[Request] = []
        for k, (user, out) in enumerate(zip(users.tolist(), outputs.tolist())):
            segments.append((self._fresh(), user))
            if hashing:
                hashes = block_hashes(segments, spec.hash_block_tokens, salt=self.salt, known=hashes)
            made.append(Request(
                id=0, arrival_s=start_s + k * spec.think_time_s, input_len=sum(n for _, n in segments),
                output_len=out, prefix_hashes=hashes, session=index if spec.turns > 1 else None))
            segments.append((self._fresh(), out))  # the answer becomes part of the next prompt
        return made

    def _system(self, prefix: int) -> tuple[int, ...]:
        if prefix not in self.system:
            self.system[prefix] = block_hashes([(prefix, self.spec.shared_prefix_len)],
                                               self.spec.hash_block_tokens, salt=self.salt)
        return self.system[prefix]

    def _fresh(self) -> int:
        self.next_segment += 1
        return self.next_segment - 1


def _sorted(requests: list[Request]) -> list[Request]:
    """Stable sort by arrival (ties keep generation order), then number the requests."""
    ordered = sorted(requests, key=lambda r: r.arrival_s)
    for i, request in enumerate(ordered):
        request.id = i
    return ordered


def _describe_spec(spec: WorkloadSpec, seed: int) -> str:
    how = {"offline": "offline (all at t=0)", "concurrency": f"{spec.concurrency} closed-loop clients",
           "poisson": f"poisson at {spec.request_rate} req/s",
           "gamma": f"gamma at {spec.request_rate} req/s, burstiness {spec.burstiness}"}[spec.arrival]
    extra = f", {spec.turns} turns per session" if spec.turns > 1 else ""
    if spec.shared_prefix_len:
        extra += f", {spec.num_prefixes} system prompt(s) of {spec.shared_prefix_len} tokens"
    lengths = f"{spec.dataset} ({spec.lengths_file})" if spec.lengths_file else spec.dataset
    return f"synthetic: {spec.num_requests} requests, {lengths} lengths, {how}{extra}, seed {seed}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceRow:
    """One request as a trace reader parsed it (times in the trace's own seconds)."""

    arrival_s: float
    input_len: int
    output_len: int
    prefix_hashes: tuple[int, ...] = ()


def from_trace(rows: Iterable[TraceRow], *, hash_block_tokens: int = 16, description: str = "",
               time_scale: float = 1.0, max_requests: int | None = None, start_s: float = 0.0,
               duration_s: float | None = None, skipped: Sequence[str] = ()) -> Workload:
    """A Workload from parsed trace rows: sorted, shifted so the first request arrives at 0.

    start_s / duration_s select a window in trace seconds after the first request; the
    kept requests are shifted to start at 0, then every time is multiplied by time_scale
    (0.5 replays the trace twice as fast); max_requests keeps the first that many.
    """
    _check_window(time_scale, max_requests, start_s, duration_s)
    ordered = sorted(rows, key=lambda r: r.arrival_s)
    if not ordered:
        raise ConfigError(f"{description or 'trace'}: no usable requests")
    t0 = ordered[0].arrival_s + start_s
    end = math.inf if duration_s is None else t0 + duration_s
    kept = [r for r in ordered if t0 <= r.arrival_s < end][:max_requests]
    if len(kept) > MAX_REQUESTS:
        raise ConfigError(f"{description or 'trace'}: {len(kept):,} requests to replay; the limit "
                          f"is {MAX_REQUESTS:,} (set max_requests / --num-requests or a duration)")
    if not kept:
        raise ConfigError(f"{description or 'trace'}: no request in the window start_s={start_s}, "
                          f"duration_s={duration_s} (the trace spans "
                          f"{ordered[-1].arrival_s - ordered[0].arrival_s:g} s)")
    first = kept[0].arrival_s
    requests = [Request(id=i, arrival_s=(r.arrival_s - first) * time_scale, input_len=r.input_len,
                        output_len=r.output_len, prefix_hashes=r.prefix_hashes)
                for i, r in enumerate(kept)]
    if len(kept) < len(ordered) or time_scale != 1:
        description += f"; replaying {len(kept)} of them, times x{time_scale:g}"
    return Workload(requests=requests, hash_block_tokens=hash_block_tokens,
                    description=description, skipped=list(skipped))


def _check_window(time_scale: float, max_requests: int | None, start_s: float,
                  duration_s: float | None) -> None:
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ConfigError(f"time_scale = {time_scale!r} must be a finite number > 0 "
                          f"(0.5 replays twice as fast, 2 half as fast)")
    if max_requests is not None and max_requests < 1:
        raise ConfigError(f"max_requests = {max_requests!r} must be >= 1 (or None for all)")
    if not (math.isfinite(start_s) and start_s >= 0):
        raise ConfigError(f"start_s = {start_s!r} must be a finite number of seconds >= 0")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"duration_s = {duration_s!r} must be a finite number of seconds > 0")
