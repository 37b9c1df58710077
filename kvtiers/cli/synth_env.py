"""The dependencies each side of ``kvtiers diff`` is synthesized with: the base as it was built, so that a pull
request that bumps aws-cdk-lib, cdk8s-plus, the kubectl layer or Node.js is not compared with itself.

What a tree pins for its synth (``python app.py``), its *synth lock*: in ``pyproject.toml`` the library's
``[project] dependencies``, its ``app`` extra and the ``app`` dependency group (the exact versions, installed as
constraints, as the Makefile installs them), and in ``package-lock.json`` the ``node`` package: the Node.js that jsii
runs aws-cdk-lib's JavaScript on (the JavaScript itself ships in the Python wheels; the CDK CLI, npm ``aws-cdk``, is
not part of the synth).

When the base's lock is the working tree's (the common case), the base is synthesized with this interpreter. Else
with a venv, and a ``node_modules`` when the Node.js pin differs, built once per lock hash under the cache folder
(:func:`cache_folder`) and reused by every later diff. When they cannot be built (offline), the base is synthesized
with this interpreter and the report says the dependencies were not compared. So it does for a tree without a synth
lock (another team's layout: requirements.txt, uv, Poetry, Pipenv), naming those lock files when they differ.

Only the pins the synth can import make a venv's key (:func:`synth_closure`): a bump of the command-line tool's
boto3 builds nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYNTH_GROUP = "app"
"""The extra and the dependency group the app synthesizes with."""
NODE_PACKAGE = "node"
"""The one npm package ``python app.py`` runs: jsii starts ``node`` from ``PATH``."""
CACHE_VARIABLE = "KVTIERS_DIFF_CACHE"
OTHER_LOCKS = ("requirements*.txt", "uv.lock", "poetry.lock", "Pipfile.lock")
"""Lock files of layouts kvtiers cannot install a base from (``cdk init``'s requirements.txt, uv, Poetry, Pipenv):
compared by hash only."""
NO_SYNTH_LOCK = f"no synth lock (pyproject.toml `[dependency-groups] {SYNTH_GROUP}`) found"


def cache_folder() -> Path:
    """``$KVTIERS_DIFF_CACHE``, else ``$XDG_CACHE_HOME/kvtiers/diff-envs`` (``~/.cache/kvtiers/diff-envs``)."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvtiers" / "diff-envs"


def _name(requirement: str) -> str:
    """A requirement's project name, normalized (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _specifier(requirement: str) -> str:
    """What a requirement asks of the version: the version of an exact pin, else its specifier."""
    rest = re.sub(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?\s*", "", requirement).strip()
    return rest.removeprefix("==") if re.fullmatch(r"==[^,;\s]+", rest) else rest


@dataclass(frozen=True)
class SynthLock:
    """What a tree pins for its synth."""

    requirements: tuple[str, ...]
    """The library's dependencies and its ``app`` extra (ranges)."""
    constraints: tuple[str, ...]
    """The ``app`` dependency group (exact versions)."""
    npm: tuple[tuple[str, str], ...]
    """Every package of ``package-lock.json`` with its version."""
    other_locks: tuple[tuple[str, str], ...] = ()
    """Each of :data:`OTHER_LOCKS` the tree has, with its hash."""

    @property
    def node(self) -> str | None:
        return dict(self.npm).get(NODE_PACKAGE)

    def python_key(self, used: frozenset[str] | None = None) -> str:
        """The hash that names a venv of these pins (for this interpreter), counting only the pins of ``used``
        (default: all): a pin of a package the synth never imports changes no template."""
        interpreter = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
        constraints = [c for c in self.constraints if used is None or _name(c) in used]
        return _digest({"python": interpreter, "requirements": self.requirements, "constraints": constraints})

    def node_key(self) -> str:
        return _digest({"node": self.node})

    def pins(self) -> dict[str, str]:
        """Package label -> what it pins, for the report."""
        found = {f"{_name(r)} (library range)": _specifier(r) for r in self.requirements}
        found.update({_name(c): _specifier(c) for c in self.constraints})
        found.update({f"{name} (npm)": version for name, version in self.npm})
        return found


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def synth_closure(requirements: Iterable[str]) -> frozenset[str]:
    """The projects ``requirements`` need, transitively, as this interpreter has them installed (a project it does not
    have counts, without what it needs)."""
    found: set[str] = set()
    todo = [_name(r) for r in requirements]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            needs = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        # An extra's requirement is not installed by the plain project (`; extra == "..."`).
        todo += [_name(n) for n in needs if "extra" not in n.partition(";")[2]]
    return frozenset(found)


def read_lock(tree: Path) -> SynthLock:
    """The synth lock of ``tree`` (empty parts for a file it does not have)."""
    pyproject: dict[str, Any] = {}
    if (tree / "pyproject.toml").is_file():
        pyproject = tomllib.loads((tree / "pyproject.toml").read_text())
    project = pyproject.get("project", {})
    own = _name(project.get("name", "kvtiers"))
    wanted = [*project.get("dependencies", []), *project.get("optional-dependencies", {}).get(SYNTH_GROUP, [])]
    # A self-reference (as the `cli` extra's kvtiers[app]) is the tree itself, which app.py imports from its folder.
    requirements = [str(r) for r in wanted if _name(str(r)) != own]
    # tools/pins.py allows only requirement strings in a group (no include-group tables).
    constraints = [c for c in pyproject.get("dependency-groups", {}).get(SYNTH_GROUP, []) if isinstance(c, str)]
    npm: dict[str, str] = {}
    if (tree / "package-lock.json").is_file():
        packages = json.loads((tree / "package-lock.json").read_text()).get("packages", {})
        npm = {
            key.removeprefix("node_modules/"): str(entry.get("version"))
            for key, entry in packages.items()
            if key.startswith("node_modules/")
        }
    others = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        for pattern in OTHER_LOCKS
        for path in tree.glob(pattern)
        if path.is_file()
    }
    return SynthLock(
        tuple(sorted(requirements)),
        tuple(sorted(constraints)),
        tuple(sorted(npm.items())),
        tuple(sorted(others.items())),
    )


@dataclass(frozen=True)
class PinChange:
    package: str
    base: str
    head: str


def pin_changes(base: SynthLock, head: SynthLock) -> tuple[PinChange, ...]:
    """Every pin that differs, ``-`` for a side without it."""
    old, new = base.pins(), head.pins()
    return tuple(
        PinChange(package, old.get(package, "-"), new.get(package, "-"))
        for package in sorted(old.keys() | new.keys())
        if old.get(package) != new.get(package)
    )


@dataclass(frozen=True)
class SynthEnv:
    """The interpreter a tree's ``python app.py`` runs with, and the ``node_modules/.bin`` put first on ``PATH``."""

    python: str
    node_bin: Path | None = None

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        env = dict(base)
        if self.python != sys.executable:
            # Nothing of this interpreter's packages may reach a venv of other pins.
            for variable in ("PYTHONPATH", "PYTHONHOME"):
                env.pop(variable, None)
        if self.node_bin is not None:
            env.pop("JSII_NODE", None)  # jsii would run it instead of the first node on PATH
            env["PATH"] = os.pathsep.join([str(self.node_bin), env.get("PATH", "")])
        return env


def head_env(tree: Path) -> SynthEnv:
    """This interpreter, and the tree's ``node_modules`` (``npm ci``, as the Makefile puts it first on ``PATH``) if it
    has one."""
    node_bin = tree / "node_modules" / ".bin"
    return SynthEnv(sys.executable, node_bin if (node_bin / NODE_PACKAGE).exists() else None)


class InstallError(Exception):
    """The base's pins could not be installed; ``str()`` is the installer's last words."""


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One builder of ``folder`` at a time (another diff may build the same lock)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(command: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        # pip's first error names the requirement it could not satisfy; its last points at its documentation.
        errors = [line for line in lines if line.startswith(("ERROR:", "npm error")) and " code " not in line[:15]]
        raise InstallError((errors or lines or [f"{command[0]} exited {result.returncode}"])[0])


def _runs(python: Path) -> bool:
    """Whether ``python`` still starts (a venv's interpreter dangles once the Python it was made from is gone)."""
    try:
        return subprocess.run([str(python), "-c", "pass"], capture_output=True, check=False).returncode == 0
    except OSError:
        return False


def python_env(lock: SynthLock, cache: Path, used: frozenset[str] | None = None) -> Path:
    """A venv of ``lock``'s pins under ``cache`` (built once, rebuilt if its interpreter no longer starts); returns
    its interpreter."""
    venv = cache / f"python-{lock.python_key(used)}"
    done = venv / ".installed"
    with _locked(venv):
        if not done.is_file() or not _runs(venv / "bin" / "python"):
            shutil.rmtree(venv, ignore_errors=True)
            try:
                _run([sys.executable, "-m", "venv", str(venv)])
                (venv / "requirements.txt").write_text("".join(f"{r}\n" for r in lock.requirements))
                (venv / "constraints.txt").write_text("".join(f"{c}\n" for c in lock.constraints))
                pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
                _run([*pip, "-r", str(venv / "requirements.txt"), "-c", str(venv / "constraints.txt")])
            except InstallError:
                shutil.rmtree(venv, ignore_errors=True)
                raise
            done.write_text(json.dumps({"requirements": lock.requirements, "constraints": lock.constraints}) + "\n")
    return venv / "bin" / "python"


def node_env(tree: Path, lock: SynthLock, cache: Path) -> Path:
    """``npm ci`` of ``tree``'s package files under ``cache`` (built once); returns its ``node_modules/.bin``."""
    folder = cache / f"node-{lock.node_key()}"
    done = folder / ".installed"
    with _locked(folder):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for name in ("package.json", "package-lock.json"):
                shutil.copy(tree / name, folder / name)
            try:
                _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=folder)
            except (InstallError, OSError) as error:
                shutil.rmtree(folder, ignore_errors=True)
                raise InstallError(str(error)) from error
            done.write_text(f"{lock.node}\n")
    return folder / "node_modules" / ".bin"


@dataclass(frozen=True)
class BaseEnv:
    env: SynthEnv
    not_compared: tuple[str, ...]
    """Why the base's own dependencies were not used (empty: they were, or they equal the working tree's)."""
    built: tuple[Path, ...] = ()
    """The cached venv or node_modules the base used."""
    unused: frozenset[str] = frozenset()
    """The pinned projects the synth does not import (their pins are no part of the venv's key)."""


def _other_lock_changes(base: SynthLock, head: SynthLock) -> list[str]:
    old, new = dict(base.other_locks), dict(head.other_locks)
    return [
        f"`{name}` differs (kvtiers installs a base only from pyproject.toml `[dependency-groups] {SYNTH_GROUP}`)"
        for name in sorted(old.keys() | new.keys())
        if old.get(name) != new.get(name)
    ]


def base_env(
    base_tree: Path,
    base: SynthLock,
    head: SynthLock,
    cache: Path,
    head_with: SynthEnv,
    used: frozenset[str] | None = None,
) -> BaseEnv:
    """The dependencies to synthesize the base with: the working tree's (``head_with``) where the locks agree on the
    pins of ``used`` (default: every pin), else the base's own."""
    python, node_bin = head_with.python, head_with.node_bin
    not_compared: list[str] = []
    built: list[Path] = []
    without = [side for side, lock in (("the base", base), ("this change", head)) if not lock.constraints]
    if without:
        not_compared.append(f"{NO_SYNTH_LOCK} in {' and '.join(without)}")
    elif base.python_key(used) != head.python_key(used):
        try:
            python = str(python_env(base, cache, used))
            built.append(Path(python).parent.parent)
        except InstallError as error:
            not_compared.append(f"installing the base's Python pins into {cache} failed ({error})")
    not_compared += _other_lock_changes(base, head)
    if base.node != head.node and base.node is not None:
        try:
            node_bin = node_env(base_tree, base, cache)
            built.append(node_bin.parent.parent)
        except InstallError as error:
            not_compared.append(f"installing the base's Node.js {base.node} into {cache} failed ({error})")
    pinned = {_name(c) for c in (*base.constraints, *head.constraints)}
    unused = frozenset() if used is None else frozenset(pinned - used)
    return BaseEnv(SynthEnv(python, node_bin), tuple(not_compared), tuple(built), unused)
