"""Real length distributions (#32 item 4): named public datasets' packaged tables, a user's
lengths file (CSV/JSONL pairs) and histograms, in WorkloadSpec, records and the serve CLI."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.serving.traffic import empirical
from meshplan.serving.traffic.empirical import LengthHistogram, read_pairs
from meshplan.serving.traffic.lengths import NAMED_TABLES, dataset_table, sample_lengths
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize
from meshplan.validate.records import parse_record
from meshplan.validate.serving_records import serving_case

runner = CliRunner()
HIST = {"input": {"edges": [100, 200, 1000, 4000], "counts": [2, 0, 1]},
        "output": {"edges": [10, 50, 300], "counts": [3, 1]}}


def _lengths(w):
    return (np.array([r.input_len for r in w.requests]), np.array([r.output_len for r in w.requests]))


@pytest.mark.parametrize("name", NAMED_TABLES)
def test_named_table_draws_reproduce_its_packaged_quantiles(name):
    table = dataset_table(name)
    ins, outs = sample_lengths(name, 200_000, np.random.default_rng(3), max_len=None)
    inner = slice(1, -1)  # p = 0 and 1 are the bounds, not quantiles a sample estimates
    for drawn, packaged in ((ins, table.input_quantiles), (outs, table.output_quantiles)):
        got = np.quantile(drawn, table.probs[inner])
        slope = np.diff(packaged) / np.diff(table.probs)  # tokens per unit of probability
        steep = np.maximum(slope[:-1], slope[1:])  # a sample quantile moves ~0.005 in p at n = 2e5
        assert np.all(np.abs(got - packaged[inner]) <= 2 + 0.03 * packaged[inner] + 0.005 * steep)
        assert drawn.min() >= packaged[0] and drawn.max() <= packaged[-1]
    assert ins.mean() == pytest.approx(table.implied_input_mean, rel=0.02)
    assert outs.mean() == pytest.approx(table.implied_output_mean, rel=0.02)


@pytest.mark.parametrize("name", NAMED_TABLES)
def test_named_tables_cite_their_sources(name):
    text = resources.files("meshplan.serving").joinpath("data", f"{name}_lengths.yaml").read_text()
    data = yaml.safe_load(text)
    assert data["name"] == name and data["tokenizer"]["value"]
    for side in ("input_tokens", "output_tokens"):
        assert data[side]["quantiles"]["source"]
        assert data[side]["mean"]["source"] and data[side]["mean"]["value"] > 0
    assert data["spearman"]["source"]


@pytest.mark.parametrize("name", ["openorca", "cnn_dailymail"])
def test_truncated_tables_keep_their_published_mean(name):
    data = yaml.safe_load(resources.files("meshplan.serving").joinpath("data", f"{name}_lengths.yaml").read_text())
    table = dataset_table(name)
    assert table.implied_input_mean == pytest.approx(data["input_tokens"]["mean"]["value"], rel=0.01)
    assert table.implied_output_mean == pytest.approx(data["output_tokens"]["mean"]["value"], rel=0.01)


def test_long_context_table_is_long():
    ins, outs = sample_lengths("longbench", 20_000, np.random.default_rng(0), max_len=None)
    assert ins.mean() > 8000 and np.median(ins) > 6000
    assert set(np.unique(outs)) <= set(range(32, 513))


def test_a_named_table_is_only_pair_limited_when_max_len_is_given():
    free = _lengths(synthesize(WorkloadSpec(dataset="longbench", num_requests=2000)))
    assert (free[0] + free[1]).max() > 16_000
    capped = _lengths(synthesize(WorkloadSpec(dataset="longbench", num_requests=2000, max_len=16_000)))
    assert (capped[0] + capped[1]).max() <= 16_000
    with pytest.raises(ConfigError, match="input_len is not used with dataset='openorca'"):
        WorkloadSpec(dataset="openorca", input_len=100)


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_csv_lengths_file_is_resampled_with_its_joint_frequencies(tmp_path):
    path = _write(tmp_path, "lens.csv", "input_len,output_len\n100,10\n300,30\n300,30\n900,90\n")
    ins, outs = sample_lengths("file", 40_000, np.random.default_rng(1), source=read_pairs(path), max_len=None)
    assert np.all(outs * 10 == ins)  # rows are kept whole
    share = {v: np.mean(ins == v) for v in (100, 300, 900)}
    assert share == pytest.approx({100: 0.25, 300: 0.5, 900: 0.25}, abs=0.01)


def test_jsonl_lengths_take_keyed_objects_or_pairs(tmp_path):
    path = _write(tmp_path, "lens.jsonl", '{"input_tokens": 5, "output_tokens": 7}\n\n[8, 9]\n')
    pairs = read_pairs(path)
    assert pairs.inputs.tolist() == [5, 8] and pairs.outputs.tolist() == [7, 9]
    w = synthesize(WorkloadSpec(dataset="file", lengths_file=str(path), num_requests=50), seed=2)
    assert set(zip(*map(np.ndarray.tolist, _lengths(w)))) <= {(5, 7), (8, 9)}


@pytest.mark.parametrize(("name", "text", "match"), [
    ("a.csv", "100,10\n100,x\n", r"a.csv:2: output tokens = 'x' is not a whole number"),
    ("a.csv", "100,10,5\n", r"a.csv:1: expected two columns"),
    ("a.csv", "0,10\n", r"prompt tokens = '0' must be a whole number of tokens in \[1,"),
    ("a.jsonl", '{"input_len": 3}\n', r"a.jsonl:1: expected"),
    ("a.jsonl", "[1, 2\n", r"a.jsonl:1: not valid JSON"),
    ("a.txt", "1,2\n", r"expected a .csv or .jsonl file"),
    ("a.csv", "\n", r"holds no \(prompt, output\) rows"),
])
def test_a_bad_lengths_file_is_one_clear_error(tmp_path, name, text, match):
    with pytest.raises(ConfigError, match=match):
        read_pairs(_write(tmp_path, name, text))


def test_lengths_files_are_bounded_in_rows_and_bytes(tmp_path, monkeypatch):
    path = _write(tmp_path, "a.csv", "1,2\n3,4\n5,6\n")
    monkeypatch.setattr(empirical, "MAX_LENGTH_ROWS", 2)
    with pytest.raises(ConfigError, match="more than 2 rows; the limit is 2"):
        read_pairs(path)
    monkeypatch.setattr(empirical, "MAX_LENGTHS_BYTES", 5)
    with pytest.raises(ConfigError, match="the limit is 5"):
        read_pairs(path)


def test_histogram_draws_follow_the_bins_and_skip_empty_ones():
    hist = LengthHistogram.model_validate(HIST)
    ins, outs = hist.draw(60_000, np.random.default_rng(4))
    assert not np.any((ins >= 200) & (ins < 1000))  # the empty bin
    assert np.mean(ins < 200) == pytest.approx(2 / 3, abs=0.01)
    assert np.mean(outs < 50) == pytest.approx(3 / 4, abs=0.01)
    inside = ins[ins >= 1000]  # uniform over 1000..3999
    assert inside.min() >= 1000 and inside.max() <= 3999
    assert np.quantile(inside, [0.25, 0.5, 0.75]) == pytest.approx([1750, 2500, 3250], rel=0.02)


def test_a_histogram_spearman_correlates_the_sides():
    hist = LengthHistogram.model_validate({**HIST, "spearman": 0.6})
    ins, outs = hist.draw(30_000, np.random.default_rng(5))
    from scipy import stats

    assert stats.spearmanr(ins, outs).statistic > 0.3


def test_histogram_from_a_yaml_lengths_file(tmp_path):
    path = _write(tmp_path, "h.yaml", yaml.safe_dump(HIST))
    w = synthesize(WorkloadSpec(dataset="histogram", lengths_file=str(path), num_requests=300), seed=1)
    ins, outs = _lengths(w)
    assert ins.min() >= 100 and ins.max() < 4000 and outs.min() >= 10 and outs.max() < 300
    bad = _write(tmp_path, "bad.yaml", "input: {edges: [5, 3], counts: [1]}\noutput: {edges: [1, 2], counts: [1]}\n")
    with pytest.raises(ConfigError, match="histogram field input: .*edges must rise strictly"):
        synthesize(WorkloadSpec(dataset="histogram", lengths_file=str(bad), num_requests=3))


@pytest.mark.parametrize(("fields", "match"), [
    ({"dataset": "file"}, "dataset='file' needs lengths_file"),
    ({"dataset": "file", "lengths_file": "h.yaml"}, "dataset='file' needs lengths_file"),
    ({"dataset": "histogram"}, "needs either histogram"),
    ({"dataset": "histogram", "histogram": HIST, "lengths_file": "h.yaml"}, "needs either histogram"),
    ({"dataset": "random", "lengths_file": "a.csv"}, "only used with dataset='file' or 'histogram'"),
    ({"dataset": "histogram", "histogram": {"input": {"edges": [1, 2], "counts": [1, 2]},
                                            "output": {"edges": [1, 2], "counts": [1]}}}, "2 edges need 1 counts"),
])
def test_workload_spec_names_what_a_length_source_lacks(fields, match):
    with pytest.raises(ConfigError, match=match):
        WorkloadSpec(**fields)


def _record(workload: dict) -> dict:
    return {"id": "lengths", "kind": "serving", "source": {"name": "test"}, "model": "llama-3.1-8b",
            "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 1},
            "serving": {"engine": "vllm", "tp": 1, "workload": {"mode": "offline", "num_requests": 64, **workload}},
            "measured": {"output_tokens_per_s": 1000.0}}


def test_a_record_states_a_histogram_or_a_named_dataset():
    case = serving_case(parse_record(_record({"dataset": "histogram", "histogram": HIST}), "t.yaml"))
    ins, outs = _lengths(case.workload)
    assert ins.min() >= 100 and ins.max() < 4000 and outs.max() < 300
    case = serving_case(parse_record(_record({"dataset": "cnn_dailymail"}), "t.yaml"))
    assert _lengths(case.workload)[1].max() <= 128


def test_serve_simulate_and_plan_take_a_lengths_file(tmp_path):
    path = _write(tmp_path, "lens.csv", "512,64\n")
    base = ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-requests", "40"]
    out = runner.invoke(app, [*base, "--lengths-file", str(path), "--json", "--quiet"])
    assert out.exit_code == 0, out.output
    m = json.loads(out.stdout)["metrics"]
    assert (m["total_input_tokens"], m["total_output_tokens"]) == (40 * 512, 40 * 64)
    out = runner.invoke(app, ["serve", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb",
                              "--request-rate", "2", "--slo-ttft-ms", "2000", "--num-requests", "60",
                              "--lengths-file", str(path), "--json", "--quiet", "--workers", "1",
                              "--max-gpus", "1", "--no-disaggregation"])
    assert out.exit_code in (0, 1), out.output
    workload = json.loads(out.stdout)["workload"]
    assert workload["dataset"] == "file" and workload["lengths_file"] == str(path)


def test_the_web_api_never_reads_a_lengths_file_on_the_server():
    from pydantic import ValidationError

    from meshplan.ui.schemas import SimulateRequest

    with pytest.raises(ValidationError, match="lengths_file would read a file on the server"):
        SimulateRequest(model="llama-3.1-8b", gpu="h100-sxm-80gb",
                        workload={"dataset": "file", "lengths_file": "/etc/passwd"})
    ok = SimulateRequest(model="llama-3.1-8b", gpu="h100-sxm-80gb",
                         workload={"dataset": "histogram", "histogram": HIST, "num_requests": 5})
    assert ok.workload.histogram.input.edges[0] == 100
