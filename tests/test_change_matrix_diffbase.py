"""Change-matrix rows for what a review synth's templates cannot show: a new pin of the HyperPod dependency chart
(left out of every review synth) and a dependency bump (the same templates when both sides are synthesized with one
venv). Real synths of the shipped dev environment."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kvtiers.change.report import assembly_change, markdown
from kvtiers.cli import diff as differ
from tests.conftest import CONFIG_DIR, ROOT
from tests.synth import synth

REVISION = "0123456789abcdef0123456789abcdef01234567"


def _variant(tmp_path: Path, change) -> Path:
    raw = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
    change(raw)
    (tmp_path / "env.yaml").write_text(yaml.safe_dump(raw))
    return synth(tmp_path / "env.yaml", tmp_path / "cdk.out").outdir


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Path:
    return synth(CONFIG_DIR / "dev.yaml", tmp_path_factory.mktemp("dev") / "cdk.out").outdir


def test_a_new_dependency_chart_revision_is_a_helm_upgrade_in_the_report(tmp_path, shipped, dev_env):
    pinned = dev_env.hyperpod.dependency_chart.revision
    after = _variant(tmp_path, lambda raw: raw["hyperpod"].update(dependency_chart={"revision": REVISION}))
    change = assembly_change("dev", shipped, after)
    assert change.errors == () and change.resources == ()
    assert change.chart is not None
    assert change.summary().endswith(f"; dependency chart {pinned[:7]} -> {REVISION[:7]} (Helm upgrade)")
    assert change.chart.detail.startswith(
        f"HyperPod dependency chart: revision {pinned} -> {REVISION}: the platform stack runs `helm upgrade "
        "--install` of release kube-system/hyperpod-dependencies"
    )
    assert f"`git diff {pinned[:12]} {REVISION[:12]} -- helm_chart/`" in change.chart.detail
    assert change.chart.detail in markdown([change])


def test_a_chart_installed_by_hand_from_now_on_is_an_uninstall_on_deploy(tmp_path, shipped):
    after = _variant(tmp_path, lambda raw: raw["hyperpod"].update(dependency_chart={"source": "external"}))
    change = assembly_change("dev", shipped, after)
    assert change.chart is not None and change.chart.summary == "dependency chart asset -> external"
    assert "runs `helm uninstall` of release kube-system/hyperpod-dependencies" in change.chart.detail


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_a_dependency_bump_lists_the_pins_and_says_when_the_base_could_not_be_built(tmp_path, monkeypatch):
    """The base pins cdk8s-plus-33 2.5.62, the working tree 2.5.63. Offline (pip reaches no index), the base cannot
    get its own venv: the report says the dependencies were not compared, and which pins moved."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("app.py", "cdk.json", "cdk.context.json", "pyproject.toml", "package.json", "package-lock.json"):
        shutil.copy(ROOT / name, repo / name)
    for folder in ("kvtiers", "config"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__"))
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"cdk8s-plus-33==2.5.63"' in pyproject
    (repo / "pyproject.toml").write_text(pyproject.replace('"cdk8s-plus-33==2.5.63"', '"cdk8s-plus-33==2.5.62"'))
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setenv("KVTIERS_DIFF_CACHE", str(tmp_path / "cache"))
    compared = differ.diff_revision(repo, "HEAD", [Path("config/dev.yaml")])
    (change,) = compared.changes
    assert change.errors == () and change.resources == () and change.chart is None
    lines = compared.dependency_lines()
    assert lines[0].startswith("- **dependencies were not compared**: installing the base's Python pins into ")
    assert lines[0].endswith(
        "the base was synthesized with this change's dependencies, so what they change in the templates is not shown"
    )
    assert f"installing the base's Python pins into {tmp_path / 'cache'} failed (ERROR: " in lines[0]  # pip's words
    assert lines[-1] == "| cdk8s-plus-33 | 2.5.62 | 2.5.63 |"
    text = markdown(compared.changes, preface=lines)
    assert text.splitlines()[3] == lines[0]  # right under the summary line of the environment
