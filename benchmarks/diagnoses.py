"""Shared by the accuracy scripts: the first matching diagnosis for a record id."""

from __future__ import annotations

import re


def diagnose(record_id: str, table: list[tuple[str, str]]) -> str:
    """The text of the first (regex, text) pair in `table` whose pattern occurs in `record_id`."""
    for pattern, text in table:
        if re.search(pattern, record_id):
            return text
    return ""
