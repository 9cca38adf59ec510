"""Bad input as HTTP errors whose body is `{"detail": "<the CLI's one-line message>"}`: the same
checks and sentences as the command line (meshplan.errors, the CLI's numeric-flag checks, the
JSON parser of user files), with a 4xx status. The server keeps serving."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from meshplan.cli.common import check_numbers
from meshplan.errors import ConfigError, MeshplanError
from meshplan.userfiles import parse_json
from meshplan.ui.guard import check_web_model
from meshplan.ui.jobs import TooManyJobs
from meshplan.ui.schemas import NAME_MAX
from meshplan.ui.work import status_of


class TooLarge(MeshplanError):
    """An upload above the size limit (HTTP 413)."""


def check_body(body: BaseModel) -> None:
    """Every number of a request finite and not negative, positive where zero means nothing,
    as the CLI checks its numeric flags (the message names the flag)."""
    def leaves(data: Any, out: dict) -> dict:
        for key, value in (data.items() if isinstance(data, dict) else ()):
            if isinstance(value, dict):
                leaves(value, out)
            else:
                out.setdefault(key, value)
        return out

    for name, value in leaves(body.model_dump(), {}).items():
        if isinstance(value, str) and len(value) > NAME_MAX:
            raise ConfigError(f"--{name.replace('_', '-')}: {len(value):,} characters; "
                              f"the limit is {NAME_MAX}")
        check_numbers({name: value})


SPEC_WORDS = {"doc_lengths": ("fixed", "lognormal", "zipf"), "expert_skew": ("uniform", "zipf")}
"""The non-file forms of the fields that may also name a file (the first word before `:`)."""


def check_no_server_files(body: dict) -> None:
    """The app never reads a file of the machine it runs on because a request names it: a model
    is a catalog name, hf:ORG/NAME or an uploaded config (upload:ID), and document lengths or
    expert skew are given as distributions. (The CLI reads such paths: they are the user's.)"""
    check_web_model(body.get("model", ""))
    for section in (body, body.get("plan") or {}):
        for name, words in SPEC_WORDS.items():
            value = section.get(name)
            if isinstance(value, str) and value.partition(":")[0].strip() not in words:
                raise ConfigError(f"--{name.replace('_', '-')} {value!r}: the web app takes "
                                  f"{', '.join(words)} (files of the server are not read)")


def validation_message(err: dict) -> str:
    """One pydantic error as the CLI says it: `--flag value: reason`, or the missing option."""
    names = [str(p) for p in err["loc"][1:] if isinstance(p, str)]  # drop "body" and list indices
    if not names:
        return f"request body: {err['msg']}"
    flag = "--" + names[-1].replace("_", "-")
    if err["type"] == "missing":
        return f"missing option '{flag}'"
    if err["type"] == "extra_forbidden":
        return f"no such option: {flag}"
    try:
        check_numbers({names[-1]: err.get("input")})  # the CLI's sentence for a number out of range
    except ConfigError as exc:
        return str(exc)
    return f"{flag} {short(err.get('input'))}: {err['msg']}"


def short(value: Any, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters with "..." (a 10,000-character name is not echoed)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _detail(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status)


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    err = exc.errors()[0]
    if err["type"] == "json_invalid":
        try:
            parse_json((await request.body()).decode("utf-8", "replace"), "request body")
        except ConfigError as parsed:
            return _detail(400, str(parsed))
    if err["type"] == "model_attributes_type" or (err["type"] == "missing" and err["loc"] == ("body",)):
        return _detail(400, "request body: expected a JSON object")
    return _detail(422, validation_message(err))


async def _user_error(request: Request, exc: MeshplanError) -> JSONResponse:
    if isinstance(exc, TooLarge):
        return _detail(413, str(exc))
    if isinstance(exc, TooManyJobs):
        return _detail(429, str(exc))
    return _detail(status_of(exc), str(exc))


def install(app: FastAPI) -> None:
    """Register the handlers on `app`."""
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(MeshplanError, _user_error)
