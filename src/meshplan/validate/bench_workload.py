"""The `serving.workload` of a run record, from a serving benchmark's command line, the run facts
its result file states, and explicit values; a fact two of them state must agree
(`bench_checks`), and each fills what the others leave open.

Flags read from the command line (names from vllm/benchmarks/serve.py and
python/sglang/bench_serving.py, the commits named in meshplan.validate.bench_results):
`vllm bench serve` --dataset-name, --random-input-len, --random-output-len (or the general
--input-len, --output-len), --random-range-ratio, --num-prompts, --request-rate, --burstiness,
--max-concurrency; `python -m sglang.bench_serving` the same without burstiness and the general
lengths. argparse accepts unambiguous prefixes (`--random-input`), `--flag=value` and, in vLLM,
underscores; so does this reader.

ShareGPT: each tool samples it its own way (vLLM keeps prompts of 4..1024 tokens and pairs up to
2048; SGLang keeps everything of 2 tokens or more), so a benchmark's `sharegpt` is recorded as
`sharegpt_vllm` or `sharegpt_sglang`, the packaged table of that tool's sampler.

Random lengths: vLLM draws uniformly in [L(1-r), L(1+r)], the schema's convention; SGLang draws in
[max(1, int(L r)), L] (input) and [int(O r), O] (output), recorded as the same interval's centre
and relative half-width.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any

import numpy as np

from meshplan.errors import ConfigError
from meshplan.serving.traffic.lengths import NAMED_TABLES, sample_lengths
from meshplan.validate.bench_checks import check_sources
from meshplan.validate.bench_results import BenchResult

_COMMON = {"--dataset-name": ("dataset_name", str), "--random-input-len": ("random_input_len", int),
           "--random-output-len": ("random_output_len", int),
           "--random-range-ratio": ("random_range_ratio", float), "--num-prompts": ("num_prompts", int),
           "--request-rate": ("request_rate", float), "--max-concurrency": ("max_concurrency", int)}
FLAGS = {
    "vllm": {**_COMMON, "--burstiness": ("burstiness", float), "--input-len": ("random_input_len", int),
             "--output-len": ("random_output_len", int)},
    "sglang": _COMMON,
}
"""Benchmark flag -> (run-fact name, type), per tool."""

DATASETS = {"random": "random", "random-ids": "random", "sharegpt": "sharegpt_{tool}"}
"""Benchmark dataset names the schema can state ({tool}: vllm or sglang, whose samplers differ)."""

KINDS = {int: "an integer", float: "a number", str: "text"}

OVERRIDES = ("input_len", "output_len", "num_requests", "request_rate", "concurrency", "dataset")
"""Workload keys a user may give explicitly."""


def command_tool(argv: list[str]) -> str | None:
    """`vllm` or `sglang` for a benchmark command line, None when it is neither."""
    names = {Path(a).name for a in argv}
    if {"sglang.bench_serving", "sglang.benchmark.serving", "bench_serving.py"} & names:
        return "sglang"
    if {"bench", "serve"} <= set(argv) and any(Path(a).name == "vllm" for a in argv):
        return "vllm"
    return "vllm" if "benchmark_serving.py" in names else None


def _match(flag: str, known: dict) -> str | None:
    """The known flag `flag` names: exactly, or as argparse's unambiguous prefix."""
    flag = "--" + flag[2:].replace("_", "-")
    if flag in known:
        return flag
    hits = [k for k in known if k.startswith(flag)]
    return hits[0] if len(hits) == 1 else None


def _convert(kind: type, flag: str, value: str | None) -> Any:
    if value is None:
        raise ConfigError(f"--bench-command: {flag} has no value")
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"--bench-command: {flag} {value!r} is not {KINDS[kind]}") from None


def parse_command(command: str, default_tool: str | None = None) -> tuple[str, dict[str, Any]]:
    """(tool, run facts) of a benchmark command line; `default_tool` when the line names none."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"--bench-command: cannot split the command line: {exc}") from None
    tool = command_tool(argv) or default_tool
    if tool is None:
        raise ConfigError("--bench-command: not a `vllm bench serve` or `python -m sglang.bench_serving` "
                          "command line")
    facts: dict[str, Any] = {}
    for i, token in enumerate(argv):
        name, eq, inline = token.partition("=")
        key = _match(name, FLAGS[tool]) if token.startswith("--") else None
        if key is not None:
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            fact, kind = FLAGS[tool][key]
            facts[fact] = _convert(kind, key, value)
    return tool, facts


def _rate(value: Any) -> float | None:
    """A request rate, None when unbounded (vLLM saves "inf", SGLang Infinity)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"request_rate {value!r} is not a number (or inf)") from None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def sglang_random(input_len: int, output_len: int, ratio: float) -> dict[str, Any]:
    """SGLang's random lengths as the schema's centre and relative half-width."""
    in_lo, out_lo = max(int(input_len * ratio), 1), int(output_len * ratio)
    if ratio >= 1:
        in_lo, out_lo = input_len, output_len
    width = (input_len - in_lo) / (input_len + in_lo)
    return {"input_len": round((in_lo + input_len) / 2), "range_ratio": min(round(width, 4), 0.9999),
            "output_len": max(1, round((out_lo + output_len) / 2))}


def _lengths(tool: str, raw: dict, remarks: list[str]) -> dict[str, Any]:
    """Lengths of a random dataset, in the schema's convention."""
    inp, out = raw.get("random_input_len"), raw.get("random_output_len")
    ratio = raw.get("random_range_ratio")
    if tool == "sglang" and inp and out:
        if ratio is None:
            remarks.append("assumed SGLang's default --random-range-ratio 0.0")
        new = sglang_random(inp, out, ratio or 0.0)
        remarks.append(f"SGLang random lengths (input {inp}, output {out}, range ratio {ratio or 0.0}) "
                       f"recorded in vLLM's convention as input_len {new['input_len']}, output_len "
                       f"{new['output_len']}, range_ratio {new['range_ratio']}")
        return new
    return {"input_len": inp, "output_len": out, "range_ratio": ratio}


def _check_numbers(raw: dict[str, Any]) -> None:
    """Run facts other than the dataset name and the rate are numbers."""
    for key, value in raw.items():
        if key not in ("dataset_name", "request_rate") and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"benchmark run fact {key} = {value!r}: expected a number")


def workload_facts(tool: str, raw: dict[str, Any], remarks: list[str]) -> dict[str, Any]:
    """Schema workload keys from run facts under the benchmark's flag names."""
    _check_numbers(raw)
    name = raw.get("dataset_name")
    dataset = DATASETS.get(name) if isinstance(name, str) else None
    if name is not None and dataset is None:
        remarks.append(f"dataset {name!r} is neither random nor sharegpt: recorded without a dataset")
    if dataset is not None and "{tool}" in dataset:
        dataset = dataset.format(tool=tool)
        remarks.append(f"dataset sharegpt recorded as {dataset}: ShareGPT as {tool}'s benchmark samples it "
                       f"(its length filters and measured means), not the vLLM paper's table")
    facts = {"dataset": dataset, "num_requests": raw.get("num_prompts"),
             "request_rate": _rate(raw.get("request_rate")), "burstiness": raw.get("burstiness"),
             "concurrency": raw.get("max_concurrency")}
    if dataset == "random":
        facts.update(_lengths(tool, raw, remarks))
    return {k: v for k, v in facts.items() if v is not None}


def _from_totals(facts: dict, result: BenchResult, remarks: list[str]) -> None:
    """Mean lengths and the request count from the result's totals, where nothing else says."""
    done = result.totals.get("completed")
    if not done:
        return
    if "num_requests" not in facts:
        facts["num_requests"] = int(done)
        remarks.append(f"num_requests {int(done)}: the result's completed count")
    if facts.get("dataset") in NAMED_TABLES:
        _table_remark(facts["dataset"], result, done, remarks)
        return
    for key, total in (("input_len", "total_input_tokens"), ("output_len", "total_output_tokens")):
        if key not in facts and result.totals.get(total):
            facts[key] = max(1, round(result.totals[total] / done))
            remarks.append(f"{key} {facts[key]}: mean from the result ({total} / completed)")


def _table_remark(name: str, result: BenchResult, done: float, remarks: list[str]) -> None:
    """The run's own tokens per request beside the table's means: a run of a few requests is a
    small draw the table does not reproduce (its notes should say so)."""
    ins, outs = result.totals.get("total_input_tokens"), result.totals.get("total_output_tokens")
    if not ins or not outs:
        return
    table_in, table_out = sample_lengths(name, 200_000, np.random.default_rng(0), max_len=None)
    remarks.append(f"the run sent {ins / done:,.0f} prompt and received {outs / done:,.0f} output tokens per "
                   f"request; the {name} table's means are {table_in.mean():,.0f} and {table_out.mean():,.0f}")


ORDER = ("mode", "dataset", "input_len", "output_len", "range_ratio", "num_requests", "request_rate",
         "burstiness", "concurrency")
"""Key order of a written workload (SCHEMA.md's)."""


def _mode(facts: dict) -> str:
    """The arrival mode (SCHEMA.md): closed loop, timed arrivals or all at t=0. A run with both
    a request rate and a concurrency cap is refused: the simulator takes one of them, so
    `meshplan validate` could never use its record."""
    rate, clients, burst = facts.get("request_rate"), facts.get("concurrency"), facts.get("burstiness")
    if rate is None:
        return "concurrency" if clients else "offline"
    if clients:
        raise ConfigError(f"the run had both a request rate ({rate:g} requests/s) and a concurrency "
                          f"cap ({clients}); meshplan simulates one of them, so `meshplan validate` "
                          f"could not use the record; nothing was written")
    return "gamma" if burst is not None and burst != 1 else "poisson"


def bench_workload(result: BenchResult, command: str | None, explicit: dict[str, Any],
                   remarks: list[str]) -> dict[str, Any]:
    """The record's `serving.workload` from the explicit values, the command and the result
    (which must agree where they overlap); what was inferred is appended to `remarks`."""
    raw, flags = dict(result.facts), {}
    if command:
        tool, flags = parse_command(command, default_tool=result.format)
        if tool != result.format:
            raise ConfigError(f"--bench-command is a {tool} benchmark but the result is a "
                              f"{result.format} result; give the command that wrote the result")
        raw.update(flags)
    check_sources(result, flags, explicit)
    facts = workload_facts(result.format, raw, remarks)
    if unknown := sorted(set(explicit) - set(OVERRIDES)):
        raise ConfigError(f"workload keys {unknown} cannot be given; known: {', '.join(OVERRIDES)}")
    explicit = {k: v for k, v in explicit.items() if v is not None}
    facts.update(explicit)
    if facts.get("dataset") != "random":
        facts.pop("range_ratio", None)
    if facts.get("dataset") in NAMED_TABLES:  # lengths come from its table unless given
        for key in {"input_len", "output_len"} - set(explicit):
            facts.pop(key, None)
    _from_totals(facts, result, remarks)
    facts["mode"] = _mode(facts)
    if facts["mode"] != "gamma":
        facts.pop("burstiness", None)
    return {**{k: facts[k] for k in ORDER if k in facts}, **facts}
