"""The change matrix's assemblies: an example environment file as shipped or with an edit, each synthesized once per
test session (per xdist worker), whichever change-matrix module asks first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.conftest import CONFIG_DIR
from tests.synth import synth

Edit = Callable[[dict], None]
"""An edit of an environment file's parsed YAML, in place."""


def shipped_file(raw: dict) -> None:
    """The environment file as shipped: no edit."""


class EnvironmentAssemblies:
    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self._done: dict[tuple[str, Edit], Path] = {}

    def edited(self, env: str, edit: Edit = shipped_file) -> Path:
        """The cloud assembly of ``config/<env>.yaml`` after ``edit``."""
        if (env, edit) not in self._done:
            raw = yaml.safe_load((CONFIG_DIR / f"{env}.yaml").read_text())
            edit(raw)
            folder = self._tmp.mktemp(f"{env}-{edit.__name__}")
            (folder / "env.yaml").write_text(yaml.safe_dump(raw))
            self._done[env, edit] = synth(folder / "env.yaml", folder / "cdk.out").outdir
        return self._done[env, edit]

    def shipped(self, env: str) -> Path:
        return self.edited(env)
