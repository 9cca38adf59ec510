"""`create_app()`: the FastAPI application of `meshplan ui` (pages, JSON API, jobs)."""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager

from fastapi import FastAPI

from meshplan import __version__


def create_app(max_running: int | None = None, token: str | None = None) -> FastAPI:
    """The web app; `max_running` background jobs at a time (default: up to 2, the cores); with
    `token`, every request must carry it (meshplan.ui.guard)."""
    from meshplan.ui import apidocs, errors, guard, limits, pages, routes_catalog, routes_jobs
    from meshplan.ui.jobs import JobManager
    from meshplan.ui.uploads import UploadStore

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        threading.Thread(target=app.state.jobs.start, daemon=True).start()
        yield
        app.state.jobs.shutdown()
        app.state.uploads.close()

    app = FastAPI(title="meshplan", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Predict and plan LLM training runs and serving deployments.")
    app.state.jobs = JobManager(max_running=max_running)
    app.state.uploads = UploadStore()
    errors.install(app)
    limits.install(app)
    if token:
        guard.install_token(app, token)
    for module in (routes_catalog, routes_jobs, pages, apidocs):
        app.include_router(module.router)
    _label_schema(app)
    return app


def _label_schema(app: FastAPI) -> None:
    """/openapi.json with each request field's form label as its title (meshplan.ui.labels)."""
    from meshplan.ui.labels import titled

    def openapi() -> dict:
        if app.openapi_schema is None:
            titled(FastAPI.openapi(app).get("components", {}).get("schemas", {}))
        return app.openapi_schema

    app.openapi = openapi


def warm_up() -> None:
    """Import the numerics and cost one small plan, so the first request is not the slow one."""
    from meshplan.ui.work import train_estimate

    train_estimate({"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 8}})
