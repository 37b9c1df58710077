"""Modules kvtiers ships into the router and engine images (in ConfigMaps on their ``PYTHONPATH``)."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path


@cache
def module_source(module: str) -> str:
    """``kvtiers/k8s_charts/<module>.py`` as a ConfigMap ships it, read without importing it (it may import the
    image's own packages)."""
    spec = importlib.util.find_spec(f"kvtiers.k8s_charts.{module}")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).read_text()
