"""Trace readers (BurstGPT, Azure LLM inference, Mooncake) on small hand-written sample files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from meshplan.errors import ConfigError
from meshplan.serving.traffic.traces import parse_azure_time, read_burstgpt, read_trace
from meshplan.serving.traffic.workload import TraceRow, from_trace

DATA = Path(__file__).parent / "data" / "traces"


def _arrivals(w):
    return [r.arrival_s for r in w.requests]


# --- BurstGPT ------------------------------------------------------------------------------

def test_burstgpt_sample():
    w = read_trace(DATA / "burstgpt_sample.csv", "burstgpt")
    assert len(w) == 18  # 20 rows, 2 failed requests (Response tokens = 0)
    assert _arrivals(w)[:3] == [0.0, 3.0, 9.0] and _arrivals(w)[-1] == 120.0
    first = w.requests[0]
    assert (first.input_len, first.output_len, first.prefix_hashes) == (310, 142, ())
    assert w.hash_block_tokens == 16 and w.concurrency is None
    assert len(w.skipped) == 2 and all("Response tokens = 0" in note for note in w.skipped)
    assert "burstgpt_sample.csv:6:" in w.skipped[0] and "2 failed request(s)" in w.description


def test_burstgpt_model_filter():
    w = read_burstgpt(DATA / "burstgpt_sample.csv", model="GPT-4")
    assert len(w) == 5 and _arrivals(w)[:2] == [0.0, 20.0]
    assert w.requests[0].input_len == 1204 and w.skipped == []


def test_burstgpt_bad_rows_stop_names_file_line_column_value():
    with pytest.raises(ConfigError) as err:
        read_trace(DATA / "burstgpt_bad.csv", "burstgpt")
    message = str(err.value)
    assert "burstgpt_bad.csv:4:" in message and "'Request tokens'" in message and "'abc'" in message


def test_burstgpt_bad_rows_skip_with_notes():
    w = read_trace(DATA / "burstgpt_bad.csv", "burstgpt", on_error="skip")
    assert [r.input_len for r in w.requests] == [310, 88, 234]
    lines = [note.split(":")[-2] for note in (n.split(" ")[0] for n in w.skipped)]
    assert lines == ["4", "5", "6", "7"]  # bad value, failed request, short row, negative
    assert "expected 6 columns" in w.skipped[2] and "'-3'" in w.skipped[3]
    assert "3 malformed rows skipped" in w.description


# --- Azure ---------------------------------------------------------------------------------

def test_azure_sample():
    w = read_trace(DATA / "azure_code_sample.csv", "azure")
    assert len(w) == 15 and w.skipped == []
    assert w.requests[0].arrival_s == 0.0
    assert w.requests[1].arrival_s == pytest.approx(4.314579, abs=1e-6)  # 7-digit fractions
    assert w.requests[-1].arrival_s == pytest.approx(30.0, abs=1e-6)
    assert (w.requests[0].input_len, w.requests[0].output_len) == (4808, 10)


def test_azure_timestamps():
    whole, fraction = parse_azure_time("2023-11-16 18:15:46.6805900")
    assert whole == 1700158546 and fraction == pytest.approx(0.68059)
    assert parse_azure_time("2024-05-12T00:00:00Z") == (1715472000, 0.0)
    assert parse_azure_time("2024-05-12 02:00:00.5+02:00") == (1715472000, 0.5)


def test_azure_bad_rows():
    with pytest.raises(ConfigError, match=r"azure_bad\.csv:4: column 'TIMESTAMP' = '2024-13-45"):
        read_trace(DATA / "azure_bad.csv", "azure")
    w = read_trace(DATA / "azure_bad.csv", "azure", on_error="skip")
    assert len(w) == 3 and len(w.skipped) == 3
    assert "'ContextTokens' = '1.5e3'" in w.skipped[1] and "'GeneratedTokens' = '0'" in w.skipped[2]
    assert _arrivals(w)[1] == pytest.approx(1.4900700, abs=1e-6)


# --- Mooncake ------------------------------------------------------------------------------

def test_mooncake_sample():
    w = read_trace(DATA / "mooncake_sample.jsonl", "mooncake")
    assert len(w) == 12 and w.hash_block_tokens == 512
    assert w.requests[0].prefix_hashes == tuple(range(13))  # 6955 tokens: 13 full blocks of 512
    assert w.requests[2].arrival_s == pytest.approx(27.482)
    by_len = {r.input_len: r for r in w.requests}
    assert by_len[300].prefix_hashes == () and by_len[512].prefix_hashes == (21,)
    assert by_len[4096].prefix_hashes[:3] == by_len[2500].prefix_hashes[:3] == (18, 19, 23)


def test_mooncake_bad_rows():
    with pytest.raises(ConfigError, match=r"mooncake_bad\.jsonl:3: not valid JSON"):
        read_trace(DATA / "mooncake_bad.jsonl", "mooncake")
    w = read_trace(DATA / "mooncake_bad.jsonl", "mooncake", on_error="skip")
    assert len(w) == 3 and [n.split(":")[1] for n in w.skipped] == ["3", "4", "6"]
    assert "'input_length'" in w.skipped[1] and "'hash_ids'" in w.skipped[2]


# --- replay options ------------------------------------------------------------------------

def test_time_scale_and_max_requests():
    base = read_trace(DATA / "burstgpt_sample.csv", "burstgpt")
    fast = read_trace(DATA / "burstgpt_sample.csv", "burstgpt", time_scale=0.5, max_requests=5)
    assert len(fast) == 5 and _arrivals(fast) == [t * 0.5 for t in _arrivals(base)[:5]]
    assert "replaying 5" in fast.description


def test_time_window():
    w = read_trace(DATA / "burstgpt_sample.csv", "burstgpt", start_s=20, duration_s=40)
    # Trace seconds 32-72 after the first request (t=12): rows at 41 ... 71, 33 was a failure.
    assert len(w) == 6 and _arrivals(w) == [0.0, 6.0, 11.0, 19.0, 23.0, 30.0]
    with pytest.raises(ConfigError, match="no request in the window"):
        read_trace(DATA / "burstgpt_sample.csv", "burstgpt", start_s=1000)


def test_gzip_and_from_trace_sorting(tmp_path):
    packed = tmp_path / "trace.jsonl.gz"
    packed.write_bytes(gzip.compress((DATA / "mooncake_sample.jsonl").read_bytes()))
    assert len(read_trace(packed, "mooncake")) == 12
    rows = [TraceRow(arrival_s=t, input_len=5, output_len=5) for t in (9.0, 4.0, 6.5)]
    w = from_trace(rows)
    assert _arrivals(w) == [0.0, 2.5, 5.0] and [r.id for r in w.requests] == [0, 1, 2]


# --- errors --------------------------------------------------------------------------------

def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="valid: burstgpt, azure, mooncake"):
        read_trace(DATA / "burstgpt_sample.csv", "sharegpt")
    with pytest.raises(ConfigError, match="does not exist"):
        read_trace(tmp_path / "nope.csv", "azure")


def test_missing_column_lists_found_and_needed(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("Timestamp,Model,Request tokens\n1,ChatGPT,10\n")
    with pytest.raises(ConfigError) as err:
        read_trace(path, "burstgpt")
    message = str(err.value)
    assert "missing column(s) 'Response tokens'" in message
    assert "found 'Timestamp', 'Model', 'Request tokens'" in message and "needed" in message


@pytest.mark.parametrize("options, named", [
    ({"on_error": "ignore"}, "on_error"),
    ({"time_scale": 0.0}, "time_scale"),
    ({"max_requests": 0}, "max_requests"),
    ({"duration_s": -5.0}, "duration_s"),
])
def test_bad_options(options, named):
    with pytest.raises(ConfigError, match=named):
        read_trace(DATA / "azure_code_sample.csv", "azure", **options)


def test_model_filter_only_for_burstgpt():
    with pytest.raises(ConfigError, match="BurstGPT"):
        read_trace(DATA / "azure_code_sample.csv", "azure", model="GPT-4")


def test_unreadable_file_is_a_config_error(tmp_path):
    path = tmp_path / "binary.csv"
    path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n\xff\xfe\x00,1,2\n")
    with pytest.raises(ConfigError, match="cannot read trace file"):
        read_trace(path, "azure")
