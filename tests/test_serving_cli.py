"""`meshplan serve simulate`: JSON and table output, output files, traces, engines,
disaggregation, and one clear stderr line with exit code 2 for bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app

runner = CliRunner()
TRACES = Path(__file__).parent / "data" / "traces"
BASE = ("serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb")
SMALL = (*BASE, "--num-requests", "200", "--input-len", "512", "--output-len", "64")
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def run_json(*args: str, code: int = 0) -> dict:
    result = run(*args, "--json")
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_json_reports_metrics_and_simulation_stats():
    data = run_json(*SMALL, "--request-rate", "20")
    m = data["metrics"]
    for name in LATENCIES:
        assert set(m[name]) == {"mean", "p50", "p90", "p99"}
        assert all(isinstance(v, float) and v > 0 for v in m[name].values()), name
        assert m[name]["p50"] <= m[name]["p90"] <= m[name]["p99"]
    for name in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s"):
        assert m[name] > 0
    assert "goodput_requests_per_s" in m and m["goodput_requests_per_s"] is None  # no SLO given
    assert m["total_tokens_per_s"] > m["output_tokens_per_s"]
    assert m["completed"] == 200 and m["total_input_tokens"] == 200 * 512
    assert m["total_output_tokens"] == 200 * 64
    sim = data["simulation"]
    assert sim["requests"] == 200
    assert sim["iterations"] > 0 and sim["simulated_s"] > 0 and sim["wall_s"] > 0
    assert sim["simulated_s"] == pytest.approx(m["duration_s"])
    assert [p["role"] for p in data["deployment"]] == ["both"]


def test_json_is_deterministic_for_a_seed():
    a = run_json(*SMALL, "--request-rate", "20", "--seed", "3")
    b = run_json(*SMALL, "--request-rate", "20", "--seed", "3")
    assert a["metrics"] == b["metrics"]
    assert a["simulation"]["iterations"] == b["simulation"]["iterations"]


def test_human_output_prints_the_metric_tables():
    result = run(*SMALL, "--request-rate", "20")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("Serving latency", "TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2E (ms)", "P99",
                 "Serving throughput", "Successful requests", "Request throughput, incl. drain (req/s)",
                 "Request throughput, steady (req/s)",
                 "Output token throughput (tok/s)", "workload: synthetic: 200 requests"):
        assert text in out, text
    assert "simulated" in out and "iterations" in out
    assert result.stderr == ""


def test_slo_flags_give_a_goodput():
    loose = run_json(*SMALL, "--request-rate", "20", "--slo-ttft-ms", "10000", "--slo-tpot-ms", "1000")
    m = loose["metrics"]
    assert m["goodput_requests_per_s"] == pytest.approx(m["requests_per_s"])
    assert loose["slo"] == {"attainment": pytest.approx(1.0), "percentile": 90.0, "met": True}
    tight = run_json(*SMALL, "--request-rate", "20", "--slo-ttft-ms", "0.01", "--slo-tpot-ms", "1000", code=1)
    assert tight["metrics"]["goodput_requests_per_s"] == 0 and not tight["slo"]["met"]
    p50 = m["ttft_ms"]["p50"]
    mid = run_json(*SMALL, "--request-rate", "20", "--slo-ttft-ms", str(p50), "--slo-tpot-ms", "1000", code=1)
    assert 0 < mid["metrics"]["goodput_requests_per_s"] < m["requests_per_s"]
    assert 0.3 < mid["slo"]["attainment"] < 0.7  # the p50 TTFT as objective: about half meet it
    half = run_json(*SMALL, "--request-rate", "20", "--slo-ttft-ms", str(p50), "--slo-tpot-ms", "1000",
                    "--slo-percentile", "40")
    assert half["slo"]["met"]


def test_requests_csv_and_trace_out_write_files(tmp_path):
    csv_path, trace_path = tmp_path / "requests.csv", tmp_path / "iterations.json"
    data = run_json(*SMALL, "--request-rate", "20", "--requests-csv", csv_path, "--trace-out", trace_path)
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == data["simulation"]["requests"] == 200
    assert sorted(int(r["id"]) for r in rows) == list(range(200))
    assert all(float(r["ttft_ms"]) > 0 and int(r["output_len"]) == 64 for r in rows)
    trace = json.loads(trace_path.read_text())
    events = trace["traceEvents"]
    iterations = [e for e in events if e["ph"] == "X"]
    assert len(iterations) == data["simulation"]["iterations"]
    assert any(e["ph"] == "C" for e in events)
    assert any(e["ph"] == "M" and e["args"].get("name") == "replica 0" for e in events)


def test_mooncake_trace_replays():
    data = run_json(*BASE, "--trace", TRACES / "mooncake_sample.jsonl", "--trace-format", "mooncake")
    lines = [ln for ln in (TRACES / "mooncake_sample.jsonl").read_text().splitlines() if ln.strip()]
    assert data["simulation"]["requests"] == data["metrics"]["completed"] == len(lines)
    assert data["metrics"]["prefix_cache_hit_rate"] > 0  # the sample's requests share hash ids


@pytest.mark.parametrize("fmt, name", [("burstgpt", "burstgpt_sample.csv"),
                                       ("azure", "azure_code_sample.csv")])
def test_csv_traces_replay(fmt, name):
    data = run_json(*BASE, "--trace", TRACES / name, "--trace-format", fmt)
    assert data["simulation"]["requests"] == data["metrics"]["completed"] > 0


@pytest.mark.parametrize("engine", ["sglang", "tensorrt-llm"])
def test_other_engines_run(engine):
    data = run_json(*SMALL, "--engine", engine, "--request-rate", "20")
    assert data["metrics"]["completed"] == 200
    assert data["metrics"]["ttft_ms"]["mean"] > 0
    assert len(data["deployment"]) == 1


def test_engine_version_selects_the_tensorrt_llm_generation():
    # 0.13 (TensorRT engines, C++ executor) and 1.0 (PyTorch backend) are priced with their own
    # fitted constants; no version means the current generation.
    args = (*SMALL, "--engine", "tensorrt-llm", "--concurrency", "16")
    old = run_json(*args, "--engine-version", "0.13.0")["metrics"]["tpot_ms"]["mean"]
    new = run_json(*args, "--engine-version", "1.0")["metrics"]["tpot_ms"]["mean"]
    default = run_json(*args)["metrics"]["tpot_ms"]["mean"]
    assert old != new and default == new


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm"])
def test_disaggregated_pools(engine):
    data = run_json(*SMALL, "--engine", engine, "--request-rate", "20",
                    "--prefill-gpus", "1", "--decode-gpus", "1")
    assert [p["role"] for p in data["deployment"]] == ["prefill", "decode"]
    assert data["metrics"]["completed"] == data["simulation"]["requests"] == 200
    assert data["metrics"]["total_output_tokens"] == 200 * 64


# ---------------------------------------------------------------------------- bad input

BAD = {
    "unknown engine": ((*SMALL, "--engine", "tgi"), ("--engine", "tgi", "vllm")),
    "tp 0": ((*SMALL, "--tp", "0"), ("--tp", "0", "1 or more")),
    "rate and concurrency": ((*SMALL, "--request-rate", "20", "--concurrency", "4"),
                             ("--request-rate", "--concurrency")),
    "speculation without acceptance": ((*SMALL, "--speculative-tokens", "2"),
                                       ("speculative_tokens", "acceptance_rate")),
    "unknown trace format": ((*BASE, "--trace", TRACES / "mooncake_sample.jsonl", "--trace-format", "sharegpt"),
                             ("trace format", "sharegpt", "mooncake")),
    "half disaggregation": ((*SMALL, "--prefill-gpus", "1"), ("--prefill-gpus", "--decode-gpus")),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exits_2_with_one_clear_line(case):
    args, words = BAD[case]
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and "{" not in result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_a_deployment_that_does_not_fit_is_an_answer_with_exit_1(command):
    """Not bad input: the pinned layout is valid, it just does not fit (train memory also exits 1)."""
    extra = ("--rates", "1") if command == "sweep" else ()
    result = run("serve", command, "--model", "llama-3.1-70b", "--gpu", "l40s-48gb",
                 "--num-requests", "10", *extra)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    for word in ("llama-3.1-70b", "does not fit", "l40s-48gb", "raise tp/pp"):
        assert word in lines[0], (word, lines[0])


@pytest.mark.parametrize("fmt, name, line", [("mooncake", "mooncake_bad.jsonl", 3),
                                             ("burstgpt", "burstgpt_bad.csv", 4),
                                             ("azure", "azure_bad.csv", 4)])
def test_malformed_trace_stops_at_the_bad_line(fmt, name, line):
    result = run(*BASE, "--trace", TRACES / name, "--trace-format", fmt, "--on-error", "stop")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert f"{name}:{line}:" in lines[0]


def test_malformed_trace_rows_can_be_skipped():
    data = run_json(*BASE, "--trace", TRACES / "mooncake_bad.jsonl", "--trace-format", "mooncake",
                    "--on-error", "skip")
    assert data["metrics"]["completed"] == data["simulation"]["requests"] > 0


# ---------------------------------------------------------------------------- trace format from the file


@pytest.mark.parametrize("name, fmt", [("burstgpt_sample.csv", "burstgpt"),
                                       ("azure_code_sample.csv", "azure"),
                                       ("mooncake_sample.jsonl", "mooncake")])
def test_trace_format_is_told_from_the_file(name, fmt):
    """--trace alone replays a public trace (it needed --trace-format even for a BurstGPT CSV);
    the description names the format that was detected (#34 item 6)."""
    data = run_json(*BASE, "--trace", TRACES / name)
    given = run_json(*BASE, "--trace", TRACES / name, "--trace-format", fmt)
    assert data["simulation"]["requests"] == given["simulation"]["requests"] > 0
    table = run(*BASE, "--trace", TRACES / name)
    assert table.exit_code == 0 and f"workload: {fmt} trace {name}" in table.stdout, table.output


def test_trace_format_flag_overrides_detection(tmp_path):
    """--trace-format still decides: a BurstGPT file read as azure is refused by the azure reader."""
    result = run(*BASE, "--trace", TRACES / "burstgpt_sample.csv", "--trace-format", "azure")
    assert result.exit_code == 2 and "TIMESTAMP" in result.stderr


def test_undetectable_trace_is_one_error_listing_the_formats(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("when,prompt,answer\n0.0,10,20\n")
    result = run(*BASE, "--trace", path)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for word in ("--trace-format", "burstgpt", "azure", "mooncake", "Request tokens", "hash_ids"):
        assert word in lines[0], (word, lines[0])
