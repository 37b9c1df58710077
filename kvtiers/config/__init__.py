"""Typed environment configuration: the schema, its loader and the derived sizing facts.

The loader and schema (pydantic) are imported on first use: importing the package alone loads neither.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvtiers.config.loader import ConfigError, load_environment
    from kvtiers.config.schema import Environment

__all__ = ["ConfigError", "Environment", "load_environment"]
_HOMES = {"ConfigError": "loader", "load_environment": "loader", "Environment": "schema"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
