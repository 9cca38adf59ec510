"""Read run-record files; a record that breaks the schema is named by id, key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from meshplan.errors import ConfigError
from meshplan.model import ModelSpec, load_model
from meshplan.validate.schema import Record


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
    """All records of one run-record file (`{schema: 1, records: [...]}`)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read run records {str(path)!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != 1 or not isinstance(data.get("records"), list):
        raise ConfigError(f"{path}: expected a mapping {{schema: 1, records: [...]}}")
    records = [parse_record(raw, str(path)) for raw in data["records"]]
    seen: set[str] = set()
    for record in records:
        if record.id in seen:
            raise ConfigError(f"{path}: record id {record.id!r} appears twice")
        seen.add(record.id)
    return records


def record_model(record: Record) -> ModelSpec:
    """The ModelSpec of a record's `model` (catalog name or config mapping, `name` for display)."""
    model = record.model
    return load_model(model, name=model.get("name") if isinstance(model, dict) else model)
