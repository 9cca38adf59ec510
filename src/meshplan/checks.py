"""Checks of numbers given to the Python API (the CLI's flags have their ranges in cli/ranges.py):
each failure is a ConfigError naming the argument, the value and what would be valid."""

from __future__ import annotations

import math
from typing import Any

from meshplan.errors import ConfigError


def positive(name: str, value: Any, *, low: float = 0.0, high: float = math.inf) -> None:
    """`value` is a finite number above `low` (inclusive when low > 0) and at most `high`."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value <= 0 or value < low or value > high:
        bound = f" from {_number(low)}" if low > 0 else ""
        bound += f" to {_number(high)}" if high < math.inf else ""
        raise ConfigError(f"{name} {value!r}: give a positive, finite number{bound}")


def whole(name: str, value: Any, low: int = 1) -> None:
    """`value` is an int (not a bool) of at least `low`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{name} {value!r}: give a whole number of {low} or more")


def optional(check, name: str, value: Any, **bounds) -> None:
    """`check(name, value)` unless `value` is None."""
    if value is not None:
        check(name, value, **bounds)


def _number(x: float) -> str:
    """A bound as people write it: 1,000,000, 0.001."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"
