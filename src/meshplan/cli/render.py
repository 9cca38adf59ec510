"""Human units for terminal output; data stays in SI units everywhere else."""

from __future__ import annotations


def si(value: float, unit: str = "", base: float = 1000.0) -> str:
    """`12.3 G` style with an SI prefix (base 1000) or a binary one (base 1024)."""
    prefixes = ["", "K", "M", "G", "T", "P", "E"]
    i = 0
    while abs(float(f"{value:.3g}")) >= base and i < len(prefixes) - 1:  # 999.9 K shows as 1 M
        value /= base
        i += 1
    prefix = prefixes[i] + ("i" if base == 1024 and i else "")
    return f"{value:.3g} {prefix}{unit}".rstrip()


def count(value: int) -> str:
    """A parameter count with thousands separators and an SI abbreviation."""
    return f"{value:,} ({si(value)})"


PARAM_PREFIXES = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3), ("", 1.0))


def params(value: float) -> str:
    """A parameter count as people say it, one decimal: 999.9 M, 1.0 B, 671.0 B (below a
    thousand: the number itself)."""
    for i, (prefix, scale) in enumerate(PARAM_PREFIXES):
        if abs(value) >= scale:
            if not prefix:
                return f"{value:.0f}"
            if round(abs(value) / scale, 1) >= 1000 and i:  # 999.96 M reads 1.0 B, not 1000.0 M
                prefix, scale = PARAM_PREFIXES[i - 1]
            return f"{value / scale:.1f} {prefix}"
    return f"{value:.0f}"
