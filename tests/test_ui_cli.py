"""`meshplan ui`: loopback by default and says so, warns when exposed, and names the extra to
install when FastAPI/uvicorn/Jinja2 are missing (exit 2). The server itself is not started here
(uvicorn.run is replaced); tests/test_ui_browser.py starts a real one."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.cli.commands.ui import is_loopback


def run(*args: str):
    return CliRunner().invoke(app, ["ui", *args])


@pytest.mark.parametrize("host,local", [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                        ("localhost", True), ("0.0.0.0", False), ("::", False),
                                        ("192.168.1.5", False), ("example.com", False)])
def test_is_loopback(host, local):
    assert is_loopback(host) is local


def test_missing_extra_is_one_message_and_exit_2(monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)  # `import fastapi` raises ImportError
    result = run()
    assert result.exit_code == 2
    assert result.stderr.strip() == ("error: meshplan ui needs the ui extra: pip install 'meshplan[ui]' "
                                     "(fastapi is not installed)")


@pytest.fixture
def served(monkeypatch):
    """uvicorn.run replaced by a recorder; no warm-up."""
    pytest.importorskip("uvicorn")
    import uvicorn

    import meshplan.ui.app

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    monkeypatch.setattr(meshplan.ui.app, "warm_up", lambda: None)
    return calls


def test_default_is_loopback_and_says_so(served):
    result = run("--port", "8123")
    assert result.exit_code == 0, result.output
    assert served == [{"host": "127.0.0.1", "port": 8123, "log_level": "warning"}]
    assert "meshplan ui at http://127.0.0.1:8123/" in result.stderr
    assert "loopback only" in result.stderr and "warning" not in result.stderr


def test_another_host_is_a_warning(served):
    result = run("--host", "0.0.0.0")
    assert result.exit_code == 0 and served[0]["host"] == "0.0.0.0"
    assert "warning: listening on 0.0.0.0: anyone who can reach this address" in " ".join(result.stderr.split())


@pytest.mark.parametrize("args,message", [(("--port", "70000"), "--port 70000: give a TCP port of at most 65,535"),
                                          (("--jobs", "0"), "--jobs 0: give a job count of 1 or more")])
def test_bad_port_or_jobs_exit_2(served, args, message):
    result = run(*args)
    assert result.exit_code == 2 and result.stderr.strip() == f"error: {message}" and not served


def test_the_command_module_imports_no_web_stack():
    """`meshplan ui --help` and the root help import no FastAPI, uvicorn or Jinja2."""
    import subprocess

    probe = ("import sys, meshplan.cli.commands.ui; "
             "print([m for m in ('fastapi', 'uvicorn', 'jinja2', 'starlette') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
