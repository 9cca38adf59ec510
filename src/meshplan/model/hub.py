"""Fetch only a model's `config.json` from the Hugging Face Hub (the optional `hf` extra)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from meshplan.errors import ConfigError, MeshplanError

REPO_PATTERN = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def fetch_config(repo_id: str, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Download (or reuse from the local Hub cache) `config.json` of `repo_id` and parse it.

    Honors the Hub's usual environment (`HF_HUB_CACHE`, `HF_HUB_OFFLINE`, `HF_TOKEN`), read at
    call time so a process can switch caches or go offline after huggingface_hub was imported.
    """
    if not REPO_PATTERN.match(repo_id):
        raise ConfigError(f"hf:{repo_id}: expected a Hub repository as ORG/NAME, e.g. hf:Qwen/Qwen3-8B")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise MeshplanError(
            "reading hf:ORG/NAME needs the optional hf extra: pip install 'meshplan[hf]'"
        ) from None
    try:
        path = hf_hub_download(
            repo_id=repo_id, filename="config.json",
            cache_dir=cache_dir or os.environ.get("HF_HUB_CACHE"),
            local_files_only=os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"),
        )
    except Exception as exc:  # the hub raises many types: offline, gated, missing repo
        raise MeshplanError(
            f"could not fetch config.json of {repo_id!r} from the Hugging Face Hub "
            f"({type(exc).__name__}); pass a local config.json path instead"
        ) from None
    from meshplan.model.load import read_config_file

    return read_config_file(Path(path))
