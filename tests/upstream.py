"""Upstream source at the pinned versions, as ``make test`` installs it: the engine image's vLLM wheel (downloaded
from PyPI, never unpacked) and the LMCache packages of the contract venvs."""

from __future__ import annotations

import re
import zipfile
from functools import cache
from pathlib import Path

from kvtiers.config.versions import DEFAULT_ENGINE_IMAGE, engine_release

ROOT = Path(__file__).resolve().parent.parent
ENGINE = engine_release(DEFAULT_ENGINE_IMAGE)
VLLM_WHEEL_DIR = ROOT / ".upstream" / f"vllm-{ENGINE.vllm}"
ENGINE_VENV = ROOT / ".venv-engine"


@cache
def vllm_wheel() -> Path:
    wheels = sorted(VLLM_WHEEL_DIR.glob(f"vllm-{ENGINE.vllm}-*.whl"))
    assert wheels, f"no vLLM {ENGINE.vllm} wheel in {VLLM_WHEEL_DIR}: `make test` downloads it"
    return wheels[0]


def vllm_source(path: str) -> str:
    """A file of the engine image's vLLM, e.g. ``vllm/v1/core/sched/scheduler.py``."""
    with zipfile.ZipFile(vllm_wheel()) as wheel:
        return wheel.read(path).decode()


def lmcache_source(path: str) -> str:
    """A file of the engine image's LMCache, as installed in the fault drill's venv."""
    found = sorted(ENGINE_VENV.glob(f"lib/python3*/site-packages/{path}"))
    assert found, f"{path} not in {ENGINE_VENV}: `make test` installs LMCache {ENGINE.lmcache} there"
    return found[0].read_text()


def line_of(text: str, pattern: str) -> int:
    """1-based line of the first match of ``pattern`` (a regular expression), for a contract row's citation."""
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"{pattern!r} not found"
    return text.count("\n", 0, match.start()) + 1
