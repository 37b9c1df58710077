"""Shared fixtures: the shipped environments, loaded once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtiers.config import load_environment

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "config"


@pytest.fixture(scope="session")
def dev_env():
    return load_environment(CONFIG_DIR / "dev.yaml")
