"""`meshplan ui`: serve the local web app (the `ui` extra: FastAPI, uvicorn, Jinja2)."""

from __future__ import annotations

import ipaddress

import typer

from meshplan.cli.common import err_console, user_errors

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
) -> None:
    """Serve the web app: pages per job, a JSON API (/openapi.json), background plan searches."""
    from meshplan.ui import require_extra

    require_extra()  # --port and --jobs are checked against their ranges (cli/ranges.py)
    import uvicorn

    from meshplan.ui.app import create_app, warm_up

    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"meshplan ui at http://{shown}:{port}/", err=True)
    if is_loopback(host):
        typer.echo("listening on loopback only: reachable from this machine alone", err=True)
    else:
        err_console.print(f"[bold yellow]warning:[/] listening on {host}: anyone who can reach this "
                          f"address can use the app (no authentication); use --host 127.0.0.1 to "
                          f"keep it local", highlight=False, soft_wrap=True)
    app = create_app(max_running=jobs)
    warm_up()
    uvicorn.run(app, host=host, port=port, log_level="warning")


def register(app: typer.Typer) -> None:
    """Add the `ui` command."""
    app.command("ui")(user_errors(ui_command))
