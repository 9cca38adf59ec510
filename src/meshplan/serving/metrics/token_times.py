"""Token times of simulated requests, built when first read.

A replica knows a request's output-token times only as the tokens its prefills emitted and the
runs of decode steps it took part in (the replica keeps every decode step's end time in one
growing array). Building a numpy array per request as it finished cost more than the rest of
that request's bookkeeping, and the metrics need only the gaps, which are mostly differences
of the shared step times. So a simulated record keeps that description and builds
`token_times_s` when it is first read -- the same values by the same arithmetic -- and
`decode_run` lets the ITL metric (meshplan.serving.metrics.itl) use the shared step times directly.
"""

from __future__ import annotations

from array import array

import numpy as np

from meshplan.serving.traffic.request import RequestRecord

Segments = list[tuple[float, int]]
"""A request's emissions in order: (time, -1) for a token its prefill sampled, (first decode
step, steps) for a run of decode steps (see `Seq.segments`)."""


def build_token_times(ends: array, segments: Segments, tokens_per_step: float,
                      output_len: int) -> np.ndarray:
    """Emission times of every output token, from prefill emissions and decode runs over the
    replica's decode-step end times `ends` (cut to `output_len`)."""
    parts = []
    for a, b in segments:
        if b == -1:
            parts.append(np.array([a]))
        elif b > 0:
            parts.append(_run_times(ends, int(a), b, tokens_per_step))
    out = np.concatenate(parts) if parts else np.empty(0)
    return out[:output_len]


def _run_times(ends: array, c0: int, steps: int, tokens_per_step: float) -> np.ndarray:
    """Times of the tokens of `steps` decode steps from step `c0` (several a step, sharing its
    time, when speculative decoding emits more than one)."""
    step_times = np.frombuffer(ends, float, steps, 8 * c0).copy()
    if tokens_per_step == 1.0:
        return step_times
    per = np.diff(np.floor(np.arange(steps + 1) * tokens_per_step + 1e-9)).astype(int)
    return np.repeat(step_times, per)


_TIMES_SLOT = RequestRecord.token_times_s
"""The dataclass slot holding a record's token times (shadowed below by a property)."""


class SimulatedRecord(RequestRecord):
    """A `RequestRecord` whose `token_times_s` is built from its replica's decode steps the
    first time it is read (assigning it, as any record allows, replaces that)."""

    __slots__ = ("_source",)

    @property
    def token_times_s(self) -> np.ndarray:
        """Emission time of every output token (see `RequestRecord.token_times_s`)."""
        if self._source is not None:
            self.token_times_s = build_token_times(*self._source)
        return _TIMES_SLOT.__get__(self, RequestRecord)

    @token_times_s.setter
    def token_times_s(self, value: np.ndarray) -> None:
        _TIMES_SLOT.__set__(self, value)
        self._source = None

    def set_decode_source(self, ends: array, segments: Segments, tokens_per_step: float,
                          output_len: int) -> None:
        """Token times to be built from these (the arguments of `build_token_times`); `ends`
        may grow meanwhile, its first values never change."""
        self._source = (ends, segments, tokens_per_step, output_len)

    def decode_run(self) -> tuple[array, float, int, int] | None:
        """(ends, first, c0, tokens) when the token times, not built yet, are `first` (the
        prefill's token) then one token per decode step from step `c0` of `ends`, `tokens` in
        all; None for any other shape (preempted, speculative, already built or assigned)."""
        if self._source is None:
            return None
        ends, segments, tokens_per_step, output_len = self._source
        if tokens_per_step != 1.0 or not 1 <= len(segments) <= 2 or segments[0][1] != -1:
            return None
        c0, steps = segments[1] if len(segments) == 2 else (0, 0)
        if steps < 0:
            return None
        return ends, segments[0][0], int(c0), min(1 + steps, output_len)
