"""The pull-request workflow lints clean with actionlint, and runs the README's commands."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.synth import ROOT

WORKFLOW = ROOT / ".github/workflows/pull-request.yml"
ACTIONLINT = str(Path(sys.executable).with_name("actionlint"))


def lint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([ACTIONLINT, "-no-color", str(path)], capture_output=True, text=True, timeout=60)


def test_workflow_lints_clean():
    assert shutil.which(ACTIONLINT)
    result = lint(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_rejects_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.nope }}\n"
    )
    assert lint(bad).returncode == 1


def test_workflow_runs_the_test_command_synth_and_diff():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    test_steps = " ".join(s.get("run", "") for s in workflow["jobs"]["test"]["steps"])
    assert "make test" in test_steps and "make synth CONFIG=" in test_steps
    diff = workflow["jobs"]["diff"]
    assert diff["permissions"]["id-token"] == "write"
    assert any("configure-aws-credentials" in s.get("uses", "") for s in diff["steps"])
    assert "cdk diff" in " ".join(s.get("run", "") for s in diff["steps"])


def test_the_test_job_sets_up_every_supported_python():
    from tools.python_versions import supported_versions

    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["test"]["steps"]
    (setup,) = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
    assert sorted(str(setup["with"]["python-version"]).split()) == supported_versions()


def test_the_pull_request_runs_kvtiers_diff_against_the_base_and_posts_it_with_cdk_diff():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    change = " ".join(s.get("run", "") for s in workflow["jobs"]["change"]["steps"])
    assert "kvtiers diff --base" in change and "|| true" not in change  # its exit code fails the check
    checkout = next(s for s in workflow["jobs"]["change"]["steps"] if "checkout" in s.get("uses", ""))
    assert checkout["with"]["fetch-depth"] == 0
    posted = " ".join(s.get("run", "") for s in workflow["jobs"]["diff"]["steps"])
    assert posted.index("kvtiers-diff.md") < posted.index("cdk diff --all")


def test_the_change_job_warns_when_the_report_says_the_dependencies_were_not_compared(tmp_path):
    from kvtiers.change.report import markdown

    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["change"]["steps"]
    (warn,) = [s for s in steps if s.get("name", "").startswith("Warn when")]
    outputs = {}
    for compared in (True, False):
        (tmp_path / "kvtiers-diff.md").write_text(markdown([], dependencies_compared=compared))
        result = subprocess.run(
            ["bash", "-eo", "pipefail", "-c", warn["run"]], cwd=tmp_path, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        outputs[compared] = result.stdout
    assert outputs[True] == "" and outputs[False].startswith("::warning::kvtiers diff: dependencies NOT compared")


def test_the_change_job_caches_the_base_venvs_and_pip_keyed_on_the_base_pins():
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["change"]["steps"]
    (cache,) = [s for s in steps if s.get("uses", "").startswith("actions/cache@")]
    assert cache["with"]["path"].split() == ["~/.cache/kvtiers/diff-envs", "~/.cache/pip"]
    (pins,) = [s for s in steps if s.get("id") == "base-pins"]
    assert 'origin/$BASE_REF:pyproject.toml" "origin/$BASE_REF:package-lock.json"' in pins["run"]
    assert "steps.base-pins.outputs.hash" in cache["with"]["key"]
    assert steps.index(cache) < next(i for i, s in enumerate(steps) if "kvtiers diff --base" in s.get("run", ""))
