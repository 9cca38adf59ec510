"""A size limit on JSON request bodies, checked before anything parses them: a body declared or
streamed past MAX_JSON_BODY is answered 413 with a sentence naming the limit, and no more of it
is read. Uploads (a config.json, a run-record file) have their own, larger limit and quota
(meshplan.ui.uploads) and are not counted here."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse

MAX_JSON_BODY = 8 * 2**20
"""Largest JSON request body, bytes (8 MiB: the largest real request, a serving search with a
price per GPU, is a few kB)."""
UPLOAD_PATHS = ("/api/configs", "/api/validate")
"""Endpoints whose body is an uploaded file, read with the upload limit (meshplan.ui.uploads)."""


def too_large(size: int, declared: bool, limit: int) -> JSONResponse:
    """The 413 answer: how big the body is (or that it passed the limit) and what the limit is."""
    said = f"is {size:,} bytes" if declared else f"is more than {limit:,} bytes"
    return JSONResponse({"detail": f"request body {said}; the limit on a JSON request is {limit:,} "
                                   f"bytes ({limit / 2**20:g} MiB)"}, status_code=413)


class BodyLimit:
    """ASGI middleware: read a request's body up to `limit` bytes, then hand it on whole."""

    def __init__(self, app, limit: int = MAX_JSON_BODY) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in UPLOAD_PATHS:
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"").decode("latin-1")
        if declared.isdigit() and int(declared) > self.limit:
            return await too_large(int(declared), True, self.limit)(scope, receive, send)
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None
            body += message.get("body", b"")
            if len(body) > self.limit:
                return await too_large(len(body), False, self.limit)(scope, receive, send)
            more = message.get("more_body", False)
        await self.app(scope, _replay(bytes(body), receive), send)


def _replay(body: bytes, receive):
    """A `receive` that gives the buffered body once, then what the client sends next."""
    sent = False

    async def replay():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}
    return replay


def install(app: FastAPI, limit: int = MAX_JSON_BODY) -> None:
    """Refuse JSON bodies above `limit` bytes on every endpoint but the uploads."""
    app.add_middleware(BodyLimit, limit=limit)
