"""The web app's forms and notes (issue #34 item 7): every form field has a label with its unit,
from one table (meshplan.ui.labels) written into the schema's titles, and a help text from its
docstring; a simulation given only GPUs gets the CLI's chosen layout; what the CLI says as a
`note:` on stderr (the framework chosen for a method, the layout chosen) reaches the page."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("fastapi", reason="the ui extra (fastapi) is not installed")
from fastapi.testclient import TestClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from meshplan.cli.app import app as cli_app  # noqa: E402
from meshplan.ui.app import create_app  # noqa: E402
from tests.test_ui_api import wait  # noqa: E402  (polls a job until it ends)
from meshplan.ui.labels import LABELS  # noqa: E402
from meshplan.ui.pages import PAGES  # noqa: E402

H100 = "h100-sxm-80gb"
UNITS = {"_ms": "(ms)", "_gb_per_s": "(GB/s)", "_gbps_per_gpu": "(Gb/s)", "_minutes": "(minutes)", "_w": "(W)",
         "_gb": "(GB)", "_tb": "(TB)", "_bytes": "(bytes)", "_s": "(s)", "_len": "(tokens)", "price": "(USD)",
         "_percentile": "(%)", "_utilization": "(fraction)", "_rate": None}
"""A field name's unit and how its label ends with it; the first matching suffix (or prefix) wins,
None: no rule (a rate is requests/s or a probability, said by hand)."""


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(max_running=2)) as c:
        yield c


def form_fields(schemas: dict, name: str, seen: set | None = None):
    """(field name, property schema, resolved schema) of every field a page's form shows."""
    seen = set() if seen is None else seen
    for field, prop in schemas[name].get("properties", {}).items():
        real = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
        ref = (real[0] if len(real) == 1 else {}).get("$ref")
        yield field, prop, ref
        if ref and ref not in seen:
            seen.add(ref)
            yield from form_fields(schemas, ref.rsplit("/", 1)[-1], seen)


def test_every_form_field_has_a_label_with_its_unit_and_a_help_text(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    used = set()
    for page in PAGES:
        for field, prop, ref in (form_fields(schemas, page.schema) if page.schema else ()):
            used.add(field)
            assert prop.get("title") == LABELS.get(field) and prop["title"] != field, (page.path, field, prop.get("title"))
            assert ref or prop.get("description"), (page.path, field)  # the help under the label
            unit = next((u for suffix, u in UNITS.items() if field.endswith(suffix) or field.startswith(suffix)), None)
            assert unit is None or prop["title"].endswith(unit), (field, prop["title"])  # the first suffix matching
    assert used == set(LABELS), set(LABELS) ^ used  # no label for a field that is gone
    assert LABELS["global_batch_size"] == "Global batch (sequences)" and LABELS["num_gpus"] == "GPUs"
    assert LABELS["request_rate"] == "Request rate (requests/s)"
    docs = client.get("/docs").text
    assert "<td class=\"text\">Sequence length (tokens)</td>" in docs  # the API reference lists the label


def cli(*args: str):
    result = CliRunner().invoke(cli_app, [str(a) for a in args])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout), [line.removeprefix("note: ") for line in result.stderr.splitlines()
                                       if line.startswith("note: ")]


def test_a_simulation_given_only_gpus_gets_the_cli_layout_and_its_note(client):
    body = {"model": "llama-3.1-8b", "gpu": H100, "num_gpus": 4,
            "workload": {"dataset": "random", "input_len": 512, "output_len": 64, "num_requests": 40}}
    view = wait(client, client.post("/api/serve/simulate", json=body).json())
    assert view["state"] == "done", view["error"]
    web = view["result"]
    data, notes = cli("serve", "simulate", "--model", "llama-3.1-8b", "--gpu", H100, "--num-gpus", "4",
                      "--dataset", "random", "--input-len", "512", "--output-len", "64", "--num-requests", "40",
                      "--json")
    assert web["layout"] == data["layout"] and web["layout"]["chosen"] is True
    assert web["notes"] == data["notes"] == notes and notes[0].startswith("no layout given for 4 GPUs: chose tp=1")
    assert web["deployment"] == data["deployment"] and web["deployment"][0]["replicas"] == 4
    stated = wait(client, client.post("/api/serve/simulate", json={**body, "plan": {"tp": 2}}).json())["result"]
    assert "layout" not in stated and "notes" not in stated and stated["deployment"][0]["replicas"] == 1
    nightly = {**body, "num_gpus": None, "plan": {"engine_version": "nightly"}}
    read = wait(client, client.post("/api/serve/simulate", json=nightly).json())["result"]
    assert "layout" not in read and len(read["notes"]) == 1
    assert read["notes"][0].startswith("engine version 'nightly' names no release: using the latest documented")


def test_the_framework_the_cli_picks_for_a_method_is_a_note_on_the_page(client):
    body = {"model": "llama-3.2-1b", "hardware": {"gpu": H100, "num_gpus": 8}, "plan": {"method": "lora"}}
    _, notes = cli("train", "estimate", "--model", "llama-3.2-1b", "--gpu", H100, "--num-gpus", "8",
                   "--method", "lora", "--json")
    assert notes and notes[0].startswith("framework hf: megatron has no lora")
    for path in ("/api/train/estimate?plots=true", "/api/train/memory?plots=true"):
        answer = client.post(path, json=body).json()
        if answer.get("report") is None:
            pytest.skip("the report needs the viz extra")
        assert answer["report"]["notes"][0] == notes[0], path
    given = {**body, "plan": {"method": "lora", "framework": "hf"}}
    assert not any(n.startswith("framework") for n in
                   client.post("/api/train/memory?plots=true", json=given).json()["report"]["notes"])
    search = {"model": "llama-3.2-1b", "gpu": H100, "num_gpus": 8, "global_batch_size": 64, "top": 1, "method": "lora"}
    result = wait(client, client.post("/api/train/plan", json=search).json())["result"]
    assert result["report"]["notes"][0] == notes[0]
    assert re.search(r"\(--framework chooses another\)$", notes[0])
