"""Upstream source at the pinned versions: the engine image's vLLM wheel (downloaded from PyPI by ``make test``,
never unpacked), the LMCache packages of the contract venvs, and the components on no package registry (Curvine,
production-stack's router, the Secrets Store CSI driver's CRDs), read from bare git mirrors that ``make upstream-mirrors`` clones at their pinned tags.

Without those mirrors the tests that read Curvine or the router skip, naming :data:`MIRROR_SKIP`; the test session's
summary counts them (``tests/conftest.py``), so a run says how much of the upstream contract it did not check.

``python -m tests.upstream fetch [DIR]`` clones the mirrors (network to github.com needed) and refuses a tag that
no longer points at the commit kvtiers reviewed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path

from kvtiers.catalog.versions import DEFAULT_ENGINE_IMAGE, engine_release

ROOT = Path(__file__).resolve().parent.parent
ENGINE = engine_release(DEFAULT_ENGINE_IMAGE)
VLLM_WHEEL_DIR = ROOT / ".upstream" / f"vllm-{ENGINE.vllm}"
ENGINE_VENV = ROOT / ".venv-engine"
LMCACHE_SITE = ROOT / f".venv-lmcache-{ENGINE.lmcache}" / "lib"
DEFAULT_MIRRORS = ROOT / ".upstream" / "mirrors"
"""Where ``make upstream-mirrors`` puts them; ``$KVTIERS_UPSTREAM_MIRRORS`` points elsewhere (same layout)."""

MIRRORED: dict[str, tuple[str, str]] = {
    "CurvineIO/curvine": ("v0.4.1", "709f24781f35a0ea8dda01b12212ede007712498"),
    "vllm-project/production-stack": ("vllm-stack-0.1.12", "66b60661aa3052810859a417559e9e830772a091"),
    "kubernetes-sigs/secrets-store-csi-driver": ("v1.6.0", "4960f9637c51ad9cb9ef264481bc6d9a98bf1f1c"),
    # The HyperPod dependency chart has no release tags: its pin is a commit (hyperpod.dependency_chart.revision).
    "aws/sagemaker-hyperpod-cli": (
        "011ca927123e02b35a399935bbb3ab1905fe33c7",
        "011ca927123e02b35a399935bbb3ab1905fe33c7",
    ),
    "kubernetes-sigs/aws-ebs-csi-driver": (
        "helm-chart-aws-ebs-csi-driver-2.50.1",
        "3f4fd472b7277401d6494ab85cc6268a2232e1b0",
    ),
}
"""Repository → (the pinned tag, or a commit where upstream tags none, and the commit it pointed at when kvtiers was
reviewed against it)."""

MIRROR_SKIP = "upstream mirror missing (run `make upstream-mirrors`, or set KVTIERS_UPSTREAM_MIRRORS)"
"""Every skip for a missing mirror carries this text; the session summary counts it."""


def mirror_git_dir(repo: str) -> Path | None:
    """The bare mirror of ``repo`` (``owner/name``), if this machine has one."""
    base = Path(os.environ.get("KVTIERS_UPSTREAM_MIRRORS") or DEFAULT_MIRRORS)
    git_dir = base / repo.replace("/", "+") / "repo"
    return git_dir if git_dir.is_dir() else None


def upstream_text(source: str) -> str | None:
    """The file ``source`` names (``owner/name@tag:path``, or ``kvtiers:path``) at its pinned version, where it is on
    this machine; ``None`` when it is not (only a mirrored repository can be missing after ``make test``)."""
    repo_tag, path = source.split(":", 1)
    if repo_tag == "kvtiers":
        return (ROOT / path).read_text()
    repo, tag = repo_tag.split("@")
    if repo == "LMCache/LMCache":
        found = sorted(LMCACHE_SITE.glob(f"python3*/site-packages/{path}"))
        assert found, f"`make test` installs LMCache {ENGINE.lmcache}; {path} not found under {LMCACHE_SITE}"
        return found[0].read_text()
    if repo == "vllm-project/vllm":
        assert tag == f"v{ENGINE.vllm}", f"{source} is not the engine image's vLLM {ENGINE.vllm}"
        return vllm_source(path)
    assert MIRRORED.get(repo, ("",))[0] == tag, f"{source}: kvtiers mirrors {repo} at {MIRRORED.get(repo)}"
    git_dir = mirror_git_dir(repo)
    if git_dir is None:
        return None
    shown = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{tag}:{path}"], capture_output=True, text=True)
    assert shown.returncode == 0, f"{source}: {shown.stderr.strip()}"
    return shown.stdout


MIRRORS_REQUIRED = os.environ.get("KVTIERS_UPSTREAM_REQUIRED") == "1"
"""Set where the mirrors were fetched (the pull-request workflow): a missing one then fails instead of skipping."""


def skip_without_mirror(reason: str) -> None:
    """Skip the calling test for a missing mirror (fail it where the mirrors are required)."""
    import pytest

    if MIRRORS_REQUIRED:
        pytest.fail(f"{reason} (KVTIERS_UPSTREAM_REQUIRED=1)")
    pytest.skip(reason)


def require_upstream(source: str) -> str:
    """:func:`upstream_text`, skipping the calling test (with :data:`MIRROR_SKIP`) when its mirror is missing."""
    text = upstream_text(source)
    if text is None:
        skip_without_mirror(f"{source}: {MIRROR_SKIP}")
    assert text is not None
    return text


def fetch_mirrors(base: Path, pinned: dict[str, tuple[str, str]] = MIRRORED, host: str = "https://github.com") -> None:
    """Clone each pinned repository at its tag (bare, shallow) under ``base``; refuse a moved tag."""
    for repo, (tag, commit) in pinned.items():
        git_dir = base / repo.replace("/", "+") / "repo"
        if not git_dir.is_dir() and tag == commit:
            # A commit pin: fetch that one commit (GitHub serves a commit by its id).
            subprocess.run(["git", "init", "--quiet", "--bare", str(git_dir)], check=True)
            subprocess.run(
                ["git", "--git-dir", str(git_dir), "fetch", "--quiet", "--depth", "1", f"{host}/{repo}.git", commit],
                check=True,
            )
        elif not git_dir.is_dir():
            subprocess.run(
                ["git", "clone", "--quiet", "--bare", "--depth", "1", "--branch", tag, f"{host}/{repo}.git"]
                + [str(git_dir)],
                check=True,
            )
        found = subprocess.run(
            ["git", "--git-dir", str(git_dir), "rev-parse", f"{tag}^{{commit}}"], capture_output=True, text=True
        ).stdout.strip()
        if found != commit:
            sys.exit(f"{repo} tag {tag} is at {found or 'nothing'} in {git_dir}, kvtiers reviewed {commit}")
        print(f"{repo}@{tag} ({commit[:12]}) in {git_dir}")


@cache
def vllm_wheel() -> Path:
    wheels = sorted(VLLM_WHEEL_DIR.glob(f"vllm-{ENGINE.vllm}-*.whl"))
    assert wheels, f"no vLLM {ENGINE.vllm} wheel in {VLLM_WHEEL_DIR}: `make test` downloads it"
    return wheels[0]


def vllm_source(path: str) -> str:
    """A file of the engine image's vLLM, e.g. ``vllm/v1/core/sched/scheduler.py``."""
    with zipfile.ZipFile(vllm_wheel()) as wheel:
        return wheel.read(path).decode()


def vllm_routes() -> set[tuple[str, str]]:
    """Every ``(method, path)`` the engine image's vLLM declares with a route decorator in ``vllm/entrypoints``."""
    declared = re.compile(r'@(?:router|app)\.(get|post|put|delete)\(\s*"([^"]+)"')
    with zipfile.ZipFile(vllm_wheel()) as wheel:
        sources = [wheel.read(n).decode() for n in wheel.namelist() if re.match(r"vllm/entrypoints/.*\.py$", n)]
    return {(m.group(1), m.group(2)) for text in sources for m in declared.finditer(text)}


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


if __name__ == "__main__":
    if sys.argv[1:2] != ["fetch"]:
        sys.exit("usage: python -m tests.upstream fetch [DIR]")
    fetch_mirrors(Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MIRRORS)
