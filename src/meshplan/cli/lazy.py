"""Sub-commands loaded on first use, so `meshplan --help` and `meshplan gpus list` import only
what they run (no scipy, no serving stack, no plan search for a help page).

The root group lists every command from this table without importing it; a command's module
is imported when the command is parsed or invoked (`LazyCommand.make_context`). The short help
shown on the root page is kept here, and `tests/test_startup.py` checks it against the loaded
command so it cannot go stale.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import click
import typer
from typer.core import TyperGroup


def new_app(**kwargs) -> typer.Typer:
    """A typer app whose help pages are click's plain text: typer's rich help renderer imports
    markdown and syntax-highlighting stacks (about 0.2 s) on every `--help`."""
    return typer.Typer(rich_markup_mode=None, **kwargs)


def _holder() -> typer.Typer:
    """A root-like typer app (no completion options) to convert one command or group with."""
    holder = new_app(add_completion=False)
    holder.callback()(lambda: None)
    return holder


def _command(module: str) -> Callable[[], click.Command]:
    """A loader for a command that `meshplan.cli.<module>.register(app)` adds to an app."""
    def load() -> click.Command:
        holder = _holder()
        importlib.import_module(f"meshplan.cli.{module}").register(holder)
        return typer.main.get_command(holder).commands[module]
    return load


def _group(name: str, attr: str, *modules: str) -> Callable[[], click.Command]:
    """A loader for the typer sub-app `attr` of modules[0], which modules[1:] add commands to."""
    def load() -> click.Command:
        loaded = [importlib.import_module(f"meshplan.cli.{m}") for m in modules]
        for extra in loaded[1:]:
            extra.register(None)
        holder = _holder()
        holder.add_typer(getattr(loaded[0], attr), name=name)
        return typer.main.get_command(holder).commands[name]
    return load


COMMANDS: dict[str, tuple[Callable[[], click.Command], str]] = {
    "validate": (_command("validate"),
                 "Predict every record's measured quantities and print the errors and a summary."),
    "calibrate": (_command("calibrate"),
                  ("Fit the step-time constants on training records or the serving engine "
                   "constants on serving records.")),
    "record": (_group("record", "record_app", "record"),
               "Write your own measured runs as run records (for validate and calibrate)."),
    "models": (_group("models", "models_app", "models"), "The model catalog."),
    "model": (_group("model", "model_app", "models"), "One model's parameters, FLOPs and KV-cache size."),
    "gpus": (_group("gpus", "gpus_app", "gpus"), "The GPU catalog."),
    "gpu": (_group("gpu", "gpu_app", "gpus"), "One GPU's catalog row."),
    "cluster": (_group("cluster", "cluster_app", "cluster"), "A cluster of catalog GPUs."),
    "train": (_group("train", "train_app", "train", "train_plan", "train_export"),
              "Training runs: memory, step time, plan search, sweeps and launch configs."),
    "serve": (_group("serve", "serve_app", "serve", "serve_plan"),
              "Serving deployments: simulate traffic, plan, export launch commands."),
    "ui": (_command("ui"),
           "Serve the web app: pages per job, a JSON API (/openapi.json), background plan searches."),
}
"""Root command -> (loader, the short help the root page shows)."""


@functools.cache
def load(name: str) -> click.Command:
    """The real click command of root command `name`, imported once."""
    return COMMANDS[name][0]()


class LazyCommand(click.Group):
    """Stands for a root command on the help page; parsing it hands over to the real one."""

    def __init__(self, name: str, short_help: str):
        super().__init__(name=name, help=short_help, short_help=short_help)

    def make_context(self, info_name, args, parent=None, **extra):
        return load(self.name).make_context(info_name, args, parent=parent, **extra)


class LazyGroup(TyperGroup):
    """The root group: commands from COMMANDS, each imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        return LazyCommand(cmd_name, COMMANDS[cmd_name][1])
