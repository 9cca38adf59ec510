"""No input crashes meshplan: every reader and flag, fed hostile values, gives a result or one
`error:` line (exit 2; exit 1 for an answered 'does not fit'), never a traceback, hang or NaN.

Deterministic (hypothesis derandomized, no deadline); the case counts are the `max_examples`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.model import load_model
from meshplan.model.catalog_index import list_entries  # noqa: F401  (catalog is importable)
from meshplan.serving.traffic.traces import read_trace
from meshplan.validate.records import read_records

runner = CliRunner()
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CATALOG_CONFIG = json.loads((Path(__file__).parents[2] / "src/meshplan/model/catalog/llama-3.2-1b.json").read_text())

HOSTILE_NUMBERS = st.one_of(
    st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e308", "1e400", "99999999999999999999", "-0",
                     "0.5", "1e-300", "abc", ""]),
    st.integers(min_value=-10**6, max_value=10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)


def assert_clean(result) -> None:
    """Exit 0, 1 or 2; no exception other than the exit; no traceback or NaN in the output."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1, 2), result.output
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert "error:" in result.output or "Usage:" in result.output, result.output


TRAIN = ["train", "estimate", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
SERVE = ["serve", "simulate", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--num-requests", "20",
         "--input-len", "64", "--output-len", "8"]
FLAGS = [(TRAIN, f) for f in ("--num-gpus", "--tp", "--pp", "--vpp", "--cp", "--micro-batch-size",
                               "--global-batch-size", "--seq-len", "--inter-node-gbps-per-gpu",
                               "--gpu-power-limit-w", "--recompute-num-layers")]
FLAGS += [(SERVE, f) for f in ("--request-rate", "--seed", "--tp", "--max-num-seqs", "--input-len",
                               "--slo-ttft-ms", "--gpu-memory-utilization", "--range-ratio",
                               "--burstiness", "--time-scale", "--acceptance-rate", "--concurrency")]


@FUZZ
@given(case=st.sampled_from(FLAGS), value=HOSTILE_NUMBERS)
def test_numeric_flags(case, value):
    base, flag = case
    assert_clean(runner.invoke(app, [*base, flag, value]))


PLAN = ["train", "plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb", "--global-batch-size", "16"]


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(flag=st.sampled_from(["--num-gpus", "--top", "--price-per-gpu-hour", "--train-tokens",
                             "--seq-len", "--tp", "--pp", "--vpp", "--cp", "--ep", "--workers",
                             "--host-link-gb-per-s", "--nvme-tb", "--host-memory-gb"]), value=HOSTILE_NUMBERS)
def test_plan_flags(flag, value):
    args = [*PLAN, "--num-gpus", "8"] if flag != "--num-gpus" else PLAN
    assert_clean(runner.invoke(app, [*args, flag, value]))


@FUZZ
@given(key=st.sampled_from(sorted(CATALOG_CONFIG)), value=JSON_VALUES)
def test_config_json_fields(key, value):
    config = {**CATALOG_CONFIG, key: value}
    try:
        spec = load_model(config, name="fuzz")
    except ConfigError:
        return
    assert spec.params_total > 0 and math.isfinite(spec.flops_per_token_forward(128))


@FUZZ
@given(data=st.binary(max_size=200))
def test_config_file_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_bytes(data)
    result = runner.invoke(app, ["model", "show", str(path)])
    assert_clean(result)


@FUZZ
@given(records=JSON_VALUES)
def test_run_record_files(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("rec") / "records.yaml"
    path.write_text(json.dumps({"schema": 1, "records": records if isinstance(records, list) else [records]},
                               allow_nan=True))
    try:
        good, skipped = read_records(path)
    except ConfigError:
        return
    assert len(good) + len(skipped) >= 0


@FUZZ
@given(text=st.text(max_size=300), fmt=st.sampled_from(["burstgpt", "azure", "mooncake"]))
def test_trace_files(tmp_path_factory, text, fmt):
    path = tmp_path_factory.mktemp("trace") / f"trace.{'jsonl' if fmt == 'mooncake' else 'csv'}"
    path.write_text(text)
    try:
        read_trace(path, fmt, on_error="skip")
    except ConfigError:
        pass


@FUZZ
@given(plan=JSON_VALUES, target=st.sampled_from(["megatron", "torchtitan", "deepspeed"]))
def test_plan_files(tmp_path_factory, plan, target):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    body = {"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 8}, "plan": plan}
    path.write_text(json.dumps(body if isinstance(plan, dict) else plan, allow_nan=True))
    assert_clean(runner.invoke(app, ["train", "export", "--target", target, "--plan", str(path)]))


@pytest.mark.parametrize("path", ["/dev/null", "/proc/self/fd/0", "/nonexistent/config.json"])
def test_special_paths_as_config(path):
    assert_clean(runner.invoke(app, ["model", "show", path]))


@pytest.mark.parametrize("flag", ["--trace", "--requests-csv", "--trace-out"])
def test_unwritable_or_unreadable_paths(tmp_path, flag):
    base = SERVE if flag != "--trace" else [*SERVE, "--trace-format", "burstgpt"]
    for bad in (str(tmp_path), "/nonexistent/dir/file"):
        result = runner.invoke(app, [*base, flag, bad])
        assert_clean(result)
        assert result.exit_code == 2
