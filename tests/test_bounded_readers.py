"""Every reader of a user's file is bounded (#34): a YAML "billion laughs" (aliases standing for
10**9 values) is refused at once with exit 2, as is a file over the size limit or holding more
records than a file may; each message names the file and the limit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.userfiles import MAX_BYTES
from meshplan.validate import records as record_files
from meshplan.yamlread import MAX_NODES, TooBig, load_user

runner = CliRunner()
LOL = ["lol"] * 9


def billion_laughs(tail: str = "") -> str:
    """Nine levels of nine aliases of the level below under `bomb:` (*l9 stands for 9**9, 387
    million strings), then `tail`, which refers to *l9 where the reader walks it."""
    lines = [f"l0: &l0 {LOL}"] + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "bomb:\n" + "".join(f"  {line}\n" for line in lines) + tail


def run(*args) -> tuple[int, str, float]:
    start = time.perf_counter()
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, " ".join(result.stderr.split()), time.perf_counter() - start


def _bombs(tmp_path: Path) -> dict[str, tuple[Path, list]]:
    record = tmp_path / "records.yaml"
    record.write_text(billion_laughs("schema: 1\nrecords:\n- {id: r1, kind: training, model: llama-3.1-8b, "
                                     "measured: {step_time_s: *l9}}\n"))
    plan = tmp_path / "plan.yaml"
    plan.write_text(billion_laughs("model: llama-3.1-8b\ntp: 1\nmax_num_seqs: *l9\n"))
    site = tmp_path / "site.yaml"
    site.write_text(billion_laughs("site: bomb\nconstants: {training: {mfu: *l9}}\n"))
    return {"validate": (record, ["validate", record]),
            "serve export": (plan, ["serve", "export", "--target", "vllm", "--plan", plan]),
            "train export": (plan, ["train", "export", "--target", "megatron", "--plan", plan]),
            "--site": (site, ["train", "estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb",
                              "--num-gpus", "8", "--site", site])}


@pytest.mark.parametrize("reader", ["validate", "serve export", "train export", "--site"])
def test_a_billion_laughs_is_exit_2_at_once(tmp_path, reader):
    path, args = _bombs(tmp_path)[reader]
    code, error, seconds = run(*args)
    assert code == 2, error
    assert str(path) in error and f"more than {MAX_NODES:,} values" in error and "alias" in error
    assert seconds < 5


def test_aliases_within_the_budget_still_read():
    text = "base: &b {hidden_size: 4096, layers: 32}\na: *b\nb: *b\n"
    assert load_user(text) == yaml.safe_load(text)
    with pytest.raises(TooBig):
        load_user(billion_laughs())


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    big = tmp_path / "records.yaml"
    with big.open("wb") as handle:
        handle.truncate(MAX_BYTES + 1)  # sparse: nothing is written or read
    code, error, _ = run("validate", big)
    assert code == 2 and error == f"error: run-record file {str(big)!r} is {MAX_BYTES + 1:,} bytes; the limit is {MAX_BYTES:,}"


def test_a_record_file_holding_too_many_records_names_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(record_files, "MAX_RECORDS", 3)
    path = tmp_path / "records.yaml"
    path.write_text(yaml.safe_dump({"schema": 1, "records": [{"id": f"r{i}"} for i in range(4)]}))
    code, error, _ = run("validate", path)
    assert code == 2 and error == f"error: {path}: 4 records; the limit is 3 per file (split it)"


def test_a_trace_past_the_row_limit_names_it(tmp_path, monkeypatch):
    from meshplan.serving.traffic import traces
    from meshplan.errors import ConfigError

    monkeypatch.setattr(traces, "MAX_TRACE_ROWS", 2)
    path = tmp_path / "trace.jsonl"
    path.write_text("".join('{"timestamp": %d, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n' % i
                            for i in range(3)))
    with pytest.raises(ConfigError, match="more than 2 requests; the limit is 2"):
        traces.read_trace(path, "mooncake")
    path.write_text(path.read_text().splitlines(keepends=True)[0])
    assert len(traces.read_trace(path, "mooncake").requests) == 1


def test_a_doc_lengths_device_or_folder_is_refused(tmp_path):
    from meshplan.errors import ConfigError
    from meshplan.training.imbalance.doclengths import read_lengths

    for bad in (str(tmp_path), "/dev/zero"):
        with pytest.raises(ConfigError, match="not a regular file"):
            read_lengths(bad)
