"""Reading files a user names: only regular files of sane size, decoded as UTF-8, parsed as JSON or
YAML without recursion blow-ups; every failure is one ConfigError naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from meshplan.errors import ConfigError

MAX_BYTES = 64 * 2**20
"""Largest config, plan or record file read whole (a Hugging Face config.json is a few KiB)."""


def check_readable(path: Path, what: str) -> None:
    """A regular file exists at `path` (a FIFO, device or directory would block or mislead)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{what} {str(path)!r} does not exist")
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r} is not a regular file")


def read_text(path: Path, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`."""
    check_readable(path, what)
    size = Path(path).stat().st_size
    if size > max_bytes:
        raise ConfigError(f"{what} {str(path)!r} is {size:,} bytes; the limit is {max_bytes:,}")
    try:
        return Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {str(path)!r} is not UTF-8 text (byte {exc.start})") from None


MAX_INT_DIGITS = 30
"""Most digits of an integer in a user's JSON (Python refuses to parse more than 4,300)."""


class HugeNumber(ValueError):
    """An integer in a JSON document longer than MAX_INT_DIGITS."""


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise HugeNumber(f"an integer of {digits:,} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def loads(text: str) -> Any:
    """json.loads that refuses absurdly long integers (HugeNumber) instead of a bare ValueError."""
    return json.loads(text, parse_int=_int)


def parse_json(text: str, where: str) -> Any:
    """JSON, with line and column on a syntax error and a message for absurd nesting or an
    absurdly long integer."""
    try:
        return loads(text)
    except HugeNumber as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON at line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg}") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply") from None


def parse_yaml(text: str, where: str) -> Any:
    """YAML (JSON is YAML), with a one-line message on a syntax error or absurd nesting."""
    import yaml

    from meshplan.yamlread import TooBig, TooDeep, load_user

    try:
        return load_user(text)
    except yaml.YAMLError as exc:
        if "nesting depth" in str(getattr(exc, "problem", "")):  # the parser's own limit (PyYAML 6.0.4)
            raise ConfigError(f"{where}: YAML nested too deeply") from None
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}: not valid YAML{at}: {first}") from None
    except (TooDeep, RecursionError):
        raise ConfigError(f"{where}: YAML nested too deeply") from None
    except TooBig as exc:
        raise ConfigError(f"{where}: the YAML document {exc}; the limit guards against alias bombs") from None
    except ValueError as exc:  # a scalar YAML cannot build: 5,000 digits, a date 2024-13-45
        raise ConfigError(f"{where}: not valid YAML: {str(exc).split(';')[0]}") from None
