"""Chrome/Perfetto traces of a simulated pipeline step (open in ui.perfetto.dev, chrome://tracing).

One process per pipeline stage ("stage N"), one thread per stream: "compute" for F/B/W,
"pp p2p" for sends, then any extra streams ("tp comm", "dp comm", ...) in order of appearance.
Complete events ("ph": "X") with microsecond "ts" and "dur", as the JSON object format expects.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from os import PathLike
from pathlib import Path

from meshplan.training.pipeline.simulate import PipeEvent

COMPUTE, P2P = "compute", "pp p2p"
_COMPUTE_KINDS = frozenset({"F", "B", "W"})


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _complete(name: str, cat: str, pid: int, tid: int, start_s: float, end_s: float,
              args: dict) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": _us(start_s),
            "dur": _us(end_s - start_s), "args": args}


def _metadata(threads: dict[tuple[int, int], str]) -> list[dict]:
    """process_name / thread_name records and sort indexes for every (stage, stream) used."""
    out: list[dict] = []
    for pid in sorted({pid for pid, _ in threads}):
        out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"name": f"stage {pid}"}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"sort_index": pid}})
    for (pid, tid), stream in sorted(threads.items()):
        out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": stream}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"sort_index": tid}})
    return out


def chrome_trace(events: Sequence[PipeEvent], *,
                 extra: Sequence[tuple[int, str, str, float, float]] = (),
                 metadata: dict | None = None) -> dict:
    """Chrome/Perfetto trace ({"traceEvents": [...]}) of pipeline events: pid = stage, tid =
    stream ("compute" first, then "pp p2p"). `extra` adds (stage, stream, label, start_s, end_s)
    complete events on other streams; `metadata` goes to "otherData"."""
    tids = {COMPUTE: 0, P2P: 1}
    threads: dict[tuple[int, int], str] = {}
    out: list[dict] = []
    for ev in events:
        stream = COMPUTE if ev.kind in _COMPUTE_KINDS else P2P
        threads[(ev.stage, tids[stream])] = stream
        out.append(_complete(f"{ev.kind} mb{ev.microbatch} c{ev.chunk}", ev.kind, ev.stage,
                             tids[stream], ev.start_s, ev.end_s,
                             {"microbatch": ev.microbatch, "chunk": ev.chunk}))
    for stage, stream, label, start_s, end_s in extra:
        tid = tids.setdefault(stream, len(tids))
        threads[(stage, tid)] = stream
        out.append(_complete(label, stream, stage, tid, start_s, end_s, {}))
    return {"traceEvents": _metadata(threads) + out, "displayTimeUnit": "ms",
            "otherData": dict(metadata or {})}


def write_trace(path: str | PathLike[str], trace: dict) -> None:
    """Write `trace` as JSON (gzip-compressed when the name ends in .gz; Perfetto reads both)."""
    from meshplan.outfiles import write_atomic

    path = Path(path)
    data = json.dumps(trace, separators=(",", ":")).encode()
    write_atomic(path, gzip.compress(data) if path.suffix == ".gz" else data, "--trace")
