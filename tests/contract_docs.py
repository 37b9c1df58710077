"""Shared by the contract-document tests: which test functions exist, and which a document names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT


def existing_tests() -> set[str]:
    """Every function defined in the test modules (so a document may name a test at any nesting)."""
    names: set[str] = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        names |= {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
    return names


def defined_tests(module: Path) -> set[str]:
    """The top-level test functions of one module."""
    tree = ast.parse(module.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def named_tests(text: str) -> set[str]:
    return set(re.findall(r"`(test_[a-z0-9_]+)`", text))
