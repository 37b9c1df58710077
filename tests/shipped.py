"""Modules kvtiers ships in ConfigMaps (the key check, the L2 guard, the drain hook), loaded from the rendered text."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_shipped(name: str, text: str, directory: Path) -> ModuleType:
    """The module ``name`` as a pod imports it: ``text`` (a ConfigMap's data) written to ``directory``, then loaded."""
    path = directory / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
