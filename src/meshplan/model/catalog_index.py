"""The shipped model catalog: popular open models' `config.json` files addressable by short name."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from meshplan.yamlread import load_packaged

from meshplan.errors import UnknownNameError

_PACKAGE = "meshplan.model"
_FOLDER = "catalog"


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogEntry:
    """One catalog row: where the config comes from and what the model is."""

    name: str
    """Short name, e.g. `llama-3.1-70b`."""
    file: str
    """The config.json file inside the catalog folder."""
    hf_repo: str | None
    """Hugging Face repository the config was taken from, if any."""
    source: str
    """URL or citation of the config's values."""
    family: str
    """Hugging Face `model_type`."""
    description: str
    """One line about the model."""
    aliases: tuple[str, ...] = ()
    """Other names that resolve to this entry."""


@functools.cache
def _index() -> dict[str, CatalogEntry]:
    text = resources.files(_PACKAGE).joinpath(_FOLDER, "index.yaml").read_text()
    rows = load_packaged(text)["models"]
    entries: dict[str, CatalogEntry] = {}
    for row in rows:
        entry = CatalogEntry(
            name=row["name"], file=row["file"], hf_repo=row.get("hf_repo"), source=row["source"],
            family=row["family"], description=row.get("description", ""),
            aliases=tuple(row.get("aliases") or ()),
        )
        for key in (entry.name, *entry.aliases):
            entries[key.lower()] = entry
    return entries


def list_entries() -> list[CatalogEntry]:
    """Every catalog entry once, sorted by name."""
    unique = {entry.name: entry for entry in _index().values()}
    return [unique[name] for name in sorted(unique)]


def get_entry(name: str) -> CatalogEntry:
    """The entry for a short name or alias (case-insensitive)."""
    try:
        return _index()[name.lower()]
    except KeyError:
        raise UnknownNameError("model", name, [e.name for e in list_entries()]) from None


def is_catalog_name(name: str) -> bool:
    """True when `name` is a catalog short name or alias."""
    return name.lower() in _index()


def catalog_config(name: str) -> dict[str, Any]:
    """The shipped config.json of a catalog model."""
    entry = get_entry(name)
    return json.loads(resources.files(_PACKAGE).joinpath(_FOLDER, entry.file).read_text())
