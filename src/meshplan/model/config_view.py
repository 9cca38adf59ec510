"""Typed, checked reads from a Hugging Face `config.json` mapping, with errors that name the field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from meshplan.errors import ConfigError

_MISSING = object()


MAX_INT = 2**40
"""Largest size any config field may hold (a trillion: far above every real width or count)."""
MAXIMA = {"num_hidden_layers": 4096, "n_layer": 4096, "num_layers": 4096, "n_layers": 4096}
"""Layer counts meshplan walks one by one; the deepest published LLMs have a few hundred."""


class ConfigView:
    """Read fields of one config mapping; every bad value raises a ConfigError naming the field."""

    def __init__(self, data: Mapping[str, Any], where: str = "model config") -> None:
        self.data = data
        self.where = where

    def has(self, key: str) -> bool:
        """True when `key` is present and not null."""
        return self.data.get(key) is not None

    def _fail(self, key: str, value: Any, expected: str) -> ConfigError:
        return ConfigError(f"{self.where}: field {key!r} = {value!r} is invalid; expected {expected}")

    def _raw(self, keys: tuple[str, ...], default: Any) -> tuple[str, Any]:
        for key in keys:
            if self.data.get(key) is not None:
                return key, self.data[key]
        if default is _MISSING:
            names = " or ".join(repr(k) for k in keys)
            raise ConfigError(f"{self.where}: required field {names} is missing")
        return keys[0], default

    def int(self, *keys: str, default: Any = _MISSING, minimum: int = 1) -> int:
        """An integer >= `minimum` from the first present key (aliases allowed)."""
        key, value = self._raw(keys, default)
        if value is None:
            return value
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or int(value) != value):
            raise self._fail(key, value, "an integer")
        if value < minimum:
            raise self._fail(key, value, f"an integer >= {minimum}")
        ceiling = MAXIMA.get(key, MAX_INT)
        if value > ceiling:
            raise self._fail(key, value, f"an integer <= {ceiling:,}")
        return int(value)

    def opt_int(self, *keys: str, minimum: int = 1) -> int | None:
        """An integer >= `minimum`, or None when absent."""
        return self.int(*keys, default=None, minimum=minimum)

    def float(self, *keys: str, default: Any = _MISSING) -> float | None:
        """A real number from the first present key."""
        key, value = self._raw(keys, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._fail(key, value, "a number")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise self._fail(key, value, "a finite number")
        return number

    def bool(self, key: str, default: bool) -> bool:
        """A boolean flag."""
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, value, "true or false")
        return value

    def str(self, *keys: str, default: Any = _MISSING) -> str:
        """A string from the first present key."""
        key, value = self._raw(keys, default)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, value, "a string")
        return value

    def list(self, key: str, default: Any = _MISSING) -> list:
        """A list (or null -> `default`)."""
        _, value = self._raw((key,), default)
        if value is not None and not isinstance(value, list | tuple):
            raise self._fail(key, value, "a list")
        return list(value) if value is not None else value

    def mapping(self, key: str) -> dict | None:
        """A nested mapping, or None when absent."""
        value = self.data.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise self._fail(key, value, "a mapping")
        return dict(value) if value is not None else None

    def choice(self, key: str, valid: tuple[str, ...], default: str) -> str:
        """One of `valid`."""
        value = self.data.get(key, default)
        if value is None:
            return default
        if value not in valid:
            raise self._fail(key, value, "one of " + ", ".join(valid))
        return value
