"""``make upstream-mirrors`` keeps only the commits kvtiers was reviewed against: a tag moved upstream is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.upstream import MIRRORED, fetch_mirrors


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def tagged_repo(host: Path, repo: str, tag: str) -> str:
    """A repository under ``host`` with one commit tagged ``tag``; returns that commit."""
    work = host / repo
    work.mkdir(parents=True)
    git("init", "-q", cwd=work)
    (work / "f").write_text("x")
    git("add", "f", cwd=work)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c", cwd=work)
    git("tag", tag, cwd=work)
    (work.parent / f"{work.name}.git").symlink_to(work)
    return git("rev-parse", "HEAD", cwd=work)


def test_the_pinned_tags_are_full_commits():
    assert all(len(commit) == 40 and tag for tag, commit in MIRRORED.values())


def test_a_tag_at_the_reviewed_commit_is_mirrored_and_a_moved_tag_is_refused(tmp_path):
    commit = tagged_repo(tmp_path / "host", "acme/widget", "v1")
    fetch_mirrors(tmp_path / "ok", {"acme/widget": ("v1", commit)}, host=f"file://{tmp_path / 'host'}")
    mirrored = tmp_path / "ok" / "acme+widget" / "repo"
    assert git("--git-dir", str(mirrored), "show", "v1:f", cwd=tmp_path) == "x"
    with pytest.raises(SystemExit, match="kvtiers reviewed 0{40}"):
        fetch_mirrors(tmp_path / "moved", {"acme/widget": ("v1", "0" * 40)}, host=f"file://{tmp_path / 'host'}")


def test_a_commit_pin_is_mirrored_by_its_id(tmp_path):
    commit = tagged_repo(tmp_path / "host", "acme/untagged", "unused")
    fetch_mirrors(tmp_path / "ok", {"acme/untagged": (commit, commit)}, host=f"file://{tmp_path / 'host'}")
    mirrored = tmp_path / "ok" / "acme+untagged" / "repo"
    assert git("--git-dir", str(mirrored), "show", f"{commit}:f", cwd=tmp_path) == "x"


def test_where_the_mirrors_are_required_a_missing_one_fails_the_check(tmp_path):
    """The pull-request workflow fetches the mirrors and sets KVTIERS_UPSTREAM_REQUIRED=1: a check that still finds
    none fails there, so a green run there has read the upstream source."""
    import os
    import sys

    test = tmp_path / "test_needs_mirror.py"
    test.write_text(
        "from tests.upstream import require_upstream\n"
        "def test_it():\n"
        "    require_upstream('CurvineIO/curvine@v0.4.1:README.md')\n"
    )
    # Not inherited: the pull-request workflow runs this very suite with KVTIERS_UPSTREAM_REQUIRED=1.
    outer = {k: v for k, v in os.environ.items() if k != "KVTIERS_UPSTREAM_REQUIRED"}
    env = {**outer, "KVTIERS_UPSTREAM_MIRRORS": str(tmp_path / "none"), "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(test)]
    skipped = subprocess.run(run, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    failed = subprocess.run(
        run, env={**env, "KVTIERS_UPSTREAM_REQUIRED": "1"}, capture_output=True, text=True, cwd=tmp_path
    )
    assert failed.returncode == 1 and "KVTIERS_UPSTREAM_REQUIRED=1" in failed.stdout, failed.stdout
