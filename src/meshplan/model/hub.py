"""Fetch only a model's `config.json` from the Hugging Face Hub (the optional `hf` extra)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from meshplan.errors import ConfigError, MeshplanError

REPO_PATTERN = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


HUB_CONNECT_TIMEOUT_S = 1.5
"""Seconds to wait for a TCP connection to the Hub before calling it unreachable: without this
check huggingface_hub retries an unreachable Hub with backoff for ~24 s before failing."""

NO_HUB = ("pass a local config.json path instead (--model path/to/config.json), or set "
          "HF_HUB_CACHE to a cache that holds it")


def fetch_config(repo_id: str, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Read `config.json` of `repo_id` from the local Hub cache, or download it when the Hub is
    reachable; parse it.

    Honors the Hub's usual environment (`HF_HUB_CACHE`, `HF_HUB_OFFLINE`, `HF_ENDPOINT`,
    `HF_TOKEN`), read at call time. A cached config is used without asking the Hub; offline, or
    with the Hub unreachable, a missing one fails at once (well under 2 s) with a message
    saying to pass a local config.json.
    """
    if not REPO_PATTERN.match(repo_id):
        raise ConfigError(f"hf:{repo_id}: expected a Hub repository as ORG/NAME, e.g. hf:Qwen/Qwen3-8B")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise MeshplanError(
            "reading hf:ORG/NAME needs the optional hf extra: pip install 'meshplan[hf]'"
        ) from None
    cache = cache_dir or os.environ.get("HF_HUB_CACHE")
    path = _cached(hf_hub_download, repo_id, cache)
    if path is None:
        path = _download(hf_hub_download, repo_id, cache)
    from meshplan.model.load import read_config_file

    return read_config_file(Path(path))


def _cached(download, repo_id: str, cache) -> str | None:
    """The cached config.json's path, or None (no network is used)."""
    try:
        return download(repo_id=repo_id, filename="config.json", cache_dir=cache, local_files_only=True)
    except Exception:  # not in the cache (the hub raises several types)
        return None


def _download(download, repo_id: str, cache) -> str:
    """Download config.json; offline or with the Hub unreachable, fail at once."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise MeshplanError(f"hf:{repo_id}: config.json is not in the Hugging Face cache and "
                            f"HF_HUB_OFFLINE is set; {NO_HUB}")
    endpoint = _endpoint()
    problem = _unreachable(endpoint)
    if problem is not None:
        raise MeshplanError(f"hf:{repo_id}: config.json is not in the Hugging Face cache and the "
                            f"Hub at {endpoint} cannot be reached ({problem}); {NO_HUB}")
    try:
        return download(repo_id=repo_id, filename="config.json", cache_dir=cache, endpoint=endpoint)
    except Exception as exc:  # the hub raises many types: gated, missing repo, network
        raise MeshplanError(
            f"could not fetch config.json of {repo_id!r} from the Hugging Face Hub "
            f"({type(exc).__name__}); {NO_HUB}"
        ) from None


def _endpoint() -> str:
    """The Hub's URL: HF_ENDPOINT read now, else huggingface_hub's default."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _unreachable(endpoint: str, timeout_s: float = HUB_CONNECT_TIMEOUT_S) -> str | None:
    """Why a TCP connection to `endpoint` fails within `timeout_s` (None: it connects). Name
    resolution has no timeout of its own, so the attempt runs in a daemon thread."""
    import socket
    import threading
    from urllib.parse import urlsplit

    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            socket.create_connection((url.hostname or "", port), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or type(exc).__name__)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout_s)
    return outcome[0] if outcome else f"no answer in {timeout_s:g} s"
