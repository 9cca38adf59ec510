"""What the web app serves besides the answers themselves (issue #34 items 7-8): an API reference
that works offline, a size limit on JSON bodies, downloads named and typed by what they hold, the
catalogs behind the pickers, every framework of the CLI with the CLI's rule for a method, the
goodput inputs, and a reason beside every plan that does not make it."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("fastapi", reason="the ui extra (fastapi) is not installed")
from fastapi.testclient import TestClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from meshplan.cli.app import app as cli_app  # noqa: E402
from meshplan.ui import limits  # noqa: E402
from meshplan.ui.app import create_app  # noqa: E402
from tests.test_ui_api import wait  # noqa: E402  (polls a job until it ends)
from meshplan.ui.pages import PAGES, STATIC  # noqa: E402

H100 = "h100-sxm-80gb"
SMALL = {"model": "llama-3.2-1b", "hardware": {"gpu": H100, "num_gpus": 8}, "plan": {"global_batch_size": 64}}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(max_running=2)) as c:
        yield c


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(cli_app, [str(a) for a in args])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|https?://[^"'\s]*(?:cdn|jsdelivr|unpkg)""", re.I)


def test_api_docs_page_lists_every_endpoint_and_loads_nothing_from_elsewhere(client):
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    api = client.get("/openapi.json").json()
    for path in api["paths"]:
        assert f"<code>{path}</code>" in page.text, path
    assert "TrainingSearchRequest" in page.text and "Tensor-parallel size" in page.text
    assert "integer &gt;= 1" in page.text  # a field's type and bound, as a person reads them
    assert client.get("/redoc").status_code == 404
    served = [page.text, client.get("/").text] + [client.get(f"/{p.path}").text for p in PAGES]
    served += [path.read_text() for path in STATIC.iterdir()]
    for text in served:
        assert not EXTERNAL.search(text), EXTERNAL.search(text).group(0)


def test_json_body_over_the_limit_is_413_before_it_is_parsed(client):
    big = b'{"model": "' + b"x" * limits.MAX_JSON_BODY + b'"}'
    answer = client.post("/api/train/memory", content=big, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    assert answer.json()["detail"] == (f"request body is {len(big):,} bytes; the limit on a JSON request "
                                       f"is {limits.MAX_JSON_BODY:,} bytes (8 MiB)")
    streamed = client.post("/api/train/plan", content=(b" " * 2**20 for _ in range(9)),
                           headers={"Content-Type": "application/json"})  # chunked: no Content-Length
    assert streamed.status_code == 413 and "is more than 8,388,608 bytes" in streamed.json()["detail"]
    assert client.post("/api/train/memory", json=SMALL).status_code == 200  # still serving


def test_the_limit_stops_reading_a_stream_once_past_it():
    """At the ASGI level (the test client reads a body whole before sending it): the middleware
    takes one MiB chunk after another, answers 413 at the ninth and never calls the app."""
    import asyncio

    received, sent = [], []

    async def receive():
        received.append(1)
        return {"type": "http.request", "body": b" " * 2**20, "more_body": True}

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):
        raise AssertionError("the app saw a body past the limit")

    scope = {"type": "http", "method": "POST", "path": "/api/train/plan", "headers": []}
    asyncio.run(limits.BodyLimit(app)(scope, receive, send))
    assert sent[0]["status"] == 413 and len(received) == limits.MAX_JSON_BODY // 2**20 + 1


def test_uploads_keep_their_own_larger_limit(client):
    config = b'{"model_type": "llama"' + b" " * (limits.MAX_JSON_BODY + 10) + b"}"
    answer = client.post("/api/configs", content=config)
    assert answer.status_code == 400 and "config.json" in answer.json()["detail"]


def test_catalog_pickers_have_engines_and_every_cli_framework(client):
    assert client.get("/api/engines").json() == ["vllm", "sglang", "tensorrt-llm"]
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    framework = schemas["TrainingSearchRequest"]["properties"]["framework"]
    choices = [v for option in framework["anyOf"] for v in option.get("enum", ())]
    assert {"megatron", "nemo", "torchtitan", "deepspeed", "hf", "fsdp"} <= set(choices)
    assert framework.get("default") is None and "framework" not in schemas["TrainingSearchRequest"]["required"]
    assert {"full", "lora", "qlora"} == set(schemas["TrainingSearchRequest"]["properties"]["method"]["enum"])


def test_a_method_without_a_framework_picks_the_cli_one(client):
    body = {**SMALL, "plan": {**SMALL["plan"], "method": "qlora"}}
    web = client.post("/api/train/memory", json=body)
    assert web.status_code == 200, web.text
    cli = cli_json("train", "memory", "--model", "llama-3.2-1b", "--gpu", H100, "--num-gpus", "8",
                   "--global-batch-size", "64", "--method", "qlora", "--json")
    assert web.json() == cli and cli["plan"]["framework"] == "hf"


def test_estimate_takes_the_run_and_goodput_inputs_as_the_cli_does(client):
    body = {**SMALL, "train_tokens": 1e12, "price_per_gpu_hour": 2.5,
            "goodput": {"restart_minutes": 30, "checkpoint_mode": "async", "straggler_cv": 0.05}}
    web = client.post("/api/train/estimate", json=body)
    assert web.status_code == 200, web.text
    cli = cli_json("train", "estimate", "--model", "llama-3.2-1b", "--gpu", H100, "--num-gpus", "8",
                   "--global-batch-size", "64", "--train-tokens", "1e12", "--price-per-gpu-hour", "2.5",
                   "--restart-minutes", "30", "--checkpoint-mode", "async", "--straggler-cv", "0.05", "--json")
    assert web.json() == cli and cli["goodput"]["days_to_train"] > 0
    bad = client.post("/api/train/estimate", json={**SMALL, "goodput": {"straggler_cv": 1.5}})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("--straggler-cv 1.5")


def test_plan_search_with_a_method_and_goodput_matches_the_cli_and_names_its_downloads(client):
    body = {"model": "llama-3.2-1b", "gpu": H100, "num_gpus": 8, "global_batch_size": 64, "top": 2,
            "method": "lora", "train_tokens": 1e11, "goodput": {"restart_minutes": 20}}
    view = wait(client, client.post("/api/train/plan", json=body).json())
    assert view["state"] == "done", view["error"]
    cli = cli_json("train", "plan", "--model", "llama-3.2-1b", "--gpu", H100, "--num-gpus", "8",
                   "--global-batch-size", "64", "--top", "2", "--method", "lora", "--train-tokens", "1e11",
                   "--restart-minutes", "20", "--json")
    assert view["result"]["plans"] == cli["plans"] and cli["plans"][0]["framework"] == "hf"  # megatron has no lora
    download = client.get(f"/api/jobs/{view['id']}/json")
    assert download.headers["content-type"] == "application/json"
    assert download.headers["content-disposition"] == f'attachment; filename="meshplan-train-plan-{view["id"]}.json"'


def test_launch_configs_download_with_their_real_extension_and_type(client):
    body = {"model": "llama-3.2-1b", "gpu": H100, "num_gpus": 8, "global_batch_size": 64, "top": 1}
    view = wait(client, client.post("/api/train/plan", json=body).json())
    for target, extension, media in (("megatron", "sh", "text/x-shellscript"), ("torchtitan", "toml", "application/toml"),
                                     ("deepspeed", "json", "application/json")):
        answer = client.get(f"/api/jobs/{view['id']}/export/{target}")
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].split(";")[0] == media
        assert answer.headers["content-disposition"].endswith(f'-1.{extension}"')
    assert json.loads(client.get(f"/api/jobs/{view['id']}/export/deepspeed").text)  # JSON indeed


def test_every_export_target_has_a_file_type():
    from meshplan.export.serving import SERVING_EXPORTERS
    from meshplan.training.layout.capabilities import EXPORT_TARGETS
    from meshplan.ui.routes_jobs import EXPORT_EXTENSIONS, MEDIA_TYPES

    assert set(EXPORT_EXTENSIONS) == set(SERVING_EXPORTERS) | set(EXPORT_TARGETS)
    assert set(EXPORT_EXTENSIONS.values()) <= set(MEDIA_TYPES)


def test_a_plan_that_does_not_fit_says_why_on_the_page(client):
    body = {"model": "llama-3.1-70b", "hardware": {"gpu": H100, "num_gpus": 8}, "plan": {"tp": 1}}
    plain = client.post("/api/train/memory", json=body).json()
    assert plain["fits"] is False and "why" not in plain  # the --json answer is the CLI's
    why = client.post("/api/train/memory?plots=true", json=body).json()["why"]
    assert re.fullmatch(r"Does not fit: tp1 pp1 vpp1 cp1 ep1 mbs1 recompute none zero 1: needs [\d.]+ of "
                        r"79\.6 GiB \([\d.]+ GiB over, stage 0\)", why), why


def test_every_infeasible_serving_plan_has_a_reason(client):
    body = {"model": "llama-3.2-1b", "gpus": [H100], "request_rate": 4, "max_gpus": 2, "slo_ttft_ms": 2000,
            "num_requests": 100, "top": 1}
    view = wait(client, client.post("/api/serve/plan", json=body).json())
    assert view["state"] == "done", view["error"]
    infeasible = view["result"]["infeasible"]
    assert infeasible and all(entry["reason"] for entry in infeasible)
    assert any("ranks below the plans shown (--top)" in entry["reason"] for entry in infeasible)


def _at(answer, path: str):
    for part in path.split("."):
        answer = answer[int(part)] if part.isdigit() else answer[part]
    return answer


def test_every_headline_row_a_page_formats_is_in_the_report_and_its_value_in_the_answer(client):
    """The pages write the report's headline rows they name (pages.Page.headline) from the
    answer's numbers: each named row exists in the report, each path holds a number, and the
    banded ones hold their band under `intervals`."""
    pytest.importorskip("plotly", reason="the report's headline needs the viz extra")
    pages = {p.path: p for p in PAGES}
    search = {"model": "llama-3.2-1b", "gpu": H100, "num_gpus": 8, "global_batch_size": 64, "top": 1,
              "train_tokens": 1e10}
    simulate = {"model": "llama-3.2-1b", "gpu": H100, "slo_ttft_ms": 50, "workload": {"num_requests": 30}}
    answers = {"train/memory": client.post("/api/train/memory?plots=true", json=SMALL).json(),
               "train/estimate": client.post("/api/train/estimate?plots=true",
                                             json={**SMALL, "train_tokens": 1e10}).json(),
               "train/plan": wait(client, client.post("/api/train/plan", json=search).json())["result"],
               "serve/simulate": wait(client, client.post("/api/serve/simulate", json=simulate).json())["result"]}
    for path, answer in answers.items():
        rows = [row[0] for row in answer["report"]["headline"]]
        assert pages[path].headline, path
        for row, where in pages[path].headline:
            assert row in rows, (path, row, rows)
            for one in where.split(" / "):
                assert isinstance(_at(answer, one), (int, float)), (path, one)
        for where in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_bytes", "plans.0.tokens_per_s_per_gpu"):
            if any(where == w for _, w in pages[path].headline):
                *parents, key = where.split(".")
                holder = _at(answer, ".".join(parents)) if parents else answer
                band = holder["intervals"][key]
                assert band["low"] < holder[key] < band["high"], (path, where)
