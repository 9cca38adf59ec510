"""YAML through libyaml's C parser when PyYAML was built with it (about six times faster than the
pure-Python parser: the packaged catalogs and the calibration records are read on start-up and by
validate). The C composer recurses without Python's recursion guard, so text from a user is read
only after an event scan (iterative, stopped early) has shown its nesting is sane and its size,
aliases expanded, bounded (a "billion laughs" document is refused, not walked).

A packaged document is parsed once per machine: its data is kept as JSON (about ten times faster
to read than the C parser's YAML) in the user's cache directory, `$MESHPLAN_CACHE_DIR`, else
`$XDG_CACHE_HOME/meshplan`, else `~/.cache/meshplan`, under a digest of the text, so an edited
or upgraded file is parsed afresh. Data JSON would not give back equal (dates, non-string keys)
is not cached; `MESHPLAN_CACHE_DIR=off` turns the cache off; an unwritable or damaged cache is
passed over silently."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

try:  # the same hash as hashlib's, without importing OpenSSL's bindings (~40 ms on a cold start)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - CPython always builds _blake2
    from hashlib import blake2b


@cache
def _yaml():
    """(PyYAML, its fastest safe loader): imported only when a document is parsed (about 25 ms,
    which a start-up reading only cached data does not pay)."""
    import yaml

    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader)


MAX_DEPTH = 100
"""Deepest nesting of lists and mappings read from a user's file (real configs and records nest
fewer than ten levels)."""


class TooDeep(ValueError):
    """The document nests lists or mappings more than MAX_DEPTH levels."""


MAX_NODES = 1_000_000
"""Most values (scalars, lists, mappings) a user's document may hold, each alias counted as all
it repeats: a "billion laughs" file (nine levels of ten aliases) would stand for 10**9 and is
refused before it is built. The largest packaged record file holds far fewer."""


class TooBig(ValueError):
    """The document, aliases expanded, holds more than MAX_NODES values."""


def load_packaged(text: str) -> Any:
    """A YAML document shipped with meshplan (trusted: no nesting check), from the parse cache
    when it holds this text."""
    path = _cache_path(text)
    if path is not None:
        try:
            return json.loads(path.read_bytes())
        except (OSError, ValueError):
            pass  # not cached yet, or damaged: parse and (re)write
    yaml, loader = _yaml()
    data = yaml.load(text, Loader=loader)
    if path is not None:
        _store(path, data)
    return data


def cache_dir() -> Path | None:
    """Where parsed packaged documents are kept; None when `MESHPLAN_CACHE_DIR=off`."""
    chosen = os.environ.get("MESHPLAN_CACHE_DIR")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "meshplan"


def _cache_path(text: str) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    digest = blake2b(text.encode(), digest_size=16).hexdigest()
    return folder / f"parsed-{digest}.json"


def _store(path: Path, data: Any) -> None:
    """Write `data` as JSON if JSON gives it back equal (atomically: a reader never sees half)."""
    try:
        encoded = json.dumps(data, allow_nan=False)
        if json.loads(encoded) != data:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(encoded)
        os.replace(partial, path)
    except (OSError, TypeError, ValueError):
        pass


def nests_deeper_than(text: str, limit: int) -> bool:
    """True when some list or mapping in `text` sits more than `limit` levels deep (stops at the
    first such level, so an absurd document costs no more than a sane one)."""
    try:
        _scan(text, limit, None)
    except TooDeep:
        return True
    return False


def _scan(text: str, depth_limit: int, node_limit: int | None) -> None:
    """Walk the parser's events (iterative, stopped at the first excess): TooDeep past
    `depth_limit` levels, TooBig past `node_limit` nodes counted as the data holds them, an
    alias counting every node of what it repeats (so a "billion laughs" stops at once)."""
    yaml, loader = _yaml()
    openers = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
    closers = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    sizes: dict[str, int] = {}  # anchor -> nodes it stands for
    stack: list[list] = [[None, 0]]  # open collections: [anchor, nodes so far]
    total = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, openers):
            stack.append([event.anchor, 1])
            if len(stack) - 1 > depth_limit:
                raise TooDeep(f"nested more than {depth_limit} levels deep")
            total += 1
        elif isinstance(event, closers):
            anchor, size = stack.pop()
            stack[-1][1] += size
            if anchor is not None:
                sizes[anchor] = size
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            size = sizes.get(event.anchor, 1) if isinstance(event, yaml.AliasEvent) else 1
            if isinstance(event, yaml.ScalarEvent) and event.anchor is not None:
                sizes[event.anchor] = 1
            stack[-1][1] += size
            total += size
        if node_limit is not None and total > node_limit:
            raise TooBig(f"holds more than {node_limit:,} values once its aliases (*name) are "
                         f"expanded")


def load_user(text: str) -> Any:
    """A YAML document from a user's file; TooDeep past MAX_DEPTH levels, TooBig past MAX_NODES
    values (aliases expanded), yaml.YAMLError on bad syntax."""
    _scan(text, MAX_DEPTH, MAX_NODES)
    yaml, loader = _yaml()
    return yaml.load(text, Loader=loader)
