"""A pipeline schedule as a text picture: one row per stage, time left to right."""

from __future__ import annotations

from collections.abc import Sequence

from meshplan.training.pipeline.simulate import PipeEvent

SYMBOLS = {"F": "F", "B": "B", "W": "w"}


def text_timeline(events: Sequence[PipeEvent], width: int = 72) -> str:
    """Rows `stage k |FFFFBBBB..|`: each column is step/width seconds; `.` is idle (bubble)."""
    compute = [e for e in events if e.kind in SYMBOLS]
    if not compute:
        return ""
    end = max(e.end_s for e in compute)
    stages = max(e.stage for e in compute) + 1
    rows = [["."] * width for _ in range(stages)]
    for e in compute:
        first = int(e.start_s / end * width)
        last = max(first + 1, int(round(e.end_s / end * width)))
        for col in range(first, min(last, width)):
            rows[e.stage][col] = SYMBOLS[e.kind]
    return "\n".join(f"stage {s:<2d} |{''.join(r)}|" for s, r in enumerate(rows))
