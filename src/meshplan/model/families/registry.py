"""The registry of family parsers, keyed by Hugging Face `model_type`: one decorator adds a family."""

from __future__ import annotations

from collections.abc import Callable

from meshplan.model.config_view import ConfigView
from meshplan.model.spec import ModelSpec

Parser = Callable[[ConfigView, str], ModelSpec]
"""Turns a config view and a display name into a ModelSpec."""

PARSERS: dict[str, Parser] = {}


def register(*model_types: str) -> Callable[[Parser], Parser]:
    """Register `parser` for each of `model_types`."""

    def decorate(parser: Parser) -> Parser:
        for model_type in model_types:
            if model_type in PARSERS:
                raise RuntimeError(f"model_type {model_type!r} registered twice")
            PARSERS[model_type] = parser
        return parser

    return decorate
