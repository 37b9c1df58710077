"""`kvtiers diff --base`: the base is synthesized with the dependencies it pins (a venv per lock hash, or the report
says they were not compared), an environment file given by absolute path is the repository's file on both sides,
and the stacks read from a cloud assembly are the ones its last synth wrote.

The revision tests run the real diff on a small git repository whose `app.py` writes one template from what it
finds: the version of an installed package and the environment file. The package is a wheel built here and
installed offline (`PIP_NO_INDEX`, `PIP_FIND_LINKS`), so no registry is reached.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvtiers.change.cloudformation import CfnAction
from kvtiers.change.dependency_chart import read_chart_record
from kvtiers.cli import diff as differ
from kvtiers.cli.main import app
from kvtiers.cli.synth_env import PinChange, pin_changes, read_lock
from tests.conftest import ROOT
from tests.test_cli_diff import assembly, engine

runner = CliRunner()
PACKAGE = "kvtiers-diff-probe"
"""A package no registry has: only the wheels built here can satisfy it."""

FAKE_APP = textwrap.dedent(
    """\
    import json, os, re
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    try:
        installed = version("kvtiers-diff-probe")
    except PackageNotFoundError:
        installed = "none"
    config = Path(json.loads(os.environ["CDK_CONTEXT_JSON"])["config"]).read_text().strip()
    parameter = {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": "v"}}
    # What the synth found, in the logical IDs: a different finding is a resource deleted and another created.
    ids = [f"Probe{re.sub('[^A-Za-z0-9]', '', installed)}", f"Config{re.sub('[^A-Za-z0-9]', '', config)}"]
    template = {"Resources": {i: parameter for i in ids}}
    Path(os.environ["CDK_OUTDIR"], "env-app.template.json").write_text(json.dumps(template))
    """
)


def pyproject(pin: str) -> str:
    return textwrap.dedent(
        f"""\
        [project]
        name = "kvtiers"
        dependencies = ["{PACKAGE}>=1"]

        [dependency-groups]
        app = ["{PACKAGE}=={pin}"]
        """
    )


def wheel(folder: Path, version: str) -> Path:
    """A pure-Python wheel of :data:`PACKAGE` at ``version`` (what pip needs of one: the module, METADATA, WHEEL,
    RECORD)."""
    module, info = PACKAGE.replace("-", "_"), f"{PACKAGE.replace('-', '_')}-{version}.dist-info"
    path = folder / f"{PACKAGE.replace('-', '_')}-{version}-py3-none-any.whl"
    files = {
        f"{module}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kvtiers-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]))
    return path


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A repository whose last commit pins the probe at 1.0 with `config/env.yaml` "base", and whose working tree
    pins 2.0 with "head"; pip offline, with the wheels of both versions, and its own diff cache."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "2.0"):
        wheel(wheels, version)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("KVTIERS_DIFF_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "repo"
    (root / "config").mkdir(parents=True)
    (root / "app.py").write_text(FAKE_APP)
    (root / "cdk.json").write_text(json.dumps({"context": {}}))
    (root / "cdk.context.json").write_text("{}")
    (root / "pyproject.toml").write_text(pyproject("1.0"))
    (root / "config" / "env.yaml").write_text("base\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    (root / "pyproject.toml").write_text(pyproject("2.0"))
    (root / "config" / "env.yaml").write_text("head\n")
    return root


def created_and_deleted(compared: differ.RevisionDiff) -> tuple[set[str], set[str]]:
    (change,) = compared.changes
    return (
        {c.logical_id for c in change.resources if c.action is CfnAction.CREATE},
        {c.logical_id for c in change.resources if c.action is CfnAction.DELETE},
    )


def test_a_base_that_pins_other_versions_is_synthesized_in_a_venv_of_its_own_pins(repo, tmp_path):
    compared = differ.diff_revision(repo, "HEAD", [Path("config/env.yaml")])
    # The working tree is synthesized with this interpreter (no probe installed), the base with its own pin.
    created, deleted = created_and_deleted(compared)
    assert "Probe10" in deleted and "Probenone" in created
    assert compared.base.not_compared == ()
    (venv,) = compared.base.built
    assert venv.parent == tmp_path / "cache" and venv.name.startswith("python-")
    lines = compared.dependency_lines()
    assert lines[0] == f"- dependencies: 1 pin(s) changed; the base was synthesized with its own (`{venv}`)"
    assert lines[2:] == [
        "### Dependencies",
        "",
        "| package | base | this change |",
        "|---|---|---|",
        "| kvtiers-diff-probe | 1.0 | 2.0 |",
    ]
    # The next diff of the same base reuses the venv.
    installed = (venv / ".installed").stat().st_mtime_ns
    again = differ.diff_revision(repo, "HEAD", [Path("config/env.yaml")])
    assert again.base.built == (venv,) and (venv / ".installed").stat().st_mtime_ns == installed
    assert created_and_deleted(again) == (created, deleted)


def test_a_base_whose_pins_are_the_working_trees_uses_this_interpreter_and_builds_nothing(repo, tmp_path):
    (repo / "pyproject.toml").write_text(pyproject("1.0") + "\n[tool.ruff]\nline-length = 100\n")
    compared = differ.diff_revision(repo, "HEAD", [Path("config/env.yaml")])
    assert created_and_deleted(compared) == ({"Confighead"}, {"Configbase"})  # one interpreter: no probe on either
    assert compared.base.built == () and compared.base.not_compared == () and compared.pins == ()
    assert compared.dependency_lines() == []
    assert not (tmp_path / "cache").exists()


def test_pins_that_cannot_be_installed_are_reported_as_not_compared(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # offline, and no wheel of the probe
    compared = differ.diff_revision(repo, "HEAD", [Path("config/env.yaml")])
    assert created_and_deleted(compared)[1] == {"Configbase"}  # both synthesized with this interpreter
    (reason,) = compared.base.not_compared
    assert reason.startswith(f"installing the base's Python pins into {tmp_path / 'cache'} failed (")
    assert PACKAGE in reason  # pip's last words name what it could not find
    lines = compared.dependency_lines()
    assert lines[0].startswith("- **dependencies were not compared**: installing the base's Python pins into ")
    assert lines[0].endswith(
        "the base was synthesized with this change's dependencies, so what they change in the templates is not shown"
    )
    assert "| kvtiers-diff-probe | 1.0 | 2.0 |" in lines
    assert not [p for p in (tmp_path / "cache").glob("python-*") if p.is_dir()]  # nothing half-built stays


def test_a_base_on_another_node_js_needs_its_own_or_says_it_was_not_compared(repo, tmp_path, monkeypatch):
    lock = {"lockfileVersion": 3, "packages": {"": {}, "node_modules/node": {"version": "0.0.0-kvtiers-test"}}}
    (repo / "package.json").write_text(json.dumps({"devDependencies": {"node": "0.0.0-kvtiers-test"}}))
    (repo / "package-lock.json").write_text(json.dumps(lock))
    git(repo, "add", "package.json", "package-lock.json")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "node")
    (repo / "package-lock.json").write_text(json.dumps(lock).replace("0.0.0-kvtiers-test", "0.0.1-kvtiers-test"))
    monkeypatch.setenv("npm_config_offline", "true")  # no registry: npm ci fails at once
    compared = differ.diff_revision(repo, "HEAD", [Path("config/env.yaml")])
    (reason,) = compared.base.not_compared  # the Python pins were installed (the first test)
    assert reason.startswith(f"installing the base's Node.js 0.0.0-kvtiers-test into {tmp_path / 'cache'} failed (")
    assert "npm error" in reason  # npm's own words (no such version, or nothing cached for it offline)
    assert "| node (npm) | 0.0.0-kvtiers-test | 0.0.1-kvtiers-test |" in compared.dependency_lines()


def test_an_absolute_environment_file_is_the_repositorys_file_on_both_sides(repo):
    compared = differ.diff_revision(repo, "HEAD", [repo / "config" / "env.yaml"])
    created, deleted = created_and_deleted(compared)
    assert "Configbase" in deleted and "Confighead" in created


def test_an_environment_file_outside_the_repository_is_refused(repo, tmp_path):
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("x\n")
    with pytest.raises(differ.DiffError, match="not inside the repository .*give an environment file of the repo"):
        differ.diff_revision(repo, "HEAD", [outside])
    result = runner.invoke(app, ["diff", "--base", "HEAD", "-c", str(outside)])
    assert result.exit_code == 2 and "not inside the repository" in result.output


def stack_manifest(folder: Path, *stacks: str) -> None:
    """The ``manifest.json`` a synth of ``stacks`` writes (the part that lists them)."""
    artifacts = {
        s: {"type": "aws:cloudformation:stack", "properties": {"templateFile": f"{s}.template.json"}} for s in stacks
    }
    (folder / "manifest.json").write_text(json.dumps({"version": "53.0.0", "artifacts": artifacts}))


def test_the_stacks_of_a_cloud_assembly_are_those_its_last_synth_wrote(tmp_path):
    before = assembly(tmp_path / "a", [engine("img:1")])
    after = assembly(tmp_path / "b", [engine("img:1")])
    for folder in (before, after):
        stack_manifest(folder, "env-workloads")
    # An earlier synth of another environment into the same folder left its template there.
    vpc = {"Resources": {"OtherVpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.9.0.0/16"}}}}
    (after / "other-network.template.json").write_text(json.dumps(vpc))
    result = runner.invoke(app, ["diff", "--before", str(before), "--after", str(after)])
    assert result.exit_code == 0, result.output
    assert "no resource changes" in result.output.splitlines()[2]
    assert "OtherVpc" not in result.output


@pytest.mark.parametrize("checkout", ["at the pinned revision", "at another revision"])
def test_the_synths_of_a_diff_are_the_same_whatever_vendor_holds(tmp_path, dev_env, checkout):
    """`make hyperpod-chart` leaves a checkout in vendor/: the diff's review synth neither adds its chart (a false
    "created" against a base without vendor/) nor stops when it is at another revision."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("app.py", "cdk.json", "cdk.context.json"):
        shutil.copy(ROOT / name, tree / name)
    for folder in ("kvtiers", "config"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=shutil.ignore_patterns("__pycache__"))
    pinned = dev_env.hyperpod.dependency_chart.revision
    checkout_dir = tree / "vendor" / "sagemaker-hyperpod-cli"
    (checkout_dir / ".git").mkdir(parents=True)
    (checkout_dir / ".git" / "HEAD").write_text((pinned if checkout.endswith("pinned revision") else "2" * 40) + "\n")
    chart = checkout_dir / "helm_chart" / "HyperPodHelmChart"
    chart.mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\n")
    out = tmp_path / "out"
    out.mkdir()
    differ.synth(tree, Path("config/dev.yaml"), out)
    platform = json.loads((out / f"{dev_env.name}-platform.template.json").read_text())
    assert not [r for r in platform["Resources"].values() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"]
    assert read_chart_record(out).revision == pinned


def test_the_synth_lock_is_the_app_pins_and_node_and_a_test_tools_pin_is_no_part_of_it(tmp_path):
    pyproject = (ROOT / "pyproject.toml").read_text()
    groups = tomllib.loads(pyproject)["dependency-groups"]
    cdk = next(p for p in groups["app"] if p.startswith("aws-cdk-lib=="))
    tool = groups["test"][-1]
    lock = read_lock(ROOT)
    assert cdk in lock.constraints and tool not in lock.constraints
    assert lock.node == json.loads((ROOT / "package-lock.json").read_text())["packages"]["node_modules/node"]["version"]
    other = tmp_path / "tree"
    other.mkdir()
    shutil.copy(ROOT / "package-lock.json", other)
    (other / "pyproject.toml").write_text(pyproject.replace(f'"{tool}"', f'"{tool}.post1"'))
    assert read_lock(other).python_key() == lock.python_key()
    (other / "pyproject.toml").write_text(pyproject.replace(f'"{cdk}"', '"aws-cdk-lib==2.999.0"'))
    assert read_lock(other).python_key() != lock.python_key()
    assert pin_changes(read_lock(other), lock) == (PinChange("aws-cdk-lib", "2.999.0", cdk.split("==")[1]),)
