"""Sub-commands loaded on first use, so `meshplan --help` and `meshplan gpus list` import only
what they run (no scipy, no serving stack, no plan search for a help page).

The root group lists every command from this table without importing it; a command's module
is imported when the command is parsed or invoked (`LazyCommand.make_context`). The `train` and
`serve` groups do the same one level down (`SUBCOMMANDS`): `train estimate` does not import the
plan search, nor convert the options of the group's other commands. The short help shown on
each page is kept here, and `tests/test_startup.py` checks it against the loaded command so it
cannot go stale.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import typer
from typer import Context
from typer.core import TyperCommand, TyperGroup

# Only typer's public names: typer 0.29 and later run on a click of their own and no longer
# install click, so this module names no click class.
Command = TyperCommand | TyperGroup
"""What a loader returns: a converted typer command or group."""


def new_app(**kwargs) -> typer.Typer:
    """A typer app whose help pages are click's plain text: typer's rich help renderer imports
    markdown and syntax-highlighting stacks (about 0.2 s) on every `--help`."""
    return typer.Typer(rich_markup_mode=None, **kwargs)


def _holder() -> typer.Typer:
    """A root-like typer app (no completion options) to convert one command or group with."""
    holder = new_app(add_completion=False)
    holder.callback()(lambda: None)
    return holder


def _command(module: str) -> Callable[[], Command]:
    """A loader for a command that `meshplan.cli.commands.<module>.register(app)` adds to an app."""
    def load() -> Command:
        holder = _holder()
        importlib.import_module(f"meshplan.cli.commands.{module}").register(holder)
        return typer.main.get_command(holder).commands[module]
    return load


def _group(name: str, attr: str, *modules: str) -> Callable[[], Command]:
    """A loader for the typer sub-app `attr` of modules[0], which modules[1:] add commands to."""
    def load() -> Command:
        loaded = [importlib.import_module(f"meshplan.cli.commands.{m}") for m in modules]
        for extra in loaded[1:]:
            extra.register(None)
        holder = _holder()
        holder.add_typer(getattr(loaded[0], attr), name=name)
        return typer.main.get_command(holder).commands[name]
    return load


COMMANDS: dict[str, tuple[Callable[[], Command], str]] = {
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
    "train": (lambda: _lazy_group("train"),
              "Training runs: memory, step time, plan search, sweeps and launch configs."),
    "serve": (lambda: _lazy_group("serve"),
              "Serving deployments: simulate traffic, plan, export launch commands."),
    "ui": (_command("ui"),
           "Serve the web app: pages per job, a JSON API (/openapi.json), background plan searches."),
}
"""Root command -> (loader, the short help the root page shows)."""


@functools.cache
def load(name: str) -> Command:
    """The real click command of root command `name`, imported once."""
    command = COMMANDS[name][0]()
    if isinstance(command, LazySubGroup):  # its commands are documented as they load
        return command
    from meshplan.cli.ranges import document

    return document(command)


class LazyCommand(TyperCommand):
    """Stands for a command on its group's help page; parsing it hands over to the real command,
    which `load()` imports and converts."""

    def __init__(self, name: str, short_help: str, load: Callable[[], Command]):
        super().__init__(name=name, help=short_help, short_help=short_help)
        self.load = load

    def make_context(self, info_name, args, parent=None, **extra):
        return self.load().make_context(info_name, args, parent=parent, **extra)


SUBCOMMANDS: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "train": ("train_app", {
        "memory": ("train", "Peak memory per GPU of a training plan, per pipeline stage, and "
                            "whether it fits."),
        "estimate": ("train", "Step time, tokens/s per GPU, MFU and where the time goes, for one "
                              "training plan."),
        "plan": ("train_plan", "Search tp, pp, vpp, cp, ep, micro-batch, recompute and sharding; "
                               "rank the plans that fit."),
        "sweep": ("train_plan", "The best plan of every grid cell, searched in parallel, as a CSV "
                                "table (rows are written as tasks finish; the file ends sorted in "
                                "grid order)."),
        "export": ("train_export", "Print the engine's launch config (launch script or JSON) for "
                                   "a plan."),
    }),
    "serve": ("serve_app", {
        "simulate": ("serve", "Simulate a deployment under traffic: TTFT, TPOT, ITL, E2E, "
                              "throughput and goodput."),
        "plan": ("serve_plan", "The cheapest deployments that serve a request rate within latency "
                               "SLOs."),
        "sweep": ("serve_plan", "Latency and throughput over request rates: the latency-throughput "
                                "curve of one deployment."),
        "export": ("serve_plan", "Print the launch commands of a plan for vLLM or SGLang, one block per host."),
    }),
}
"""Group -> (its typer app's name in `meshplan.cli.commands.<group>`, sub-command -> (the module that
defines it, the short help the group's page shows))."""


def _lazy_group(name: str) -> TyperGroup:
    """The `name` group, its sub-commands imported on first use."""
    return LazySubGroup(name=name, help=COMMANDS[name][1], no_args_is_help=True,
                        rich_markup_mode=None)


class LazySubGroup(TyperGroup):
    """A group of `SUBCOMMANDS`: lists them without importing; parsing one imports its module and
    converts that command alone."""

    def list_commands(self, ctx: Context) -> list[str]:
        return list(SUBCOMMANDS[self.name][1])

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        table = SUBCOMMANDS[self.name][1]
        if cmd_name not in table:
            return None
        return LazyCommand(cmd_name, table[cmd_name][1],
                           functools.partial(load_sub, self.name, cmd_name))


@functools.cache
def load_sub(group: str, name: str) -> Command:
    """The real click command of `group name`, imported and converted once."""
    attr, table = SUBCOMMANDS[group]
    app = getattr(importlib.import_module(f"meshplan.cli.commands.{group}"), attr)
    module = table[name][0]
    if module != group:
        _registered(module)
    info = next(c for c in app.registered_commands if c.name == name)
    holder = _holder()
    holder.registered_commands.append(info)
    from meshplan.cli.ranges import document

    return document(typer.main.get_command(holder).commands[name])


@functools.cache
def _registered(module: str) -> None:
    """Import `meshplan.cli.commands.<module>` and let it add its commands to its group, once."""
    importlib.import_module(f"meshplan.cli.commands.{module}").register(None)


class LazyGroup(TyperGroup):
    """The root group: commands from COMMANDS, each imported on first use."""

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in COMMANDS:
            return None
        return LazyCommand(cmd_name, COMMANDS[cmd_name][1], functools.partial(load, cmd_name))
