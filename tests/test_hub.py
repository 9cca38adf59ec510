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
    with pytest.raises(MeshplanError, match="could not fetch config.json of 'org/missing'"):
        load_model("hf:org/missing")


def test_hf_prefix_needs_org_and_name():
    with pytest.raises(ConfigError, match="expected a Hub repository as ORG/NAME"):
        load_model("hf:justaname")
