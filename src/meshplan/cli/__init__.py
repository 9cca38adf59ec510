"""The `meshplan` command line: thin typer commands that parse, call the library and render."""

from __future__ import annotations

import sys

import typer

from meshplan.cli.app import app
from meshplan.errors import MeshplanError

# typer may vendor click (typer._click); reach its exception classes through public typer names.
_CLICK_ERRORS = {c.__name__: c for c in typer.BadParameter.__mro__}
UsageError, ClickException = _CLICK_ERRORS["UsageError"], _CLICK_ERRORS["ClickException"]
NoArgsIsHelpError = getattr(sys.modules[UsageError.__module__], "NoArgsIsHelpError", ())


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Bad input of any kind (a flag value, a missing option, an unreadable file)
    prints one line `error: ...` to stderr and exits with code 2; a group without a command
    prints its help page (exit 2, as typer does)."""
    try:
        code = app(args=argv, prog_name="meshplan", standalone_mode=False)
    except NoArgsIsHelpError as exc:  # the group's help page, on stderr
        exc.show()
        raise SystemExit(2) from None
    except UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        print(f"error: {' '.join(exc.format_message().split())}{hint}", file=sys.stderr)
        raise SystemExit(2) from None
    except ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        print("Aborted!", file=sys.stderr)
        raise SystemExit(1) from None
    except MeshplanError as exc:  # raised outside a command body (rare: typer wraps most)
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(code if isinstance(code, int) else 0)


__all__ = ["app", "main"]
