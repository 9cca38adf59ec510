"""When a run record's measurement was published, read from its free-form `source`.

The schema leaves `source` free-form, so the year is best-effort: an explicit `date` or `year`
key, else the arXiv identifier of the `url` (YYMM.NNNNN), else the first 20xx year written in
the source's `name` or `where`. None when nothing says; callers then assume current software.
"""

from __future__ import annotations

import re

_ARXIV = re.compile(r"arxiv\.org/(?:abs|pdf)/(\d{2})(\d{2})\.\d{4,5}", re.IGNORECASE)
_YEAR = re.compile(r"(?<!\d)(20\d{2})(?!\d)")


def _year_of(value: object) -> int | None:
    if isinstance(value, int) and 2000 <= value < 2100:
        return value
    match = _YEAR.search(str(value)) if value is not None else None
    return int(match.group(1)) if match else None


def source_year(source: dict) -> int | None:
    """The publication year a record's `source` states, or None."""
    for key in ("date", "year"):
        if key in source and (year := _year_of(source[key])):
            return year
    match = _ARXIV.search(str(source.get("url", "")))
    if match:
        return 2000 + int(match.group(1))
    for key in ("name", "where"):
        if year := _year_of(source.get(key)):
            return year
    return None
