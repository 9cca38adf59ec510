"""The web app in a real browser: `meshplan ui` started as a process on a free loopback port,
Playwright driving the system's Chromium (/usr/bin/chromium; never a downloaded browser). Pick a
model and a GPU, run a plan search, see its progress, the ranked table with the CLI's winner,
the plots drawn, and download the winner's Megatron launch config; a shared URL refills the form
and re-runs; bad input shows the CLI's message. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app as cli_app

pytestmark = pytest.mark.browser
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
SEARCH = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "num_gpus": "16", "global_batch_size": "128"}


def _requirements() -> None:
    pytest.importorskip("fastapi", reason="the ui extra (fastapi) is not installed")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """`meshplan ui` on a free port; yields its base URL."""
    _requirements()
    port = _free_port()
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "meshplan", "ui", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"meshplan ui exited: {proc.stdout.read()}")
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def browser():
    _requirements()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    tab = context.new_page()
    errors = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    # every status line the page shows, so a short-lived "running" is not missed
    tab.add_init_script("""window.addEventListener('DOMContentLoaded', () => {
        window.statuses = [];
        new MutationObserver(() => window.statuses.push(document.getElementById('status').textContent))
            .observe(document.getElementById('status'), {childList: true, characterData: true, subtree: true});
    });""")
    yield tab
    assert not errors, errors
    context.close()


def cli_winner() -> dict:
    result = CliRunner().invoke(cli_app, ["train", "plan", "--model", SEARCH["model"], "--gpu", SEARCH["gpu"],
                                          "--num-gpus", SEARCH["num_gpus"], "--global-batch-size",
                                          SEARCH["global_batch_size"], "--json"])
    return json.loads(result.stdout)["plans"][0]


LABELS = {"tp": "TP", "pp": "PP", "dp": "DP", "micro_batch_size": "micro-batch", "recompute": "recompute",
          "dp_sharding": "DP sharding"}
"""The plans table's headers for the CLI's field names."""
BAND = r"[\d,.]+ \([\d,.]+-[\d,.]+\)"
"""A number with its p10-p90 band, as the page writes it: 1,079 (845-1,198)."""


def table(page, name: str) -> list[dict[str, str]]:
    """The rows of a result table as {header: cell text}."""
    header = page.locator(f"#table-{name} thead th").all_inner_texts()
    rows = page.locator(f"#table-{name} tbody tr")
    return [dict(zip(header, rows.nth(i).locator("td").all_inner_texts())) for i in range(rows.count())]


def test_plan_search_in_the_browser(server, page):
    page.goto(f"{server}/train/plan")
    page.wait_for_selector("body[data-ready='1']")
    for name, value in SEARCH.items():
        if name == "gpu":
            page.select_option("[name='gpu']", value)  # a picker from the GPU catalog
        else:
            page.fill(f"[name='{name}']", value)
    page.click("#run")
    page.wait_for_selector("#table-plans tr.best", timeout=60_000)
    statuses = page.evaluate("window.statuses")
    assert any("running" in s for s in statuses), statuses  # progress was shown
    assert page.inner_text("#status").endswith(" s") and "done" in page.inner_text("#status")
    winner = cli_winner()
    best = table(page, "plans")[0]
    for field, header in LABELS.items():
        assert best[header] == str(winner[field]), (field, best)
    assert best["GPUs"] == "16"
    low, high = (winner["intervals"]["tokens_per_s_per_gpu"][k] for k in ("low", "high"))
    assert best["tokens/s per GPU"] == f"{winner['tokens_per_s_per_gpu']:,.0f} ({low:,.0f}-{high:,.0f})"
    text = page.inner_text("#result")
    assert "score" not in text.lower() and "e+" not in text  # no debug dump, no exponent
    assert re.search(r"winner tokens/s per GPU\s+[\d,]+ tokens/s \([\d,]+-[\d,]+\)\n", text), text[:800]
    page.wait_for_selector("#plots .main-svg", timeout=30_000)
    assert page.locator("#plots .js-plotly-plot").count() >= 2
    assert page.locator("#plots .main-svg .point").count() > 0  # the ranked plans are drawn
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-plan.png"), full_page=True)
    with page.expect_download() as download:
        page.click("text=megatron launch config")
    assert download.value.suggested_filename.endswith("-1.sh")
    text = Path(download.value.path()).read_text()
    assert text.startswith("#!/bin/bash\n# Megatron-LM launch for llama-3.1-8b on 16 x h100-sxm-80gb")
    assert f"--tensor-model-parallel-size {winner['tp']}" in text
    assert f"--micro-batch-size {winner['micro_batch_size']}" in text
    with page.expect_download() as download:
        page.click("text=torchtitan launch config")
    assert download.value.suggested_filename.endswith("-1.toml")


def test_several_cluster_sizes_read_as_a_report(server, page):
    page.goto(f"{server}/train/plan?model=llama-3.1-70b&gpu=h100-sxm-80gb&num_gpus=128,256,512"
              "&global_batch_size=512&run=1")
    page.wait_for_selector("#table-plans tr.best", timeout=60_000)
    rows = table(page, "plans")
    assert len({r["GPUs"] for r in rows}) > 1 and {r["GPUs"] for r in rows} <= {"128", "256", "512"}
    header = page.locator("#table-plans thead th").all_inner_texts()
    assert {"MFU (%)", "step time (s)", "peak memory (GiB)", "tokens/s per GPU"} <= set(header), header
    for row in rows:  # one format per column: GiB and %, each with its band; no raw bytes or fractions
        assert re.fullmatch(BAND, row["peak memory (GiB)"]) and float(row["peak memory (GiB)"].split()[0]) < 100
        assert re.fullmatch(BAND, row["MFU (%)"]) and 10 < float(row["MFU (%)"].split()[0]) < 100
    assert [r["GPUs"] for r in table(page, "search")] == ["128", "256", "512"]


def test_a_method_picks_its_framework_and_extrapolation_is_a_warning(server, page):
    page.goto(f"{server}/train/plan")
    page.wait_for_selector("body[data-ready='1']")
    frameworks = page.locator("[name='framework'] option").all_inner_texts()
    assert {"megatron", "nemo", "torchtitan", "deepspeed", "hf", "fsdp"} <= set(frameworks), frameworks
    assert "h100-sxm-80gb (nvidia, 79.6 GiB)" in page.locator("[name='gpu'] option").all_inner_texts()
    page.goto(f"{server}/train/estimate?model=llama-3.1-8b&hardware.gpu=mi300x-192gb&hardware.num_gpus=8"
              "&plan.method=qlora&run=1")
    page.wait_for_selector("#extrapolating", timeout=30_000)
    warning = page.inner_text("#extrapolating")
    assert warning.startswith("Extrapolating") and "no calibration record with architecture cdna3" in warning
    assert "no calibration record with framework hf" in warning  # qlora without a framework runs on hf
    headline = dict(r.split("\t") for r in page.inner_text("#table-headline").splitlines())
    assert re.fullmatch(r"[\d,]+ tokens/s \([\d,]+-[\d,]+\)", headline["tokens/s per GPU"]), headline
    assert re.fullmatch(r"[\d.]+ s \([\d.]+-[\d.]+\)", headline["step time"]), headline


def test_a_search_where_nothing_fits_says_why(server, page):
    page.goto(f"{server}/train/plan?model=llama-3.1-70b&gpu=h100-sxm-80gb&num_gpus=8&global_batch_size=64&run=1")
    page.wait_for_selector("#no-plan-8", timeout=60_000)
    text = page.inner_text("#no-plan-8")
    assert text.startswith("No plan fits on 8 GPUs:") and re.search(r"closest: tp\d+ .* GiB over", text), text


def test_serving_pickers_reasons_and_a_level_capacity_chart(server, page):
    page.goto(f"{server}/serve/plan")
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("[name='engine'] option").all_inner_texts()[1:] == ["vllm", "sglang", "tensorrt-llm"]
    page.goto(f"{server}/serve/plan?model=llama-3.2-1b&gpus=h100-sxm-80gb&request_rate=4&max_gpus=2"
              "&slo_ttft_ms=2000&num_requests=100&top=1&run=1")
    page.wait_for_selector("#plots .main-svg", timeout=120_000)
    reasons = [row["reason"] for row in table(page, "infeasible")]
    assert reasons and all(reasons), reasons
    chart = page.locator("#plots .js-plotly-plot").first
    labels = chart.locator(".ytick text").all_text_contents()
    assert labels and labels[0].startswith("#1 tp") and labels[0].endswith("GPUs)")  # whole, level
    assert chart.locator(".xtick text[transform*='rotate'], .ytick text[transform*='rotate']").count() == 0


def test_pages_and_api_reference_work_offline(server, browser):
    context = browser.new_context()
    tab, outside = context.new_page(), []

    def only_this_server(route):
        if route.request.url.startswith(server):
            return route.continue_()
        outside.append(route.request.url)
        return route.abort()

    tab.route("**/*", only_this_server)
    tab.goto(f"{server}/docs")
    assert "/api/train/plan" in tab.inner_text("#endpoints")
    assert tab.locator("#TrainingSearchRequest h3").inner_text() == "TrainingSearchRequest"
    tab.goto(f"{server}/serve/simulate")
    tab.wait_for_selector("body[data-ready='1']")
    assert outside == []
    context.close()


def test_shared_url_refills_the_form_and_reruns(server, page):
    query = "&".join(f"{k}={v}" for k, v in SEARCH.items())
    page.goto(f"{server}/train/estimate?model=llama-3.1-8b&hardware.gpu=h100-sxm-80gb&hardware.num_gpus=8"
              f"&plan.recompute=full&plan.global_batch_size=64&run=1")
    page.wait_for_selector("#plots .main-svg", timeout=30_000)
    assert page.input_value("[name='hardware.num_gpus']") == "8"
    assert page.input_value("[name='plan.recompute']") == "full"
    assert "step time" in page.inner_text("#result")
    assert page.input_value("[name='hardware.gpu']") == "h100-sxm-80gb"  # the GPU picker, refilled
    with page.expect_download() as download:
        page.click("text=JSON (--json)")
    assert download.value.suggested_filename == "meshplan-train-estimate.json"
    assert json.loads(Path(download.value.path()).read_text())["step_time_s"] > 0
    assert "run=1" in page.get_attribute("#share", "href")
    page.goto(f"{server}/train/plan?{query}")
    page.wait_for_selector("body[data-ready='1']")
    assert page.input_value("[name='num_gpus']") == "16" and not page.locator("#table-plans").count()


def test_bad_input_shows_the_cli_message(server, page):
    page.goto(f"{server}/train/memory?model=llama-3.1-7b&hardware.gpu=h100-sxm-80gb&hardware.num_gpus=8")
    page.wait_for_selector("body[data-ready='1']")
    page.click("#run")
    page.wait_for_selector("#error:not([hidden])")
    assert page.inner_text("#error").startswith("unknown model 'llama-3.1-7b'; closest: llama-3.1-70b")


def test_validation_shows_bands_beside_predictions_and_why_they_extrapolate(server, page, tmp_path):
    """validate's rows carry `low`/`high` beside `predicted` (not an `intervals` entry): the
    renderer finds a band wherever it sits beside its value."""
    record = {"id": "web-band", "kind": "training", "source": {"name": "a test input (made up)"},
              "model": "llama-3.1-8b", "hardware": {"gpu": "mi300x-192gb", "num_gpus": 8},
              "training": {"framework": "megatron", "seq_length": 4096, "global_batch_size": 64, "tp": 1,
                           "pp": 1, "recompute": "full", "precision": "bf16"},
              "measured": {"tokens_per_s_per_gpu": 7000.0}}
    path = tmp_path / "records.yaml"
    path.write_text(json.dumps({"schema": 1, "records": [record]}))  # JSON is YAML
    page.goto(f"{server}/validate")
    page.wait_for_selector("body[data-ready='1']")
    page.set_input_files("#records", str(path))
    page.click("#run")
    page.wait_for_selector("#table-records", timeout=60_000)
    (row,) = table(page, "records")
    assert re.fullmatch(BAND, row["predicted"]) and "low" not in row and "high" not in row, row
    assert row["extrapolating"] == "no calibration record with architecture cdna3"
    assert re.fullmatch(r"-?[\d.]+", row["error (%)"])
    summary = dict(r.split("\t") for r in page.inner_text("#result").splitlines() if r.startswith("median abs"))
    assert summary["median abs rel error"].endswith("%"), summary


def labels(page) -> dict[str, str]:
    """Each form field's label and help text by the field's name: {name: (label, help)}."""
    return page.evaluate("""Object.fromEntries([...document.querySelectorAll('#fields .field')].map((d) => [
        d.querySelector('input, select').name, [d.querySelector('label').textContent, d.querySelector('.help').textContent]]))""")


def key_table(page, selector: str) -> dict[str, str]:
    return dict(r.split("\t") for r in page.inner_text(selector).splitlines())


def test_form_fields_read_as_labels_with_units_and_help(server, page):
    page.goto(f"{server}/train/plan")
    page.wait_for_selector("body[data-ready='1']")
    fields = labels(page)
    assert fields["num_gpus"][0] == "GPUs" and fields["global_batch_size"] == ["Global batch (sequences)", "Sequences per step"]
    assert fields["seq_len"][0] == "Sequence length (tokens)" and fields["price_per_gpu_hour"][0] == "Price per GPU-hour (USD)"
    assert fields["goodput.restart_minutes"][0] == "Restart time (minutes)"
    assert not [name for name, (label, _) in fields.items() if "_" in label], fields  # no flag name as a label
    assert all(help for _, help in fields.values()), fields
    page.goto(f"{server}/train/estimate")
    page.wait_for_selector("body[data-ready='1']")
    assert page.inner_text("#fields legend") == "Hardware" and "Plan" in page.locator("#fields summary").all_inner_texts()
    assert labels(page)["hardware.num_gpus"][0] == "GPUs" and labels(page)["plan.tp"][0] == "Tensor parallel (TP)"


def test_headline_numbers_read_as_the_details_read_them(server, page):
    """One format per quantity: the headline's peak memory is the details' (GiB, 3 digits, band),
    not the report's own 191.7 GiB beside a 192 GiB."""
    page.goto(f"{server}/train/estimate?model=llama-3.1-8b&hardware.gpu=h100-sxm-80gb&hardware.num_gpus=8&run=1")
    page.wait_for_selector("#table-headline", timeout=30_000)
    head = key_table(page, "#table-headline")
    details = key_table(page, "h3:text-is('Details') + table")
    for row, field in (("peak memory per GPU", "peak memory"), ("step time", "step time"), ("tokens/s per GPU", "tokens/s per GPU")):
        assert head[row] == details[field] and re.search(r"\(.+-.+\)$", head[row]), (row, head[row], details[field])
    memory = key_table(page, "h3:text-is('Memory') + table")
    assert (head["GPU memory"], head["headroom"]) == (memory["GPU memory"], memory["headroom"]), (head, memory)
    assert re.fullmatch(r"[\d.]+% \([\d.]+-[\d.]+\) / [\d.]+%", head["MFU / HFU"]), head
    assert not any(k.endswith("p10-p90") for k in head)


def test_a_simulation_given_only_gpus_shows_the_chosen_layout_and_its_note(server, page):
    page.goto(f"{server}/serve/simulate")
    page.wait_for_selector("body[data-ready='1']")
    assert page.get_attribute("[name='plan.tp']", "placeholder") == "chosen for the GPUs"
    assert labels(page)["num_gpus"] == ["GPUs", "GPUs to serve on; with tp, pp, ep, dp and replicas left empty, "
                                                "meshplan chooses the layout for them"]
    page.goto(f"{server}/serve/simulate?model=llama-3.2-1b&gpu=h100-sxm-80gb&num_gpus=2&workload.num_requests=30"
              "&slo_ttft_ms=500&run=1")
    page.wait_for_selector("#notes", timeout=60_000)
    assert re.search(r"no layout given for 2 GPUs: chose tp=1 pp=1 x 2 replicas", page.inner_text("#notes"))
    layout = key_table(page, "h3:text-is('Layout') + table")
    assert (layout["TP"], layout["PP"], layout["replicas"], layout["chosen"]) == ("1", "1", "2", "yes"), layout
    head, ttft = key_table(page, "#table-headline"), key_table(page, "h3:text-is('TTFT') + table")
    assert head["TTFT p50 / p90"] == f"{ttft['p50']} / {ttft['p90']}" and ttft["p50"].endswith(" ms"), (head, ttft)
    slo = key_table(page, "h3:text-is('SLO') + table")
    assert head["SLO attainment"] == slo["attainment"] and re.fullmatch(r"[\d.]+%", slo["attainment"]), (head, slo)


def test_validation_reads_metrics_by_name_and_shows_each_records_notes(server, page, tmp_path):
    record = {"id": "web-notes", "kind": "serving", "source": {"name": "a test input (made up)"},
              "model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 2},
              "serving": {"engine": "vllm", "workload": {"mode": "offline", "input_len": 128, "output_len": 128,
                                                         "num_requests": 40}},
              "measured": {"output_tokens_per_s": 9000.0}}
    path = tmp_path / "records.yaml"
    path.write_text(json.dumps({"schema": 1, "records": [record]}))
    page.goto(f"{server}/validate")
    page.wait_for_selector("body[data-ready='1']")
    page.set_input_files("#records", str(path))
    page.click("#run")
    page.wait_for_selector("#notes", timeout=60_000)
    assert "web-notes: no layout given for 2 GPUs: chose tp=1" in page.inner_text("#notes")
    head = key_table(page, "#table-headline")
    assert "output_tokens_per_s" not in head and re.fullmatch(
        r"n=1, median \|error\| [\d.]+%, p90 \|error\| [\d.]+%", head["output tokens/s"]), head
    assert head["all"] == head["output tokens/s"]
    assert "notes" not in table(page, "records")[0]
