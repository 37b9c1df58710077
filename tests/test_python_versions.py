"""Python 3.11 to 3.13: the declared versions agree (requires-python from 3.11 without a cap, the classifiers, the
Makefile, ruff and mypy), the Makefile picks a supported interpreter (or says it found none), and both environments
synthesize under every other supported Python this machine has exactly as under the project venv's (the committed
snapshot, which tests/test_golden_output.py holds the project venv's synth to)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from tests.golden_snapshot import ENVIRONMENTS, differences, golden_path
from tests.synth import ROOT
from tools import python_versions

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
MAKEFILE = (ROOT / "Makefile").read_text()
MAKE = shutil.which("make")
OTHER_VERSIONS = [v for v in python_versions.supported_versions() if v != python_versions.current_version()]

SYNTH_BOTH = """
import json, sys, tempfile
from pathlib import Path
from tests.golden_snapshot import ENVIRONMENTS, snapshot
from tests.synth import synth

snapshots = {"python": "%d.%d" % sys.version_info[:2]}
for environment in ENVIRONMENTS:
    with tempfile.TemporaryDirectory() as tmp:
        synthesized = synth(f"config/{environment}.yaml", Path(tmp) / "cdk.out", nag=True)
        snapshots[environment] = snapshot(synthesized.outdir)
Path(sys.argv[1]).write_text(json.dumps(snapshots))
"""


def test_the_declared_versions_agree():
    supported = python_versions.supported_versions()
    assert supported == ["3.11", "3.12", "3.13"]
    # requires-python is the oldest supported version and no cap (a newer Python may install kvtiers; the
    # classifiers name the versions tested).
    requires = SpecifierSet(PYPROJECT["project"]["requires-python"])
    assert requires == SpecifierSet(f">={supported[0]}")
    classifiers = [
        c.removeprefix("Programming Language :: Python :: ")
        for c in PYPROJECT["project"]["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert classifiers == supported
    assert re.search(r"^SUPPORTED_PYTHONS := (.*)$", MAKEFILE, re.MULTILINE).group(1).split() == supported
    oldest = supported[0].replace(".", "")
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{oldest}"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == supported[0]


def _fake_python(folder: Path, name: str, version: str | None) -> Path:
    """An executable that answers the version probe with ``version``, or fails like a pyenv shim of a version pyenv
    does not select."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(
        f"#!/bin/sh\necho {version}\n" if version else "#!/bin/sh\necho 'pyenv: not selected' >&2\nexit 127\n"
    )
    path.chmod(0o755)
    return path


def _make(fake_bin: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": str(fake_bin), "HOME": str(fake_bin)}
    return subprocess.run(
        [MAKE, "-s", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_make_takes_the_first_python_that_runs_as_a_supported_version(tmp_path):
    _fake_python(tmp_path, "python3.11", None)
    chosen = _fake_python(tmp_path, "python3.12", "3.12")
    _fake_python(tmp_path, "python3", "3.13")
    shown = _make(tmp_path, "--eval", "show-python: ; @echo $(PYTHON)", "show-python")
    assert shown.stdout.strip() == str(chosen), shown.stderr
    assert _make(tmp_path, "check-python").returncode == 0


def test_make_refuses_without_a_supported_python(tmp_path):
    _fake_python(tmp_path, "python3.11", None)
    _fake_python(tmp_path, "python3", "3.10")
    run = _make(tmp_path, "check-python")
    assert run.returncode != 0
    assert "kvtiers needs Python 3.11 3.12 3.13" in run.stderr
    old = _fake_python(tmp_path, "python3.10", "3.10")
    run = _make(tmp_path, "check-python", f"PYTHON={old}")
    assert run.returncode != 0
    assert f"PYTHON={old} does not run as Python 3.11 3.12 3.13" in run.stderr


def test_other_pythons_are_found_on_path_or_under_pyenv(tmp_path, monkeypatch):
    shim = _fake_python(tmp_path / "bin", "python3.12", None)
    pyenv_python = _fake_python(tmp_path / "pyenv/versions/3.12.9/bin", "python3.12", "3.12")
    _fake_python(tmp_path / "pyenv/versions/3.12.2/bin", "python3.12", "3.12")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    found = python_versions.find("3.12")
    assert found.python == pyenv_python
    assert found.notes == (f"{shim} does not run as Python 3.12",)
    missing = python_versions.find("3.13")
    assert missing.python is None
    assert "Python 3.13: not found" in missing.describe()


@pytest.mark.parametrize("version", OTHER_VERSIONS)
def test_both_environments_synthesize_identically_under(version, tmp_path):
    venv_python = python_versions.venv_dir(version) / "bin" / "python"
    if not venv_python.exists():
        found = python_versions.find(version)
        reason = "`make test` builds its venv" if found.python else "skipped"
        pytest.skip(f"{found.describe()}: {reason}")
    out = tmp_path / "snapshots.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [str(venv_python), "-c", SYNTH_BOTH, str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-3000:]
    snapshots = json.loads(out.read_text())
    assert snapshots["python"] == version
    for environment in ENVIRONMENTS:
        found = differences(json.loads(golden_path(environment).read_text()), snapshots[environment])
        assert not found, f"{environment} under Python {version}:\n" + "\n".join(found[:40])
