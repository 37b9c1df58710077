"""Typed environment configuration: the schema, its loader and the derived sizing facts."""

from kvtiers.config.loader import ConfigError, load_environment
from kvtiers.config.schema import Environment

__all__ = ["ConfigError", "Environment", "load_environment"]
