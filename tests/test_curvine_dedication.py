"""Synth warns when pods of other workloads can land on the Curvine nodes (issue 25 item 3).

Curvine v0.4.1 authenticates nothing: its masters accept RPC from the whole HyperPod subnet, and every HyperPod node
runs the CSI's FUSE client, which mounts the whole L2. What keeps other workloads off those nodes is a taint that
repels pods (``NoSchedule`` or ``NoExecute``) on every HyperPod group; a label attracts, it does not repel, and
``PreferNoSchedule`` only prefers. Built as a library user would, without the app.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import assertions

from kvtiers.constructs import EksCluster, HyperPodCluster, HyperPodNetwork, InstanceGroup
from kvtiers.constructs.curvine import CURVINE_NODES_OPEN, DEDICATION_TAINT_KEY, CurvineL2
from kvtiers.constructs.hyperpod_cluster import Taint
from kvtiers.constructs.network import NewVpcOptions
from tests.synth import cdk_context

DEDICATED = Taint(key="kvtiers.io/dedicated", value="l2", effect="NoSchedule")
"""The key spelled out, not imported: the documented name users put on their groups."""


def group(name: str, *taints: Taint, **kwargs) -> InstanceGroup:
    checks = {"deep_health_checks": ()} if taints else {}
    return InstanceGroup(
        name=name,
        instance_type="ml.g6e.12xlarge",
        count=2,
        labels={"kvtiers.io/role": "serving"},
        taints=taints,
        **checks,
        **kwargs,
    )


def team_platform(groups: list[InstanceGroup]) -> tuple[cdk.Stack, EksCluster, HyperPodCluster, HyperPodNetwork]:
    """A team's stack with the network, EKS and HyperPod under a Curvine L2, from the documented constructs."""
    app = cdk.App(context=cdk_context())
    stack = cdk.Stack(app, "team", env=cdk.Environment(account="111111111111", region="us-east-1"))
    network = HyperPodNetwork(stack, "Network", vpc=NewVpcOptions(hyperpod_az_id="use1-az2"))
    eks = EksCluster(
        stack,
        "Eks",
        vpc=network.vpc,
        subnets=network.eks_subnets,
        security_group=network.security_group,
        service_ipv4_cidr="172.20.0.0/16",
    )
    hyperpod = HyperPodCluster(
        stack,
        "HyperPod",
        eks_cluster=eks,
        dependencies=None,
        subnet=network.hyperpod_subnet,
        security_group=network.security_group,
        instance_groups=groups,
    )
    return stack, eks, hyperpod, network


def warnings(groups: list[InstanceGroup], worker_groups: list[str] | None = None) -> list[str]:
    stack, eks, hyperpod, network = team_platform(groups)
    CurvineL2(stack, "Curvine", eks_cluster=eks, hyperpod=hyperpod, network=network, worker_groups=worker_groups)
    found = assertions.Annotations.from_stack(stack).find_warning("*", assertions.Match.any_value())
    return [str(w.entry.data) for w in found if CURVINE_NODES_OPEN in str(w.entry.data)]


def test_untainted_groups_are_named_in_one_warning():
    (warning,) = warnings([group("g6e-a"), group("g6e-b", DEDICATED)])
    assert "g6e-a" in warning and "g6e-b" not in warning
    assert "no authentication" in warning and "NoSchedule" in warning


def test_a_group_without_curvine_workers_still_counts():
    # Its FUSE client mounts the whole L2 and it shares the subnet the masters accept RPC from.
    (warning,) = warnings([group("g6e-a", DEDICATED), group("g6e-b")], worker_groups=["g6e-a"])
    assert "g6e-b" in warning


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_every_group_with_the_dedication_taint_means_no_warning(effect):
    assert warnings([group("g6e-a", Taint(key=DEDICATION_TAINT_KEY, value="any", effect=effect))]) == []


def test_a_soft_taint_does_not_dedicate_a_group():
    assert warnings([group("g6e-a", Taint(key=DEDICATION_TAINT_KEY, effect="PreferNoSchedule"))]) != []


def test_a_taint_other_workloads_routinely_tolerate_does_not_dedicate_a_group():
    """GPU operators and device plugins tolerate ``nvidia.com/gpu`` (and a generic ``dedicated``) by convention, so
    those keep nothing off the Curvine nodes: only kvtiers' own key counts."""
    (warning,) = warnings([group("g6e-a", Taint(key="nvidia.com/gpu", effect="NoSchedule"))])
    assert DEDICATION_TAINT_KEY in warning
