"""The web app is no window onto its machine (#34): a request or an uploaded run record never
makes it read a file of the server, nor says whether one exists; long strings are a 422, not a
500; uploads stop at a quota; and bound beyond loopback, every request needs the token."""

from __future__ import annotations

import json

import pytest
import yaml

pytest.importorskip("fastapi", reason="the ui extra (fastapi) is not installed")
from fastapi.testclient import TestClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from meshplan.cli.app import app as cli_app  # noqa: E402
from meshplan.ui import uploads  # noqa: E402
from meshplan.ui.app import create_app  # noqa: E402

H100 = "h100-sxm-80gb"
TRAIN = {"model": "llama-3.1-8b", "hardware": {"gpu": H100, "num_gpus": 8}}
PROBES = ["/etc/passwd", "/etc/no-such-file", "../../etc/passwd", "~/.ssh/id_rsa", "C:\\Windows\\win.ini",
          "/proc/self/environ", "x.json", "secrets.yaml", "hf:../../etc/passwd", "upload:../../etc"]


def records(model: str) -> str:
    return yaml.safe_dump({"schema": 1, "records": [{
        "id": "r1", "kind": "training", "model": model, "hardware": {"gpu": H100, "num_gpus": 8},
        "training": {"framework": "megatron", "seq_length": 4096, "global_batch_size": 64},
        "measured": {"step_time_s": 1.0}, "source": {"url": "https://example.com"}}]})


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(max_running=1)) as c:
        yield c


def _same_shape(detail: str, probe: str) -> str:
    return detail.replace(repr(probe[:80]), "<model>")


def test_a_record_naming_a_server_path_is_refused_alike_whether_it_exists_or_not(client):
    answers = {p: client.post("/api/validate", content=records(p)) for p in ["/etc/passwd", "/etc/no-such-file"]}
    assert {r.status_code for r in answers.values()} == {400}
    shapes = {_same_shape(r.json()["detail"], p) for p, r in answers.items()}
    assert len(shapes) == 1, shapes
    detail = answers["/etc/passwd"].json()["detail"]
    assert detail.startswith("records.yaml: record 'r1': model '/etc/passwd': give a catalog name")
    assert "JSON" not in detail and "exist" not in detail and "root:" not in detail


@pytest.mark.parametrize("probe", PROBES)
def test_request_models_never_name_server_files(client, probe):
    answer = client.post("/api/train/memory", json={**TRAIN, "model": probe})
    assert answer.status_code == 400, answer.text
    assert "reads no file of the server" in answer.json()["detail"]


def test_a_bare_name_that_is_a_folder_of_the_servers_cwd_is_not_read(client, tmp_path, monkeypatch):
    (tmp_path / "mymodel").mkdir()
    (tmp_path / "mymodel" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.chdir(tmp_path)
    answer = client.post("/api/train/memory", json={**TRAIN, "model": "mymodel"})
    assert answer.status_code == 404 and answer.json()["detail"].startswith("unknown model 'mymodel'")


@pytest.mark.parametrize("field", ["model", "gpu"])
def test_a_300_character_name_is_a_422_naming_the_limit(client, field):
    body = {**TRAIN, "model": "x" * 300} if field == "model" else {**TRAIN, "hardware": {"gpu": "g" * 300, "num_gpus": 8}}
    answer = client.post("/api/train/estimate", json=body)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert detail.startswith(f"--{field} ") and "at most 200 characters" in detail and len(detail) < 200


def test_a_long_plan_string_is_a_400(client):
    answer = client.post("/api/train/memory", json={**TRAIN, "plan": {"doc_lengths": "fixed:" + "9" * 5000}})
    assert answer.status_code in (400, 422) and "200" in answer.json()["detail"]


def test_uploads_stop_at_the_servers_quota(client):
    saved = client.app.state.uploads
    client.app.state.uploads = uploads.UploadStore(quota=10_000, count=1)
    try:
        config = json.dumps({"model_type": "llama"}).encode()
        client.post("/api/configs", content=config)
        refused = client.post("/api/configs", content=config)
        assert refused.status_code == 413
        assert refused.json()["detail"] == ("this server already holds 1 uploads, its quota of 1; "
                                            "restart `meshplan ui` to clear them")
    finally:
        client.app.state.uploads.close()
        client.app.state.uploads = saved


def test_with_a_token_every_request_needs_it():
    with TestClient(create_app(max_running=1, token="s3cret-token")) as c:
        for path in ("/", "/api/models", "/openapi.json", "/docs"):
            bare = c.get(path)
            assert bare.status_code == 401 and "needs its token" in bare.json()["detail"]
        assert c.get("/api/models", headers={"X-Meshplan-Token": "wrong"}).status_code == 401
        assert c.get("/api/models", headers={"X-Meshplan-Token": "s3cret-token"}).status_code == 200
        assert c.get("/api/models", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
        first = c.get("/?token=s3cret-token")
        assert first.status_code == 200 and "meshplan_token" in first.cookies
        assert c.get("/api/models").status_code == 200  # the cookie now carries it


def test_loopback_stays_tokenless(client):
    assert client.get("/api/models").status_code == 200


@pytest.fixture
def started(monkeypatch):
    """uvicorn.run replaced by a recorder of (app, options); no warm-up."""
    pytest.importorskip("uvicorn")
    import uvicorn

    import meshplan.ui.app

    calls: list = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append((app, kw)))
    monkeypatch.setattr(meshplan.ui.app, "warm_up", lambda: None)
    monkeypatch.delenv("MESHPLAN_UI_TOKEN", raising=False)
    return calls


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::", "192.168.1.5"])
def test_beyond_loopback_a_token_is_made_printed_and_required(started, host):
    result = CliRunner().invoke(cli_app, ["ui", "--host", host])
    assert result.exit_code == 0, result.output
    [(app, options)] = started
    url = next(line for line in result.stderr.splitlines() if line.startswith("meshplan ui at "))
    token = url.partition("?token=")[2]
    assert len(token) >= 24 and options["host"] == host
    with TestClient(app) as c:
        assert c.get("/api/models").status_code == 401
        assert c.get(f"/api/models?token={token}").status_code == 200


def test_loopback_has_no_token_unless_given(started):
    assert CliRunner().invoke(cli_app, ["ui"]).exit_code == 0
    assert CliRunner().invoke(cli_app, ["ui", "--token", "mine"]).exit_code == 0
    (open_app, _), (closed_app, _) = started
    with TestClient(open_app) as c:
        assert c.get("/api/models").status_code == 200
    with TestClient(closed_app) as c:
        assert c.get("/api/models").status_code == 401
        assert c.get("/api/models", headers={"X-Meshplan-Token": "mine"}).status_code == 200


def test_an_empty_token_is_refused(started):
    result = CliRunner().invoke(cli_app, ["ui", "--token", ""])
    assert result.exit_code == 2 and "--token ''" in result.stderr and not started
