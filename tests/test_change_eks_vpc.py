"""An EKS cluster's subnets and security groups may change only within the cluster's VPC (AWS EKS User Guide,
network-reqs): the model fails the update only when the new ``ResourcesVpcConfig`` names subnets or security groups
of a VPC the deploy replaces, followed through ``Ref``, ``Fn::GetAtt`` and other stacks' outputs."""

from __future__ import annotations

from kvtiers.change.cloudformation import CfnAction, resource_changes

NETWORK, PLATFORM = "env-network", "env-platform"


def _vpc_and_subnet(name: str, cidr: str) -> dict:
    return {
        f"{name}Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": cidr}},
        f"{name}Subnet": {
            "Type": "AWS::EC2::Subnet",
            "Properties": {"VpcId": {"Ref": f"{name}Vpc"}, "CidrBlock": cidr, "AvailabilityZoneId": "use1-az2"},
        },
    }


def _network(cluster_cidr: str, other_cidr: str) -> dict:
    resources = {**_vpc_and_subnet("Cluster", cluster_cidr), **_vpc_and_subnet("Other", other_cidr)}
    outputs = {f"Subnet{n}": {"Value": {"Ref": f"{n}Subnet"}} for n in ("Cluster", "Other")}
    return {"Resources": resources, "Outputs": outputs}


def _platform(subnet_ids: list) -> dict:
    cluster = {
        "Type": "AWS::EKS::Cluster",
        "Properties": {"Name": "env", "RoleArn": "arn", "ResourcesVpcConfig": {"SubnetIds": subnet_ids}},
    }
    return {"Resources": {"Cluster": cluster}}


def _read(output: str) -> dict:
    return {"Fn::GetStackOutput": {"StackName": NETWORK, "Region": "us-east-1", "OutputName": output}}


def _cluster(before: dict, after: dict):
    return next(c for c in resource_changes(before, after) if c.logical_id == "Cluster")


def test_an_eks_subnet_change_while_another_vpc_is_replaced_updates_in_place():
    before = {NETWORK: _network("10.0.0.0/16", "10.1.0.0/16"), PLATFORM: _platform([_read("SubnetCluster")])}
    after = {
        NETWORK: _network("10.0.0.0/16", "10.2.0.0/16"),
        PLATFORM: _platform([_read("SubnetCluster"), "subnet-extra"]),
    }
    assert any(c.logical_id == "OtherVpc" and c.action is CfnAction.REPLACE for c in resource_changes(before, after))
    cluster = _cluster(before, after)
    assert (cluster.action, cluster.error) == (CfnAction.UPDATE, None)


def test_an_eks_cluster_whose_new_subnets_are_in_the_replaced_vpc_fails():
    before = {NETWORK: _network("10.0.0.0/16", "10.1.0.0/16"), PLATFORM: _platform([_read("SubnetCluster")])}
    after = {NETWORK: _network("10.3.0.0/16", "10.1.0.0/16"), PLATFORM: _platform([_read("SubnetCluster")])}
    cluster = _cluster(before, after)
    assert cluster.action is CfnAction.FAIL and cluster.error and "new VPC" in cluster.error


def test_an_eks_cluster_moved_to_subnets_of_the_other_vpc_in_the_same_stack_fails_when_that_vpc_is_replaced():
    before = {NETWORK: {"Resources": {**_network("10.0.0.0/16", "10.1.0.0/16")["Resources"]}}}
    before[NETWORK]["Resources"]["Cluster"] = _platform([{"Ref": "ClusterSubnet"}])["Resources"]["Cluster"]
    after = {NETWORK: {"Resources": {**_network("10.0.0.0/16", "10.2.0.0/16")["Resources"]}}}
    after[NETWORK]["Resources"]["Cluster"] = _platform([{"Ref": "OtherSubnet"}])["Resources"]["Cluster"]
    assert _cluster(before, after).action is CfnAction.FAIL
