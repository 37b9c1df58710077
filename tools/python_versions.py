"""The other supported Pythons this machine has, each with a venv from the project's pins.

kvtiers supports the Python versions pyproject.toml's classifiers list. ``make test`` runs
``python tools/python_versions.py install`` with the project venv's Python: for every other supported version found
(``python3.X`` on PATH, or under ``$(pyenv root)/versions``) it builds ``.venv-py3.X`` with the app's pinned
dependencies and kvtiers itself (``pip install -e .``, so pip checks ``requires-python`` as it does for a user), and
says which versions it found and which it skipped. tests/test_python_versions.py then synthesizes both environments
in each of these venvs and compares the output with the project venv's.

Without ``install`` it only reports. ``which 3.X`` prints the interpreter found for one version (nothing when none
is), for the Makefile's venvs that need a particular Python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
CLASSIFIER = "Programming Language :: Python :: "
PIP = ("-m", "pip", "install", "--quiet", "--disable-pip-version-check")


def supported_versions() -> list[str]:
    """``3.X`` for every ``Programming Language :: Python :: 3.X`` classifier of pyproject.toml."""
    classifiers = tomllib.loads(PYPROJECT.read_text())["project"]["classifiers"]
    return [c.removeprefix(CLASSIFIER) for c in classifiers if c.startswith(CLASSIFIER + "3.")]


def current_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def venv_dir(version: str) -> Path:
    return ROOT / f".venv-py{version}"


def _pyenv_versions() -> Path | None:
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        run = subprocess.run([pyenv, "root"], check=False, capture_output=True, text=True, timeout=30)
        if run.returncode == 0:
            return Path(run.stdout.strip()) / "versions"
    root = os.environ.get("PYENV_ROOT")
    return Path(root) / "versions" if root else None


def candidates(version: str) -> list[Path]:
    """Where a ``python<version>`` may be: PATH first, then pyenv's installs (newest patch release first)."""
    found = []
    on_path = shutil.which(f"python{version}")
    if on_path is not None:
        found.append(Path(on_path))
    versions = _pyenv_versions()
    if versions is not None:
        installs = sorted(
            versions.glob(f"{version}.*/bin/python{version}"),
            key=lambda p: tuple(int(x) if x.isdigit() else -1 for x in p.parent.parent.name.split(".")),
            reverse=True,
        )
        found.extend(installs)
    return found


def runs_as(python: Path, version: str) -> bool:
    # Run it: a pyenv shim exists for every installed version but runs only the ones pyenv selects.
    try:
        run = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return False
    return run.returncode == 0 and run.stdout.strip() == version


@dataclass(frozen=True)
class Found:
    version: str
    python: Path | None
    """The first candidate that runs as this version; None when there is none."""
    notes: tuple[str, ...]
    """What was looked at and why it was not taken."""

    def describe(self) -> str:
        if self.python is not None:
            return f"Python {self.version}: {self.python}"
        looked = "; ".join(self.notes) or f"no python{self.version} on PATH or under $(pyenv root)/versions"
        return f"Python {self.version}: not found ({looked})"


def find(version: str) -> Found:
    notes: list[str] = []
    for python in candidates(version):
        if runs_as(python, version):
            return Found(version, python, tuple(notes))
        notes.append(f"{python} does not run as Python {version}")
    return Found(version, None, tuple(notes))


def up_to_date(version: str) -> bool:
    stamp = venv_dir(version) / ".installed"
    return (
        stamp.exists()
        and stamp.stat().st_mtime >= PYPROJECT.stat().st_mtime
        and runs_as(venv_dir(version) / "bin" / "python", version)
    )


def install(found: list[Found]) -> list[str]:
    """Build the venvs that are missing, or update those older than pyproject.toml; return a line per version."""
    # The app's exact pins (the library itself declares ranges), so every Python synthesizes with the same versions.
    dependencies = tomllib.loads(PYPROJECT.read_text())["dependency-groups"]["app"]
    lines, building = [], []
    for f in found:
        assert f.python is not None
        if up_to_date(f.version):
            lines.append(f"{f.describe()}: {venv_dir(f.version).name} is up to date")
            continue
        venv = venv_dir(f.version)
        if not runs_as(venv / "bin" / "python", f.version):
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([str(f.python), "-m", "venv", str(venv)], check=True, timeout=300)
        log = (venv / "install.log").open("w")
        # The dependencies of several venvs install in parallel; kvtiers itself one venv at a time below, because
        # its editable build writes kvtiers.egg-info into this tree.
        process = subprocess.Popen([str(venv / "bin/python"), *PIP, *dependencies], stdout=log, stderr=log)
        building.append((f, venv, log, process))
    start = time.monotonic()
    failed = []
    for f, venv, log, process in building:
        code = process.wait()
        if code == 0:
            code = subprocess.run(
                [str(venv / "bin/python"), *PIP, "--no-deps", "-e", str(ROOT)],
                check=False,
                stdout=log,
                stderr=log,
                timeout=600,
            ).returncode
        log.close()
        if code != 0:
            failed.append(f"{venv.name}: pip failed, see {venv / 'install.log'}")
            continue
        (venv / ".installed").touch()
        lines.append(f"{f.describe()}: installed {venv.name}")
    if building:
        lines.append(f"installed {len(building)} venv(s) in {time.monotonic() - start:.0f} s")
    if failed:
        raise SystemExit("error: " + "; ".join(failed))
    return lines


def main(argv: list[str]) -> None:
    if len(argv) == 2 and argv[0] == "which":
        python = find(argv[1]).python
        print(python or "")
        return
    if argv not in ([], ["install"]):
        raise SystemExit(__doc__)
    current = current_version()
    others = [find(v) for v in supported_versions() if v != current]
    present = [f for f in others if f.python is not None]
    lines = [f"Python {current}: {sys.executable} (the project venv)"]
    lines += install(present) if argv == ["install"] else [f.describe() for f in present]
    lines += [f"{f.describe()}: skipped" for f in others if f.python is None]
    for line in lines:
        print(f"python versions: {line}")


if __name__ == "__main__":
    main(sys.argv[1:])
