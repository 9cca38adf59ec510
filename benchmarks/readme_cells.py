"""Cell and table formatting shared by the generated blocks (benchmarks/readme_blocks.py and
benchmarks/readme_serving.py): pure formatting, no figure is computed here."""

from __future__ import annotations

def pct(x: float, digits: int = 1) -> str:
    """A fraction as a percentage: 0.0549 -> '5.5%'."""
    return f"{x * 100:.{digits}f}%"


def spct(x: float, digits: int = 1) -> str:
    """A signed fraction as a percentage: -0.006 -> '-0.6%'."""
    return f"{x * 100:+.{digits}f}%"


def med_p90(s: dict | None) -> list[str]:
    """The median and p90 of an error_stats dict, as two table cells (None: a figure the last fit
    did not measure, e.g. a refit without --loso)."""
    if s is None:
        return ["not re-measured since the last refit", ""]
    return [pct(s["median_abs_rel_error"]), pct(s["p90_abs_rel_error"])]


def md_table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def band_cell(band: dict) -> str:
    """Share of measured values inside their p10-p90 band, with the counts."""
    return f"{pct(band['share'], 0)} ({band['inside']} of {band['n']})"


ACCURACY_HEADER = ["", "median abs. error", "p90 abs. error", "issue target"]
ACCURACY_ALIGN = ["---", "---:", "---:", "---:"]
