"""A SageMaker HyperPod cluster orchestrated by EKS (``AWS::SageMaker::Cluster``), with its execution role and
lifecycle-script bucket, continuous provisioning, automatic node recovery and HyperPod tiered storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

LIFECYCLE_DIR = Path(__file__).parent / "lifecycle"
ON_CREATE = "on_create.sh"
INSTANCE_ROLE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"


@dataclass(frozen=True)
class TaintProps:
    key: str
    effect: str = "NoSchedule"
    """Default: ``NoSchedule`` (only pods that tolerate it run on the group)."""
    value: str = ""


@dataclass(frozen=True)
class InstanceGroupProps:
    name: str
    instance_type: str
    count: int
    threads_per_core: int = 1
    """Default: 1 (no SMT), as HyperPod recommends for GPU groups."""
    ebs_volume_gb: int = 500
    """Secondary EBS per node, mounted at /opt/sagemaker. Default: 500 GB for images, kubelet volumes and logs;
    0 for none."""
    deep_health_checks: tuple[str, ...] = ("InstanceStress", "InstanceConnectivity")
    """Default: both deep health checks at node start."""
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[TaintProps, ...] = ()


@dataclass(frozen=True)
class HyperPodClusterProps:
    eks_cluster: eks.ICluster
    subnet: ec2.ISubnet
    security_group: ec2.ISecurityGroup
    instance_groups: tuple[InstanceGroupProps, ...]
    cluster_name: str | None = None
    """Default: a CloudFormation-generated name."""
    node_recovery: str = "Automatic"
    """Default: ``Automatic``: HyperPod replaces unhealthy nodes without an operator."""
    tiered_storage_enabled: bool = True
    """Default: on; LMCache's L1 on HyperPod uses this memory tier."""
    tiered_storage_memory_percentage: int = 20
    """Default: 20 % of node memory, the value the source design measured with."""
    lifecycle_dir: Path = LIFECYCLE_DIR
    """Folder uploaded as lifecycle scripts; must hold ``on_create.sh``. Default: the project's own script."""


class HyperPodCluster(Construct):
    """The HyperPod cluster. ``cluster`` is the ``CfnCluster``; ``execution_role``, ``lifecycle_bucket``, ``key``."""

    def __init__(self, scope: Construct, id: str, *, props: HyperPodClusterProps) -> None:
        super().__init__(scope, id)
        if not (props.lifecycle_dir / ON_CREATE).is_file():
            raise ValueError(f"lifecycle_dir {props.lifecycle_dir} has no {ON_CREATE}")
        if not props.instance_groups:
            raise ValueError("HyperPodClusterProps.instance_groups must not be empty")
        stack = cdk.Stack.of(self)
        self.key = kms.Key(
            self, "Key", enable_key_rotation=True, description="HyperPod node volumes and lifecycle scripts"
        )
        self.lifecycle_bucket = s3.Bucket(
            self,
            "LifecycleBucket",
            # AmazonSageMakerClusterInstanceRolePolicy only lets nodes read buckets named sagemaker-*.
            bucket_name=f"sagemaker-{stack.stack_name.lower()}-lcs-{stack.account}"[:63],
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        self.lifecycle_deployment = s3deploy.BucketDeployment(
            self,
            "LifecycleScripts",
            sources=[s3deploy.Source.asset(str(props.lifecycle_dir))],
            destination_bucket=self.lifecycle_bucket,
            destination_key_prefix="lifecycle",
            prune=True,
        )
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="HyperPod instance groups: node bootstrap, image pulls, pod identity",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(INSTANCE_ROLE_POLICY)],
        )
        self.execution_role.add_to_policy(
            iam.PolicyStatement(
                sid="PullImages",
                actions=[
                    "ecr:GetAuthorizationToken",
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                ],
                resources=["*"],
            )
        )
        for statement in vpc_cni_statements(subnet=props.subnet, security_group=props.security_group):
            self.execution_role.add_to_policy(statement)
        self.execution_role.add_to_policy(
            iam.PolicyStatement(
                sid="PodIdentity",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[props.eks_cluster.cluster_arn],
            )
        )
        # Reading the lifecycle scripts decrypts with the key (granted by grant_read). HyperPod itself creates the
        # node-volume grants with the execution role ("Customer managed AWS KMS key encryption for SageMaker
        # HyperPod": kms:CreateGrant and kms:DescribeKey); nodes never encrypt with the key themselves.
        self.lifecycle_bucket.grant_read(self.execution_role)
        self.key.grant(self.execution_role, "kms:CreateGrant", "kms:DescribeKey")

        tiered = sagemaker.CfnCluster.TieredStorageConfigProperty(
            mode="Enable" if props.tiered_storage_enabled else "Disable",
            instance_memory_allocation_percentage=props.tiered_storage_memory_percentage
            if props.tiered_storage_enabled
            else None,
        )
        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=props.cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=props.eks_cluster.cluster_arn)
            ),
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[props.security_group.security_group_id], subnets=[props.subnet.subnet_id]
            ),
            node_recovery=props.node_recovery,
            node_provisioning_mode="Continuous",
            tiered_storage_config=tiered,
            instance_groups=[self._group(g) for g in props.instance_groups],
        )
        self.cluster.node.add_dependency(self.lifecycle_deployment)

    def _group(self, group: InstanceGroupProps) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.count,
            threads_per_core=group.threads_per_core,
            execution_role=self.execution_role.role_arn,
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                source_s3_uri=self.lifecycle_bucket.s3_url_for_object("lifecycle"), on_create=ON_CREATE
            ),
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                        volume_size_in_gb=group.ebs_volume_gb, volume_kms_key_id=self.key.key_arn
                    )
                )
            ]
            if group.ebs_volume_gb
            else None,
            on_start_deep_health_checks=list(group.deep_health_checks) or None,
            kubernetes_config=sagemaker.CfnCluster.ClusterKubernetesConfigProperty(
                labels=dict(group.labels) or None,
                taints=[
                    sagemaker.CfnCluster.ClusterKubernetesTaintProperty(
                        key=t.key, value=t.value or None, effect=t.effect
                    )
                    for t in group.taints
                ]
                or None,
            ),
        )

    @property
    def cluster_arn(self) -> str:
        return self.cluster.attr_cluster_arn


def vpc_cni_statements(*, subnet: ec2.ISubnet, security_group: ec2.ISecurityGroup) -> list[iam.PolicyStatement]:
    """What the VPC CNI on HyperPod nodes needs to give pods VPC addresses.

    On HyperPod the CNI runs with the instance group's execution role (there is no node role), so these go on that
    role. The actions are those of ``AmazonEKS_CNI_Policy`` (IPv4 only); like the reference templates
    (aws/sagemaker-hyperpod-cluster-setup ``eks/cloudformation/sagemaker-iam-role-template.yaml``,
    awsome-distributed-training ``terraform-modules/.../sagemaker_iam_role/main.tf``) the mutating ones are scoped to
    this account and region, the HyperPod subnet and the node security group instead of ``*``.
    """
    stack = cdk.Stack.of(subnet)

    def ec2_arn(resource: str) -> str:
        return stack.format_arn(
            service="ec2",
            resource=resource,
            resource_name="*" if resource in ("instance", "network-interface") else None,
        )

    here = [ec2_arn("instance"), ec2_arn("network-interface")]
    return [
        iam.PolicyStatement(
            sid="CniEnis",
            actions=[
                "ec2:AssignPrivateIpAddresses",
                "ec2:AttachNetworkInterface",
                "ec2:CreateNetworkInterface",
                "ec2:DeleteNetworkInterface",
                "ec2:DetachNetworkInterface",
                "ec2:ModifyNetworkInterfaceAttribute",
                "ec2:UnassignPrivateIpAddresses",
            ],
            resources=[
                *here,
                stack.format_arn(service="ec2", resource="subnet", resource_name=subnet.subnet_id),
                stack.format_arn(
                    service="ec2", resource="security-group", resource_name=security_group.security_group_id
                ),
            ],
        ),
        # Describe calls support no resource-level scope.
        iam.PolicyStatement(
            sid="CniDescribe",
            actions=[
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeSubnets",
                "ec2:DescribeTags",
            ],
            resources=["*"],
        ),
        iam.PolicyStatement(sid="CniEniTags", actions=["ec2:CreateTags"], resources=[ec2_arn("network-interface")]),
    ]
