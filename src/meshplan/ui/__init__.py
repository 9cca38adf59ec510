"""`meshplan ui`: a local web app over the library. Pages per job (training memory, estimate,
plan; serving simulate, plan; validate) call the same functions as the CLI through a JSON API
(FastAPI; `create_app()` in meshplan.ui.app). Long jobs run in background processes
(meshplan.ui.jobs) with progress streamed as server-sent events. Needs the `ui` extra."""

from __future__ import annotations

from meshplan.errors import ConfigError

EXTRA_MESSAGE = "meshplan ui needs the ui extra: pip install 'meshplan[ui]'"


def require_extra() -> None:
    """Fail with one clear message when FastAPI, uvicorn or Jinja2 is missing."""
    try:
        import fastapi  # noqa: F401
        import jinja2  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"{EXTRA_MESSAGE} ({exc.name} is not installed)") from None
