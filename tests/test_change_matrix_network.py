"""A new ``network.cidr`` replaces the VPC and with it every subnet and security group; the EKS cluster reads them
(``ResourcesVpcConfig``), which its schema lets update, but EKS takes only subnets of the cluster's own VPC: the
update fails (docs/change-contract.md, "CloudFormation")."""

from __future__ import annotations

from kvtiers.change.cloudformation import CfnAction
from tests.test_change_matrix import variant_changes
from tests.test_change_matrix_stacks import _network_cidr


def test_a_new_vpc_fails_the_eks_cluster_update_instead_of_updating_it_in_place(environment_assemblies):
    change = variant_changes(environment_assemblies, {("dev", "network-cidr"): _network_cidr})["dev", "network-cidr"]
    cluster = next(c for c in change.resources if c.type == "AWS::EKS::Cluster")
    assert cluster.action is CfnAction.FAIL, cluster
    assert any(b.startswith("/properties/ResourcesVpcConfig/SubnetIds") for b in cluster.because)
    assert [e for e in change.errors if cluster.logical_id in e and "EKS refuses" in e]
