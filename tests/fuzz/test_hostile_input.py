"""Hostile input of each class #34 names, generated: shell metacharacters in launch-script values,
output paths that are not regular files, YAML alias bombs, web requests probing the server's
files, over-long strings and wrong tokens. Deterministic (derandomized, no deadline)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplan.errors import ConfigError
from meshplan.export.serving import export_serving
from meshplan.export.serving._common import STOP_ALL
from meshplan.outfiles import write_atomic
from meshplan.serving.plan import ServingPlan
from meshplan.yamlread import MAX_NODES, TooBig, load_user

FUZZ = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SHELL_TEXT = st.lists(st.sampled_from(list("ab$()`;&|<>'\"\\\n\t *?~#{}!\r") + ["$(id)", "`id`", "$HOME"]),
                      min_size=1, max_size=20).map("".join).filter(lambda s: s.strip())
STUBS = ("vllm() { printf '%s\\0' \"$@\" > \"$LOG/$BASHPID.$RANDOM\"; }\n"
         "python() { printf '%s\\0' \"$@\" > \"$LOG/$BASHPID.$RANDOM\"; }\n")


@FUZZ
@given(model=SHELL_TEXT, target=st.sampled_from(["vllm", "sglang"]))
def test_a_launch_script_passes_any_model_name_as_one_word(tmp_path_factory, model, target):
    log = tmp_path_factory.mktemp("calls")
    script = export_serving(target, model, ServingPlan(engine=target, tp=1, replicas=2))
    text = STUBS + script.replace(STOP_ALL, "") + "\nwait\n"
    done = subprocess.run(["bash", "-c", text], capture_output=True, text=True, cwd=log,
                          env={"PATH": "/usr/bin:/bin", "LOG": str(log)})
    assert done.returncode == 0, done.stderr
    calls = [p.read_bytes().decode().split("\0")[:-1] for p in log.iterdir()]
    servers = [c for c in calls if c[0] == "serve" or "sglang.launch_server" in c]
    assert len(servers) == 2 and all(model.strip() in c for c in servers), (model, calls)
    assert len(calls) == len(list(log.iterdir()))  # nothing else ran and wrote here


@FUZZ
@given(kind=st.sampled_from(["dir", "fifo", "link-to-dir", "link-to-fifo"]), text=st.text(max_size=20))
def test_no_output_lands_on_what_is_not_a_regular_file(tmp_path_factory, kind, text):
    root = tmp_path_factory.mktemp("out")
    target = root / "t"
    target.mkdir() if "dir" in kind else os.mkfifo(target)
    path = target if not kind.startswith("link") else root / "link"
    if path != target:
        path.symlink_to(target)
    with pytest.raises(ConfigError, match="meshplan writes only regular files"):
        write_atomic(path, text, "--out")
    assert sorted(p.name for p in root.iterdir()) == sorted({"t", path.name})


def _bomb(depth: int, width: int, shape: str) -> str:
    first = "l0: &l0 [lol, lol]" if shape == "list" else "l0: &l0 {a: lol, b: lol}"
    refs = [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth + 1)]
    return "\n".join([first, *refs, f"top: *l{depth}"]) + "\n"


@FUZZ
@given(depth=st.integers(1, 12), width=st.integers(1, 12), shape=st.sampled_from(["list", "map"]))
def test_alias_documents_read_within_the_budget_or_are_refused_at_once(depth, width, shape):
    start = time.perf_counter()
    expanded = sum(3 * width ** k for k in range(depth + 1)) * 2  # an upper bound on the values
    try:
        data = load_user(_bomb(depth, width, shape))
    except TooBig:
        assert expanded > MAX_NODES // 2
    else:
        assert data["top"] is not None
    assert time.perf_counter() - start < 2


pytest.importorskip("fastapi", reason="the ui extra (fastapi) is not installed")
from fastapi.testclient import TestClient  # noqa: E402

from meshplan.ui.app import create_app  # noqa: E402

TRAIN = {"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 8}}
PATHS = st.one_of(
    st.sampled_from(["/etc/passwd", "/etc/shadow", "/proc/self/environ", "/nonexistent", "..", "./config.json",
                     "~root/.bashrc", "C:\\boot.ini", "hf:../../x", "hf:a/b/../../c", "upload:../x", "a/b.json",
                     "x.yaml", "/dev/zero", "/tmp"]),
    st.builds(lambda a, b: f"{a}/{b}", st.text(min_size=0, max_size=10), st.text(min_size=1, max_size=10)),
)


def _client(**options):
    """A client without the app's lifespan: no job runs here, so no forkserver is started (it
    would outlive the module as a child process of the test run)."""
    app = create_app(max_running=1, **options)
    yield TestClient(app)
    app.state.uploads.close()


@pytest.fixture(scope="module")
def client():
    yield from _client()


@FUZZ
@given(model=PATHS)
def test_web_requests_never_say_whether_a_server_path_exists(client, model):
    if model.startswith("hf:") and model.count("/") == 1 and ".." not in model:
        return  # a Hub repo id: fetched from the Hub, not a path
    answer = client.post("/api/train/memory", json={**TRAIN, "model": model})
    assert answer.status_code in (400, 404, 422), answer.text
    detail = answer.json()["detail"]
    for leak in ("JSON", "exist", "No such", "denied", "directory", "Errno"):
        assert leak not in detail, detail


@FUZZ
@given(length=st.integers(201, 20_000), field=st.sampled_from(["model", "gpu"]))
def test_long_names_are_422_with_a_short_message(client, length, field):
    body = ({**TRAIN, "model": "m" * length} if field == "model"
            else {**TRAIN, "hardware": {"gpu": "g" * length, "num_gpus": 8}})
    answer = client.post("/api/train/estimate", json=body)
    assert answer.status_code == 422 and len(answer.json()["detail"]) < 200


@pytest.fixture(scope="module")
def guarded():
    yield from _client(token="right-token")


@FUZZ
@given(token=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40),
       where=st.sampled_from(["header", "query", "bearer"]))
def test_only_the_token_opens_a_guarded_server(guarded, token, where):
    guarded.cookies.clear()
    kwargs = {"header": {"headers": {"X-Meshplan-Token": token}}, "query": {"params": {"token": token}},
              "bearer": {"headers": {"Authorization": f"Bearer {token}"}}}[where]
    answer = guarded.get("/api/gpus", **kwargs)
    assert answer.status_code == (200 if token == "right-token" else 401)
    guarded.cookies.clear()
