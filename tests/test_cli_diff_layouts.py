"""`kvtiers diff --base` on what it cannot or need not build: another team's layout (requirements.txt, uv, Poetry,
Pipenv) says the dependencies were not compared; a pin the synth never imports builds nothing; a cached venv whose
interpreter is gone is rebuilt; a repository without `cdk.context.json` is diffed.

The revision tests reuse the small git repository and offline wheels of tests/test_cli_diff_base.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvtiers.cli import diff as differ
from kvtiers.cli.main import app
from kvtiers.cli.synth_env import NO_SYNTH_LOCK, SynthEnv, read_lock, synth_closure
from tests import test_cli_diff_base
from tests.conftest import ROOT
from tests.test_cli_diff_base import FAKE_APP, PACKAGE, git, pyproject

repo = test_cli_diff_base.repo  # the fixture: a base pinning the probe at 1.0, a working tree at 2.0

runner = CliRunner()


def commit(root: Path, message: str) -> None:
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)


@pytest.fixture
def cdk_init_repo(tmp_path, monkeypatch) -> Path:
    """A `cdk init` layout: requirements.txt, no pyproject.toml, no cdk.context.json; the working tree bumps
    aws-cdk-lib."""
    monkeypatch.setenv("KVTIERS_DIFF_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "repo"
    (root / "config").mkdir(parents=True)
    (root / "app.py").write_text(FAKE_APP)
    (root / "cdk.json").write_text(json.dumps({"app": "python3 app.py"}))  # no "context"
    (root / "requirements.txt").write_text("aws-cdk-lib==2.200.0\nconstructs>=10.0.0,<11.0.0\n")
    (root / "config" / "env.yaml").write_text("same\n")
    git(root, "init", "-q")
    commit(root, "base")
    (root / "requirements.txt").write_text("aws-cdk-lib==2.201.0\nconstructs>=10.0.0,<11.0.0\n")
    return root


def test_a_requirements_txt_bump_without_a_synth_lock_says_the_dependencies_were_not_compared(cdk_init_repo, tmp_path):
    compared = differ.diff_revision(cdk_init_repo, "HEAD", [Path("config/env.yaml")])
    assert compared.base.not_compared == (
        f"{NO_SYNTH_LOCK} in the base and this change",
        "`requirements.txt` differs (kvtiers installs a base only from pyproject.toml `[dependency-groups] app`)",
    )
    assert compared.base.built == () and not (tmp_path / "cache").exists()
    assert compared.dependency_lines()[0].startswith(
        f"- **dependencies were not compared**: {NO_SYNTH_LOCK} in the base and this change; `requirements.txt` "
    )


def test_not_compared_is_in_the_headline_and_every_summary_line(cdk_init_repo, monkeypatch):
    monkeypatch.chdir(cdk_init_repo)
    result = runner.invoke(app, ["diff", "--base", "HEAD", "-c", "config/env.yaml"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith("in 1 environment(s); dependencies NOT compared")
    assert lines[2].startswith("- env: no errors;") and lines[2].endswith("; dependencies NOT compared")


def test_a_layout_without_a_synth_lock_whose_lock_files_agree_still_says_so(cdk_init_repo):
    git(cdk_init_repo, "checkout", "--", "requirements.txt")
    (cdk_init_repo / "uv.lock").write_text("version = 1\n")
    compared = differ.diff_revision(cdk_init_repo, "HEAD", [Path("config/env.yaml")])
    assert compared.base.not_compared == (
        f"{NO_SYNTH_LOCK} in the base and this change",
        "`uv.lock` differs (kvtiers installs a base only from pyproject.toml `[dependency-groups] app`)",
    )


def two_pins(probe: str, boto3: str) -> str:
    return pyproject(probe).replace(f'"{PACKAGE}=={probe}"]', f'"{PACKAGE}=={probe}", "boto3=={boto3}"]')


def test_a_bump_of_a_pin_the_synth_never_imports_builds_nothing(repo, tmp_path):
    (repo / "pyproject.toml").write_text(two_pins("1.0", "1.0.0"))
    commit(repo, "boto3 pinned")
    (repo / "pyproject.toml").write_text(two_pins("1.0", "2.0.0"))
    compared = differ.diff_revision(repo, "HEAD", [Path("config/env.yaml")])
    assert compared.base.built == () and compared.base.not_compared == ()
    assert not (tmp_path / "cache").exists()
    lines = compared.dependency_lines()
    assert lines[1] == "- not used by the synth (no part of the base's venv): boto3"
    assert lines[-1] == "| boto3 | 1.0.0 | 2.0.0 |"


def test_the_synth_closure_of_the_project_leaves_out_the_command_line_tools_pins():
    used = synth_closure(read_lock(ROOT).requirements)
    assert {"aws-cdk-lib", "constructs", "jsii", "pydantic", "pydantic-core", "cdk-nag", "pyyaml"} <= used
    assert not used & {"boto3", "botocore", "typer", "rich", "kubernetes", "httpx", "cfn-lint", "matplotlib"}


def test_a_cached_venv_whose_interpreter_is_gone_is_rebuilt(repo, tmp_path):
    first = differ.diff_revision(repo, "HEAD", [Path("config/env.yaml")])
    (venv,) = first.base.built
    python = venv / "bin" / "python"
    python.unlink()
    python.symlink_to(tmp_path / "a-python-since-removed")
    again = differ.diff_revision(repo, "HEAD", [Path("config/env.yaml")])
    assert again.base.built == (venv,) and again.base.not_compared == ()
    assert {c.logical_id for c in again.changes[0].resources} == {c.logical_id for c in first.changes[0].resources}


def test_a_synth_whose_interpreter_cannot_start_is_a_diff_error(cdk_init_repo, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(differ.DiffError, match="could not start .*a-python-since-removed"):
        differ.synth(cdk_init_repo, Path("config/env.yaml"), out, SynthEnv(str(tmp_path / "a-python-since-removed")))


def test_the_context_of_a_tree_without_cdk_context_json_or_a_context_key(cdk_init_repo):
    context = json.loads(differ.context_json(cdk_init_repo, Path("config/env.yaml")))
    assert context == {"config": "config/env.yaml", "kvtiers:review": "true"}
