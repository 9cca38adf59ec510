"""The web app in a real browser: `meshplan ui` started as a process on a free loopback port,
Playwright driving the system's Chromium (/usr/bin/chromium; never a downloaded browser). Pick a
model and a GPU, run a plan search, see its progress, the ranked table with the CLI's winner,
the plots drawn, and download the winner's Megatron launch config; a shared URL refills the form
and re-runs; bad input shows the CLI's message. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import json
import os
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


def test_plan_search_in_the_browser(server, page):
    page.goto(f"{server}/train/plan")
    page.wait_for_selector("body[data-ready='1']")
    for name, value in SEARCH.items():
        page.fill(f"[name='{name}']", value)
    page.click("#run")
    page.wait_for_selector("#table-plans tr.best", timeout=60_000)
    statuses = page.evaluate("window.statuses")
    assert any("running" in s for s in statuses), statuses  # progress was shown
    assert page.inner_text("#status").endswith(" s") and "done" in page.inner_text("#status")
    winner = cli_winner()
    header = page.locator("#table-plans thead th").all_inner_texts()
    cells = dict(zip(header, page.locator("#table-plans tr.best td").all_inner_texts()))
    for field in ("tp", "pp", "dp", "micro_batch_size", "recompute", "dp_sharding"):
        assert cells[field] == str(winner[field]), (field, cells)
    page.wait_for_selector("#plots .main-svg", timeout=30_000)
    assert page.locator("#plots .js-plotly-plot").count() >= 2
    assert page.locator("#plots .main-svg .point").count() > 0  # the ranked plans are drawn
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "ui-plan.png"), full_page=True)
    with page.expect_download() as download:
        page.click("text=megatron launch config")
    text = Path(download.value.path()).read_text()
    assert text.startswith("#!/bin/bash\n# Megatron-LM launch for llama-3.1-8b on 16 x h100-sxm-80gb")
    assert f"--tensor-model-parallel-size {winner['tp']}" in text
    assert f"--micro-batch-size {winner['micro_batch_size']}" in text


def test_shared_url_refills_the_form_and_reruns(server, page):
    query = "&".join(f"{k}={v}" for k, v in SEARCH.items())
    page.goto(f"{server}/train/estimate?model=llama-3.1-8b&hardware.gpu=h100-sxm-80gb&hardware.num_gpus=8"
              f"&plan.recompute=full&plan.global_batch_size=64&run=1")
    page.wait_for_selector("#plots .main-svg", timeout=30_000)
    assert page.input_value("[name='hardware.num_gpus']") == "8"
    assert page.input_value("[name='plan.recompute']") == "full"
    assert "step time" in page.inner_text("#result")
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
