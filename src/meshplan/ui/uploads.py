"""Uploaded files (a model's config.json, a run-record YAML): read from the request stream with a
size limit (refused from Content-Length, or as soon as the stream passes it, never read whole),
kept in a private temporary directory for the server's lifetime, named by a random id."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

from fastapi import Request

from meshplan.errors import ConfigError
from meshplan.ui.errors import TooLarge
from meshplan.userfiles import MAX_BYTES

UPLOAD_LIMIT = MAX_BYTES
"""Largest upload, bytes: the CLI's limit on a file it reads whole (meshplan.userfiles)."""
UPLOAD_QUOTA = 16 * MAX_BYTES
"""Most bytes the uploads of one server hold together (1 GiB); past it uploads are refused."""
UPLOAD_COUNT = 1000
"""Most uploads one server holds; past it uploads are refused."""
UPLOAD_PREFIX = "upload:"
"""A model name of the form upload:ID names an uploaded config.json."""


async def read_limited(request: Request, what: str, limit: int | None = None) -> bytes:
    """The request body, refused with TooLarge past `limit` bytes (default UPLOAD_LIMIT)."""
    limit = UPLOAD_LIMIT if limit is None else limit
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"{what} is {int(declared):,} bytes; the limit is {limit:,}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"{what} is more than {limit:,} bytes; the limit is {limit:,}")
        chunks.append(chunk)
    if not size:
        raise ConfigError(f"{what} is empty")
    return b"".join(chunks)


class UploadStore:
    """Files uploaded to this server, each under its own id: at most `quota` bytes and `count`
    files together, so a server left running does not fill the disk. Past either, an upload is
    refused (413) and the ones held stay valid (a queued job still finds its file)."""

    def __init__(self, quota: int = UPLOAD_QUOTA, count: int = UPLOAD_COUNT) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="meshplan-ui-"))
        self.quota, self.count = quota, count
        self.sizes: dict[str, int] = {}  # upload id -> bytes, oldest first

    def _check_room(self, size: int) -> None:
        held = sum(self.sizes.values())
        if len(self.sizes) >= self.count:
            raise TooLarge(f"this server already holds {len(self.sizes):,} uploads, its quota of "
                           f"{self.count:,}; restart `meshplan ui` to clear them")
        if held + size > self.quota:
            raise TooLarge(f"the upload is {size:,} bytes and this server already holds {held:,} of "
                           f"its {self.quota:,}-byte upload quota; restart `meshplan ui` to clear them")

    def save(self, data: bytes, filename: str) -> tuple[str, Path]:
        """(id, path) of a new upload stored as `filename` (e.g. config.json)."""
        self._check_room(len(data))
        upload_id = secrets.token_hex(8)
        folder = self.root / upload_id
        folder.mkdir(mode=0o700)
        path = folder / filename
        path.write_bytes(data)
        self.sizes[upload_id] = len(data)
        return upload_id, path

    def find(self, upload_id: str, filename: str) -> Path:
        """The path of an earlier upload; a ConfigError naming it when there is none."""
        path = self.root / upload_id / filename
        if not upload_id.isalnum() or not path.is_file():
            raise ConfigError(f"--model {UPLOAD_PREFIX}{upload_id!s}: no such upload on this server "
                              f"(uploads last until it stops; upload the config.json again)")
        return path

    def model(self, name: str) -> str:
        """What load_model takes for a model field: an upload's config.json path, else `name`."""
        if name.startswith(UPLOAD_PREFIX):
            return str(self.find(name[len(UPLOAD_PREFIX):], "config.json"))
        return name

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
