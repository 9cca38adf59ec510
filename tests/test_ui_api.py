"""The web app's JSON API (meshplan.ui): each endpoint answers what the CLI's `--json` prints for
the same inputs, and each kind of bad input is a 4xx whose `detail` is the CLI's one-line error,
after which the server keeps serving."""

from __future__ import annotations

import json
import time

import pytest
import yaml

pytest.importorskip("fastapi", reason="the ui extra (fastapi) is not installed")
from fastapi.testclient import TestClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from meshplan.cli.app import app as cli_app  # noqa: E402
from meshplan.errors import ConfigError  # noqa: E402
from meshplan.ui import uploads  # noqa: E402
from meshplan.ui.app import create_app  # noqa: E402

H100 = "h100-sxm-80gb"
TRAIN = {"model": "llama-3.1-8b", "hardware": {"gpu": H100, "num_gpus": 8},
         "plan": {"recompute": "full", "global_batch_size": 64}}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(max_running=2)) as c:
        yield c


def cli(*args: str):
    """(exit code, stdout, the `error:` line) of the CLI."""
    result = CliRunner().invoke(cli_app, [str(a) for a in args])
    error = " ".join(result.stderr.split()).removeprefix("error: ")
    return result.exit_code, result.stdout, error


def wait(client, job: dict, timeout_s: float = 180) -> dict:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        view = client.get(f"/api/jobs/{job['id']}").json()
        if view["state"] in ("done", "failed", "cancelled"):
            return view
        time.sleep(0.2)
    raise AssertionError(f"job {job['id']} still {view['state']} after {timeout_s} s")


def test_catalog_endpoints_list_the_catalogs(client):
    models = {m["name"] for m in client.get("/api/models").json()}
    gpus = {g["name"]: g for g in client.get("/api/gpus").json()}
    assert "llama-3.1-8b" in models and H100 in gpus
    assert gpus[H100]["hbm_bytes"] > 80e9


def test_openapi_names_the_request_models(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("TrainingRequest", "TrainingPlan", "TrainingSearchRequest", "SimulateRequest",
                 "ServingPlan", "WorkloadSpec", "ServePlanRequest", "JobView"):
        assert name in schemas
    assert "Tensor-parallel size" in schemas["TrainingPlan"]["properties"]["tp"]["description"]


@pytest.mark.parametrize("command", ["memory", "estimate"])
def test_train_memory_and_estimate_answer_the_cli_json(client, command):
    answer = client.post(f"/api/train/{command}", json=TRAIN)
    assert answer.status_code == 200, answer.text
    code, out, _ = cli("train", command, "--model", "llama-3.1-8b", "--gpu", H100, "--num-gpus", "8",
                       "--recompute", "full", "--global-batch-size", "64", "--json")
    assert code == 0 and answer.json() == json.loads(out)


def test_estimate_with_plots_carries_the_report_page(client):
    data = client.post("/api/train/estimate?plots=true", json=TRAIN).json()
    titles = [s["title"] for s in data["report"]["sections"]]
    assert titles == ["Step time breakdown", "Pipeline timeline", "Memory per stage", "Goodput at scale"]
    breakdown = json.loads(data["report"]["sections"][0]["figure"])
    assert breakdown["data"] and dict(data["report"]["headline"])["step time"].endswith(" s")


BAD = [  # (request body, status, the CLI arguments that give the same error)
    ({**TRAIN, "model": "llama-3.1-7b"}, 404, ("--model", "llama-3.1-7b", "--gpu", H100, "--num-gpus", "8")),
    ({**TRAIN, "hardware": {"gpu": "h100", "num_gpus": 8}}, 404,
     ("--model", "llama-3.1-8b", "--gpu", "h100", "--num-gpus", "8")),
    ({**TRAIN, "plan": {"tp": 3}}, 400, ("--model", "llama-3.1-8b", "--gpu", H100, "--num-gpus", "8", "--tp", "3")),
    ({**TRAIN, "plan": {"tp": 0}}, 422, ("--model", "llama-3.1-8b", "--gpu", H100, "--num-gpus", "8", "--tp", "0")),
    ({**TRAIN, "plan": {"recompute": "some"}}, 422,
     ("--model", "llama-3.1-8b", "--gpu", H100, "--num-gpus", "8", "--recompute", "some")),
    ({**TRAIN, "hardware": {"gpu": H100, "num_gpus": 8, "inter_node_gbps_per_gpu": float("inf")}}, 400,
     ("--model", "llama-3.1-8b", "--gpu", H100, "--num-gpus", "8", "--inter-node-gbps-per-gpu", "inf")),
]


@pytest.mark.parametrize("body,status,args", BAD, ids=["model", "gpu", "impossible-tp", "tp-0", "recompute",
                                                       "inf"])
def test_bad_training_input_is_a_4xx_with_the_cli_message(client, body, status, args):
    answer = client.post("/api/train/memory", content=json.dumps(body, allow_nan=True),
                         headers={"Content-Type": "application/json"})
    code, _, error = cli("train", "memory", *args)
    assert code == 2 and error
    assert (answer.status_code, answer.json()["detail"]) == (status, error)
    assert client.get("/api/gpus").status_code == 200  # still serving


def test_malformed_json_is_400_with_the_json_parser_message(client):
    answer = client.post("/api/train/memory", content=b'{"model": "llama-3.1-8b",',
                         headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("request body: not valid JSON at line 1, column 26:")


def test_missing_and_unknown_fields_name_the_option(client):
    missing = client.post("/api/train/memory", json={"model": "llama-3.1-8b", "hardware": {"gpu": H100}})
    assert missing.status_code == 422 and missing.json()["detail"] == "missing option '--num-gpus'"
    extra = client.post("/api/train/memory", json={**TRAIN, "plan": {"tensor_parallel": 2}})
    assert extra.json()["detail"] == "no such option: --tensor-parallel"
    not_object = client.post("/api/train/memory", json=[1, 2])
    assert not_object.status_code == 400 and not_object.json()["detail"] == "request body: expected a JSON object"


def test_config_upload_gives_a_model_name_that_predicts_like_the_file(client, llama_8b_config, tmp_path):
    up = client.post("/api/configs?filename=my.json", content=json.dumps(llama_8b_config))
    assert up.status_code == 200, up.text
    name = up.json()["model"]
    assert name.startswith("upload:") and up.json()["parameters"] == 8_030_261_248
    web = client.post("/api/train/memory", json={**TRAIN, "model": name}).json()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(llama_8b_config))
    code, out, _ = cli("train", "memory", "--model", path, "--gpu", H100, "--num-gpus", "8",
                       "--recompute", "full", "--global-batch-size", "64", "--json")
    assert web["peak_bytes"] == json.loads(out)["peak_bytes"]


def test_config_upload_that_is_not_json_or_not_a_config(client):
    bad = client.post("/api/configs?filename=config.json", content=b"model_type: llama")
    assert (bad.status_code, bad.json()["detail"]) == (
        400, "config.json: not valid JSON at line 1, column 1: Expecting value")
    listed = client.post("/api/configs", content=b"[1]")
    assert listed.json()["detail"] == "config.json: expected a JSON object (a model's config.json)"
    partial = client.post("/api/configs", content=b'{"model_type": "llama"}')
    assert partial.status_code == 400 and "config.json" in partial.json()["detail"]
    assert "meshplan-ui-" not in partial.json()["detail"]  # the server's path is not shown
    unknown = client.post("/api/train/memory", json={**TRAIN, "model": "upload:0123abcd"})
    assert unknown.status_code == 400 and "no such upload" in unknown.json()["detail"]


def test_uploads_past_the_quota_are_refused_and_the_held_ones_stay():
    store = uploads.UploadStore(quota=1000, count=3)
    try:
        first, _ = store.save(b"a" * 400, "config.json")
        second, _ = store.save(b"b" * 400, "config.json")
        with pytest.raises(uploads.TooLarge, match="already holds 800 of its 1,000-byte upload quota"):
            store.save(b"c" * 400, "config.json")
        assert store.find(first, "config.json").is_file() and store.find(second, "config.json").is_file()
        store.save(b"c", "config.json")
        with pytest.raises(uploads.TooLarge, match="already holds 3 uploads, its quota of 3"):
            store.save(b"d", "config.json")
    finally:
        store.close()


def test_upload_over_the_limit_is_413_before_reading_it_all(client, monkeypatch):
    monkeypatch.setattr(uploads, "UPLOAD_LIMIT", 1000)
    declared = client.post("/api/configs", content=b"{" + b" " * 5000 + b"}")
    assert declared.status_code == 413
    assert declared.json()["detail"] == "config.json is 5,002 bytes; the limit is 1,000"
    read = []

    def chunks():  # no Content-Length: the server must stop reading once past the limit
        for _ in range(100):
            read.append(1)
            yield b" " * 400

    streamed = client.post("/api/validate", content=chunks())
    assert streamed.status_code == 413 and "the limit is 1,000" in streamed.json()["detail"]
    assert client.get("/api/models").status_code == 200


def test_train_plan_job_matches_the_cli_and_exports(client, tmp_path):
    body = {"model": "llama-3.1-8b", "gpu": H100, "num_gpus": 16, "global_batch_size": 128, "top": 3}
    job = client.post("/api/train/plan", json=body)
    assert job.status_code == 202 and job.headers["location"] == f"/api/jobs/{job.json()['id']}"
    view = wait(client, job.json())
    assert view["state"] == "done", view["error"]
    code, out, _ = cli("train", "plan", "--model", "llama-3.1-8b", "--gpu", H100, "--num-gpus", "16",
                       "--global-batch-size", "128", "--top", "3", "--json")
    cli_json = json.loads(out)
    downloaded = client.get(f"/api/jobs/{view['id']}/json").json()
    for key in ("plans", "score_unit"):
        assert downloaded[key] == cli_json[key]
    assert view["total"] > 0 and view["done"] > 0  # progress was reported
    plan_file = tmp_path / "plans.json"
    plan_file.write_text(out)
    for target in ("megatron", "torchtitan", "deepspeed"):
        web = client.get(f"/api/jobs/{view['id']}/export/{target}")
        code, text, error = cli("train", "export", "--target", target, "--plan", plan_file)
        if code == 0:
            assert web.status_code == 200 and web.text.rstrip("\n") == text.rstrip("\n")
        else:  # e.g. deepspeed has no tp: the same one-line reason
            assert (code, web.status_code, web.json()["detail"]) == (2, 400, error)
    retargeted = client.get(f"/api/jobs/{view['id']}/export/torchtitan").headers["x-meshplan-retargeted"]
    assert retargeted.startswith("dp_sharding: 'optimizer'")
    assert client.get(f"/api/jobs/{view['id']}/export/vllm").status_code == 404


def test_job_events_stream_progress_then_end(client):
    job = client.post("/api/serve/simulate", json={"model": "llama-3.2-1b", "gpu": H100,
                                                  "workload": {"num_requests": 100}}).json()
    with client.stream("GET", f"/api/jobs/{job['id']}/events") as stream:
        text = "".join(stream.iter_text())
    names = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("event: ")]
    assert names[0] == "progress" and names[-1] == "end" and names.count("end") == 1
    last = json.loads(text.strip().splitlines()[-1].removeprefix("data: "))
    assert last["state"] == "done"
    result = client.get(f"/api/jobs/{job['id']}").json()["result"]
    assert result["metrics"]["completed"] == 100
    assert [s["title"] for s in result["report"]["sections"]][0] == "Latency CDFs"


def test_a_simulation_takes_a_benchmark_sampler_dataset(client):
    job = client.post("/api/serve/simulate", json={"model": "llama-3.2-1b", "gpu": H100, "workload": {
        "num_requests": 200, "dataset": "sharegpt_sglang", "arrival": "concurrency", "concurrency": 16}}).json()
    metrics = wait(client, job)["result"]["metrics"]
    assert metrics["completed"] == 200 and metrics["total_input_tokens"] / 200 > 230  # the paper's: 161


def test_a_running_job_can_be_cancelled(client):
    body = {"model": "llama-3.1-8b", "gpus": [H100, "a100-sxm-80gb"], "request_rate": 20,
            "slo_ttft_ms": 1000, "num_requests": 3000}
    job = client.post("/api/serve/plan", json=body).json()
    end = time.monotonic() + 60
    while client.get(f"/api/jobs/{job['id']}").json()["state"] == "queued" and time.monotonic() < end:
        time.sleep(0.1)
    cancelled = client.delete(f"/api/jobs/{job['id']}").json()
    assert cancelled["state"] == "cancelled"
    process = client.app.state.jobs.get(job["id"]).process
    process.join(10)
    assert not process.is_alive()
    assert client.post(f"/api/jobs/{job['id']}/cancel").json()["state"] == "cancelled"
    gone = client.get(f"/api/jobs/{job['id']}/json")
    assert gone.status_code == 400 and "while it is cancelled" in gone.json()["detail"]
    assert client.get("/api/jobs/nope").status_code == 400


def test_serve_plan_job_answers_the_cli_json_and_exports_vllm(client, tmp_path):
    body = {"model": "llama-3.2-1b", "gpus": [H100], "request_rate": 4, "max_gpus": 2,
            "slo_ttft_ms": 2000, "num_requests": 100}
    view = wait(client, client.post("/api/serve/plan", json=body).json())
    assert view["state"] == "done", view["error"]
    code, out, _ = cli("serve", "plan", "--model", "llama-3.2-1b", "--gpu", H100, "--request-rate", "4",
                       "--max-gpus", "2", "--slo-ttft-ms", "2000", "--num-requests", "100", "--workers", "1",
                       "--json")
    web = client.get(f"/api/jobs/{view['id']}/json").json()
    assert [p["layout"] for p in web["plans"]] == [p["layout"] for p in json.loads(out)["plans"]]
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(out)
    _, text, _ = cli("serve", "export", "--target", "vllm", "--plan", plan_file)
    assert client.get(f"/api/jobs/{view['id']}/export/vllm").text == text


def test_serve_plan_job_sizes_and_screens_trials_as_the_cli_does(client):
    """Without num_requests the web search runs `serve plan`'s trials: sized by duration (here
    1,008 requests at the target rate, past the 800 of a short trial, so candidates are screened
    first) and the same plans, metrics and bands."""
    body = {"model": "llama-3.2-1b", "gpus": [H100], "request_rate": 150, "max_gpus": 2, "slo_ttft_ms": 200,
            "slo_tpot_ms": 20, "dataset": "random", "input_len": 128, "output_len": 32}
    view = wait(client, client.post("/api/serve/plan", json=body).json())
    assert view["state"] == "done", view["error"]
    code, out, _ = cli("serve", "plan", "--model", "llama-3.2-1b", "--gpu", H100, "--request-rate", "150",
                       "--max-gpus", "2", "--slo-ttft-ms", "200", "--slo-tpot-ms", "20", "--dataset", "random",
                       "--input-len", "128", "--output-len", "32", "--workers", "1", "--json")
    web, ran = client.get(f"/api/jobs/{view['id']}/json").json(), json.loads(out)
    assert code == 0 and ran["search"]["requests_per_trial"] == {"min": 800, "max": 1008}
    for key in ("requests_per_trial", "trial_window_s", "simulations", "simulated_plans"):
        assert web["search"][key] == ran["search"][key], key
    assert web["plans"] and web["plans"] == ran["plans"]


def test_validate_job_reports_like_the_cli(client, tmp_path):
    record = {"id": "web-test", "kind": "training",
              "source": {"name": "a test input (the figure is made up: only web = CLI is checked)"},
              "model": "llama-3.1-8b", "hardware": {"gpu": H100, "num_gpus": 8},
              "training": {"framework": "megatron", "seq_length": 4096, "global_batch_size": 64, "tp": 1,
                           "pp": 1, "recompute": "full", "precision": "bf16"},
              "measured": {"tokens_per_s_per_gpu": 7000.0}}
    small = tmp_path / "records.yaml"
    small.write_text(yaml.safe_dump({"schema": 1, "records": [record, {"id": "broken", "kind": "training"}]}))
    job = client.post("/api/validate?filename=records.yaml", content=small.read_bytes())
    view = wait(client, job.json())
    assert view["state"] == "done", view["error"]
    code, out, _ = cli("validate", small, "--json", "--workers", "1")
    web = client.get(f"/api/jobs/{view['id']}/json").json()
    assert web == json.loads(out.replace(str(small), "records.yaml")) and len(web["records"]) == 1 and len(web["skipped"]) == 1
    bad = client.post("/api/validate?filename=mine.yaml", content=b"records: [")
    assert bad.status_code == 400 and bad.json()["detail"].startswith("mine.yaml: not valid YAML")


@pytest.mark.parametrize("body,message", [
    ({**TRAIN, "model": "/etc/hostname"}, "--model '/etc/hostname': give a catalog name (GET /api/models), hf:ORG/NAME, or the "
                                          "upload:ID of a config.json uploaded to POST /api/configs; the web app "
                                          "reads no file of the server"),
    ({**TRAIN, "plan": {"doc_lengths": "/etc/hostname"}},
     "--doc-lengths '/etc/hostname': the web app takes fixed, lognormal, zipf (files of the server are not read)"),
])
def test_requests_cannot_name_files_of_the_server(client, body, message):
    answer = client.post("/api/train/memory", json=body)
    assert (answer.status_code, answer.json()["detail"]) == (400, message)


def test_plan_search_over_several_sizes_ranks_them_together_as_the_cli_does(client):
    body = {"model": "llama-3.2-1b", "gpu": H100, "num_gpus": [8, 16], "global_batch_size": 64, "top": 2}
    view = wait(client, client.post("/api/train/plan", json=body).json())
    assert view["state"] == "done", view["error"]
    code, out, _ = cli("train", "plan", "--model", "llama-3.2-1b", "--gpu", H100, "--num-gpus", "8,16",
                       "--global-batch-size", "64", "--top", "2", "--json")
    cli_json = json.loads(out)
    result = view["result"]
    assert code == 0 and result["plans"] == cli_json["plans"]
    strip = [{k: v for k, v in s.items() if k != "seconds"} for s in result["search"] + cli_json["search"]]
    assert strip[:2] == strip[2:]  # the same two searches (wall time aside)
    assert {p["hardware"]["num_gpus"] for p in result["plans"]} == {8, 16} and view["done"] == view["total"]
    assert "Winner" in result["why"] and "GPUs" in result["why"]


def test_plan_search_takes_the_document_length_axis(client):
    body = {"model": "llama-3.2-1b", "gpu": H100, "num_gpus": 8, "global_batch_size": 64, "top": 2,
            "doc_lengths": "lognormal:mean=1500,sigma=1.2"}
    view = wait(client, client.post("/api/train/plan", json=body).json())
    assert view["state"] == "done", view["error"]
    assert all(p["doc_lengths"] == body["doc_lengths"] for p in view["result"]["plans"])


def test_plan_search_takes_the_fine_tuning_method(client):
    body = {"model": "llama-3.2-1b", "gpu": H100, "num_gpus": 8, "global_batch_size": 64, "top": 2,
            "framework": "deepspeed", "method": "lora", "lora_rank": 16, "lora_targets": "q,k,v,o"}
    view = wait(client, client.post("/api/train/plan", json=body).json())
    assert view["state"] == "done", view["error"]
    assert all(p["method"] == "lora" and p["lora_rank"] == 16 and p["lora_targets"] == ["q", "k", "v", "o"]
               for p in view["result"]["plans"])


@pytest.mark.parametrize("path,body,args", [
    ("/api/train/plan", {"model": "llama-3.1-8b", "gpu": H100, "num_gpus": 8, "objective": "cost",
                         "global_batch_size": 64},
     ("train", "plan", "--model", "llama-3.1-8b", "--gpu", H100, "--num-gpus", "8", "--objective", "cost",
      "--global-batch-size", "64")),
    ("/api/train/plan", {"model": "llama-3.1-8b", "gpu": H100, "num_gpus": 8, "tp": 3, "global_batch_size": 64},
     ("train", "plan", "--model", "llama-3.1-8b", "--gpu", H100, "--num-gpus", "8", "--tp", "3",
      "--global-batch-size", "64")),
    ("/api/serve/plan", {"model": "llama-3.2-1b", "gpus": [H100], "request_rate": 2},
     ("serve", "plan", "--model", "llama-3.2-1b", "--gpu", H100, "--request-rate", "2")),
    ("/api/serve/simulate", {"model": "llama-3.2-1b", "gpu": "b300", "workload": {"num_requests": 10}},
     ("serve", "simulate", "--model", "llama-3.2-1b", "--gpu", "b300", "--num-requests", "10")),
    ("/api/train/plan", {"model": "llama-3.2-1b", "gpu": H100, "num_gpus": 8, "global_batch_size": 64,
                         "method": "qlora", "framework": "megatron"},
     ("train", "plan", "--model", "llama-3.2-1b", "--gpu", H100, "--num-gpus", "8",
      "--global-batch-size", "64", "--method", "qlora", "--framework", "megatron")),
], ids=["cost-without-price", "pin-not-dividing", "no-slo", "unknown-gpu", "method-not-on-framework"])
def test_bad_job_input_is_refused_before_queueing(client, path, body, args):
    before = len(client.get("/api/jobs").json())
    answer = client.post(path, json=body)
    code, _, error = cli(*args)
    assert code == 2 and 400 <= answer.status_code < 500 and answer.json()["detail"] == error
    assert len(client.get("/api/jobs").json()) == before
