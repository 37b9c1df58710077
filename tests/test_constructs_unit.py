"""Every public construct of ``kvtiers.constructs``, built from explicit minimal arguments (not the environment
files) in an environment-agnostic stack and in a stack with an explicit account and region, as aws-cdk-lib tests
its own constructs; and every argument rule, each with the error that names the construct and the argument."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template

from kvtiers.constructs import (
    CoreAddonVersions,
    CurvineJournalVolumes,
    EksCluster,
    ExistingVpcAttributes,
    HyperPodCluster,
    HyperPodDependencies,
    HyperPodNetwork,
    InstanceGroup,
    ModelReadAccess,
    NewVpcOptions,
    NodeTraffic,
    PortRule,
    SystemNodegroup,
    Taint,
)
from kvtiers.constructs.hyperpod_inference import InferenceOperator, OperatorAddonVersions
from kvtiers.constructs.observability import Observability
from kvtiers.k8s_charts.tolerations import Toleration

ACCOUNT, REGION = "123456789012", "eu-west-1"
ADDONS = {
    "vpc_cni": "v1.20.4-eksbuild.1",
    "coredns": "v1.12.3-eksbuild.1",
    "kube_proxy": "v1.34.3-eksbuild.2",
    "eks_pod_identity_agent": "v1.3.9-eksbuild.3",
}
OPERATOR_ADDONS = {
    "inference_operator": "v1.0.0-eksbuild.1",
    "cert_manager": "v1.18.2-eksbuild.2",
    "s3_csi_driver": "v1.14.1-eksbuild.1",
    "fsx_csi_driver": "v1.7.0-eksbuild.1",
    "metrics_server": "v0.8.0-eksbuild.2",
}
GROUP = {"name": "gpu", "instance_type": "ml.g6e.xlarge", "count": 1}


@pytest.fixture(params=["agnostic", "explicit"])
def stack(request) -> cdk.Stack:
    if request.param == "agnostic":
        return cdk.Stack()
    return cdk.Stack(cdk.App(), "Explicit", env=cdk.Environment(account=ACCOUNT, region=REGION))


def explicit(stack: cdk.Stack) -> bool:
    return not cdk.Token.is_unresolved(stack.account)


def network(stack: cdk.Stack) -> HyperPodNetwork:
    return HyperPodNetwork(
        stack, "Network", vpc=NewVpcOptions(hyperpod_az_id="euw1-az1", availability_zones=("eu-west-1a", "eu-west-1b"))
    )


def imported_cluster(stack: cdk.Stack) -> eks.ICluster:
    """A cluster deployed elsewhere, as a consumer of the library imports it."""
    return eks.Cluster.from_cluster_attributes(
        stack,
        "Imported",
        cluster_name="shared",
        cluster_security_group_id="sg-0123456789abcdef0",
        open_id_connect_provider=iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(
            stack, "Oidc", "arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/EXAMPLE"
        ),
        kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            stack,
            "Kubectl",
            service_token="arn:aws:lambda:eu-west-1:123456789012:function:kubectl",
            role=iam.Role.from_role_arn(stack, "KubectlRole", "arn:aws:iam::123456789012:role/kubectl"),
        ),
    )


def resources(template: Template, kind: str) -> list[dict]:
    return [r.get("Properties", {}) for r in template.find_resources(kind).values()]


def chart_dir(tmp_path: Path) -> Path:
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: deps\nversion: 0.1.0\n")
    return tmp_path


# --------------------------------------------------------------------------------------------------- constructs


def test_hyperpod_network_creates_a_vpc_with_the_hyperpod_subnet_by_az_id(stack):
    net = network(stack)
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.192.0.0/16"})
    template.has_resource_properties(
        "AWS::EC2::Subnet", {"AvailabilityZoneId": "euw1-az1", "CidrBlock": "10.192.64.0/18"}
    )
    template.resource_count_is("AWS::EC2::NatGateway", 1)
    template.has_resource_properties("AWS::EC2::SecurityGroupIngress", {"IpProtocol": "tcp", "FromPort": 988})
    assert len(net.eks_subnets) == 2 and cdk.Token.is_unresolved(net.hyperpod_availability_zone)


def test_hyperpod_network_imports_an_existing_vpc_by_ids(stack):
    net = HyperPodNetwork(
        stack,
        "Network",
        vpc=ExistingVpcAttributes(
            vpc_id="vpc-0123456789abcdef0",
            cidr="10.0.0.0/16",
            private_subnet_ids=("subnet-0a", "subnet-0b"),
            availability_zones=("eu-west-1a", "eu-west-1b"),
            hyperpod_subnet_id="subnet-0c",
            hyperpod_availability_zone="eu-west-1a",
            security_group_id="sg-0123456789abcdef0",
        ),
    )
    template = Template.from_stack(stack)
    assert template.to_json().get("Resources", {}) == {}
    assert net.hyperpod_subnet.subnet_id == "subnet-0c" and net.hyperpod_availability_zone == "eu-west-1a"
    assert [s.subnet_id for s in net.eks_subnets] == ["subnet-0a", "subnet-0b"]


def test_eks_cluster_pins_its_addons_and_keeps_the_api_private(stack):
    net = network(stack)
    cluster = EksCluster(
        stack,
        "Eks",
        vpc=net.vpc,
        subnets=net.eks_subnets,
        security_group=net.security_group,
        addons=CoreAddonVersions(**ADDONS),
        system_nodegroup=SystemNodegroup(desired_size=1),
    )
    template = Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Version": "1.34",
            "ResourcesVpcConfig": Match.object_like({"EndpointPrivateAccess": True, "EndpointPublicAccess": False}),
        },
    )
    addons = {a["AddonName"]: a["AddonVersion"] for a in resources(template, "AWS::EKS::Addon")}
    assert addons == {
        "vpc-cni": ADDONS["vpc_cni"],
        "coredns": ADDONS["coredns"],
        "kube-proxy": ADDONS["kube_proxy"],
        "eks-pod-identity-agent": ADDONS["eks_pod_identity_agent"],
    }
    template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {"InstanceTypes": ["m7i.xlarge"], "ScalingConfig": {"MinSize": 1, "DesiredSize": 1, "MaxSize": 4}},
    )
    assert cluster.system_nodegroup is not None


def test_eks_cluster_without_system_nodes_and_with_a_public_endpoint(stack):
    net = network(stack)
    cluster = EksCluster(
        stack,
        "Eks",
        vpc=net.vpc,
        subnets=net.eks_subnets,
        security_group=net.security_group,
        addons=CoreAddonVersions(**ADDONS),
        endpoint_access="public_and_private",
        public_access_cidrs=("203.0.113.0/24",),
        system_nodegroup=None,
    )
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EKS::Nodegroup", 0)
    template.has_resource_properties(
        "AWS::EKS::Cluster", {"ResourcesVpcConfig": Match.object_like({"PublicAccessCidrs": ["203.0.113.0/24"]})}
    )
    assert cluster.system_nodegroup is None


def test_node_traffic_opens_one_ingress_per_rule(stack):
    net = network(stack)
    NodeTraffic(
        stack,
        "Traffic",
        hyperpod_security_group=net.security_group,
        system_security_group_id="sg-0123456789abcdef0",
        system_to_hyperpod=(PortRule(protocol="tcp", port=8000, reason="router to engines"),),
        hyperpod_to_system=(PortRule(protocol="udp", port=53, reason="DNS"),),
    )
    template = Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {"IpProtocol": "tcp", "FromPort": 8000, "ToPort": 8000, "SourceSecurityGroupId": "sg-0123456789abcdef0"},
    )
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress",
        {"IpProtocol": "udp", "FromPort": 53, "GroupId": "sg-0123456789abcdef0", "Description": "DNS"},
    )


def test_node_traffic_shares_one_rule_per_port_between_components():
    """Two components on one port (the engines and the operator's model pods on 8000) share its rule: one resource,
    both reasons, the widest range; a second resource for the same port would be a duplicate rule EC2 refuses."""
    traffic = node_traffic(system_to_hyperpod=(port(reason="engines"),))
    traffic.allow_to_hyperpod(port(reason="operator", to_port=8001))
    traffic.allow_to_hyperpod(port(reason="engines"))
    (rule,) = resources(Template.from_stack(cdk.Stack.of(traffic)), "AWS::EC2::SecurityGroupIngress")
    assert (rule["FromPort"], rule["ToPort"], rule["Description"]) == (8000, 8001, "engines; operator")


def test_hyperpod_dependencies_installs_the_chart_for_the_stacks_region(stack, tmp_path):
    HyperPodDependencies(
        stack,
        "Deps",
        cluster=imported_cluster(stack),
        chart_dir=chart_dir(tmp_path),
        tolerations=(Toleration(key="team"),),
    )
    (chart,) = resources(Template.from_stack(stack), "Custom::AWSCDK-EKS-HelmChart")
    assert chart["Namespace"] == "kube-system" and chart["Wait"] is True
    values = json.dumps(chart["Values"])
    assert (REGION in values) if explicit(stack) else ('"Ref": "AWS::Region"' in values)
    assert '\\"key\\":\\"team\\"' in values


@pytest.mark.parametrize("stack_name", ["Default", "team-inference-platform-stack-us-east-1"])
def test_hyperpod_cluster_lifecycle_bucket_name_in_an_environment_agnostic_stack(stack_name):
    """The account is a deploy-time value here: the name must stay a valid expression, never a cut token."""
    stack = cdk.Stack(cdk.App(), stack_name)
    hyperpod_cluster(stack)
    (bucket,) = resources(Template.from_stack(stack), "AWS::S3::Bucket")
    prefix, account = bucket["BucketName"]["Fn::Join"][1]
    assert account == {"Ref": "AWS::AccountId"}
    assert prefix.startswith(f"sagemaker-{stack_name.lower()[:20]}") and prefix.endswith("-lcs-")
    assert re.fullmatch(r"[a-z0-9-]+", prefix) and len(prefix) + 12 <= 63


def test_hyperpod_cluster_lifecycle_bucket_name_with_an_explicit_account():
    stack = cdk.Stack(cdk.App(), "Platform", env=cdk.Environment(account=ACCOUNT, region=REGION))
    hyperpod_cluster(stack)
    (bucket,) = resources(Template.from_stack(stack), "AWS::S3::Bucket")
    assert bucket["BucketName"] == f"sagemaker-platform-lcs-{ACCOUNT}"


@pytest.mark.parametrize("length", [47, 48, 49, 52])
def test_hyperpod_cluster_default_bucket_name_is_valid_for_a_long_stack_name(length):
    """Cut at 63 characters, the default name must not end in the infix's hyphen (S3 rejects it at deploy)."""
    stack = cdk.Stack(cdk.App(), "a" * length, env=cdk.Environment(account=ACCOUNT, region=REGION))
    hyperpod_cluster(stack)
    (bucket,) = resources(Template.from_stack(stack), "AWS::S3::Bucket")
    assert re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket["BucketName"]), bucket["BucketName"]


def test_hyperpod_cluster_takes_a_lifecycle_bucket_name():
    stack = cdk.Stack()
    hyperpod_cluster(stack, lifecycle_bucket_name="sagemaker-team-a-lifecycle")
    (bucket,) = resources(Template.from_stack(stack), "AWS::S3::Bucket")
    assert bucket["BucketName"] == "sagemaker-team-a-lifecycle"


def hyperpod_cluster(stack: cdk.Stack, **kwargs) -> HyperPodCluster:
    net = network(stack)
    arguments = {
        "eks_cluster": imported_cluster(stack),
        "subnet": net.hyperpod_subnet,
        "security_group": net.security_group,
        "instance_groups": (
            InstanceGroup(**GROUP),
            InstanceGroup(
                name="tainted",
                instance_type="ml.g6e.2xlarge",
                count=0,
                ebs_volume_gb=0,
                deep_health_checks=(),
                labels={"team": "a"},
                taints=(Taint(key="team", value="a"),),
            ),
        ),
    }
    return HyperPodCluster(stack, "HyperPod", **{**arguments, **kwargs})


def test_hyperpod_cluster_groups_storage_and_recovery(stack):
    hyperpod_cluster(stack, cluster_name="unit", tiered_storage_memory_percentage=10)
    template = Template.from_stack(stack)
    (cluster,) = resources(template, "AWS::SageMaker::Cluster")
    assert cluster["ClusterName"] == "unit" and cluster["NodeRecovery"] == "Automatic"
    assert cluster["TieredStorageConfig"] == {"Mode": "Enable", "InstanceMemoryAllocationPercentage": 10}
    gpu, tainted = cluster["InstanceGroups"]
    assert gpu["InstanceStorageConfigs"][0]["EbsVolumeConfig"]["VolumeSizeInGB"] == 500
    assert gpu["OnStartDeepHealthChecks"] == ["InstanceStress"]  # ml.g6e.xlarge has no EFA for the NCCL test
    assert "InstanceStorageConfigs" not in tainted and "OnStartDeepHealthChecks" not in tainted
    assert tainted["KubernetesConfig"] == {
        "Labels": {"team": "a"},
        "Taints": [{"Key": "team", "Value": "a", "Effect": "NoSchedule"}],
    }
    template.resource_count_is("Custom::CDKBucketDeployment", 1)


def test_curvine_journal_volumes_one_pair_per_master(stack):
    volumes = CurvineJournalVolumes(
        stack, "Journal", availability_zone="eu-west-1a", masters=3, snapshot_on_delete=False
    )
    role = iam.Role(stack, "Csi", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
    volumes.grant_attach(role, hyperpod_cluster_arn="arn:hp", eks_cluster_arn="arn:eks")
    template = Template.from_stack(stack)
    found = template.find_resources("AWS::EC2::Volume")
    assert len(found) == 6 == 2 * len(volumes.volumes)
    assert {r["Properties"]["Size"] for r in found.values()} == {20, 50}
    assert all(r["Properties"]["AvailabilityZone"] == "eu-west-1a" for r in found.values())
    assert all(r["DeletionPolicy"] == "Delete" for r in found.values())
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": Match.object_like(
                {
                    "Statement": Match.array_with(
                        [Match.object_like({"Sid": "HyperPodNodeVolumes", "Resource": "arn:hp"})]
                    )
                }
            )
        },
    )


def test_model_read_access_reads_one_prefix(stack):
    access = ModelReadAccess(
        stack,
        "Weights",
        cluster=imported_cluster(stack),
        namespace="serving",
        service_account="engine",
        bucket="models",
        prefix="llama/8b",
    )
    template = Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation",
        {"ClusterName": "shared", "Namespace": "serving", "ServiceAccount": "engine"},
    )
    (policy,) = resources(template, "AWS::IAM::Policy")
    read = next(s for s in policy["PolicyDocument"]["Statement"] if s["Sid"] == "ReadWeights")
    assert stack.resolve(access.weights_arn) == read["Resource"]


def test_inference_operator_addons_roles_and_kyverno(stack):
    operator = InferenceOperator(
        stack,
        "Operator",
        cluster=imported_cluster(stack),
        hyperpod_cluster_arn="arn:aws:sagemaker:eu-west-1:123456789012:cluster/abc",
        environment_name="unit",
        addons=OperatorAddonVersions(**OPERATOR_ADDONS),
        kyverno_chart_version="3.5.2",
        model_buckets=("models",),
    )
    template = Template.from_stack(stack)
    addons = {a["AddonName"]: a["AddonVersion"] for a in resources(template, "AWS::EKS::Addon")}
    assert addons["amazon-sagemaker-hyperpod-inference"] == OPERATOR_ADDONS["inference_operator"] and len(addons) == 5
    template.has_resource_properties("AWS::IAM::Role", {"RoleName": "SageMakerHyperPodInference-unit"})
    template.has_resource_properties("Custom::AWSCDK-EKS-HelmChart", {"Chart": "kyverno", "Version": "3.5.2"})
    assert len(operator.model_object_arns) == 1


def test_observability_collects_into_a_workspace(stack):
    net = network(stack)
    Observability(
        stack,
        "Metrics",
        cluster=imported_cluster(stack),
        vpc=net.vpc,
        subnets=net.eks_subnets,
        hyperpod_security_group=net.security_group,
        scrape_configuration="scrape_configs: []\n",
        rule_groups="groups: []\n",
        alertmanager_definition=lambda topic: f"alertmanager_config: {topic}\n",
        environment_name="unit",
        to_hyperpod=(PortRule(protocol="tcp", port=8000, reason="engines"),),
    )
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::APS::Workspace", {"Alias": "unit"})
    (scraper,) = resources(template, "AWS::APS::Scraper")
    assert scraper["Source"]["EksConfiguration"]["ClusterArn"]
    assert len(scraper["Source"]["EksConfiguration"]["SubnetIds"]) == 2
    (topic,) = resources(template, "AWS::SNS::Topic")
    assert "TopicName" not in topic and "KmsMasterKeyId" in topic
    template.has_resource_properties("AWS::EC2::SecurityGroupIngress", {"FromPort": 8000, "Description": "engines"})


# --------------------------------------------------------------------------------------------------- argument rules


def eks_cluster(subnet_count: int = 2, **kwargs) -> EksCluster:
    stack = cdk.Stack()
    net = network(stack)
    arguments = {"vpc": net.vpc, "subnets": net.eks_subnets[:subnet_count], "security_group": net.security_group}
    return EksCluster(stack, "Eks", **{**arguments, "addons": CoreAddonVersions(**ADDONS), **kwargs})


def operator(**kwargs) -> InferenceOperator:
    stack = cdk.Stack()
    arguments = {
        "cluster": imported_cluster(stack),
        "hyperpod_cluster_arn": "arn:hp",
        "environment_name": "unit",
        "addons": OperatorAddonVersions(**OPERATOR_ADDONS),
        "kyverno_chart_version": "3.5.2",
    }
    return InferenceOperator(stack, "Operator", **{**arguments, **kwargs})


def observability(**kwargs) -> Observability:
    stack = cdk.Stack()
    net = network(stack)
    arguments = {
        "cluster": imported_cluster(stack),
        "vpc": net.vpc,
        "subnets": net.eks_subnets,
        "hyperpod_security_group": net.security_group,
        "scrape_configuration": "",
        "rule_groups": "",
        "alertmanager_definition": str,
        "environment_name": "unit",
    }
    return Observability(stack, "Metrics", **{**arguments, **kwargs})


def dependencies(**kwargs) -> HyperPodDependencies:
    stack = cdk.Stack()
    return HyperPodDependencies(stack, "Deps", **{"cluster": imported_cluster(stack), **kwargs})


def model_access(**kwargs) -> ModelReadAccess:
    stack = cdk.Stack()
    arguments = {
        "cluster": imported_cluster(stack),
        "namespace": "serving",
        "service_account": "sa",
        "bucket": "b",
        "prefix": "x",
    }
    return ModelReadAccess(stack, "Access", **{**arguments, **kwargs})


def node_traffic(**kwargs) -> NodeTraffic:
    stack = cdk.Stack()
    group = ec2.SecurityGroup.from_security_group_id(stack, "Group", "sg-0123456789abcdef0")
    return NodeTraffic(
        stack, "Traffic", **{"hyperpod_security_group": group, "system_security_group_id": "sg-1", **kwargs}
    )


def existing_vpc(**kwargs) -> ExistingVpcAttributes:
    arguments = {
        "vpc_id": "vpc-1",
        "cidr": "10.0.0.0/16",
        "private_subnet_ids": ("subnet-a", "subnet-b"),
        "availability_zones": ("eu-west-1a", "eu-west-1b"),
        "hyperpod_subnet_id": "subnet-c",
        "hyperpod_availability_zone": "eu-west-1a",
    }
    return ExistingVpcAttributes(**{**arguments, **kwargs})


def port(**kwargs) -> PortRule:
    return PortRule(**{"protocol": "tcp", "port": 8000, "reason": "r", **kwargs})


RULES = {
    "addon_versions_are_exact": (
        lambda: CoreAddonVersions(**{**ADDONS, "coredns": "latest"}),
        "CoreAddonVersions: coredns 'latest' is not an EKS add-on version",
    ),
    "vpc_cni_new_enough_for_hyperpod": (
        lambda: CoreAddonVersions(**{**ADDONS, "vpc_cni": "v1.18.2-eksbuild.1"}),
        "CoreAddonVersions: vpc_cni v1.18.2-eksbuild.1 is older than v1.18.3",
    ),
    "system_nodegroup_has_a_node": (lambda: SystemNodegroup(desired_size=0), "SystemNodegroup: desired_size"),
    "eks_endpoint_access_is_known": (
        lambda: eks_cluster(endpoint_access="public"),
        "EksCluster: endpoint_access must be one of 'public_and_private', 'private'",
    ),
    "eks_public_endpoint_needs_cidrs": (
        lambda: eks_cluster(endpoint_access="public_and_private"),
        "EksCluster: endpoint_access 'public_and_private' needs public_access_cidrs",
    ),
    "eks_private_endpoint_takes_no_cidrs": (
        lambda: eks_cluster(public_access_cidrs=("203.0.113.0/24",)),
        "EksCluster: public_access_cidrs is set but endpoint_access is 'private'",
    ),
    "eks_public_access_cidrs_are_cidrs": (
        lambda: eks_cluster(endpoint_access="public_and_private", public_access_cidrs=("office",)),
        "EksCluster: public_access_cidrs 'office' is not an IPv4 CIDR",
    ),
    "eks_kubernetes_version_is_one_hyperpod_supports": (
        lambda: eks_cluster(kubernetes_version="1.35"),
        "EksCluster: kubernetes_version: Kubernetes 1.35 is not documented for SageMaker HyperPod; use one of",
    ),
    "eks_needs_two_subnets": (
        lambda: eks_cluster(subnet_count=1),
        "EksCluster: subnets needs at least two subnets",
    ),
    "eks_cluster_name_is_an_eks_name": (
        lambda: eks_cluster(cluster_name="-bad name"),
        "EksCluster: cluster_name '-bad name' is not an EKS cluster name",
    ),
    "eks_admin_role_arns_are_role_arns": (
        lambda: eks_cluster(admin_role_arns=("arn:aws:iam::123456789012:user/me",)),
        "EksCluster: admin_role_arns 'arn:aws:iam::123456789012:user/me' is not an IAM role ARN",
    ),
    "eks_logging_types_are_known": (
        lambda: eks_cluster(logging=("api", "everything")),
        "EksCluster: logging must be one of",
    ),
    "eks_service_cidr_is_private_and_sized": (
        lambda: eks_cluster(service_ipv4_cidr="8.8.0.0/16"),
        "EksCluster: service_ipv4_cidr '8.8.0.0/16' must be a private IPv4 range between /12 and /24",
    ),
    "taint_has_a_key": (lambda: Taint(key=""), "Taint: key must not be empty"),
    "taint_effect_is_known": (lambda: Taint(key="k", effect="Never"), "Taint 'k': effect must be one of"),
    "instance_group_name_is_a_sagemaker_name": (
        lambda: InstanceGroup(**{**GROUP, "name": "gpu_group"}),
        "InstanceGroup 'gpu_group': name 'gpu_group' is not a SageMaker name",
    ),
    "instance_group_count_is_not_negative": (
        lambda: InstanceGroup(**{**GROUP, "count": -1}),
        "InstanceGroup 'gpu': count must be at least 0, got -1",
    ),
    "instance_group_threads_per_core_is_1_or_2": (
        lambda: InstanceGroup(**GROUP, threads_per_core=4),
        "InstanceGroup 'gpu': threads_per_core must be one of 1, 2",
    ),
    "instance_group_ebs_volume_in_range": (
        lambda: InstanceGroup(**GROUP, ebs_volume_gb=20000),
        "InstanceGroup 'gpu': ebs_volume_gb must be 0 to 16384",
    ),
    "instance_group_deep_health_checks_are_known": (
        lambda: InstanceGroup(**GROUP, deep_health_checks=("Burn",)),
        "InstanceGroup 'gpu': deep_health_checks must be one of",
    ),
    "instance_group_deep_health_checks_unique": (
        lambda: InstanceGroup(**GROUP, deep_health_checks=("InstanceStress", "InstanceStress")),
        "InstanceGroup 'gpu': deep_health_checks must be unique",
    ),
    "instance_group_connectivity_check_needs_efa": (
        lambda: InstanceGroup(**GROUP, deep_health_checks=("InstanceStress", "InstanceConnectivity")),
        "InstanceGroup 'gpu': deep_health_checks 'InstanceConnectivity' cannot run on ml.g6e.xlarge, which has no EFA",
    ),
    "instance_group_taints_exclude_deep_health_checks": (
        lambda: InstanceGroup(**GROUP, taints=(Taint(key="team"),)),
        "InstanceGroup 'gpu': taints cannot be combined with deep_health_checks",
    ),
    "hyperpod_needs_an_instance_group": (
        lambda: hyperpod_cluster(cdk.Stack(), instance_groups=()),
        "HyperPodCluster: instance_groups must not be empty",
    ),
    "hyperpod_instance_group_names_unique": (
        lambda: hyperpod_cluster(cdk.Stack(), instance_groups=(InstanceGroup(**GROUP), InstanceGroup(**GROUP))),
        "HyperPodCluster: instance_groups names must be unique, 'gpu' appears twice",
    ),
    "hyperpod_cluster_name_is_a_sagemaker_name": (
        lambda: hyperpod_cluster(cdk.Stack(), cluster_name="my_cluster"),
        "HyperPodCluster: cluster_name 'my_cluster' is not a SageMaker name",
    ),
    "hyperpod_node_recovery_is_known": (
        lambda: hyperpod_cluster(cdk.Stack(), node_recovery="Manual"),
        "HyperPodCluster: node_recovery must be one of 'Automatic', 'None'",
    ),
    "hyperpod_tiered_storage_percentage_in_range": (
        lambda: hyperpod_cluster(cdk.Stack(), tiered_storage_memory_percentage=101),
        "HyperPodCluster: tiered_storage_memory_percentage must be 0 to 100",
    ),
    "hyperpod_lifecycle_dir_has_on_create": (
        lambda: hyperpod_cluster(cdk.Stack(), lifecycle_dir=Path(__file__).parent),
        "HyperPodCluster: lifecycle_dir .* has no on_create.sh",
    ),
    "hyperpod_lifecycle_bucket_is_sagemaker_prefixed": (
        lambda: hyperpod_cluster(cdk.Stack(), lifecycle_bucket_name="team-a-lifecycle"),
        "HyperPodCluster: lifecycle_bucket_name 'team-a-lifecycle' must start with 'sagemaker-'",
    ),
    "hyperpod_lifecycle_bucket_is_a_bucket_name": (
        lambda: hyperpod_cluster(cdk.Stack(), lifecycle_bucket_name="sagemaker-Team_A"),
        "HyperPodCluster: lifecycle_bucket_name 'sagemaker-Team_A' is not a valid S3 bucket name",
    ),
    "hyperpod_dependencies_needs_a_chart": (
        lambda: dependencies(chart_dir=Path(__file__).parent),
        "HyperPodDependencies: chart_dir .* has no Chart.yaml",
    ),
    "journal_masters_are_an_odd_quorum": (
        lambda: CurvineJournalVolumes(cdk.Stack(), "J", availability_zone="eu-west-1a", masters=2),
        "CurvineJournalVolumes: masters must be one of 1, 3, 5",
    ),
    "journal_volumes_within_gp3_limits": (
        lambda: CurvineJournalVolumes(cdk.Stack(), "J", availability_zone="a", masters=1, throughput_mibps=2000),
        "CurvineJournalVolumes: meta_size_gib: gp3 throughput is 125 to 1000 MiB/s",
    ),
    "model_access_prefix_has_no_slashes": (
        lambda: model_access(prefix="/x"),
        "ModelReadAccess: prefix '/x' must not be empty or start or end with '/'",
    ),
    "model_access_namespace_is_a_namespace_name": (
        lambda: model_access(namespace="Serving"),
        "ModelReadAccess: namespace 'Serving' is not a Kubernetes namespace name",
    ),
    "model_access_service_account_is_a_name": (
        lambda: model_access(service_account="my_sa"),
        "ModelReadAccess: service_account 'my_sa' is not a Kubernetes service account name",
    ),
    "new_vpc_hyperpod_az_is_an_id": (
        lambda: NewVpcOptions(hyperpod_az_id="us-east-1a"),
        "NewVpcOptions: hyperpod_az_id 'us-east-1a' is not an AZ ID",
    ),
    "new_vpc_cidr_is_a_cidr": (
        lambda: NewVpcOptions(hyperpod_az_id="use1-az2", cidr="10.192.0.0/33"),
        "NewVpcOptions: cidr '10.192.0.0/33' is not an IPv4 CIDR",
    ),
    "new_vpc_hyperpod_subnet_inside_the_vpc": (
        lambda: NewVpcOptions(hyperpod_az_id="use1-az2", hyperpod_subnet_cidr="10.0.0.0/18"),
        "NewVpcOptions: hyperpod_subnet_cidr 10.0.0.0/18 is not inside cidr 10.192.0.0/16",
    ),
    "new_vpc_has_two_zones": (
        lambda: NewVpcOptions(hyperpod_az_id="use1-az2", availability_zones=("us-east-1a",)),
        "NewVpcOptions: availability_zones needs at least two AZs",
    ),
    "new_vpc_zones_distinct": (
        lambda: NewVpcOptions(hyperpod_az_id="use1-az2", availability_zones=("us-east-1a", "us-east-1a")),
        "NewVpcOptions: availability_zones must be unique",
    ),
    "new_vpc_nat_gateways_one_to_one_per_zone": (
        lambda: NewVpcOptions(hyperpod_az_id="use1-az2", nat_gateways=0),
        "NewVpcOptions: nat_gateways must be 1 to 2, got 0",
    ),
    "existing_vpc_cidr_is_a_cidr": (
        lambda: existing_vpc(cidr="vpc-cidr"),
        "ExistingVpcAttributes: cidr 'vpc-cidr' is not an IPv4 CIDR",
    ),
    "existing_vpc_has_two_subnets": (
        lambda: existing_vpc(private_subnet_ids=("subnet-a",), availability_zones=("eu-west-1a",)),
        "ExistingVpcAttributes: private_subnet_ids needs at least two subnets",
    ),
    "existing_vpc_one_zone_per_subnet": (
        lambda: existing_vpc(availability_zones=("eu-west-1a",)),
        "ExistingVpcAttributes: availability_zones must list one AZ per entry of private_subnet_ids",
    ),
    "existing_vpc_load_balancer_subnets_inside_the_vpc": (
        lambda: existing_vpc(load_balancer_subnet_cidrs=("10.0.4.0/24", "10.9.0.0/24")),
        "ExistingVpcAttributes: load_balancer_subnet_cidrs 10.9.0.0/24 is not inside cidr 10.0.0.0/16",
    ),
    "existing_vpc_load_balancer_subnets_not_empty": (
        lambda: existing_vpc(load_balancer_subnet_cidrs=()),
        "ExistingVpcAttributes: load_balancer_subnet_cidrs must be a non-empty list of IPv4 CIDRs; leave it None",
    ),
    "existing_vpc_load_balancer_subnets_are_cidrs": (
        lambda: existing_vpc(load_balancer_subnet_cidrs=("subnet-d",)),
        "ExistingVpcAttributes: load_balancer_subnet_cidrs 'subnet-d' is not an IPv4 CIDR",
    ),
    "port_rule_protocol_is_tcp_or_udp": (lambda: port(protocol="icmp"), "PortRule 'r': protocol must be one of"),
    "port_rule_range_is_ordered": (lambda: port(to_port=7000), "PortRule 'r': bad port range 8000-7000"),
    "operator_addon_versions_are_exact": (
        lambda: OperatorAddonVersions(**{**OPERATOR_ADDONS, "metrics_server": "0.8.0"}),
        "OperatorAddonVersions: metrics_server '0.8.0' is not an EKS add-on version",
    ),
    "operator_needs_an_environment_name": (
        lambda: operator(environment_name=""),
        "InferenceOperator: environment_name must not be empty",
    ),
    "operator_kyverno_version_is_x_y_z": (
        lambda: operator(kyverno_chart_version="v3"),
        "InferenceOperator: kyverno_chart_version 'v3' is not a chart version X.Y.Z",
    ),
    "operator_model_buckets_distinct": (
        lambda: operator(model_buckets=("models", "models")),
        "InferenceOperator: model_buckets must be unique",
    ),
    "observability_needs_two_subnets": (
        lambda: observability(subnets=()),
        "Observability: subnets needs at least two subnets in two AZs, got 0",
    ),
    "observability_one_rule_per_port": (
        lambda: observability(to_system=(port(), port(reason="again"))),
        "Observability: to_system ports must be unique, 8000 appears twice",
    ),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_argument_rule(rule):
    build, message = RULES[rule]
    with pytest.raises(ValueError, match=message):
        build()


def test_hyperpod_lifecycle_bucket_default_needs_a_resolved_stack_name():
    """In a nested stack the stack name is a token: no name can be derived from it."""
    parent = cdk.Stack(cdk.App(), "Parent")
    nested = cdk.NestedStack(parent, "Nested")
    with pytest.raises(ValueError, match="HyperPodCluster: the stack name is resolved only at deploy time"):
        hyperpod_cluster(nested)
    hyperpod_cluster(cdk.NestedStack(parent, "Named"), lifecycle_bucket_name="sagemaker-named-lifecycle")
