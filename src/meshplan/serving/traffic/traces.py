"""Read public LLM-serving traces (BurstGPT, Azure LLM inference, Mooncake) into Workloads.

Every reader names a malformed row by file:line, column and value. on_error="stop" raises
ConfigError at the first one; "skip" leaves the row out and adds a note to Workload.skipped.
"""

from __future__ import annotations

import csv
import gzip
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import IO, Any, Literal

from meshplan.userfiles import check_readable, loads
from meshplan.errors import ConfigError
from meshplan.serving.traffic.workload import TraceRow, Workload, from_trace

TraceFormat = Literal["burstgpt", "azure", "mooncake"]
OnError = Literal["stop", "skip"]
MOONCAKE_BLOCK_TOKENS = 512
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
_AZURE_TIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?$")


class _BadRow(Exception):
    """Why one row cannot be used (caught per row, never escapes this module)."""


def _bad_cell(column: str, value: Any, expected: str) -> _BadRow:
    return _BadRow(f"column {column!r} = {value!r} is invalid; expected {expected}")


MAX_TRACE_ROWS = 20_000_000
"""Most rows (requests) a trace file may hold: the public BurstGPT release holds about 5.3 million."""


@dataclass(slots=True, kw_only=True)
class _Collector:
    """The rows read so far and the notes on rows left out."""

    name: str
    on_error: str
    rows: list[TraceRow] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    malformed: int = 0

    def check_count(self, line: int) -> None:
        """Refuse a trace past MAX_TRACE_ROWS rows (at the first row over, not after reading it all)."""
        if line > MAX_TRACE_ROWS + 1:
            raise ConfigError(f"{self.name}: more than {MAX_TRACE_ROWS:,} requests; the limit is "
                              f"{MAX_TRACE_ROWS:,} (cut the trace, e.g. with head)")

    def bad(self, line: int, problem: str) -> None:
        message = f"{self.name}:{line}: {problem}"
        if self.on_error == "stop":
            raise ConfigError(f"{message} (pass on_error='skip' to leave such rows out)")
        self.skipped.append(message)
        self.malformed += 1


def _int(value: str, column: str, minimum: int) -> int:
    try:
        number = int(value.strip())
    except (ValueError, AttributeError):
        raise _bad_cell(column, value, f"a whole number >= {minimum}") from None
    if number < minimum:
        raise _bad_cell(column, value, f"a whole number >= {minimum}")
    return number


def _seconds(value: str, column: str) -> float:
    try:
        number = float(value.strip())
    except (ValueError, AttributeError):
        raise _bad_cell(column, value, "a finite number of seconds") from None
    if not math.isfinite(number):
        raise _bad_cell(column, value, "a finite number of seconds")
    return number


def _open(path: Path) -> IO[str]:
    check_readable(path, "trace")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return path.open(newline="", encoding="utf-8")


def _csv_rows(path: Path, needed: Sequence[str], sink: _Collector) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, {column: text}) of each data row; short or long rows go to sink.bad."""
    with _open(path) as handle:
        reader = csv.reader(handle)
        header = [name.strip() for name in next(reader, [])]
        missing = [name for name in needed if name not in header]
        if missing:
            raise ConfigError(f"{path}: missing column(s) {', '.join(map(repr, missing))}; found "
                              f"{', '.join(map(repr, header)) or 'no header'}; needed "
                              f"{', '.join(map(repr, needed))}")
        for cells in reader:
            sink.check_count(reader.line_num)
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                sink.bad(reader.line_num, f"expected {len(header)} columns "
                                          f"({', '.join(header)}), found {len(cells)}")
                continue
            yield reader.line_num, dict(zip(header, cells))


def _parse_burstgpt(path: Path, sink: _Collector, model: str | None = None) -> str:
    """BurstGPT rows; Response tokens == 0 marks a failed request, left out with a note."""
    failed = other_models = 0
    for line, row in _csv_rows(path, BURSTGPT_COLUMNS, sink):
        if model is not None and row["Model"].strip() != model:
            other_models += 1
            continue
        try:
            at = _seconds(row["Timestamp"], "Timestamp")
            answer = _int(row["Response tokens"], "Response tokens", 0)
            if answer == 0:
                failed += 1
                sink.skipped.append(f"{sink.name}:{line}: failed request (Response tokens = 0), "
                                    f"left out as BurstGPT failures are")
                continue
            prompt = _int(row["Request tokens"], "Request tokens", 1)
        except _BadRow as exc:
            sink.bad(line, str(exc))
            continue
        sink.rows.append(TraceRow(arrival_s=at, input_len=prompt, output_len=answer))
    note = f", {failed} failed request(s) (Response tokens = 0) skipped" if failed else ""
    if model is not None:
        note += f", model={model} ({other_models} rows of other models ignored)"
    return note


def parse_azure_time(text: str) -> tuple[int, float]:
    """(whole seconds since the epoch, fraction) of an Azure TIMESTAMP such as
    '2023-11-16 18:15:46.6805900' (any number of fractional digits; no zone = UTC)."""
    match = _AZURE_TIME.match(text.strip())
    if match is None:
        raise _bad_cell("TIMESTAMP", text, "a time like '2023-11-16 18:15:46.6805900'")
    day, clock, frac, zone = match.groups()
    try:
        stamp = datetime.fromisoformat(f"{day} {clock}").replace(tzinfo=_zone(zone))
    except ValueError:
        raise _bad_cell("TIMESTAMP", text, "a valid calendar date and time") from None
    fraction = int(frac) / 10 ** len(frac) if frac else 0.0
    return int(stamp.timestamp()), fraction


def _zone(zone: str | None) -> timezone:
    if zone is None or zone == "Z":
        return timezone.utc
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))


def _parse_azure(path: Path, sink: _Collector) -> str:
    """Azure LLM inference trace rows (2023 and 2024 releases, code or conversation)."""
    parsed: list[tuple[int, float, int, int]] = []
    for line, row in _csv_rows(path, AZURE_COLUMNS, sink):
        try:
            whole, fraction = parse_azure_time(row["TIMESTAMP"])
            prompt = _int(row["ContextTokens"], "ContextTokens", 1)
            answer = _int(row["GeneratedTokens"], "GeneratedTokens", 1)
        except _BadRow as exc:
            sink.bad(line, str(exc))
            continue
        parsed.append((whole, fraction, prompt, answer))
    base = min((p[0] for p in parsed), default=0)  # keeps sub-microsecond precision in floats
    sink.rows += [TraceRow(arrival_s=(w - base) + f, input_len=i, output_len=o)
                  for w, f, i, o in parsed]
    return ""


def _parse_mooncake(path: Path, sink: _Collector) -> str:
    """Mooncake JSONL rows: timestamp in ms, lengths, and hash_ids of 512-token blocks."""
    with _open(path) as handle:
        for line, text in enumerate(handle, start=1):
            sink.check_count(line + 1)
            if not text.strip():
                continue
            try:
                sink.rows.append(_mooncake_row(text))
            except _BadRow as exc:
                sink.bad(line, str(exc))
    return ""


def _mooncake_row(text: str) -> TraceRow:
    try:
        obj = loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, HugeNumber
        why = "nested too deeply" if isinstance(exc, RecursionError) else getattr(exc, "msg", str(exc))
        raise _BadRow(f"not valid JSON ({why}): {text.strip()[:60]!r}") from None
    if not isinstance(obj, dict):
        raise _BadRow(f"expected one JSON object per line, got {text.strip()[:60]!r}")
    missing = [key for key in MOONCAKE_KEYS if key not in obj]
    if missing:
        raise _BadRow(f"missing key(s) {', '.join(map(repr, missing))}; needed "
                      f"{', '.join(MOONCAKE_KEYS)}; found {', '.join(obj) or 'none'}")
    stamp, prompt, answer, ids = (obj[k] for k in MOONCAKE_KEYS)
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
        raise _bad_cell("timestamp", stamp, "a number of milliseconds")
    for key, value in (("input_length", prompt), ("output_length", answer)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _bad_cell(key, value, "a whole number >= 1")
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise _bad_cell("hash_ids", str(ids)[:60], "a list of integers")
    full = prompt // MOONCAKE_BLOCK_TOKENS
    if len(ids) < full:
        raise _bad_cell("hash_ids", f"{len(ids)} ids", f"at least {full} (one per "
                       f"{MOONCAKE_BLOCK_TOKENS}-token block of input_length {prompt})")
    # Only full blocks are cacheable: a trailing partial block's id is dropped.
    return TraceRow(arrival_s=stamp / 1000.0, input_len=prompt, output_len=answer,
                    prefix_hashes=tuple(ids[:full]))


_PARSERS: dict[str, Callable[..., str]] = {
    "burstgpt": _parse_burstgpt, "azure": _parse_azure, "mooncake": _parse_mooncake}


FORMAT_HELP = {
    "burstgpt": f"CSV with columns {', '.join(BURSTGPT_COLUMNS)}",
    "azure": f"CSV with columns {', '.join(AZURE_COLUMNS)}",
    "mooncake": f"JSON lines with keys {', '.join(MOONCAKE_KEYS)}",
}
"""What each trace format looks like, for the error of a file whose format cannot be told."""


def detect_trace_format(path: str | Path) -> TraceFormat:
    """The format of a trace file from its first line: a JSON object with Mooncake's keys, or a
    CSV header holding BurstGPT's or Azure's columns (the extension alone does not decide: both
    CSV formats end in .csv). A file that matches none is one error listing the formats."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"trace file {str(path)!r} does not exist or is not a file")
    try:
        with _open(path) as handle:
            first = handle.readline(64 * 1024).strip()
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
        raise ConfigError(f"cannot read trace file {str(path)!r}: {exc}") from None
    found = _format_of_line(first)
    if found is None:
        formats = "; ".join(f"{name} ({text})" for name, text in FORMAT_HELP.items())
        raise ConfigError(f"trace file {str(path)!r}: cannot tell its format from its first line "
                          f"{first[:80]!r}; give --trace-format, one of: {formats}")
    return found


def _format_of_line(first: str) -> TraceFormat | None:
    """The format a trace's first line shows (None: none of them)."""
    if first.startswith("{"):
        try:
            obj = loads(first)
        except (ValueError, RecursionError):
            return None
        return "mooncake" if isinstance(obj, dict) and all(k in obj for k in MOONCAKE_KEYS) else None
    header = {name.strip() for name in next(csv.reader([first]), [])}
    if header.issuperset(BURSTGPT_COLUMNS):
        return "burstgpt"
    if header.issuperset(AZURE_COLUMNS):
        return "azure"
    return None


def read_trace(path: str | Path, format: TraceFormat | None = None, *, on_error: OnError = "stop", time_scale: float = 1.0,
               max_requests: int | None = None, start_s: float = 0.0,
               duration_s: float | None = None, model: str | None = None) -> Workload:
    """A Workload replaying a trace file; see `from_trace` for the time window and scaling.

    format: burstgpt (CSV), azure (CSV, 2023/2024 releases) or mooncake (JSONL, 512-token
    hash blocks); None detects it from the file's first line (`detect_trace_format`). model filters BurstGPT rows by their Model column (e.g. ChatGPT, GPT-4).
    """
    if format is None:
        format = detect_trace_format(path)
    if format not in _PARSERS:
        raise ConfigError(f"unknown trace format {format!r}; valid: {', '.join(_PARSERS)}")
    if on_error not in ("stop", "skip"):
        raise ConfigError(f"on_error = {on_error!r} is invalid; valid: 'stop', 'skip'")
    if model is not None and format != "burstgpt":
        raise ConfigError(f"model = {model!r} filters BurstGPT traces only, not {format!r}")
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"trace file {str(path)!r} does not exist or is not a file")
    sink = _Collector(name=str(path), on_error=on_error)
    parse = partial(_parse_burstgpt, model=model) if format == "burstgpt" else _PARSERS[format]
    try:
        note = parse(path, sink)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"cannot read trace file {str(path)!r}: {exc}") from None
    description = f"{format} trace {path.name}: {len(sink.rows)} requests{note}"
    description += f", {sink.malformed} malformed rows skipped" if sink.malformed else ""
    block = MOONCAKE_BLOCK_TOKENS if format == "mooncake" else 16
    return from_trace(sink.rows, hash_block_tokens=block, description=description,
                      time_scale=time_scale, max_requests=max_requests, start_s=start_s,
                      duration_s=duration_s, skipped=sink.skipped)


def read_burstgpt(path: str | Path, **options: Any) -> Workload:
    """read_trace(path, "burstgpt", ...): BurstGPT CSV (Timestamp, Model, Request/Response tokens)."""
    return read_trace(path, "burstgpt", **options)


def read_azure(path: str | Path, **options: Any) -> Workload:
    """read_trace(path, "azure", ...): Azure LLM inference CSV (TIMESTAMP, Context/GeneratedTokens)."""
    return read_trace(path, "azure", **options)


def read_mooncake(path: str | Path, **options: Any) -> Workload:
    """read_trace(path, "mooncake", ...): Mooncake JSONL with 512-token hash_ids."""
    return read_trace(path, "mooncake", **options)
