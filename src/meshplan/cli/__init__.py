"""The `meshplan` command line: thin typer commands that parse, call the library and render."""

from __future__ import annotations

import sys

from meshplan.cli.app import app
from meshplan.errors import MeshplanError


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a user-input error prints one line to stderr and exits with code 2."""
    try:
        app(args=argv, prog_name="meshplan", standalone_mode=True)
    except MeshplanError as exc:  # raised outside a command body (rare: typer wraps most)
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


__all__ = ["app", "main"]
