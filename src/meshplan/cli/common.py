"""Helpers shared by CLI commands: printing JSON, turning user errors into exit code 2."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import typer

from meshplan.errors import ConfigError, DoesNotFitError, MeshplanError

F = TypeVar("F", bound=Callable[..., Any])


PIPED_WIDTH = 200
"""Columns a table may use when the output is a file or a pipe (COLUMNS overrides)."""


class LazyConsole:
    """A rich Console made on first use: importing rich's console and markup costs ~50 ms,
    which a command printing only JSON never needs. Attribute access goes to the console."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console = None

    def real(self):
        """The rich Console itself (made now if not yet)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr)
            if not self._console.is_terminal and "COLUMNS" not in os.environ:
                self._console.width = PIPED_WIDTH  # a file or a pipe: whole tables, not 80 columns
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


def real_console(c: Any) -> Any:
    """`c` as a rich Console (a LazyConsole made real; a Console as it is)."""
    return c.real() if isinstance(c, LazyConsole) else c


def escape(text: str) -> str:
    """rich markup escaping (rich imported only when an error is printed)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


console = LazyConsole()
err_console = LazyConsole(stderr=True)


def check_numbers(values: dict[str, Any]) -> None:
    """One place for the sanity of numeric flags: each within its physical range (cli/ranges.py),
    finite; a number without a listed range finite and not negative. Each failure names the flag
    and the value."""
    from meshplan.cli import ranges

    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if name in ranges.RANGES:
            ranges.check(name, value)
        elif not math.isfinite(value) or value < 0:
            raise ConfigError(f"{ranges.flag(name)} {ranges.shown(value)}: give a finite number, "
                              f"zero or more")


def user_errors(func: F) -> F:
    """Wrap a command so bad input (a MeshplanError, a bad numeric flag, a path that cannot be
    read or written) prints one `error: ...` line to stderr and exits with code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            check_numbers(kwargs)
            return func(*args, **kwargs)
        except DoesNotFitError as exc:  # an answer (exit 1), not bad input
            err_console.print(f"[bold red]{escape(str(exc))}[/]", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(code=EXIT_NOT_MET) from None
        except MeshplanError as exc:
            _fail(str(exc))
        except OSError as exc:  # an output or input path of the user's: missing, a directory, denied
            where = f" {exc.filename!r}" if exc.filename else ""
            _fail(f"cannot use{where}: {exc.strerror or exc}")

    return wrapper  # type: ignore[return-value]


def _fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2) from None


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


def show_progress(quiet: bool = False, json_out: bool = False) -> bool:
    """Progress goes to a terminal only: never with --quiet or --json, or when stderr is piped."""
    return not (quiet or json_out) and err_console.is_terminal


@contextlib.contextmanager
def progress(label: str, enabled: bool, thread: bool = True) -> Iterator[Callable[[int, int], None]]:
    """A transient rich progress bar on stderr; yields `update(done, total)` (a no-op when not
    `enabled`, so library code can always call it). Without `thread` the bar is drawn from
    `update` (at most every REDRAW_S) instead of by rich's refresh thread: a process that forks
    workers then has no thread whose locks a child could inherit held."""
    if not enabled:
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=real_console(err_console), transient=True,
                  auto_refresh=thread) as bar:
        task = bar.add_task(label, total=None)
        if thread:
            yield lambda done, total: bar.update(task, completed=done, total=total)
            return
        drawn = [0.0]

        def update(done: int, total: int) -> None:
            now = time.monotonic()
            due = now - drawn[0] >= REDRAW_S
            bar.update(task, completed=done, total=total, refresh=due)
            if due:
                drawn[0] = now

        yield update


REDRAW_S = 0.05
"""Seconds between redraws of a progress bar drawn without rich's refresh thread."""


QUIET = typer.Option(False, "--quiet", "-q", help="No progress bar (it is shown only on a terminal).")


SITE_HELP = ("Site profile to apply on top of the packaged model: a name fitted with `meshplan "
             "calibrate --site NAME`, or a profile file (also MESHPLAN_SITE).")


def with_site(func: F) -> F:
    """Give a command a `--site NAME|FILE` option (default $MESHPLAN_SITE) and run it with that
    site profile active; say on stderr which profile is used and what it does not cover."""
    from meshplan.calibration.site import use_site

    signature = inspect.signature(func)
    option = inspect.Parameter("site", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                               default=typer.Option(None, "--site", envvar="MESHPLAN_SITE", help=SITE_HELP))
    params = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD] + [option]

    @functools.wraps(func)
    def wrapper(*args: Any, site: str | None = None, **kwargs: Any) -> Any:
        profile = use_site(site)
        try:
            if profile is not None:
                _say_site(profile, kwargs.get("gpu"))
            return func(*args, **kwargs)
        finally:
            use_site(None)

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _say_site(profile, gpu) -> None:
    """One stderr line naming the profile, and its notes (renamed constants, other GPUs)."""
    err_console.print(f"site profile: {profile.name} ({profile.path})", highlight=False)
    for note in profile.notes:
        err_console.print(f"note: {note}", highlight=False)
    fitted = profile.gpus("training") | profile.gpus("serving")
    if isinstance(gpu, str) and fitted and gpu not in fitted:
        err_console.print(f"note: site profile {profile.name} was fitted on {', '.join(sorted(fitted))}, not "
                          f"{gpu}: only its network and step constants apply", highlight=False)
