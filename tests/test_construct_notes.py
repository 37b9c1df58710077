"""What the constructs say about choices they make for a library user: EksCluster when it chooses the OIDC provider
(an older app whose deployed cluster trusts the custom-resource provider must learn how to keep it before its deploy
fails), HyperPodCluster when it reserves tiered-storage memory that kvtiers' serving paths never read."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import assertions

from kvtiers.constructs import EksCluster, HyperPodCluster, HyperPodNetwork, InstanceGroup
from kvtiers.constructs.eks_cluster import NATIVE_OIDC_PROVIDER_FLAG
from kvtiers.constructs.network import NewVpcOptions
from tests.synth import cdk_context


@pytest.mark.parametrize(("flag", "told"), [(None, True), (True, False), (False, False)])
def test_the_cluster_says_so_only_when_it_chose_the_provider(flag, told):
    context = {k: v for k, v in cdk_context().items() if k != NATIVE_OIDC_PROVIDER_FLAG}
    if flag is not None:
        context[NATIVE_OIDC_PROVIDER_FLAG] = flag
    stack = cdk.Stack(cdk.App(context=context), "oidc", env=cdk.Environment(account="111111111111", region="us-east-1"))
    network = HyperPodNetwork(stack, "Network", vpc=NewVpcOptions(hyperpod_az_id="use1-az2"))
    EksCluster(stack, "Eks", vpc=network.vpc, subnets=network.eks_subnets, security_group=network.security_group)
    infos = assertions.Annotations.from_stack(stack).find_info("*", assertions.Match.string_like_regexp("native-oidc"))
    assert bool(infos) is told
    if told:
        assert "set the flag to false" in str(infos[0].entry.data)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_hyperpod_cluster_says_what_its_tiered_storage_memory_is_for(enabled):
    stack = cdk.Stack(
        cdk.App(context=cdk_context()), "tiered", env=cdk.Environment(account="111111111111", region="us-east-1")
    )
    network = HyperPodNetwork(stack, "Network", vpc=NewVpcOptions(hyperpod_az_id="use1-az2"))
    eks = EksCluster(stack, "Eks", vpc=network.vpc, subnets=network.eks_subnets, security_group=network.security_group)
    HyperPodCluster(
        stack,
        "HyperPod",
        eks_cluster=eks,
        dependencies=None,
        subnet=network.hyperpod_subnet,
        security_group=network.security_group,
        instance_groups=[InstanceGroup(name="g6e-a", instance_type="ml.g6e.12xlarge", count=1)],
        tiered_storage_enabled=enabled,
    )
    infos = assertions.Annotations.from_stack(stack).find_info(
        "*", assertions.Match.string_like_regexp("tiered-storage")
    )
    assert bool(infos) is enabled
    if enabled:
        assert "20 %" in str(infos[0].entry.data) and "tiered_storage_enabled=False" in str(infos[0].entry.data)


def test_an_add_on_installed_twice_is_named_not_a_construct_id_clash():
    stack = cdk.Stack(
        cdk.App(context=cdk_context()), "twice", env=cdk.Environment(account="111111111111", region="us-east-1")
    )
    network = HyperPodNetwork(stack, "Network", vpc=NewVpcOptions(hyperpod_az_id="use1-az2"))
    eks = EksCluster(stack, "Eks", vpc=network.vpc, subnets=network.eks_subnets, security_group=network.security_group)
    eks.add_addon("aws-ebs-csi-driver", "v1.47.0-eksbuild.1")
    with pytest.raises(ValueError, match=r"add-on 'aws-ebs-csi-driver' is already installed on this cluster"):
        eks.add_addon("aws-ebs-csi-driver", "v1.48.0-eksbuild.1")
