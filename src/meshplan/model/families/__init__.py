"""Family parsers: every module in this package registers the `model_type`s it understands."""

from __future__ import annotations

import importlib
import pkgutil

from meshplan.model.families.registry import PARSERS, Parser, register


def _load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name not in ("registry", "common"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_all()

__all__ = ["PARSERS", "Parser", "register"]
