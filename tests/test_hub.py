"""`hf:ORG/NAME` reads config.json through huggingface_hub; tested offline on a stubbed cache."""

from __future__ import annotations

import json

import pytest

from meshplan.errors import ConfigError, MeshplanError
from meshplan.model import load_model

pytest.importorskip("huggingface_hub")


def _stub_cache(root, repo: str, config: dict) -> None:
    """Lay out the Hub cache the way huggingface_hub writes it for one downloaded file."""
    folder = root / ("models--" + repo.replace("/", "--"))
    revision = "0" * 40
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(revision)
    snapshot = folder / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))


def test_hf_prefix_reads_the_cached_config_offline(tmp_path, monkeypatch, llama_8b_config):
    _stub_cache(tmp_path, "meta-llama/Llama-3.1-8B", llama_8b_config)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = load_model("hf:meta-llama/Llama-3.1-8B")
    assert spec.params_total == 8_030_261_248
    assert spec.name == "meta-llama/Llama-3.1-8B"


def test_hf_prefix_without_cache_offline_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MeshplanError, match="org/missing.*not in the Hugging Face cache"):
        load_model("hf:org/missing")


def test_hf_prefix_needs_org_and_name():
    with pytest.raises(ConfigError, match="expected a Hub repository as ORG/NAME"):
        load_model("hf:justaname")


def _hanging_connect(*args, **kwargs):
    """A connection attempt that never answers in time (an unroutable address, a hung DNS)."""
    import time

    time.sleep(5)
    raise TimeoutError("timed out")


@pytest.mark.parametrize("hang", [False, True], ids=["refused", "no-answer"])
def test_hf_prefix_with_the_hub_unreachable_fails_in_under_2_s(tmp_path, monkeypatch, hang):
    """An empty cache, HF_HUB_OFFLINE unset and a Hub that refuses (a closed local port) or never
    answers (socket.create_connection monkeypatched to hang): the error comes at once and says to
    pass a local config.json (huggingface_hub alone retried for ~24 s; #34 item 6). No network
    is used."""
    import socket
    import time

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    if hang:
        monkeypatch.setattr(socket, "create_connection", _hanging_connect)
    started = time.monotonic()
    with pytest.raises(MeshplanError, match="org/missing.*cannot be reached.*local config.json"):
        load_model("hf:org/missing")
    assert time.monotonic() - started < 2.0


def test_hf_prefix_offline_names_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MeshplanError, match="HF_HUB_OFFLINE is set; pass a local config.json"):
        load_model("hf:org/missing")


def test_a_cached_config_is_read_without_the_hub(tmp_path, monkeypatch, llama_8b_config):
    """Online but with the Hub unreachable, a cached config.json still loads (no network call)."""
    _stub_cache(tmp_path, "meta-llama/Llama-3.1-8B", llama_8b_config)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert load_model("hf:meta-llama/Llama-3.1-8B").params_total == 8_030_261_248
