"""Chrome/Perfetto trace of a simulated pipeline step."""

from __future__ import annotations

import gzip
import json

from meshplan.report import chrome_trace, write_trace
from meshplan.training.pipeline.simulate import StageTimes, simulate_pipeline

PP, VPP, M = 2, 2, 4


def simulated():
    stages = [StageTimes(forward_s=(1e-3, 1e-3), backward_s=(2e-3, 2e-3)) for _ in range(PP)]
    return simulate_pipeline("interleaved", stages, M, 1e-4)


def trace_of(result, **kwargs):
    return json.loads(json.dumps(chrome_trace(result.events, **kwargs)))  # round trip


def thread_ids(events):
    return {(e["pid"], e["args"]["name"]): e["tid"] for e in events if e["name"] == "thread_name"}


def test_trace_is_the_json_object_format_with_one_process_per_stage():
    result = simulated()
    trace = trace_of(result, metadata={"schedule": "interleaved"})
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "stage 0", 1: "stage 1"}
    threads = thread_ids(events)
    assert threads == {(0, "compute"): 0, (0, "pp p2p"): 1, (1, "compute"): 0, (1, "pp p2p"): 1}
    order = {(e["pid"], e["tid"]): e["args"]["sort_index"]
             for e in events if e["name"] == "thread_sort_index"}
    assert order[(0, 0)] < order[(0, 1)]  # compute first
    assert trace["otherData"] == {"schedule": "interleaved"}


def test_every_op_and_send_is_a_complete_event_in_microseconds():
    result = simulated()
    complete = [e for e in trace_of(result)["traceEvents"] if e["ph"] == "X"]
    ops = 2 * M * PP * VPP
    sends = 2 * M * (PP * VPP - 1)
    assert len(complete) == len(result.events) == ops + sends
    first = next(e for e in complete if e["name"] == "F mb0 c0" and e["pid"] == 0)
    assert (first["ts"], first["dur"], first["tid"]) == (0.0, 1000.0, 0)  # 1 ms forward
    assert first["args"] == {"microbatch": 0, "chunk": 0}
    send = next(e for e in complete if e["cat"] == "send")
    assert send["dur"] == 100.0 and send["tid"] == 1
    end_us = max(e["ts"] + e["dur"] for e in complete if e["tid"] == 0)
    assert end_us == round(result.step_time_s * 1e6, 3)


def test_extra_streams_get_their_own_threads():
    result = simulated()
    extra = [(0, "tp comm", "all-reduce", 0.0, 5e-5), (1, "dp comm", "reduce-scatter", 0.01, 0.012),
             (0, "dp comm", "reduce-scatter", 0.01, 0.012)]
    events = trace_of(result, extra=extra)["traceEvents"]
    threads = thread_ids(events)
    assert threads[(0, "tp comm")] == 2
    assert threads[(0, "dp comm")] == threads[(1, "dp comm")] == 3
    rs = [e for e in events if e["name"] == "reduce-scatter"]
    assert [(e["pid"], e["ts"], e["dur"]) for e in rs] == [(1, 1e4, 2000.0), (0, 1e4, 2000.0)]


def test_written_file_loads(tmp_path):
    trace = chrome_trace(simulated().events)
    write_trace(tmp_path / "step.json", trace)
    assert json.loads((tmp_path / "step.json").read_text()) == trace
    write_trace(tmp_path / "step.json.gz", trace)
    assert json.loads(gzip.decompress((tmp_path / "step.json.gz").read_bytes())) == trace
