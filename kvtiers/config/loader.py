"""Load and validate an environment file, turning every problem into one readable :class:`ConfigError`."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from kvtiers.config.schema import Environment


class ConfigError(Exception):
    """An environment file is unreadable or invalid. ``str()`` names the file, the field and what is allowed."""


def _field_path(loc: tuple[int | str, ...]) -> str:
    # pydantic adds the union member's tag ("new", "existing", "s3", ...) to the location: keep only real keys.
    parts = [str(p) for p in loc if not (isinstance(p, str) and p in {"new", "existing", "s3", "huggingface"})]
    return ".".join(parts) or "(top level)"


def format_validation_error(path: Path | str, error: ValidationError) -> str:
    lines = [f"{path}: invalid environment ({error.error_count()} problem(s))"]
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key (not in the schema; check the spelling)"
        elif item["type"] == "literal_error":
            message = f"{message}; got {item['input']!r}"
        lines.append(f"  {_field_path(item['loc'])}: {message}")
    return "\n".join(lines)


def load_environment(path: Path | str) -> Environment:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such environment file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: an environment file must be a YAML mapping at the top level")
    try:
        return Environment.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(path, exc)) from None
