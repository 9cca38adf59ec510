"""`meshplan record training|serving`: records built from flags and benchmark results are
schema-valid, append safely, and round-trip through `meshplan validate`. The result files under
tests/data/bench are hand-written in the documented vLLM and SGLang formats (made-up numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.validate.bench_results import parse_result, read_result
from meshplan.validate.bench_workload import parse_command, sglang_random
from meshplan.validate.record_build import append_record, serving_record, training_record

runner = CliRunner()
BENCH = Path(__file__).parent / "data" / "bench"
VLLM, SGLANG = BENCH / "vllm.json", BENCH / "sglang.jsonl"
VLLM_COMMAND = ("vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct --dataset-name random "
                "--random-input-len 1024 --random-output-len 128 --num-prompts 200 --max-concurrency 16")
HW = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb")
TRAIN = ("record", "training", *HW, "--num-gpus", "8", "--framework", "megatron", "--seq-len", "8192",
         "--global-batch-size", "128", "--tp", "1", "--pp", "1", "--recompute", "none", "--precision", "bf16")
SERVE = ("record", "serving", *HW, "--num-gpus", "1", "--engine", "vllm", "--tp", "1")


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def records(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text())["records"]


def validate_json(path: Path) -> dict:
    result = run("validate", path, "--json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_training_record_round_trips_through_validate(tmp_path):
    out = tmp_path / "runs.yaml"
    result = run(*TRAIN, "--out", out, "--id", "my-8b", "--tokens-per-s-per-gpu", "9000", "--step-time-s", "14.6")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"appended my-8b to {out} (1 records)"
    (record,) = records(out)
    assert record["training"] == {"framework": "megatron", "seq_length": 8192, "global_batch_size": 128,
                                  "tp": 1, "pp": 1, "recompute": "none", "precision": "bf16"}
    assert record["measured"] == {"tokens_per_s_per_gpu": 9000.0, "step_time_s": 14.6}
    data = validate_json(out)
    assert data["skipped"] == []
    assert {r["metric"] for r in data["records"] if r["id"] == "my-8b"} == {"tokens_per_s_per_gpu", "step_time_s"}


def test_vllm_result_and_command_round_trip_through_validate(tmp_path):
    out = tmp_path / "runs.yaml"
    result = run(*SERVE, "--out", out, "--result", VLLM, "--bench-command", VLLM_COMMAND)
    assert result.exit_code == 0, result.output
    (record,) = records(out)
    assert record["serving"]["workload"] == {"mode": "concurrency", "dataset": "random", "input_len": 1024,
                                             "output_len": 128, "num_requests": 200, "concurrency": 16}
    measured = record["measured"]
    assert measured["output_tokens_per_s"] == 1893.5 and measured["total_tokens_per_s"] == 17041.4
    assert measured["ttft_ms_p99"] == 121.7 and measured["itl_ms_p50"] == 7.62
    assert "e2e_ms_mean" not in measured  # vLLM saves E2E only with --percentile-metrics e2el
    assert record["id"].startswith("llama-3.1-8b-h100-sxm-80gb-1gpu-")
    data = validate_json(out)
    assert data["skipped"] == []
    assert "output_tokens_per_s" in {r["metric"] for r in data["records"]}


def test_sglang_json_lines_take_the_last_run_and_say_so(tmp_path):
    bench = read_result(SGLANG)
    assert bench.format == "sglang" and bench.measured["requests_per_s"] == 4.4
    assert bench.measured["total_tokens_per_s"] == pytest.approx(2255.5 + 1127.8)
    assert bench.measured["e2e_ms_mean"] == 1820.6
    assert "holds 2 results" in bench.remarks[0]
    out = tmp_path / "runs.yaml"
    result = run(*SERVE, "--out", out, "--result", SGLANG, "--engine", "sglang")
    assert result.exit_code == 0, result.output
    assert "holds 2 results" in result.stderr
    (record,) = records(out)
    assert record["serving"]["workload"] == {"mode": "concurrency", "dataset": "random", "input_len": 512,
                                             "output_len": 256, "range_ratio": 0.0, "num_requests": 100,
                                             "concurrency": 8}
    assert validate_json(out)["skipped"] == []


def test_sglang_random_lengths_become_vllm_centre_and_range():
    # SGLang draws inputs in [max(1, int(L r)), L]: [500, 1000] is centre 750, half-width 1/3.
    assert sglang_random(1000, 100, 0.5) == {"input_len": 750, "range_ratio": 0.3333, "output_len": 75}
    assert sglang_random(512, 256, 1.0) == {"input_len": 512, "range_ratio": 0.0, "output_len": 256}


def test_command_lines_read_like_argparse():
    tool, facts = parse_command("vllm bench serve --request_rate=4 --burstiness 0.5 --input-len 300")
    assert tool == "vllm" and facts == {"request_rate": 4.0, "burstiness": 0.5, "random_input_len": 300}
    tool, facts = parse_command("python3 -m sglang.bench_serving --num-prompt 10 --random-input 64")
    assert tool == "sglang" and facts == {"num_prompts": 10, "random_input_len": 64}
    with pytest.raises(ConfigError, match="not a `vllm bench serve`"):
        parse_command("ls -la")


@pytest.mark.parametrize(("extra", "mode"), [
    (("--request-rate", "5"), None),
    (("--bench-command", "vllm bench serve --request-rate 5"), "poisson"),
    (("--bench-command", "vllm bench serve --request-rate 5 --burstiness 0.5"), "gamma"),
])
def test_workload_mode_follows_rate_and_concurrency(tmp_path, extra, mode):
    data = {**json.loads(VLLM.read_text()), "max_concurrency": None, "request_rate": 5.0}
    if mode == "gamma":
        data["burstiness"] = 0.5
    result_file = tmp_path / "r.json"
    result_file.write_text(json.dumps(data))
    result = run(*SERVE, "--out", tmp_path / "o.yaml", "--result", result_file, *extra)
    assert result.exit_code == 0, result.output
    workload = records(tmp_path / "o.yaml")[0]["serving"]["workload"]
    assert workload["mode"] == (mode or "poisson") and workload["request_rate"] == 5.0
    assert ("burstiness" in workload) == (mode == "gamma")


def _result(tmp_path, **changes) -> Path:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**json.loads(VLLM.read_text()), **changes}))
    return path


@pytest.mark.parametrize(("changes", "extra", "named"), [
    # the brief's case: the command ran at 20 req/s, the result says unbounded
    ({}, ("--bench-command", VLLM_COMMAND + " --request-rate 20"), ("--bench-command (request_rate) says 20",
                                                                   "says inf")),
    ({}, ("--bench-command", VLLM_COMMAND.replace("--max-concurrency 16", "--max-concurrency 64")),
     ("says 64", "says 16")),
    ({}, ("--bench-command", VLLM_COMMAND.replace("--num-prompts 200", "--num-prompts 100")),
     ("says 100", "says 200")),
    ({"num_prompts": None}, ("--bench-command", VLLM_COMMAND.replace("--num-prompts 200", "--num-prompts 100")),
     ("says 100 prompts", "completed 200")),
    ({}, ("--bench-command", VLLM_COMMAND.replace("--random-input-len 1024", "--random-input-len 4096")),
     ("says 4096 tokens", "measured 1,024 per request")),
    ({}, ("--bench-command", VLLM_COMMAND.replace("--random-output-len 128", "--random-output-len 32")),
     ("says 32 tokens", "measured 128 per request")),
    ({}, ("--bench-command", VLLM_COMMAND, "--concurrency", "8"), ("--concurrency says 8", "says 16")),
    ({"max_concurrency": None, "request_rate": 5.0}, ("--concurrency", "1"),
     ("request rate (5 requests/s)", "concurrency cap (1)", "validate")),
])
def test_contradictory_inputs_exit_2_naming_both_values(tmp_path, changes, extra, named):
    """`record serving` wrote whatever the command said over the result, a record validate could
    never reproduce (#34 item 6); now a fact stated twice must agree, and nothing is written."""
    out = tmp_path / "o.yaml"
    result = run(*SERVE, "--out", out, "--result", _result(tmp_path, **changes), *extra)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    for word in named:
        assert word in lines[0], (word, lines[0])
    assert not out.exists()


def test_agreeing_inputs_write_a_record_validate_uses(tmp_path):
    """The same facts stated by the command, the flags and the result: written, and validate
    predicts it (no skip)."""
    out = tmp_path / "o.yaml"
    result = run(*SERVE, "--out", out, "--result", VLLM, "--bench-command", VLLM_COMMAND,
                 "--concurrency", "16", "--num-requests", "200")
    assert result.exit_code == 0, result.output
    data = validate_json(out)
    assert data["skipped"] == [] and data["records"]


def test_offline_when_the_rate_is_unbounded_and_no_concurrency(tmp_path):
    data = {**json.loads(VLLM.read_text()), "max_concurrency": None}
    bench = parse_result(data, "r.json")
    built = serving_record("llama-3.1-8b", {"gpu": "h100-sxm-80gb", "num_gpus": 1}, {"engine": "vllm"}, bench)
    assert built["serving"]["workload"]["mode"] == "offline"
    assert "input_len 1024: mean from the result" in built["notes"]


@pytest.mark.parametrize(("args", "named"), [
    ((*TRAIN,), "--tokens-per-s-per-gpu"),
    ((*SERVE, "--engine", "vlm", "--result", VLLM), "--engine"),
    ((*SERVE, "--result", Path(__file__)), "not valid JSON"),
    ((*TRAIN, "--framework", "megatrn", "--step-time-s", "3"), "--framework"),
])
def test_bad_input_exits_2_with_one_line_naming_the_field(tmp_path, args, named):
    result = run(*args, "--out", tmp_path / "runs.yaml")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and named in lines[0], result.output
    assert not (tmp_path / "runs.yaml").exists()


def test_duplicate_id_is_refused_and_the_file_is_unchanged(tmp_path):
    out = tmp_path / "runs.yaml"
    assert run(*TRAIN, "--out", out, "--id", "a", "--step-time-s", "3").exit_code == 0
    before = out.read_text()
    result = run(*TRAIN, "--out", out, "--id", "a", "--step-time-s", "4")
    assert result.exit_code == 2 and "id 'a' is already there" in result.output and "--id" in result.output
    assert out.read_text() == before


def test_generated_ids_are_made_unique(tmp_path):
    out = tmp_path / "runs.yaml"
    for _ in range(2):
        assert run(*TRAIN, "--out", out, "--step-time-s", "3").exit_code == 0
    first, second = (r["id"] for r in records(out))
    assert second == f"{first}-2"


def test_append_keeps_existing_text_and_refuses_other_files(tmp_path):
    out = tmp_path / "runs.yaml"
    head = "# my runs\nschema: 1\nrecords:\n  - {id: old, kind: training}  # kept as written\n"
    out.write_text(head)
    record = training_record("llama-3.1-8b", {"gpu": "h100-sxm-80gb", "num_gpus": 8},
                             {"framework": "torchtitan", "seq_length": 4096}, {"step_time_s": 2.0}, id="new")
    assert append_record(out, record) == 2
    assert out.read_text().startswith(head)
    assert [r["id"] for r in records(out)] == ["old", "new"]
    other = tmp_path / "notes.yaml"
    other.write_text("title: not records\n")
    with pytest.raises(ConfigError, match="not a run-record file"):
        append_record(other, record)
    assert other.read_text() == "title: not records\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.yaml", "runs.yaml"]  # no temp file left


def test_a_config_json_model_is_stored_as_its_mapping(tmp_path, llama_8b_config):
    config = tmp_path / "my-llama" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(llama_8b_config))
    out = tmp_path / "runs.yaml"
    result = run(*TRAIN, "--out", out, "--step-time-s", "3", "--model", config)
    assert result.exit_code == 0, result.output
    (record,) = records(out)
    assert record["model"] == {"name": "my-llama", **llama_8b_config}
    assert record["id"].startswith("my-llama-h100-sxm-80gb-8gpu-")


@pytest.mark.parametrize(("data", "message"), [
    ({"completed": 10, "mean_ttft_ms": 5.0, "num_prompts": 10}, "no throughput in the result"),
    ({"completed": 0, "output_throughput": 1.0, "num_prompts": 10}, "'completed' is 0"),
    ({"output_throughput": 1.0}, "--result-format"),
    ([1, 2], "expected a JSON object"),
])
def test_unusable_results_are_named(data, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_result(data, "bench.json")
    assert "bench.json" in str(info.value)


def test_a_record_validate_would_skip_is_refused(tmp_path):
    """No output length anywhere (no command, no totals in the result): validate would skip the
    record ("output_len is not published"), so record refuses it instead of writing it."""
    out = tmp_path / "o.yaml"
    path = _result(tmp_path, total_output_tokens=None, total_input_tokens=None)
    result = run(*SERVE, "--out", out, "--result", path)
    assert result.exit_code == 2, result.output
    assert "`meshplan validate` could not use this record" in result.output
    assert "output_len" in result.output and not out.exists()
