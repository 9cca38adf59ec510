"""The root typer application; each command family lives in its own module and registers here."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="meshplan",
    help="Predict and plan LLM training runs and serving deployments on GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from meshplan.cli import (
        calibrate, cluster, gpus, models, serve, serve_plan, train, train_export, train_plan, validate,
    )

    for module in (models, gpus, cluster, train, train_plan, train_export, serve, serve_plan, validate,
                   calibrate):
        module.register(app)


_register()
