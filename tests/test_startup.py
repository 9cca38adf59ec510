"""Start-up: `import meshplan` and the CLI's help and catalog pages import only what they use
(meshplan.cli.lazy, the package's PEP 562 `__getattr__`). Checked in a fresh interpreter: the
modules loaded, not the time (timing lives in benchmarks/startup_speed.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from meshplan.cli.lazy import COMMANDS, SUBCOMMANDS, load, load_sub

PROBE = """
import json, sys
{body}
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""
HEAVY = ("scipy", "numpy", "pydantic", "meshplan.serving", "meshplan.training", "meshplan.validate",
         "meshplan.calibration", "meshplan.export", "torch")


def modules_after(body: str) -> set[str]:
    """The modules a fresh interpreter holds after running `body`."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], capture_output=True,
                          text=True, check=True)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def cli(*argv: str) -> str:
    args = ", ".join(repr(a) for a in argv)
    return ("from meshplan.cli import main\n"
            "try:\n"
            f"    main([{args}])\n"
            "except SystemExit:\n"
            "    pass")


def loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in prefixes or m.startswith(prefixes))


def test_import_meshplan_loads_only_the_package_and_its_errors():
    modules = modules_after("import meshplan")
    assert {m for m in modules if m.startswith("meshplan")} == {"meshplan", "meshplan.errors"}
    assert not loaded(modules, HEAVY)


def test_help_page_imports_no_command():
    modules = modules_after(cli("--help"))
    assert not loaded(modules, HEAVY + ("meshplan.hardware", "meshplan.model", "rich.markdown",
                                        "typer.rich_utils"))
    assert not [m for m in modules if m.startswith("meshplan.cli.") and m not in
                ("meshplan.cli.app", "meshplan.cli.lazy")]


def test_catalog_listing_imports_no_numerics():
    modules = modules_after(cli("gpus", "list"))
    assert not loaded(modules, ("scipy", "numpy", "meshplan.serving", "meshplan.training",
                                "meshplan.validate", "meshplan.calibration"))


def test_a_dense_single_estimate_imports_no_numerics():
    """numpy (about 0.15 s to import) is for searches, MoE routing and document packing; one
    estimate of a dense model with fixed-length sequences runs on plain Python."""
    modules = modules_after(cli("train", "estimate", "--model", "llama-3.1-8b", "--gpu",
                                "h100-sxm-80gb", "--num-gpus", "8", "--global-batch-size", "64",
                                "--seq-len", "8192", "--recompute", "full"))
    assert "meshplan.training.estimate" in modules
    assert not loaded(modules, ("scipy", "numpy", "meshplan.serving", "torch"))
    # the group's other commands stay unloaded: no plan search, no exporters
    assert not loaded(modules, ("meshplan.cli.commands.train_plan",
                                "meshplan.cli.commands.train_export",
                                "meshplan.training.search", "meshplan.export"))


def test_a_group_help_page_imports_none_of_its_commands():
    modules = modules_after(cli("train", "--help"))
    assert not loaded(modules, tuple(h for h in HEAVY if h != "pydantic"))  # typer parses --help with it
    assert not [m for m in modules if m.startswith("meshplan.cli.") and m not in
                ("meshplan.cli.app", "meshplan.cli.lazy")]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_root_page_help_is_the_commands_own(name):
    """The short help stored for the root page must open the command's own help text."""
    real = " ".join((load(name).help or "").split())
    assert real.startswith(COMMANDS[name][1]), (name, real[:120])


@pytest.mark.parametrize("group,name", [(g, n) for g, (_, table) in SUBCOMMANDS.items() for n in table])
def test_a_group_page_help_is_the_sub_commands_own(group, name):
    """The short help stored for a group's page must open the sub-command's own help text, and
    the group's page lists every command its typer app defines."""
    real = " ".join((load_sub(group, name).help or "").split())
    assert real.startswith(SUBCOMMANDS[group][1][name][1]), (group, name, real[:120])
    attr, table = SUBCOMMANDS[group]
    import importlib

    app = getattr(importlib.import_module(f"meshplan.cli.commands.{group}"), attr)
    assert {c.name for c in app.registered_commands} <= set(table)
