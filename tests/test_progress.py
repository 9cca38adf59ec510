"""Progress bars: on a terminal only, never with --quiet or --json, never on stdout."""

from __future__ import annotations

import io
import json

from rich.console import Console
from typer.testing import CliRunner

from meshplan.cli import common
from meshplan.cli.app import app


def test_progress_shows_on_a_terminal_and_not_when_quiet_or_json(monkeypatch):
    sink = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=sink, force_terminal=True, width=80))
    assert common.show_progress() and not common.show_progress(quiet=True)
    assert not common.show_progress(json_out=True)
    with common.progress("searching 8 GPUs", common.show_progress()) as update:
        update(3, 10)
    assert "searching 8 GPUs" in sink.getvalue()


def test_piped_commands_print_no_progress_and_parseable_json():
    runner = CliRunner()
    result = runner.invoke(app, ["train", "plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb",
                                 "--num-gpus", "8", "--global-batch-size", "16", "--json"])
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    assert "searching" not in result.output
    quiet = runner.invoke(app, ["train", "plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm-80gb",
                                "--num-gpus", "8", "--global-batch-size", "16", "--quiet"])
    assert quiet.exit_code == 0 and "searching" not in quiet.output


def test_a_bar_without_its_thread_draws_from_updates_and_starts_no_thread(monkeypatch):
    """`train plan` forks search workers while its bar is up: the bar then runs no refresh
    thread (whose locks a child could inherit held) and is drawn by the updates themselves."""
    import threading

    sink = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=sink, force_terminal=True, width=80))
    before = threading.active_count()
    with common.progress("searching 8 GPUs", True, thread=False) as update:
        assert threading.active_count() == before
        update(3, 10)
        drawn = sink.getvalue()
        update(4, 10)  # within REDRAW_S of the last draw: counted, not drawn
        assert sink.getvalue() == drawn
    assert "3/10" in drawn
