"""The construct library as other teams use it: built into a wheel (with its type marker and scripts) and installed
into a fresh virtual environment, its example app synthesizes from the installed copy (not from this source tree)."""

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

from tests.synth import ROOT

EXAMPLE = ROOT / "examples" / "reuse_app" / "app.py"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The kvtiers wheel, built offline (no build isolation) from a copy of the sources, so that nothing left in
    this tree (build/, egg-info) can slip into it."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
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


def test_the_wheel_ships_the_type_marker_and_the_scripts(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    scripts = {str(path.relative_to(ROOT)) for path in (ROOT / "kvtiers").rglob("*.sh")}
    assert len(scripts) >= 2, scripts
    assert "kvtiers/py.typed" in names
    assert scripts <= names, scripts - names


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


def synthesize_example(venv: Path, workdir: Path) -> dict:
    """The example app run with ``venv``'s Python from a directory outside this tree; its template."""
    shutil.copy(EXAMPLE, workdir / "app.py")
    env = {**os.environ, "CDK_OUTDIR": str(workdir / "out")}
    env.pop("PYTHONPATH", None)
    run = subprocess.run(
        [str(venv / "bin/python"), "app.py"], cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads((workdir / "out" / "team-endpoint.template.json").read_text())


def test_example_app_synthesizes_from_the_installed_package(installed_venv, tmp_path):
    template = synthesize_example(installed_venv, tmp_path)
    manifests = [r for r in template["Resources"].values() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"]
    assert len(manifests) == 1
    body = json.dumps(manifests[0]["Properties"]["Manifest"])
    assert "team-llama8b-engine" in body and "fs://localhost:0/mnt/curvine/l2cache/" in body
    roles = [r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::PodIdentityAssociation"]
    assert roles and roles[0]["Properties"]["ServiceAccount"] == "team-llama8b-engine"


# --------------------------------------------------------------------------------------------------- version ranges

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def library_requirements() -> list[Requirement]:
    """The library's and its extras' requirements (an extra's ``kvtiers[...]`` brings nothing of its own)."""
    project = PYPROJECT["project"]
    return [
        Requirement(r)
        for r in (*project["dependencies"], *(r for e in project["optional-dependencies"].values() for r in e))
        if canonicalize_name(Requirement(r).name) != canonicalize_name(project["name"])
    ]


def test_the_library_declares_ranges_and_the_app_pins_a_version_inside_each():
    pins = {canonicalize_name(r.name): r for r in map(Requirement, PYPROJECT["dependency-groups"]["app"])}
    for requirement in library_requirements():
        assert not any(s.operator == "==" for s in requirement.specifier), f"{requirement} is an exact pin"
        pin = pins[canonicalize_name(requirement.name)]
        (exact,) = pin.specifier
        assert exact.operator == "==" and requirement.specifier.contains(exact.version), (requirement, pin)


def lowest(name: str) -> str:
    (requirement,) = [r for r in library_requirements() if canonicalize_name(r.name) == canonicalize_name(name)]
    (floor,) = [s.version for s in requirement.specifier if s.operator == ">="]
    return floor


@pytest.fixture(scope="module")
def consumer_with_another_cdk(tmp_path_factory, wheel) -> Path:
    """A team's venv: the kvtiers wheel resolved by pip from PyPI next to the lowest aws-cdk-lib its range admits (a
    different minor from the app's pin), the rest at the app's pins."""
    cdk = lowest("aws-cdk-lib")
    venv = tmp_path_factory.mktemp("team") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    constraints = venv.parent / "constraints.txt"
    constraints.write_text(
        "\n".join(r for r in PYPROJECT["dependency-groups"]["app"] if not r.startswith("aws-cdk-lib")) + "\n"
    )
    subprocess.run(
        [
            str(venv / "bin/python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-c",
            str(constraints),
            str(wheel),
            f"aws-cdk-lib=={cdk}",
        ],
        check=True,
        timeout=900,
    )
    return venv


def test_the_wheel_installs_and_synthesizes_beside_another_aws_cdk_lib(consumer_with_another_cdk, tmp_path):
    version = subprocess.check_output(
        [
            str(consumer_with_another_cdk / "bin/python"),
            "-c",
            "import importlib.metadata as m; print(m.version('aws-cdk-lib'))",
        ],
        text=True,
    ).strip()
    assert version == lowest("aws-cdk-lib") and version.split(".")[1] != "275"
    assert synthesize_example(consumer_with_another_cdk, tmp_path)["Resources"]


def test_without_the_cli_extra_the_tool_names_the_extra(consumer_with_another_cdk):
    run = subprocess.run([str(consumer_with_another_cdk / "bin/kvtiers"), "--help"], capture_output=True, text=True)
    assert run.returncode == 1 and "pip install 'kvtiers[cli]'" in run.stderr and "Traceback" not in run.stderr
