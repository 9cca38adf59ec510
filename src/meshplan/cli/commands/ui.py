"""`meshplan ui`: serve the local web app (the `ui` extra: FastAPI, uvicorn, Jinja2)."""

from __future__ import annotations

import ipaddress

import typer

from meshplan.cli.common import err_console, user_errors
from meshplan.errors import ConfigError

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: only this machine can connect."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ui_command(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: loopback only)."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    jobs: int = typer.Option(None, "--jobs", help="Background jobs run at once (default: up to 2)."),
    token: str = typer.Option(None, "--token", envvar="MESHPLAN_UI_TOKEN", show_default=False,
                              help="Token every request must carry (default: none on loopback; a "
                                   "random one, printed, when listening beyond it)."),
) -> None:
    """Serve the web app: pages per job, a JSON API (/openapi.json), background plan searches."""
    from meshplan.ui import require_extra

    require_extra()  # --port and --jobs are checked against their ranges (cli/ranges.py)
    import uvicorn

    from meshplan.ui.app import create_app, warm_up
    from meshplan.ui.guard import new_token

    if token is not None and not token.strip():
        raise ConfigError("--token '': give a non-empty token, or omit --token")
    if token is None and not is_loopback(host):
        token = new_token()
    _announce(host, port, token)
    app = create_app(max_running=jobs, token=token)
    warm_up()
    uvicorn.run(app, host=host, port=port, log_level="warning")


def _announce(host: str, port: int, token: str | None) -> None:
    """Where the app listens, who can reach it, and the URL that carries its token."""
    shown = f"[{host}]" if ":" in host else (host or "0.0.0.0")
    query = f"?token={token}" if token else ""
    typer.echo(f"meshplan ui at http://{shown}:{port}/{query}", err=True)
    if is_loopback(host):
        typer.echo("listening on loopback only: reachable from this machine alone", err=True)
    else:
        err_console.print(f"[bold yellow]warning:[/] listening on {host or 'every interface'}: anyone "
                          f"who can reach this address and has the token can use the app; use "
                          f"--host 127.0.0.1 to keep it local", highlight=False, soft_wrap=True)
    if token:
        typer.echo("every request needs the token: open the URL above (it sets a cookie), or send "
                   "the X-Meshplan-Token header", err=True)


def register(app: typer.Typer) -> None:
    """Add the `ui` command."""
    app.command("ui")(user_errors(ui_command))
