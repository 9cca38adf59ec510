"""The `viz` extra (plotly + jinja2), imported only when a report is asked for.

`graph_objects()` and `jinja_environment()` import lazily; a missing package becomes one
ConfigError naming the extra, which the CLI prints with exit code 2.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from meshplan.errors import ConfigError

VIZ_MISSING = "--html needs the viz extra: pip install 'meshplan[viz]'"
"""The one message for a report asked for without plotly or jinja2 installed."""


def require(module: str) -> ModuleType:
    """Import `module` of the viz extra, or raise the ConfigError that names the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(VIZ_MISSING) from None


def check_viz() -> None:
    """Fail early (before a long search) when the viz extra is not installed."""
    for module in ("plotly.graph_objects", "jinja2"):
        require(module)


def graph_objects() -> ModuleType:
    """`plotly.graph_objects`."""
    return require("plotly.graph_objects")


def subplots(**kwargs):
    """`plotly.subplots.make_subplots(**kwargs)`."""
    return require("plotly.subplots").make_subplots(**kwargs)
