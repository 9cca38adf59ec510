"""What keeps the web app from being a window onto its machine: a request never names a file of
the server (models come from the catalog, the Hub or an upload), and a server bound beyond
loopback asks every request for its token (a header, the `token` query parameter, then a cookie).
"""

from __future__ import annotations

import re
import secrets

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from meshplan.errors import ConfigError

TOKEN_HEADER = "X-Meshplan-Token"
TOKEN_COOKIE = "meshplan_token"
TOKEN_QUERY = "token"
HUB_REPO = re.compile(r"hf:[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
UPLOAD_ID = re.compile(r"upload:[0-9a-f]{1,64}")
WEB_MODELS = ("a catalog name (GET /api/models), hf:ORG/NAME, or the upload:ID of a config.json "
              "uploaded to POST /api/configs")


def check_web_model(model: str, where: str = "--model") -> None:
    """Refuse a model the web app would have to read from the server's disk. The message is the
    same whether or not such a path exists, and nothing is looked up on disk to write it."""
    from meshplan.model.catalog_index import get_entry

    if model.startswith("hf:") and HUB_REPO.fullmatch(model) and ".." not in model:
        return
    if UPLOAD_ID.fullmatch(model):
        return
    if looks_like_path(model) or model.startswith(("hf:", "upload:")):
        raise ConfigError(f"{where} {model[:80]!r}: give {WEB_MODELS}; the web app reads no file "
                          f"of the server")
    get_entry(model)  # an unknown name: the catalog's "unknown model ...; closest: ..."


def looks_like_path(text: str) -> bool:
    """A name with a folder separator, a leading `.` or `~`, or a .json/.yaml suffix."""
    lowered = text.lower()
    return ("/" in text or "\\" in text or text.startswith((".", "~")) or "\0" in text
            or lowered.endswith((".json", ".yaml", ".yml")))


def new_token() -> str:
    """A random token to print at start-up (as Jupyter does)."""
    return secrets.token_urlsafe(24)


def install_token(app: FastAPI, token: str) -> None:
    """Require `token` on every request: the X-Meshplan-Token header, `Authorization: Bearer`,
    or `?token=` (which also sets a cookie, so a browser opened on the printed URL keeps
    working), then the cookie. Anything else is a 401 that says how to pass it."""

    @app.middleware("http")
    async def require_token(request: Request, call_next):
        given = _given(request)
        if given is None or not secrets.compare_digest(given.encode(), token.encode()):
            return JSONResponse({"detail": "this server needs its token: open the URL printed by "
                                 f"`meshplan ui` (?{TOKEN_QUERY}=...), or send the {TOKEN_HEADER} "
                                 "header"}, status_code=401)
        response = await call_next(request)
        if request.query_params.get(TOKEN_QUERY) is not None:
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
        return response


def _given(request: Request) -> str | None:
    """The token a request carries, from the first place that has one."""
    bearer = request.headers.get("authorization", "")
    return (request.headers.get(TOKEN_HEADER)
            or (bearer[7:] if bearer.lower().startswith("bearer ") else None)
            or request.query_params.get(TOKEN_QUERY)
            or request.cookies.get(TOKEN_COOKIE))
