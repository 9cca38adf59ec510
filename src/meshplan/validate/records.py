"""Read run-record files; a record that breaks the schema is named by id, key and what is allowed."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from meshplan.errors import ConfigError
from meshplan.model import ModelSpec, load_model
from meshplan.userfiles import parse_yaml, read_text
from meshplan.validate.schema import Record

MAX_RECORDS = 10_000
"""Most records one run-record file may hold (the packaged files hold a few hundred)."""


def _describe(error: dict) -> str:
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {error['msg']}"


def parse_record(raw: dict, origin: str) -> Record:
    """Validate one record mapping; errors name the record id and the offending key."""
    rid = raw.get("id", "?") if isinstance(raw, dict) else "?"
    try:
        record = Record.model_validate(raw)
    except ValidationError as exc:
        details = "; ".join(_describe(e) for e in exc.errors()[:3])
        raise ConfigError(f"{origin}: record {rid!r}: {details}") from None
    section = record.training if record.kind == "training" else record.serving
    if section is None:
        raise ConfigError(f"{origin}: record {rid!r}: kind {record.kind} needs a "
                          f"'{record.kind}' section")
    if not record.measured.model_dump(exclude_none=True):
        raise ConfigError(f"{origin}: record {rid!r}: 'measured' needs at least one key")
    return record


def load_records(path: str | Path) -> list[Record]:
    """All records of one run-record file (`{schema: 1, records: [...]}`); the first bad record
    stops with its id and key."""
    records, _ = read_records(path, strict=True)
    return records


def read_records(path: str | Path, strict: bool = False) -> tuple[list[Record], list[tuple[str, str]]]:
    """(records, skipped) of one run-record file: with `strict` the first record that breaks the
    schema raises; otherwise it is skipped as (id or position, reason) and the rest are read. A
    file that is not a record file at all always raises."""
    path = Path(path)
    data = parse_yaml(read_text(path, "run-record file"), str(path))
    if not isinstance(data, dict) or data.get("schema") != 1 or not isinstance(data.get("records"), list):
        raise ConfigError(f"{path}: expected a mapping {{schema: 1, records: [...]}}")
    if len(data["records"]) > MAX_RECORDS:
        raise ConfigError(f"{path}: {len(data['records']):,} records; the limit is {MAX_RECORDS:,} "
                          f"per file (split it)")
    records, skipped, seen = [], [], set()
    for index, raw in enumerate(data["records"]):
        try:
            record = parse_record(raw, str(path))
            if record.id in seen:
                raise ConfigError(f"{path}: record id {record.id!r} appears twice")
        except ConfigError as exc:
            if strict:
                raise
            rid = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else f"#{index + 1}"
            skipped.append((rid, f"not a valid record: {exc}"))
            continue
        seen.add(record.id)
        records.append(record)
    return records, skipped


def record_model(record: Record) -> ModelSpec:
    """The ModelSpec of a record's `model` (catalog name or config mapping, `name` for display)."""
    model = record.model
    return load_model(model, name=model.get("name") if isinstance(model, dict) else model)
