"""The engine-side state of one request while a replica serves it."""

from __future__ import annotations

from meshplan.serving.traffic.request import Request, RequestRecord


class Seq:
    """A request inside one replica: how much of it is computed, what KV it holds."""

    __slots__ = ("req", "record", "prompt", "computed", "generated", "units", "private",
                 "window_blocks", "c0", "offset", "finish_c", "segments", "reserved_full",
                 "prefilled", "adapter")

    def __init__(self, req: Request, record: RequestRecord):
        self.req, self.record = req, record
        self.prompt = req.input_len
        """Tokens to (re)compute before decoding: the prompt, plus output after a preemption."""
        self.computed = 0
        """Tokens whose KV is in the cache."""
        self.generated = 0
        """Output tokens emitted so far."""
        self.units: tuple[int, ...] = ()
        """Cached prefix units this request references."""
        self.private = 0
        """Private KV blocks held (while decoding: at the time it joined the decode set)."""
        self.window_blocks = 0
        """Blocks held for window-bounded layers."""
        self.c0 = 0
        """Decode step at which it joined the decode set."""
        self.offset = 0
        """Block-phase offset: the KV slot index reserved at its first decode step."""
        self.finish_c = 0
        """Decode step at whose end it emits its last token."""
        self.segments: list[tuple[int, int]] = []
        """(first decode step, steps) runs of decode steps, for its token times."""
        self.reserved_full = False
        """All blocks of prompt + output were reserved at admission (no-evict scheduling)."""
        self.prefilled = False
        """Its prompt KV arrived from a prefill pool (disaggregated decode side)."""
        self.adapter = -1
        """The LoRA adapter it uses (multi-LoRA serving); -1: the base model."""

    @property
    def remaining_prompt(self) -> int:
        """Prompt tokens still to compute."""
        return self.prompt - self.computed

    @property
    def remaining_output(self) -> int:
        """Output tokens still to emit."""
        return self.req.output_len - self.generated


def rebased(segments: list[tuple[float, int]], base: int) -> list[tuple[float, int]]:
    """`segments` with each decode run's first step counted from step `base` (the decode-step
    times a replica dropped from the front of its array), prefill emissions unchanged."""
    if not base:
        return segments
    return [(a - base, b) if b != -1 else (a, b) for a, b in segments]
