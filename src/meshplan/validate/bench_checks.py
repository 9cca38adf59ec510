"""Refuse a serving benchmark record whose inputs contradict each other: the benchmark command
line, the explicit workload flags and the result file each state run facts (rate, concurrency,
prompt count, lengths); where two of them state the same fact they must agree, or the record would
describe a run that never happened and `meshplan validate` could never reproduce it (#34).

Lengths are checked against the result's mean tokens per request (its totals / completed): the
mean input of a random dataset lies in the drawn interval, the mean output at most at its top
(a request may stop at end-of-sequence), each within LENGTH_SLACK for retokenization.
"""

from __future__ import annotations

import math
from typing import Any

from meshplan.errors import ConfigError
from meshplan.validate.bench_results import BenchResult

LENGTH_SLACK = 0.25
"""Relative slack on the mean length against the requested interval (retokenization of random
prompts changes a few tokens; a contradiction is a different length, not a few percent)."""
LENGTH_SLACK_TOKENS = 8
"""Absolute slack on the mean length, for short requests."""

EXPLICIT = {"request_rate": "request_rate", "concurrency": "max_concurrency",
            "num_requests": "num_prompts"}
"""Explicit workload flag -> the run fact (benchmark flag name) it states. Explicit lengths are
in the schema's convention (SGLang's are converted), so they are not compared with the flags."""


def _rate(value: Any) -> float:
    """A request rate as a number (inf when unbounded: vLLM saves "inf", SGLang Infinity)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    return float(value) if isinstance(value, (int, float)) else math.nan


def _same(fact: str, a: Any, b: Any) -> bool:
    """Whether two statements of run fact `fact` agree."""
    if fact == "request_rate":
        a, b = _rate(a), _rate(b)
        return a == b or math.isclose(a, b, rel_tol=1e-6)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return str(a).strip().lower() == str(b).strip().lower()


def _shown(fact: str, value: Any) -> str:
    if fact == "request_rate" and math.isinf(_rate(value)):
        return "inf (unbounded)"
    return repr(value) if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)


def check_sources(result: BenchResult, command: dict[str, Any], explicit: dict[str, Any]) -> None:
    """Every run fact stated twice (result file, --bench-command, explicit flag) agrees; else one
    ConfigError naming both values and where each came from."""
    where = result.path or "the result file"
    sources = [(f"{where} ({fact})", fact, value) for fact, value in result.facts.items()]
    sources += [(f"--bench-command ({fact})", fact, value) for fact, value in command.items()]
    sources += [(f"--{key.replace('_', '-')}", EXPLICIT[key], value)
                for key, value in explicit.items() if key in EXPLICIT and value is not None]
    seen: dict[str, tuple[str, Any]] = {}
    for name, fact, value in sources:
        if fact in seen and not _same(fact, seen[fact][1], value):
            first, before = seen[fact]
            raise ConfigError(f"{name} says {_shown(fact, value)} but {first} says "
                              f"{_shown(fact, before)}: the inputs describe different runs; give the "
                              f"command and values of the run that wrote the result")
        seen.setdefault(fact, (name, value))
    _check_totals(result, {fact: (name, value) for fact, (name, value) in seen.items()})


def _check_totals(result: BenchResult, stated: dict[str, tuple[str, Any]]) -> None:
    """The prompt count and the lengths stated against what the result counted."""
    done = result.totals.get("completed")
    if not done:
        return
    where = result.path or "the result file"
    if "num_prompts" in stated and done > stated["num_prompts"][1]:
        name, value = stated["num_prompts"]
        raise ConfigError(f"{name} says {value} prompts but {where} completed {done:g} requests: "
                          f"the inputs describe different runs")
    dataset = stated.get("dataset_name", ("", ""))[1]
    if str(dataset).lower() not in ("random", "random-ids"):
        return
    ratio = float(stated.get("random_range_ratio", ("", 0.0))[1] or 0.0)
    for fact, total, capped in (("random_input_len", "total_input_tokens", False),
                                ("random_output_len", "total_output_tokens", True)):
        if fact in stated and result.totals.get(total):
            _check_length(stated[fact], ratio, result, result.totals[total] / done, total, capped)


def _check_length(stated: tuple[str, Any], ratio: float, result: BenchResult, mean: float,
                  total: str, capped: bool) -> None:
    """A stated random length against the measured mean (`capped`: only its top is a bound)."""
    name, length = stated
    if result.format == "sglang":  # SGLang draws in [L r, L]
        low, high = max(1.0, int(length * ratio)), float(length)
    else:  # vLLM draws in [L(1-r), L(1+r)]
        low, high = length * (1 - ratio), length * (1 + ratio)
    top = high * (1 + LENGTH_SLACK) + LENGTH_SLACK_TOKENS
    bottom = 0.0 if capped else low * (1 - LENGTH_SLACK) - LENGTH_SLACK_TOKENS
    if not bottom <= mean <= top:
        where = result.path or "the result file"
        raise ConfigError(f"{name} says {length} tokens but {where} measured {mean:,.0f} per request "
                          f"({total} / completed): the inputs describe different runs")
