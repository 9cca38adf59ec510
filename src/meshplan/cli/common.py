"""Helpers shared by CLI commands: printing JSON, turning user errors into exit code 2."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from meshplan.errors import MeshplanError

F = TypeVar("F", bound=Callable[..., Any])

console = Console()
err_console = Console(stderr=True)


def user_errors(func: F) -> F:
    """Wrap a command so a MeshplanError prints `error: ...` to stderr and exits with code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except MeshplanError as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(code=2) from None

    return wrapper  # type: ignore[return-value]


EXIT_NOT_MET = 1
"""Exit code of a command that answered but whose answer is negative: the plan does not fit, no
plan is feasible, the SLOs are not met. 0 means answered and feasible; 2 means bad input."""


def finish(ok: bool) -> None:
    """End a command that printed its answer: exit 0 when the answer is positive, else 1."""
    if not ok:
        raise typer.Exit(code=EXIT_NOT_MET)


def print_json(data: Any) -> None:
    """Print `data` as indented JSON on stdout, untouched by rich's highlighting."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
