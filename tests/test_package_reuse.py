"""The construct library as other teams use it: built into a wheel (with its type marker, scripts and license) and
installed into fresh virtual environments, from which the example apps synthesize (from the installed copy, not
from this source tree):

- beside the project's own pinned dependencies (the wheel's contents, the reuse example's objects);
- at the floors of [project].dependencies (each at its lowest version, all together) and at the newest versions
  those ranges admit, without any extra (no pydantic, no cdk-nag): every ``examples/*/app.py`` synthesizes
  (tests/test_architecture.py imports every module of the library's side with the extras' modules blocked);
- the app (``app.py``, the ``app`` extra) at the floors of the library and of that extra: both environments
  synthesize the Kubernetes objects of the committed snapshot.

The venvs are installed with pip's cache from PyPI (about 15 s each once the wheels are cached).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.golden_snapshot import ENVIRONMENTS, differences, golden_path, snapshot
from tests.synth import ROOT, cdk_context

REUSE_EXAMPLE = ROOT / "examples" / "reuse_app" / "app.py"
EXAMPLES = sorted((ROOT / "examples").glob("*/app.py"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
COMMON_PINS = ("pyyaml==6.0.2", "pydantic==2.13.5")
"""Pins an app beside kvtiers may hold (this file's `lmcache-contract` group pins the first; the 2026-12-07 library
review could not install the wheel beside either)."""


def requirements(*extras: str) -> list[Requirement]:
    """[project].dependencies (the library's), or the requirements of ``extras`` (without ``kvtiers[...]``)."""
    if not extras:
        return [Requirement(r) for r in PROJECT["dependencies"]]
    found = [Requirement(r) for extra in extras for r in PROJECT["optional-dependencies"][extra]]
    return [r for r in found if canonicalize_name(r.name) != canonicalize_name(PROJECT["name"])]


def floor(requirement: Requirement) -> str:
    (version,) = [s.version for s in requirement.specifier if s.operator == ">="]
    return version


def app_pins() -> dict[str, Version]:
    pins = {}
    for pin in map(Requirement, PYPROJECT["dependency-groups"]["app"]):
        (exact,) = pin.specifier
        assert exact.operator == "==", pin
        pins[canonicalize_name(pin.name)] = Version(exact.version)
    return pins


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The kvtiers wheel, built offline (no build isolation) from a copy of the sources, so that nothing left in
    this tree (build/, egg-info) can slip into it."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "kvtiers", source / "kvtiers", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("kvtiers-*.whl")
    return built


def test_the_wheel_ships_the_type_marker_the_scripts_and_the_license(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    scripts = {str(path.relative_to(ROOT)) for path in (ROOT / "kvtiers").rglob("*.sh")}
    assert len(scripts) >= 2, scripts
    assert "kvtiers/py.typed" in names
    assert scripts <= names, scripts - names
    dist_info = f"kvtiers-{PROJECT['version']}.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    license_text = zipfile.ZipFile(wheel).read(f"{dist_info}/licenses/LICENSE").decode()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def test_the_changelog_opens_with_this_version():
    """Library users read what changed by version: the newest entry is headed with pyproject.toml's version."""
    headings = [line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")]
    assert headings[0].split()[1] == PROJECT["version"], headings[0]


@pytest.fixture(scope="module")
def installed_venv(tmp_path_factory, wheel) -> Path:
    venv = tmp_path_factory.mktemp("consumer") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(
        subprocess.check_output(
            [str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    # kvtiers itself is installed from its wheel; its pinned dependencies are reused from the project venv (a
    # .pth line adds the directory but runs none of its .pth files, so the editable kvtiers stays out).
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    (site / "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_installed_package_has_the_public_constructs_and_data(installed_venv, tmp_path):
    probe = (
        "import kvtiers, kvtiers.constructs as c, kvtiers.k8s_charts.serving as s, kvtiers.k8s_charts.curvine_l2 as l2;"
        "from kvtiers.constructs.hyperpod_cluster import LIFECYCLE_DIR;"
        "print(kvtiers.__file__); print((LIFECYCLE_DIR / 'on_create.sh').is_file())"
    )
    out = subprocess.check_output([str(installed_venv / "bin/python"), "-c", probe], cwd=tmp_path, text=True)
    path, has_script = out.split()
    assert str(installed_venv) in path and str(ROOT) not in path
    assert has_script == "True"


def synthesize_outside_the_tree(venv: Path, workdir: Path, env: dict[str, str] | None = None) -> Path:
    """``workdir``'s app.py (copied there from this tree) run with ``venv``'s Python; its cloud assembly."""
    environment = {**os.environ, **(env or {}), "CDK_OUTDIR": str(workdir / "out")}
    environment.pop("PYTHONPATH", None)
    run = subprocess.run(
        [str(venv / "bin/python"), "app.py"],
        cwd=workdir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return workdir / "out"


def copy_example(example: Path, workdir: Path) -> Path:
    """The example's folder (its app.py and any module beside it) in ``workdir``."""
    shutil.copytree(example.parent, workdir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return workdir


def test_example_app_synthesizes_from_the_installed_package(installed_venv, tmp_path):
    out = synthesize_outside_the_tree(installed_venv, copy_example(REUSE_EXAMPLE, tmp_path))
    template = json.loads((out / "team-endpoint.template.json").read_text())
    manifests = [r for r in template["Resources"].values() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"]
    # The endpoint's NetworkPolicies and its pods, each one manifest.
    bodies = [json.dumps(m["Properties"]["Manifest"]) for m in manifests]
    (policies,) = [b for b in bodies if "Deployment" not in b]
    (pods,) = [b for b in bodies if "Deployment" in b]
    assert "NetworkPolicy" in policies and "team-llama8b-router" in policies
    assert "team-llama8b-engine" in pods and "fs://localhost:0/mnt/curvine/l2cache/" in pods
    roles = [r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::PodIdentityAssociation"]
    assert roles and roles[0]["Properties"]["ServiceAccount"] == "team-llama8b-engine"


# --------------------------------------------------------------------------------------------------- version ranges


def test_the_library_declares_floors_and_ranges_and_the_app_pins_a_version_inside_each():
    pins = app_pins()
    for requirement in [*requirements(), *requirements(*PROJECT["optional-dependencies"])]:
        assert not any(s.operator == "==" for s in requirement.specifier), f"{requirement} is an exact pin"
        assert any(s.operator == "<" for s in requirement.specifier), f"{requirement} has no upper bound"
        floor(requirement)
        assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)]), requirement
    # The tool reads environment files and builds the app's stacks: the `cli` extra brings the `app` extra.
    assert f"{PROJECT['name']}[app]" in PROJECT["optional-dependencies"]["cli"]


def test_common_pins_resolve_beside_the_wheel_and_its_app_extra(wheel):
    """pip resolves the wheel with the ``app`` extra beside pins other projects hold (from PyPI, nothing installed)."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--disable-pip-version-check",
            f"{wheel}[app]",
            *COMMON_PINS,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]


def make_venv(venv: Path, *install: str, constraints: list[str]) -> Path:
    """A fresh venv with ``install`` from PyPI (through pip's cache) under ``constraints``; not byte-compiled
    (aws-cdk-lib's modules are large, and Python compiles what it imports)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    constraints_file = venv / "constraints.txt"
    constraints_file.write_text("".join(f"{line}\n" for line in constraints))
    subprocess.run(
        [
            str(venv / "bin/python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "-c",
            str(constraints_file),
            *install,
        ],
        check=True,
        timeout=900,
    )
    return venv


def installed(venv: Path) -> dict[str, Version]:
    script = "import importlib.metadata as m, json; print(json.dumps({d.name: d.version for d in m.distributions()}))"
    found = json.loads(subprocess.check_output([str(venv / "bin/python"), "-c", script], text=True))
    return {canonicalize_name(name): Version(version) for name, version in found.items()}


@pytest.fixture(scope="module", params=["floors", "newest"])
def library_venv(request, tmp_path_factory, wheel) -> tuple[str, Path]:
    """A team's venv with the wheel and none of its extras: every library dependency at its floor, or whatever pip
    picks by itself (the newest the ranges admit)."""
    case = request.param
    constraints = [f"{r.name}=={floor(r)}" for r in requirements()] if case == "floors" else []
    return case, make_venv(tmp_path_factory.mktemp(f"library-{case}") / "venv", str(wheel), constraints=constraints)


def test_the_library_venv_holds_the_floors_or_the_newest_versions_and_no_extra(library_venv):
    case, venv = library_venv
    versions = installed(venv)
    pins = app_pins()
    for requirement in requirements():
        version = versions[canonicalize_name(requirement.name)]
        if case == "floors":
            assert version == Version(floor(requirement)), requirement
        else:
            # The app pins the newest release of each when it was last bumped.
            assert version >= pins[canonicalize_name(requirement.name)], requirement
    if case == "floors":
        # Another minor of aws-cdk-lib than the app's.
        assert versions["aws-cdk-lib"].minor != pins["aws-cdk-lib"].minor
    extras = {canonicalize_name(r.name) for r in requirements(*PROJECT["optional-dependencies"])}
    assert {"pydantic", "cdk-nag"} <= extras
    assert not extras & versions.keys(), extras & versions.keys()


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.parent.name for example in EXAMPLES])
def test_every_example_synthesizes_in_the_library_venv(library_venv, example, tmp_path):
    _, venv = library_venv
    out = synthesize_outside_the_tree(venv, copy_example(example, tmp_path))
    templates = [json.loads(path.read_text()) for path in out.glob("*.template.json")]
    assert templates and all(template["Resources"] for template in templates)


def test_without_the_cli_extra_the_tool_names_the_extra(library_venv):
    _, venv = library_venv
    run = subprocess.run([str(venv / "bin/kvtiers"), "--help"], capture_output=True, text=True)
    assert run.returncode == 1 and "pip install 'kvtiers[cli]'" in run.stderr and "Traceback" not in run.stderr


# --------------------------------------------------------------------------------------------------- the app at floors


@pytest.fixture(scope="module")
def app_floors_venv(tmp_path_factory, wheel) -> Path:
    constraints = [f"{r.name}=={floor(r)}" for r in (*requirements(), *requirements("app"))]
    return make_venv(tmp_path_factory.mktemp("app-floors") / "venv", f"{wheel}[app]", constraints=constraints)


def test_the_app_venv_holds_the_floors(app_floors_venv):
    versions = installed(app_floors_venv)
    for requirement in (*requirements(), *requirements("app")):
        assert versions[canonicalize_name(requirement.name)] == Version(floor(requirement)), requirement


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_the_app_at_the_floors_renders_the_objects_of_the_snapshot(app_floors_venv, environment, tmp_path):
    """app.py as `cdk synth` runs it (the context of cdk.json and cdk.context.json, an offline review synth), with
    kvtiers from the wheel; the CloudFormation may differ with aws-cdk-lib, the Kubernetes objects may not."""
    shutil.copy(ROOT / "app.py", tmp_path / "app.py")
    shutil.copytree(ROOT / "config", tmp_path / "config")
    context = {**cdk_context(), "config": f"config/{environment}.yaml", "kvtiers:review": "true"}
    out = synthesize_outside_the_tree(app_floors_venv, tmp_path, env={"CDK_CONTEXT_JSON": json.dumps(context)})
    expected = json.loads(golden_path(environment).read_text())
    synthesized = json.loads(json.dumps(snapshot(out)))
    assert synthesized["templates"].keys() == expected["templates"].keys()
    found = differences(expected["kubernetes"], synthesized["kubernetes"])
    assert not found, "\n".join(found[:40])
