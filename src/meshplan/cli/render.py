"""Human units for terminal output; data stays in SI units everywhere else."""

from __future__ import annotations


def si(value: float, unit: str = "", base: float = 1000.0) -> str:
    """`12.3 G` style with an SI prefix (base 1000) or a binary one (base 1024)."""
    prefixes = ["", "K", "M", "G", "T", "P", "E"]
    i = 0
    while abs(value) >= base and i < len(prefixes) - 1:
        value /= base
        i += 1
    prefix = prefixes[i] + ("i" if base == 1024 and i else "")
    return f"{value:.3g} {prefix}{unit}".rstrip()


def count(value: int) -> str:
    """A parameter count with thousands separators and an SI abbreviation."""
    return f"{value:,} ({si(value)})"
