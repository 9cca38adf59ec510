"""User-facing errors: one sentence naming the field, the value and what would be valid."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class MeshplanError(Exception):
    """An error caused by user input; the CLI prints its message and exits with code 2."""


class ConfigError(MeshplanError):
    """A model config, plan or workload that cannot be used as given."""


class DoesNotFitError(ConfigError):
    """A well-formed deployment that does not fit in GPU memory: an answer, not bad input, so the
    CLI prints it and exits with code 1 (like `train memory` on a plan that does not fit)."""


class UnknownNameError(MeshplanError):
    """A catalog name that does not exist; the message lists the closest known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.4)
        hint = f"closest: {', '.join(close)}" if close else f"known: {', '.join(known[:12])}"
        super().__init__(f"unknown {kind} {name!r}; {hint}")
        self.name = name
        self.close_matches = close
