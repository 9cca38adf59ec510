"""The packaged reliability data (data/reliability.yaml), read and checked once."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

from meshplan.errors import ConfigError
from meshplan.yamlread import load_packaged

SCALES = ("gpu", "node", "link", "job")
"""What a component's interruption rate is proportional to."""


@functools.cache
def reliability() -> dict[str, Any]:
    """reliability.yaml as a mapping; every section cites a source the file defines."""
    text = (resources.files("meshplan.goodput") / "data" / "reliability.yaml").read_text("utf-8")
    data = load_packaged(text)
    sources = data.get("sources", {})
    cited = [data[k] for k in ("snapshot", "planned", "restart", "storage", "stragglers")]
    for entry in [*cited, *data["published"]]:
        if entry.get("source") not in sources:
            raise ConfigError(f"reliability.yaml: {entry!r} cites no known source")
    for row in data["components"]:
        if row["scales_with"] not in SCALES:
            raise ConfigError(f"reliability.yaml: component {row['name']!r} scales with "
                              f"{row['scales_with']!r}; use one of {', '.join(SCALES)}")
    return data


def published(name: str) -> float:
    """A published figure of reliability.yaml's `published` list, by name."""
    for row in reliability()["published"]:
        if row["name"] == name:
            return float(row["value"])
    raise KeyError(name)
