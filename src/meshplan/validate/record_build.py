"""Build one run record (SCHEMA.md) from what a user measured, and append it to a record file.

`meshplan record training|serving` is a thin layer over these functions. Every record is checked
with the same parse `meshplan validate` uses (meshplan.validate.records.parse_record), so what
`record` writes, `validate` reads. The file is rewritten through a temporary file and a rename,
and only after the new text was read back as the old records plus the new one.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from meshplan.errors import ConfigError
from meshplan.hardware import get_gpu
from meshplan.model.catalog_index import get_entry
from meshplan.model.load import from_config, read_config_file
from meshplan.outfiles import write_atomic
from meshplan.userfiles import parse_yaml, read_text
from meshplan.validate.bench_results import BenchResult, read_result
from meshplan.validate.bench_workload import bench_workload
from meshplan.validate.records import parse_record
from meshplan.validate.schema import Measured, Record

DEFAULT_SOURCE = "my cluster"
FLAGS = {"seq_length": "--seq-len", "workload": "--bench-command", "mode": "--bench-command",
         "range_ratio": "--bench-command", "burstiness": "--bench-command"}
"""Schema keys whose command-line flag is not the key with dashes."""
NEW_FILE = "# Run records (format: meshplan/records/SCHEMA.md, shipped with meshplan), written by `meshplan record`.\nschema: 1\nrecords:\n"


def _compact(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def model_entry(model: str) -> tuple[str | dict[str, Any], str]:
    """(the record's `model`, a short name for ids) of a catalog name or a config.json path:
    the catalog's own name, or the config mapping read from the file (checked to load)."""
    path = Path(model)
    if path.suffix == ".json" or path.exists():
        path = path / "config.json" if path.is_dir() else path
        config = read_config_file(path)
        named = config.get("name") or config.get("_name_or_path")
        name = Path(str(named)).name if named else (path.parent.name or path.stem)
        mapping = config if "name" in config else {"name": name, **config}
        from_config(mapping, where=str(path))
        return mapping, name
    if model.startswith("hf:"):
        raise ConfigError(f"--model {model!r}: give a catalog name or a config.json path (download "
                          f"the repository's config.json; a record is read without the network)")
    entry = get_entry(model)
    return entry.name, entry.name


def _hardware(hardware: dict[str, Any]) -> dict[str, Any]:
    """The hardware section, the GPU under its catalog name."""
    hw = _compact(hardware)
    if isinstance(hw.get("gpu"), str):
        hw["gpu"] = get_gpu(hw["gpu"]).name
    return hw


def record_id(model_name: str, gpu: str, num_gpus: int, day: dt.date) -> str:
    """A readable default id: model, GPU, GPU count and date, e.g. llama-3.1-8b-h100-sxm-80gb-8gpu-20260105."""
    slug = re.sub(r"[^a-z0-9.]+", "-", f"{model_name}-{gpu}-{num_gpus}gpu".lower()).strip("-")
    return f"{slug}-{day:%Y%m%d}"


def unique_id(base: str, taken: set[str]) -> str:
    """`base`, or `base-2`, `base-3`, ... when ids in `taken` already use it."""
    n, rid = 1, base
    while rid in taken:
        n += 1
        rid = f"{base}-{n}"
    return rid


def _describe(err: dict) -> str:
    """One pydantic error as the flag, the value and what would be valid."""
    loc = [str(p) for p in err["loc"]]
    key = next((p for p in reversed(loc) if not p.isdigit()), "record")
    flag = FLAGS.get(key, "--" + key.replace("_", "-"))
    field = ".".join(loc)
    if err["type"] == "missing":
        return f"{flag} is required (record field {field})"
    return f"{flag} {err.get('input')!r}: {err['msg']} (record field {field})"


def check_record(record: dict[str, Any]) -> Record:
    """The parsed Record `meshplan validate` would read; a bad field is named as its flag."""
    try:
        Record.model_validate(record)
    except ValidationError as exc:
        raise ConfigError(_describe(exc.errors()[0])) from None
    return parse_record(record, f"record {record.get('id')!r}")


def _base(kind: str, model: str, hardware: dict, rid: str | None, source: dict,
          day: dt.date | None) -> dict[str, Any]:
    """id, kind, source, model and hardware of a new record."""
    day = day or dt.date.today()
    value, name = model_entry(model)
    hw = _hardware(hardware)
    rid = rid or record_id(name, str(hw.get("gpu")), hw.get("num_gpus", 0), day)
    src = _compact({**source, "date": day.isoformat(), "confidence": "primary"})
    return {"id": rid, "kind": kind, "source": src, "model": value, "hardware": hw}


def training_record(model: str, hardware: dict[str, Any], training: dict[str, Any],
                    measured: dict[str, Any], *, id: str | None = None,
                    source_name: str = DEFAULT_SOURCE, notes: str | None = None,
                    day: dt.date | None = None) -> dict[str, Any]:
    """One training run record. `hardware`, `training` and `measured` use the schema's keys
    (None = not recorded); `model` is a catalog name or a config.json path; the id defaults to
    model, GPU, GPU count and `day` (today)."""
    measured = _compact(measured)
    if not measured:
        raise ConfigError("no measured value: give at least one of --tokens-per-s-per-gpu, "
                          "--step-time-s, --peak-memory-gib")
    record = _base("training", model, hardware, id, {"name": source_name}, day)
    record.update(training=_compact(training), measured=measured)
    if notes:
        record["notes"] = notes
    check_record(record)
    return record


def serving_record(model: str, hardware: dict[str, Any], serving: dict[str, Any],
                   result: str | Path | BenchResult, *, result_format: str | None = None,
                   bench_command: str | None = None, workload: dict[str, Any] | None = None,
                   id: str | None = None, source_name: str = DEFAULT_SOURCE,
                   notes: str | None = None, day: dt.date | None = None) -> dict[str, Any]:
    """One serving benchmark record. `serving` holds the engine keys of the schema (engine,
    tp, ..., not the workload); `result` is a vLLM or SGLang result file (or one already read);
    the workload comes from `workload` (explicit schema keys), then the benchmark command line,
    then the result's own run facts. What was inferred is written to the record's notes."""
    bench = result if isinstance(result, BenchResult) else read_result(result, result_format)
    remarks = list(bench.remarks)
    load = bench_workload(bench, bench_command, workload or {}, remarks)
    source = {"name": source_name, "benchmark": bench.format, "result": bench.path,
              "command": bench_command, "served_model": bench.served_model}
    record = _base("serving", model, hardware, id, source, day)
    measured = {k: bench.measured[k] for k in Measured.model_fields if k in bench.measured}
    record.update(serving={**_compact(serving), "workload": load}, measured=measured)
    text = "; ".join(n for n in (notes, *remarks) if n)
    if text:
        record["notes"] = text
    check_usable(check_record(record))
    return record


def check_usable(record: Record) -> None:
    """Refuse a serving record `meshplan validate` would skip: it builds the same model, cluster,
    plan and workload validate simulates (without simulating)."""
    from meshplan.validate.serving_records import serving_case

    try:
        serving_case(record)
    except ConfigError as exc:
        raise ConfigError(f"`meshplan validate` could not use this record ({exc}); nothing was "
                          f"written") from None


def _existing(path: Path) -> tuple[str, dict[str, Any]]:
    """(text, parsed mapping) of a record file; ("", {}) when it is missing or empty."""
    if not path.exists() and not path.is_symlink():
        return "", {}
    text = read_text(path, "run-record file")
    if not text.strip():
        return "", {}
    data = parse_yaml(text, str(path))
    if isinstance(data, dict) and data.get("schema") == 1 and data.get("records", []) is None:
        data["records"] = []
    if not (isinstance(data, dict) and data.get("schema") == 1 and isinstance(data.get("records"), list)):
        raise ConfigError(f"{path}: not a run-record file {{schema: 1, records: [...]}}; "
                          f"refusing to change it (give a new file to --out)")
    return text, data


def _ids(data: dict[str, Any]) -> set[str]:
    return {r["id"] for r in data.get("records", []) if isinstance(r, dict) and isinstance(r.get("id"), str)}


def existing_ids(path: str | Path) -> set[str]:
    """The record ids a record file already holds (none when it does not exist)."""
    return _ids(_existing(Path(path))[1])


def _item_indent(text: str) -> str:
    """The indentation of the `records:` list items of a file (none when it has none yet)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("records:")), len(lines))
    for line in lines[start + 1:]:
        if match := re.match(r"( *)- ", line):
            return match.group(1)
    return ""


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100, default_flow_style=False)


def _new_text(text: str, data: dict[str, Any], record: dict[str, Any]) -> str:
    """The file with `record` appended: as text after the last record (keeping comments and
    layout) when that reads back as intended, else the whole mapping dumped again."""
    want = {**data, "records": [*data["records"], record]} if data else {"schema": 1, "records": [record]}
    head = text if text else NEW_FILE
    indent = _item_indent(head)
    item = "".join(indent + line for line in _dump([record]).splitlines(True))
    candidate = head + ("" if head.endswith("\n") else "\n") + item
    for option in (candidate, _dump(want)):
        try:
            if yaml.safe_load(option) == want:
                return option
        except yaml.YAMLError:
            continue
    raise ConfigError("the record file could not be written back unchanged; nothing was written")


def append_record(path: str | Path, record: dict[str, Any]) -> int:
    """Append `record` to the run-record file at `path` (created when missing) and return how
    many records it then holds. A duplicate id or a file that is not a record file is refused;
    existing records, comments and layout are kept."""
    path = Path(path)
    check_record(record)
    text, data = _existing(path)
    if record["id"] in _ids(data):
        raise ConfigError(f"{path}: a record with id {record['id']!r} is already there; give another --id")
    write_atomic(path, _new_text(text, data, record), "--out")
    return len(data.get("records", [])) + 1
