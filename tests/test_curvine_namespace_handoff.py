"""The manifest that creates the serving namespace is retained, whoever creates it: its ``kubectl delete`` (a
removal, a new logical ID, the rollback of the deploy that created it) would delete the claim, the janitor and every
endpoint in the namespace. Built as a library user would, without the app."""

from __future__ import annotations

import aws_cdk as cdk
import cdk8s
import pytest
from aws_cdk import assertions
from aws_cdk import aws_eks_v2 as eks_v2

from kvtiers.constructs import InstanceGroup
from kvtiers.constructs.curvine import CurvineL2
from kvtiers.constructs.eks_cluster import as_cluster_interface
from kvtiers.k8s_charts.namespaces import NamespaceChart
from tests.test_curvine_dedication import team_platform


def platform(*, own_namespace: bool | None) -> tuple[cdk.Stack, CurvineL2]:
    """``own_namespace``: None, the L2 creates it; True/False, the team's manifest with/without ``overwrite``."""
    stack, eks, hyperpod, network = team_platform(
        [InstanceGroup(name="g6e-a", instance_type="ml.g6e.12xlarge", count=2)]
    )
    manifest = None
    if own_namespace is not None:
        manifest = eks_v2.KubernetesManifest(
            stack,
            "TeamNamespace",
            cluster=as_cluster_interface(eks.cluster),
            manifest=NamespaceChart(cdk8s.App(), "ns", names=("serving",)).to_json(),
            overwrite=own_namespace,
        )
    curvine = CurvineL2(
        stack, "Curvine", eks_cluster=eks, hyperpod=hyperpod, network=network, serving_namespace_manifest=manifest
    )
    return stack, curvine


def namespace_resource(stack: cdk.Stack) -> dict:
    resources = assertions.Template.from_stack(stack).to_json()["Resources"]
    (found,) = [
        r
        for r in resources.values()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        and '"kind":"Namespace"' in str(r["Properties"])
        and '"name":"serving"' in str(r["Properties"])
    ]
    return found


def test_the_l2s_own_namespace_manifest_is_retained():
    stack, _ = platform(own_namespace=None)
    resource = namespace_resource(stack)
    assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"


def test_a_team_namespace_manifest_is_retained_too():
    stack, _ = platform(own_namespace=True)
    resource = namespace_resource(stack)
    assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"


def test_a_team_namespace_manifest_without_overwrite_is_refused():
    with pytest.raises(ValueError, match=r"serving_namespace_manifest team/TeamNamespace needs overwrite=True"):
        platform(own_namespace=False)
