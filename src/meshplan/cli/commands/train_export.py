"""`meshplan train export`: the launch config of a plan for Megatron-LM, torchtitan or DeepSpeed."""

from __future__ import annotations

from pathlib import Path

import typer

from meshplan.cli.common import user_errors
from meshplan.cli.commands.train import build_plan
from meshplan.errors import ConfigError, UnknownNameError
from meshplan.cli.ranges import check
from meshplan.export import EXPORTERS, RunSettings, export_plan
from meshplan.export.retarget import retarget
from meshplan.hardware import Cluster
from meshplan.model import load_model
from meshplan.userfiles import parse_yaml, read_text


def read_plan_file(path: Path, index: int = 1) -> dict:
    """A plan file ({model, hardware, plan}) or `train plan --json` output (its `index`-th plan,
    1-based as in the table's `#` column)."""
    data = parse_yaml(read_text(path, "plan file"), str(path))  # JSON is YAML
    if isinstance(data, dict) and isinstance(data.get("plans"), list):
        if not data["plans"]:
            raise ConfigError(f"{path}: 'plans' is empty (the search found no plan that fits)")
        if not 1 <= index <= len(data["plans"]):
            raise ConfigError(f"--index {index}: {path} holds {len(data['plans'])} plans; "
                              f"give 1 to {len(data['plans'])}")
        data = data["plans"][index - 1]
    for key in ("model", "hardware", "plan"):
        if not isinstance(data, dict) or key not in data:
            raise ConfigError(f"{path}: expected keys model, hardware and plan (missing {key!r})")
    return data


def export_command(
    target: str = typer.Option(..., "--target", help="megatron, torchtitan or deepspeed."),
    plan: Path = typer.Option(..., "--plan", help="Plan file, or the --json output of train plan."),
    index: int = typer.Option(1, "--index", help="Which plan of a `train plan --json` file (1 = best)."),
    train_tokens: float = typer.Option(None, "--train-tokens", help="Tokens in the run: sets the "
                                       "training length (default: the plan file's, else a "
                                       "placeholder to fill in)."),
    launcher: str = typer.Option("torchrun", "--launcher", help="megatron and torchtitan: "
                                 "torchrun (run the script on every node) or slurm (an sbatch "
                                 "script)."),
) -> None:
    """Print the engine's launch config (launch script or JSON) for a plan. A plan searched
    for another framework is re-targeted: it exports when every field has an equivalent in the
    target, else the error lists each field that has none."""
    check("train_tokens", train_tokens)
    text, notes = export_entry(read_plan_file(plan, index), target, train_tokens, launcher)
    for note in notes:
        typer.echo(f"re-targeted {note}", err=True)
    typer.echo(text.rstrip("\n"))


def export_entry(data: dict, target: str, train_tokens: float | None = None,
                 launcher: str = "torchrun") -> tuple[str, list[str]]:
    """(launch config, re-targeting notes) of one plan entry ({model, hardware, plan}, and
    `run.train_tokens` when the search had --train-tokens; `train_tokens` overrides it)."""
    spec = load_model(data["model"])
    cluster = Cluster.build(**data["hardware"])
    if target not in EXPORTERS:
        raise UnknownNameError("export target", target, EXPORTERS)
    resolved, notes = retarget(build_plan(**data["plan"]), target, spec, cluster)
    tokens = train_tokens if train_tokens is not None else _run_tokens(data)
    run = RunSettings(train_tokens=tokens, launcher=launcher)
    return export_plan(target, spec, cluster, resolved, run), list(notes)


def _run_tokens(data: dict) -> float | None:
    """The plan file's `run.train_tokens`, checked like the flag."""
    run = data.get("run") or {}
    if not isinstance(run, dict):
        raise ConfigError(f"'run' must be a mapping like {{train_tokens: 1e12}}, not {run!r}")
    tokens = run.get("train_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, (int, float))):
        raise ConfigError(f"run.train_tokens {tokens!r}: give a number of tokens")
    check("train_tokens", tokens)
    return tokens


def register(app: typer.Typer) -> None:
    """Add `train export` to the `train` group."""
    from meshplan.cli.commands.train import train_app

    train_app.command("export")(user_errors(export_command))
