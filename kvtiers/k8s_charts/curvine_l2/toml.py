"""A small TOML writer for ``curvine-cluster.toml``: the file is built as a Python dict from typed props and
serialized here, never assembled from text templates. Supports what the Curvine config needs: strings, integers,
floats, booleans, lists of scalars and lists of inline tables, one level of tables."""

from __future__ import annotations

import json


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def dumps(document: dict) -> str:
    """Top-level scalars first, then one ``[section]`` per nested dict."""
    lines = [f"{k} = {_value(v)}" for k, v in document.items() if not isinstance(v, dict)]
    for section, body in document.items():
        if isinstance(body, dict):
            lines += ["", f"[{section}]"]
            lines += [f"{k} = {_value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"
