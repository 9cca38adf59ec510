"""Read a serving benchmark's saved result (vLLM or SGLang) into run-record `measured` keys.

Field names were read from the benchmark sources (facts only, no code copied):

- vLLM `vllm bench serve --save-result` (vllm-project/vllm, vllm/benchmarks/serve.py at commit
  009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1): one JSON object with "completed",
  "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
  "total_token_throughput", "mean_/median_/p99_{ttft,tpot,itl}_ms" (p99 with the default
  --metric-percentiles 99), "mean_/median_e2el_ms" (only when --percentile-metrics names e2el),
  and the run facts "num_prompts", "request_rate" (the string "inf" when unbounded),
  "burstiness", "max_concurrency", "model_id". `--append-result` appends further JSON lines.
- SGLang `python -m sglang.bench_serving --output-file` (sgl-project/sglang,
  python/sglang/bench_serving.py at commit 0033168f0f58b2bc05aa0273bd475d9c01bafb1c): one JSON
  line appended per run with "completed", "total_input_tokens", "total_output_tokens",
  "request_throughput", "input_throughput", "output_throughput",
  "mean_/median_/p99_{ttft,tpot,itl}_ms", "mean_/median_e2e_latency_ms", and the run facts
  "dataset_name", "request_rate" (Infinity when unbounded), "max_concurrency",
  "random_input_len", "random_output_len", "random_range_ratio" (no total token throughput:
  it is input plus output throughput).

Both define TPOT per request as (E2E - TTFT) / (output tokens - 1), like the schema.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from meshplan.errors import ConfigError
from meshplan.userfiles import HugeNumber, loads, parse_json, read_text

FORMATS = ("vllm", "sglang")

COMMON_METRICS = {
    "output_throughput": "output_tokens_per_s", "request_throughput": "requests_per_s",
    "mean_ttft_ms": "ttft_ms_mean", "median_ttft_ms": "ttft_ms_p50", "p99_ttft_ms": "ttft_ms_p99",
    "mean_tpot_ms": "tpot_ms_mean", "median_tpot_ms": "tpot_ms_p50", "p99_tpot_ms": "tpot_ms_p99",
    "median_itl_ms": "itl_ms_p50",
}
METRICS = {
    "vllm": {**COMMON_METRICS, "total_token_throughput": "total_tokens_per_s",
             "mean_e2el_ms": "e2e_ms_mean"},
    "sglang": {**COMMON_METRICS, "mean_e2e_latency_ms": "e2e_ms_mean"},
}
"""Result key -> schema `measured` key, per format (SGLang's total is computed, see above)."""

THROUGHPUT_KEYS = {"vllm": ("output_throughput", "total_token_throughput", "request_throughput"),
                   "sglang": ("output_throughput", "input_throughput", "request_throughput")}

SIGNATURE = {
    "vllm": {"total_token_throughput", "mean_e2el_ms", "median_e2el_ms", "burstiness",
             "num_prompts", "model_id", "endpoint_type", "tokenizer_id"},
    "sglang": {"input_throughput", "mean_e2e_latency_ms", "median_e2e_latency_ms", "dataset_name",
               "random_input_len", "random_output_len", "total_output_tokens_retokenized"},
}
"""Keys only one benchmark writes: how the format is told apart when not given."""

FACT_KEYS = ("dataset_name", "random_input_len", "random_output_len", "random_range_ratio",
             "num_prompts", "request_rate", "burstiness", "max_concurrency")
"""Run facts (the benchmark's own flag names) a result may carry for the workload."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchResult:
    """One benchmark run read from a result file."""

    format: str
    """`vllm` or `sglang`."""
    measured: dict[str, float]
    """Schema `measured` keys with positive values."""
    facts: dict[str, Any]
    """Workload facts the result states, under the benchmark's flag names (FACT_KEYS)."""
    totals: dict[str, float] = field(default_factory=dict)
    """completed, total_input_tokens, total_output_tokens when present."""
    served_model: str | None = None
    """The model name the benchmark sent requests for, if the result says."""
    path: str | None = None
    """The file the result was read from."""
    remarks: tuple[str, ...] = ()
    """What the reader chose that a user should know (the last of several lines, dropped zeros)."""


def _objects(text: str, where: str) -> list[Any]:
    """The JSON values of a file: one document, or one per non-empty line (JSON lines)."""
    try:
        return [loads(text)]
    except HugeNumber as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or not _is_object(lines[0]):
        parse_json(text, where)  # not JSON lines either: raises with line and column
    return [parse_json(line, f"{where} line {n}") for n, line in enumerate(lines, 1)]


def _is_object(line: str) -> bool:
    try:
        return isinstance(loads(line), dict)
    except (ValueError, RecursionError):
        return False


def detect_format(data: dict, where: str) -> str:
    """`vllm` or `sglang`, from the keys only one of them writes."""
    scores = {fmt: len(keys & data.keys()) for fmt, keys in SIGNATURE.items()}
    best = max(scores, key=scores.get)
    if scores[best] == 0 or list(scores.values()).count(scores[best]) > 1:
        raise ConfigError(f"{where}: cannot tell whether this is a vLLM or an SGLang result; "
                          f"give --result-format vllm or sglang")
    return best


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _measured(data: dict, fmt: str, where: str) -> tuple[dict[str, float], list[str]]:
    """Schema measured keys of one result; non-positive values are dropped and named."""
    values = {key: _number(data.get(src)) for src, key in METRICS[fmt].items()}
    if fmt == "sglang":
        parts = [_number(data.get(k)) for k in ("input_throughput", "output_throughput")]
        values["total_tokens_per_s"] = sum(parts) if None not in parts else None
    dropped = sorted(k for k, v in values.items() if v is not None and v <= 0)
    remarks = [f"{where}: dropped non-positive values of {', '.join(dropped)}"] if dropped else []
    return {k: v for k, v in values.items() if v is not None and v > 0}, remarks


def _check(data: dict, fmt: str, where: str) -> None:
    """Refuse a result that holds no throughput or whose every request failed."""
    if not any(_number(data.get(k)) for k in THROUGHPUT_KEYS[fmt]):
        raise ConfigError(f"{where}: no throughput in the result: expected one of "
                          f"{', '.join(repr(k) for k in THROUGHPUT_KEYS[fmt])} (a {fmt} result)")
    if "completed" in data and _number(data["completed"]) == 0:
        raise ConfigError(f"{where}: key 'completed' is 0: every request failed, nothing was measured")


def parse_result(data: Any, where: str, fmt: str | None = None) -> BenchResult:
    """A BenchResult from one parsed result object (`fmt` None: detected from the keys)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object of benchmark results, "
                          f"got {type(data).__name__}")
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"--result-format {fmt!r}: expected one of {', '.join(FORMATS)}")
    fmt = fmt or detect_format(data, where)
    _check(data, fmt, where)
    measured, remarks = _measured(data, fmt, where)
    totals = {k: v for k in ("completed", "total_input_tokens", "total_output_tokens")
              if (v := _number(data.get(k))) is not None}
    served = data.get("model_id") if isinstance(data.get("model_id"), str) else None
    return BenchResult(format=fmt, measured=measured, totals=totals, served_model=served,
                       facts={k: data[k] for k in FACT_KEYS if data.get(k) is not None},
                       remarks=tuple(remarks))


def read_result(path: str | Path, fmt: str | None = None) -> BenchResult:
    """The run a result file holds: a JSON object, or the last line of a JSON-lines file
    (SGLang appends one line per run; vLLM's --append-result too), which a remark says."""
    where = str(path)
    objects = _objects(read_text(Path(path), "benchmark result"), where)
    result = parse_result(objects[-1], where, fmt)
    if len(objects) > 1:
        note = f"{where} holds {len(objects)} results (JSON lines), recorded the last"
        result = replace(result, remarks=(note, *result.remarks))
    return replace(result, path=where)
