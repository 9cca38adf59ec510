"""ShareGPT as the benchmark tools sample it (issue #32, item 4): `sharegpt_vllm` and
`sharegpt_sglang` reproduce the token totals published runs of `vllm bench serve` and SGLang's
`bench_serving` printed, keep each tool's length filter, and work wherever a named dataset does
(records, `serve simulate`, `serve plan`, `record`, the web app's choices)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.serving.traffic import lengths
from meshplan.serving.traffic.lengths import dataset_table, sample_lengths
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize
from meshplan.ui.schemas import ServePlanRequest
from meshplan.validate.records import parse_record
from meshplan.validate.serving_records import serving_case
from tests.test_record import SERVE, SGLANG, VLLM, records

runner = CliRunner()

VLLM_RUNS = {  # total input, total generated tokens of 1000 prompts (vllm bench serve --dataset-name sharegpt)
    "Qwen3-32B, vLLM 0.11.0 (gpustack@10e9444a docs/performance-lab/qwen3-32b/h100.md)": (217_393, 201_422),
    "gpt-oss-120b, vLLM 0.10.2 (gpustack@72aee9dd docs/performance-lab/gpt-oss-120b/h100.md)": (215_312, 195_544),
    "DeepSeek-R1-0528, vLLM 0.11.0 (gpustack@a5c9fafc docs/performance-lab/deepseek-r1/h200.md)": (219_171, 200_752),
    "Llama-3.1-8B-Instruct (vllm-project/vllm PR #18566)": (229_711, 203_068),
}
SGLANG_RUNS = {  # the same for python -m sglang.bench_serving (default ShareGPT, EOS ignored)
    "gpt-oss-120b, sglang 0.5.6 (sgl-cookbook@1b354da5 OpenAI/GPT-OSS.md)": (297_156, 192_432),
    "Kimi-K2-Instruct, sglang 0.5.6.post1 (sgl-cookbook@0abf8552 Moonshotai/Kimi-K2.md)": (296_642, 193_831),
    "DeepSeek-V3, sglang 0.5.7 (sgl-cookbook@36c07b43 DeepSeek/DeepSeek-V3.md)": (301_701, 188_375),
}
POOLED_TOLERANCE = 0.03
"""The sampler's means against the pooled totals of the cited runs (a 200k draw is within ~0.5%)."""
RUN_TOLERANCE = 0.06
"""Against each run alone: the runs differ by tokenizer (Llama 3 vs Qwen, o200k, DeepSeek BPE) and
draw, up to 5.7% from their pool."""


def _draw(name: str, n: int = 200_000, **kw) -> tuple[np.ndarray, np.ndarray]:
    return sample_lengths(name, n, np.random.default_rng(11), max_len=kw.get("max_len"))


@pytest.mark.parametrize(("name", "runs"), [("sharegpt_vllm", VLLM_RUNS), ("sharegpt_sglang", SGLANG_RUNS)])
def test_the_sampler_means_match_the_published_benchmark_totals(name, runs):
    ins, outs = _draw(name)
    pooled_in = sum(r[0] for r in runs.values()) / (1000 * len(runs))
    pooled_out = sum(r[1] for r in runs.values()) / (1000 * len(runs))
    assert ins.mean() == pytest.approx(pooled_in, rel=POOLED_TOLERANCE)
    assert outs.mean() == pytest.approx(pooled_out, rel=POOLED_TOLERANCE)
    for run, (total_in, total_out) in runs.items():
        assert ins.mean() == pytest.approx(total_in / 1000, rel=RUN_TOLERANCE), run
        assert outs.mean() == pytest.approx(total_out / 1000, rel=RUN_TOLERANCE), run


def test_the_paper_table_is_not_what_the_benchmarks_send():
    paper_in, paper_out = _draw("sharegpt", max_len=4096)
    vllm_in, vllm_out = _draw("sharegpt_vllm")
    assert paper_out.mean() > 1.5 * vllm_out.mean() and paper_in.mean() < 0.8 * vllm_in.mean()


def test_vllm_sampler_keeps_its_length_filter_whatever_max_len():
    for max_len in (None, 4096):
        ins, outs = _draw("sharegpt_vllm", 50_000, max_len=max_len)
        assert ins.min() >= 4 and outs.min() >= 4 and ins.max() <= 1024
        assert (ins + outs).max() <= 2048
    ins, outs = _draw("sharegpt_vllm", 50_000, max_len=1000)
    assert (ins + outs).max() <= 1000
    assert dataset_table("sharegpt_vllm").max_total == 2048


def test_a_table_bound_below_its_shortest_pair_is_refused():
    table = dataset_table("sharegpt_vllm")
    bad = type(table)(probs=table.probs, input_quantiles=table.input_quantiles,
                      output_quantiles=table.output_quantiles, spearman=table.spearman, max_total=7)
    with pytest.raises(ConfigError, match="max_total_tokens must be a whole number >= 8"):
        lengths._check_table(bad, "x_lengths.yaml")


def test_sglang_sampler_has_no_length_bound_unless_given():
    ins, outs = _draw("sharegpt_sglang", 50_000)
    assert dataset_table("sharegpt_sglang").max_total is None
    assert np.mean(ins > 1024) > 0.03 and (ins + outs).max() > 4096  # what vLLM's filter drops
    ins, outs = _draw("sharegpt_sglang", 50_000, max_len=2048)  # --sharegpt-context-len 2048
    assert (ins + outs).max() <= 2048


def _record(dataset: str) -> dict:
    return {"id": "bench-sharegpt", "kind": "serving", "source": {"name": "test"}, "model": "llama-3.1-8b",
            "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 1},
            "serving": {"engine": "sglang", "tp": 1,
                        "workload": {"mode": "concurrency", "dataset": dataset, "concurrency": 8, "num_requests": 400}},
            "measured": {"output_tokens_per_s": 1000.0}}


@pytest.mark.parametrize("name", ["sharegpt_vllm", "sharegpt_sglang"])
def test_a_record_states_a_bench_sampler(name):
    case = serving_case(parse_record(_record(name), "t.yaml"))
    ins = np.array([r.input_len for r in case.workload.requests])
    assert case.workload.requests and ins.mean() > 180  # the paper's table averages 161


def test_serve_simulate_and_plan_take_the_new_names():
    base = ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-requests", "300"]
    out = runner.invoke(app, [*base, "--dataset", "sharegpt_sglang", "--json", "--quiet"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["metrics"]["total_input_tokens"] / 300 > 230
    out = runner.invoke(app, [*base, "--dataset", "sharegpt_bench"])
    assert out.exit_code == 2 and "sharegpt_vllm" in out.output
    out = runner.invoke(app, ["serve", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb",
                              "--request-rate", "2", "--slo-ttft-ms", "2000", "--num-requests", "60",
                              "--dataset", "sharegpt_vllm", "--json", "--quiet", "--workers", "1",
                              "--max-gpus", "1", "--no-disaggregation"])
    assert out.exit_code in (0, 1), out.output
    assert json.loads(out.stdout)["workload"]["dataset"] == "sharegpt_vllm"


def test_the_web_form_offers_them():
    assert {"sharegpt_vllm", "sharegpt_sglang"} <= set(ServePlanRequest.model_json_schema()["properties"]
                                                       ["dataset"]["enum"])
    assert synthesize(WorkloadSpec(dataset="sharegpt_vllm", num_requests=5)).requests


def test_record_writes_a_benchmark_sharegpt_as_its_tools_sampler(tmp_path):
    lines = SGLANG.read_text().strip().splitlines()
    run = {**json.loads(lines[-1]), "dataset_name": "sharegpt"}
    sglang = tmp_path / "sglang.jsonl"
    sglang.write_text(json.dumps(run) + "\n")
    out = tmp_path / "runs.yaml"
    result = runner.invoke(app, [str(a) for a in (*SERVE, "--out", out, "--result", sglang, "--engine", "sglang")])
    assert result.exit_code == 0, result.output
    (record,) = records(out)
    assert "recorded as sharegpt_sglang" in record["notes"]
    assert re.search(r"sent 512 prompt and received 256 output tokens per request; the sharegpt_sglang "
                     r"table's means are 29\d and 19\d", record["notes"])
    workload = record["serving"]["workload"]
    assert workload["dataset"] == "sharegpt_sglang" and "input_len" not in workload
    command = "vllm bench serve --dataset-name sharegpt --num-prompts 200 --max-concurrency 16"
    out = tmp_path / "vllm.yaml"
    result = runner.invoke(app, [str(a) for a in (*SERVE, "--out", out, "--result", VLLM, "--bench-command", command)])
    assert result.exit_code == 0, result.output
    assert records(out)[0]["serving"]["workload"]["dataset"] == "sharegpt_vllm"
    assert yaml.safe_load(out.read_text())["records"][0]["serving"]["workload"]["mode"] == "concurrency"
