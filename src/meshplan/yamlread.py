"""YAML through libyaml's C parser when PyYAML was built with it (about six times faster than the
pure-Python parser: the packaged catalogs and the calibration records are read on start-up and by
validate). The C composer recurses without Python's recursion guard, so text from a user is read
only after an event scan (iterative, stopped early) has shown its nesting is sane."""

from __future__ import annotations

from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPENERS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSERS = (yaml.SequenceEndEvent, yaml.MappingEndEvent)

MAX_DEPTH = 100
"""Deepest nesting of lists and mappings read from a user's file (real configs and records nest
fewer than ten levels)."""


class TooDeep(ValueError):
    """The document nests lists or mappings more than MAX_DEPTH levels."""


def load_packaged(text: str) -> Any:
    """A YAML document shipped with meshplan (trusted: no nesting check)."""
    return yaml.load(text, Loader=_LOADER)


def nests_deeper_than(text: str, limit: int) -> bool:
    """True when some list or mapping in `text` sits more than `limit` levels deep (stops at the
    first such level, so an absurd document costs no more than a sane one)."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, _OPENERS):
            depth += 1
            if depth > limit:
                return True
        elif isinstance(event, _CLOSERS):
            depth -= 1
    return False


def load_user(text: str) -> Any:
    """A YAML document from a user's file; TooDeep past MAX_DEPTH levels, yaml.YAMLError on bad
    syntax."""
    if nests_deeper_than(text, MAX_DEPTH):
        raise TooDeep(f"nested more than {MAX_DEPTH} levels deep")
    return yaml.load(text, Loader=_LOADER)
