"""The root typer application. Its commands live in their own modules and are imported on first
use (meshplan.cli.lazy), so a help page or a catalog listing starts without the heavy stacks."""

from __future__ import annotations

import typer

from meshplan.cli.lazy import LazyGroup, new_app

app = new_app(
    name="meshplan",
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from meshplan import __version__

        print(f"meshplan {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """Predict and plan LLM training runs and serving deployments on GPU clusters."""
