"""A SageMaker HyperPod cluster orchestrated by EKS (``AWS::SageMaker::Cluster``), with its execution role and
lifecycle-script bucket, continuous provisioning, automatic node recovery and HyperPod tiered storage.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IConstruct, IValidation

import kvtiers.checks as check
from kvtiers.catalog.instance_types import G6E_INSTANCE_TYPES
from kvtiers.catalog.platform_defaults import (
    DEEP_HEALTH_CHECKS,
    EBS_VOLUME_GB,
    MAX_EBS_VOLUME_GB,
    NODE_RECOVERY,
    REPELLING_TAINT_EFFECTS,
    SAGEMAKER_NAME_PATTERN,
    SYSTEM_RESERVED_GIB,
    TAINT_EFFECT,
    THREADS_PER_CORE,
    TIERED_STORAGE_ENABLED,
    TIERED_STORAGE_MEMORY_PERCENTAGE,
    DeepHealthCheck,
    NodeRecovery,
    TaintEffect,
    ThreadsPerCore,
)
from kvtiers.constructs.eks_cluster import ClusterLike, EksCluster
from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies
from kvtiers.k8s_charts.tolerations import Toleration
from kvtiers.node_agents import NODE_AGENTS, GroupFacts, NodeAgent, kubelet_reserve
from kvtiers.placement import NodeOffer, NodePlacement, node_offer

LIFECYCLE_DIR = Path(__file__).parent / "lifecycle"
ON_CREATE = "on_create.sh"
INSTANCE_ROLE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
LIFECYCLE_BUCKET_PREFIX = "sagemaker-"
"""AmazonSageMakerClusterInstanceRolePolicy only lets nodes read buckets whose names start with this."""
LIFECYCLE_BUCKET_INFIX = "-lcs-"
BUCKET_NAME_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
ACCOUNT_ID_LENGTH = 12


@dataclass(frozen=True, kw_only=True)
class Taint:
    """A Kubernetes taint HyperPod puts on every node of an instance group.

    :param key: the taint key.
    :param value: the taint value. @default empty
    :param effect: what happens to pods that do not tolerate it. @default ``"NoSchedule"`` (only pods that
        tolerate it run on the group)
    """

    key: str
    value: str = ""
    effect: TaintEffect = TAINT_EFFECT

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("Taint: key must not be empty")
        check.one_of(f"Taint {self.key!r}", "effect", self.effect, TaintEffect)


@dataclass(frozen=True, kw_only=True)
class InstanceGroup:
    """One HyperPod instance group.

    :param name: the group name (a SageMaker name: letters, digits and hyphens, at most 63 characters).
    :param instance_type: the SageMaker instance type, for example ``ml.g6e.12xlarge``.
    :param count: nodes in the group; 0 keeps the group without nodes.
    :param threads_per_core: 2 (SMT on, every vCPU of the instance) or 1 (half of them). @default 2, as G6e ships:
        kvtiers' pods pin no cores, and their many threads gain from SMT (``platform_defaults.THREADS_PER_CORE``)
    :param ebs_volume_gb: secondary EBS volume per node, mounted at /opt/sagemaker, encrypted with the cluster's
        key; 0 for none. @default 500 GB for container images, kubelet volumes and logs
    :param deep_health_checks: deep health checks at node start. ``InstanceConnectivity`` (NCCL tests across nodes
        over EFA) is refused on a type without EFA. @default the checks the type supports: ``InstanceStress``, and
        ``InstanceConnectivity`` where the type has EFA (both on a type outside kvtiers' table)
    :param labels: Kubernetes labels on the group's nodes. @default none
    :param taints: Kubernetes taints on the group's nodes; AWS does not allow them together with deep health
        checks. @default none
    :param max_pods: the pods a node of the group admits, when a node's ``status.allocatable`` shows another figure
        than the placement check assumes. @default the EKS-optimized AMI's for the instance type
        (``kvtiers.catalog.instance_types``; HyperPod's own setting is not public)
    """

    name: str
    instance_type: str
    count: int
    threads_per_core: ThreadsPerCore = THREADS_PER_CORE
    ebs_volume_gb: int = EBS_VOLUME_GB
    deep_health_checks: Sequence[DeepHealthCheck] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()
    max_pods: int | None = None

    def __post_init__(self) -> None:
        owner = f"InstanceGroup {self.name!r}"
        check.matches(owner, "name", self.name, SAGEMAKER_NAME_PATTERN, "a SageMaker name")
        check.in_range(owner, "count", self.count, 0)
        check.one_of(owner, "threads_per_core", self.threads_per_core, ThreadsPerCore)
        check.in_range(owner, "ebs_volume_gb", self.ebs_volume_gb, 0, MAX_EBS_VOLUME_GB)
        if self.max_pods is not None:
            check.in_range(owner, "max_pods", self.max_pods, 1)
        object.__setattr__(self, "deep_health_checks", _deep_health_checks(owner, self))
        # "Getting started with Amazon EKS support in SageMaker HyperPod": custom taints cannot be added to nodes in
        # instance groups that have deep health checks on (HyperPod taints those nodes itself while checking).
        if self.taints and self.deep_health_checks:
            raise ValueError(
                f"{owner}: taints cannot be combined with deep_health_checks {list(self.deep_health_checks or ())} "
                "(AWS HyperPod EKS prerequisites); remove the taints or set deep_health_checks=()"
            )


def _deep_health_checks(owner: str, group: InstanceGroup) -> tuple[DeepHealthCheck, ...]:
    """The group's deep health checks, the type's default when none are given. SageMaker AI developer guide, "Deep
    health checks" (HyperPod EKS and Slurm pages): the instance-level checks (``InstanceStress``: GPU count, DCGM
    level 4, and the EFA benchmark on an attached EFA device) run on any GPU type; the cluster-level NCCL test
    (``InstanceConnectivity``) "is only supported on instances with multi-node GPU communication capabilities", EFA
    on G6e (``kvtiers.catalog.instance_types``)."""
    instance = G6E_INSTANCE_TYPES.get(group.instance_type)
    if group.deep_health_checks is None:
        if instance is None or instance.efa:
            return DEEP_HEALTH_CHECKS
        return tuple(c for c in DEEP_HEALTH_CHECKS if c != "InstanceConnectivity")
    checks = tuple(group.deep_health_checks)
    for health_check in checks:
        check.one_of(owner, "deep_health_checks", health_check, DeepHealthCheck)
    check.distinct(owner, "deep_health_checks", checks)
    if instance is not None and not instance.efa and "InstanceConnectivity" in checks:
        raise ValueError(
            f"{owner}: deep_health_checks 'InstanceConnectivity' cannot run on {group.instance_type}, which has no "
            "EFA (the check runs NCCL tests across nodes over EFA); use ['InstanceStress'] or leave "
            "deep_health_checks unset"
        )
    return checks


class HyperPodCluster(Construct):
    """The HyperPod cluster.

    Attributes: ``cluster`` (the ``CfnCluster``), ``execution_role``, ``lifecycle_bucket``, ``lifecycle_deployment``,
    ``key`` (node volumes and lifecycle scripts), ``eks`` (the :class:`EksCluster`, or ``None`` for an imported
    cluster), ``subnet``, ``security_group``, ``instance_groups``, ``tiered_storage_enabled``,
    ``tiered_storage_memory_percentage`` and ``placement``.

    ``placement`` (a :class:`~kvtiers.placement.NodePlacement`) holds what one node of each group offers and every pod
    that must land there: the agents EKS and HyperPod run on every node (:mod:`kvtiers.node_agents`), registered here,
    and the pods of the constructs that run on the groups (:class:`~kvtiers.constructs.curvine.CurvineL2`, the
    endpoints), which register theirs. Synth fails with one line per group and resource that does not fit its
    fullest node (CPU, memory, GPUs, pods, instance-store NVMe, the kubelet's disk), and for a group too small for a
    workload with one pod a node (more replicas than nodes; ``CurvineL2`` refuses too few nodes for its masters
    itself). Groups of instance types outside kvtiers' table are not checked (a
    synth warning says so).

    HyperPod joins its nodes to the EKS cluster when it creates them: the networking add-ons and the dependency chart
    (health-monitoring agent, device plugins) must be there first. Given the :class:`EksCluster` and the
    :class:`HyperPodDependencies`, the cluster comes after both; without the chart it warns at synth.

    :param scope: the parent construct.
    :param id: the construct id.
    :param eks_cluster: the EKS cluster that orchestrates HyperPod: the :class:`EksCluster` construct (the cluster
        then comes after its ``vpc-cni``, ``kube-proxy`` and ``eks-pod-identity-agent`` add-ons) or an imported
        cluster (whose add-ons are its owner's business).
    :param subnet: the subnet of the HyperPod nodes.
    :param security_group: the security group of the HyperPod nodes.
    :param instance_groups: at least one instance group; names unique.
    :param dependencies: the HyperPod dependency chart on ``eks_cluster``; the cluster comes after it. @default none:
        a synth warning, unless ``external_dependency_chart``
    :param external_dependency_chart: the dependency chart is installed outside this app (before this cluster is
        created), so its absence here is no warning. @default False
    :param cluster_name: the HyperPod cluster name (a SageMaker name). @default a CloudFormation-generated name
    :param node_recovery: ``"Automatic"`` or ``"None"``. @default ``"Automatic"``: HyperPod replaces unhealthy
        nodes without an operator
    :param tiered_storage_enabled: HyperPod tiered storage (managed tiered KV cache memory on every node).
        @default on, as in the source design kvtiers reproduces; only the Inference Operator's ``tieredstorage`` KV
        backend reads it, not kvtiers' own serving paths (Curvine L2), so turn it off to give that memory to the
        engines' L1 (an info annotation says so when it is on)
    :param tiered_storage_memory_percentage: share of node memory, 0 to 100, reserved for tiered storage when it is
        on. @default 20, the value the source design measured with
    :param system_reserved_gib: memory of every node kept for HyperPod's own processes outside Kubernetes, beyond
        the kernel's share and the kubelet's reserve and eviction threshold. @default 2 GiB
        (``platform_defaults.SYSTEM_RESERVED_GIB``: an estimate until a real node's allocatable is read)
    :param lifecycle_dir: folder uploaded as lifecycle scripts; must hold ``on_create.sh``. @default the project's
        own script
    :param lifecycle_bucket_name: name of the lifecycle-script bucket; must start with ``sagemaker-`` (the only
        buckets HyperPod nodes may read). @default ``sagemaker-<stack name, lower-cased>-lcs-<account>`` cut to 63
        characters; in an environment-agnostic stack the account is resolved at deploy time and the stack name is
        shortened instead, so the account is never cut
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        eks_cluster: EksCluster | ClusterLike,
        subnet: ec2.ISubnet,
        security_group: ec2.ISecurityGroup,
        instance_groups: Sequence[InstanceGroup],
        dependencies: HyperPodDependencies | None = None,
        external_dependency_chart: bool = False,
        cluster_name: str | None = None,
        node_recovery: NodeRecovery = NODE_RECOVERY,
        tiered_storage_enabled: bool = TIERED_STORAGE_ENABLED,
        tiered_storage_memory_percentage: int = TIERED_STORAGE_MEMORY_PERCENTAGE,
        system_reserved_gib: int = SYSTEM_RESERVED_GIB,
        lifecycle_dir: Path = LIFECYCLE_DIR,
        lifecycle_bucket_name: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        if not (lifecycle_dir / ON_CREATE).is_file():
            raise ValueError(f"HyperPodCluster: lifecycle_dir {lifecycle_dir} has no {ON_CREATE}")
        if not instance_groups:
            raise ValueError("HyperPodCluster: instance_groups must not be empty")
        check.distinct("HyperPodCluster", "instance_groups names", [g.name for g in instance_groups])
        if cluster_name is not None:
            check.matches("HyperPodCluster", "cluster_name", cluster_name, SAGEMAKER_NAME_PATTERN, "a SageMaker name")
        check.one_of("HyperPodCluster", "node_recovery", node_recovery, NodeRecovery)
        check.in_range("HyperPodCluster", "tiered_storage_memory_percentage", tiered_storage_memory_percentage, 0, 100)
        check.in_range("HyperPodCluster", "system_reserved_gib", system_reserved_gib, 0)
        if dependencies is not None and external_dependency_chart:
            raise ValueError(
                "HyperPodCluster: dependencies is given and external_dependency_chart is True; give one or the other"
            )
        if lifecycle_bucket_name is None:
            lifecycle_bucket_name = default_lifecycle_bucket_name(cdk.Stack.of(self))
        else:
            _check_bucket_name(lifecycle_bucket_name)
        self.eks = eks_cluster if isinstance(eks_cluster, EksCluster) else None
        cluster = eks_cluster.cluster if isinstance(eks_cluster, EksCluster) else eks_cluster
        self.subnet = subnet
        self.security_group = security_group
        self.instance_groups = tuple(instance_groups)
        self.tiered_storage_enabled = tiered_storage_enabled
        self.tiered_storage_memory_percentage = tiered_storage_memory_percentage
        self.placement = checked_placement(
            self,
            self.instance_groups,
            tiered_storage_percentage=tiered_storage_memory_percentage if tiered_storage_enabled else 0,
            system_reserved_gib=system_reserved_gib,
        )
        self._lifecycle_scripts(lifecycle_dir, lifecycle_bucket_name)
        self._execution_role(cluster, subnet, security_group)

        if tiered_storage_enabled:
            cdk.Annotations.of(self).add_info(
                f"kvtiers:tiered-storage: HyperPod reserves {tiered_storage_memory_percentage} % of every node's memory "
                "for tiered storage, which only the Inference Operator's tieredstorage KV backend reads; kvtiers' "
                "serving paths (the Curvine L2) do not, and the endpoints' fit checks subtract it. "
                "tiered_storage_enabled=False gives that memory to the engines"
            )
        tiered = sagemaker.CfnCluster.TieredStorageConfigProperty(
            mode="Enable" if tiered_storage_enabled else "Disable",
            instance_memory_allocation_percentage=tiered_storage_memory_percentage if tiered_storage_enabled else None,
        )
        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=cluster.cluster_arn)
            ),
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[security_group.security_group_id], subnets=[subnet.subnet_id]
            ),
            node_recovery=node_recovery,
            node_provisioning_mode="Continuous",
            tiered_storage_config=tiered,
            instance_groups=[self._group(g) for g in instance_groups],
        )
        self._order(dependencies, external_dependency_chart=external_dependency_chart)
        cdk.Aspects.of(cdk.Stack.of(self)).add(_AfterRolePolicies(self.cluster, self.execution_role))

    def _lifecycle_scripts(self, lifecycle_dir: Path, bucket_name: str) -> None:
        """The lifecycle scripts in a bucket HyperPod nodes may read (``sagemaker-*``), encrypted with the key that
        also encrypts the node volumes."""
        self.key = kms.Key(
            self, "Key", enable_key_rotation=True, description="HyperPod node volumes and lifecycle scripts"
        )
        self.lifecycle_bucket = s3.Bucket(
            self,
            "LifecycleBucket",
            bucket_name=bucket_name,
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
            sources=[s3deploy.Source.asset(str(lifecycle_dir))],
            destination_bucket=self.lifecycle_bucket,
            destination_key_prefix="lifecycle",
            prune=True,
        )

    def _execution_role(self, cluster: ClusterLike, subnet: ec2.ISubnet, security_group: ec2.ISecurityGroup) -> None:
        """The nodes' role: image pulls, the nodes' network interfaces in the VPC (HyperPod's and the VPC CNI's),
        the alarms of an AMI update's automatic rollback, Pod Identity, and reading the lifecycle scripts."""
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
        for statement in vpc_statements(subnet=subnet, security_group=security_group):
            self.execution_role.add_to_policy(statement)
        # "Update your AMI version in your SageMaker HyperPod cluster": an AMI update in batches (UpdateClusterSoftware
        # with a DeploymentConfig, or a scheduled update) rolls back on CloudWatch alarms only if the execution role
        # may call cloudwatch:DescribeAlarms. kvtiers starts no AMI update itself; its operators do, on this role.
        # On "*": DescribeAlarms returns composite alarms only with permission scoped to "*" (CloudWatch API
        # reference, DescribeAlarms); alarm metadata only, no metric data.
        self.execution_role.add_to_policy(
            iam.PolicyStatement(sid="AmiUpdateRollbackAlarms", actions=["cloudwatch:DescribeAlarms"], resources=["*"])
        )
        self.execution_role.add_to_policy(
            iam.PolicyStatement(
                sid="PodIdentity",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[cluster.cluster_arn],
            )
        )
        # Reading the lifecycle scripts decrypts with the key (granted by grant_read). HyperPod itself creates the
        # node-volume grants with the execution role ("Customer managed AWS KMS key encryption for SageMaker
        # HyperPod": kms:CreateGrant and kms:DescribeKey); nodes never encrypt with the key themselves.
        self.lifecycle_bucket.grant_read(self.execution_role)
        self.key.grant(self.execution_role, "kms:CreateGrant", "kms:DescribeKey")

    def _order(self, dependencies: HyperPodDependencies | None, *, external_dependency_chart: bool) -> None:
        """The cluster after its lifecycle scripts, the networking add-ons and the dependency chart: HyperPod joins
        its nodes to EKS as it creates them."""
        self.cluster.node.add_dependency(self.lifecycle_deployment)
        if self.eks is not None:
            for name in ("vpc-cni", "kube-proxy", "eks-pod-identity-agent"):
                self.cluster.node.add_dependency(self.eks.addons[name])
        if dependencies is not None:
            self.cluster.node.add_dependency(dependencies.chart)
            self._warn_about_untolerated_taints(dependencies)
        elif not external_dependency_chart:
            cdk.Annotations.of(self).add_warning_v2(
                "kvtiers:no-dependency-chart",
                "HyperPodCluster: no HyperPod dependency chart (dependencies=HyperPodDependencies(...)): without its "
                "health-monitoring agent there is no automatic node recovery and without its device plugins no node "
                "offers nvidia.com/gpu; give it, or set external_dependency_chart=True when it is installed outside "
                "this app",
            )

    @staticmethod
    def from_hyperpod_cluster_attributes(
        scope: Construct,
        id: str,
        *,
        cluster_arn: str,
        instance_groups: Sequence[InstanceGroup],
        tiered_storage_memory_percentage: int = 0,
        system_reserved_gib: int = SYSTEM_RESERVED_GIB,
    ) -> ImportedHyperPodCluster:
        """A HyperPod cluster deployed elsewhere, for endpoints and an imported L2 to run on.

        :param cluster_arn: the cluster's ARN.
        :param instance_groups: its instance groups as deployed (names, instance types, counts, taints): the
            endpoints' groups, tolerations and placement come from them.
        :param tiered_storage_memory_percentage: the share of node memory the cluster reserves for tiered storage
            (0 when it is off). @default 0
        :param system_reserved_gib: memory every node keeps for HyperPod's processes. @default 2 GiB, as
            :class:`HyperPodCluster`
        """
        return ImportedHyperPodCluster(
            scope,
            id,
            cluster_arn=cluster_arn,
            instance_groups=instance_groups,
            tiered_storage_memory_percentage=tiered_storage_memory_percentage,
            system_reserved_gib=system_reserved_gib,
        )

    def _warn_about_untolerated_taints(self, dependencies: HyperPodDependencies) -> None:
        for group in self.instance_groups:
            for taint in group.taints:
                if not any(_tolerates(t, taint) for t in dependencies.tolerations):
                    cdk.Annotations.of(self).add_warning_v2(
                        "kvtiers:dependency-chart-untolerated-taint",
                        f"HyperPodCluster: the dependency chart does not tolerate the taint {taint.key!r} "
                        f"({taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}) of instance group {group.name!r}: its device "
                        "plugins do not run there and no node of the group offers nvidia.com/gpu; give "
                        "HyperPodDependencies(tolerations=...) a toleration of it",
                    )

    def _group(self, group: InstanceGroup) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
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
            on_start_deep_health_checks=list(group.deep_health_checks or ()) or None,
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
        """The HyperPod cluster's ARN (a deploy-time value)."""
        return self.cluster.attr_cluster_arn


class ImportedHyperPodCluster(Construct):
    """A HyperPod cluster another stack or team owns, by its attributes
    (:meth:`HyperPodCluster.from_hyperpod_cluster_attributes`).

    Attributes: ``cluster_arn``, ``instance_groups`` and ``placement``: the agents EKS and HyperPod run on every node
    and the pods of this app's constructs, checked as :class:`HyperPodCluster` checks them (synth fails where they
    do not fit). Pods the owner or other apps put on the same nodes are not counted (an info annotation says so).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster_arn: str,
        instance_groups: Sequence[InstanceGroup],
        tiered_storage_memory_percentage: int = 0,
        system_reserved_gib: int = SYSTEM_RESERVED_GIB,
    ) -> None:
        super().__init__(scope, id)
        if not instance_groups:
            raise ValueError("HyperPodCluster.from_hyperpod_cluster_attributes: instance_groups must not be empty")
        check.distinct("HyperPodCluster", "instance_groups names", [g.name for g in instance_groups])
        check.in_range("HyperPodCluster", "tiered_storage_memory_percentage", tiered_storage_memory_percentage, 0, 100)
        self.cluster_arn = cluster_arn
        self.instance_groups = tuple(instance_groups)
        self.placement = checked_placement(
            self,
            self.instance_groups,
            tiered_storage_percentage=tiered_storage_memory_percentage,
            system_reserved_gib=system_reserved_gib,
        )
        cdk.Annotations.of(self).add_info(
            "kvtiers:imported-hyperpod: the placement check counts the node agents and this app's pods on "
            f"{', '.join(g.name for g in self.instance_groups)}; pods the cluster's owner or other apps run there "
            "are not counted"
        )


def checked_placement(
    cluster: HyperPodCluster | ImportedHyperPodCluster,
    groups: Sequence[InstanceGroup],
    *,
    tiered_storage_percentage: int,
    system_reserved_gib: int,
) -> NodePlacement:
    """``cluster``'s placement: synth fails unless every pod registered there fits its node, warns where that
    depends on the scheduler's order and where a group's instance type has no figures."""
    placement = node_placement(
        groups, tiered_storage_percentage=tiered_storage_percentage, system_reserved_gib=system_reserved_gib
    )
    unchecked = [g for g in groups if g.instance_type not in G6E_INSTANCE_TYPES]
    if unchecked:
        cdk.Annotations.of(cluster).add_warning_v2(
            "kvtiers:placement-unchecked",
            f"HyperPodCluster: instance group(s) {', '.join(f'{g.name} ({g.instance_type})' for g in unchecked)} "
            "are of instance types kvtiers has no figures for (kvtiers.catalog.instance_types): nothing checks "
            "that the pods placed there fit their nodes",
        )
    cluster.node.add_validation(_PlacementFits(placement))
    cdk.Aspects.of(cluster).add(_PlacementWarnings(cluster))
    return placement


def node_placement(
    groups: Sequence[InstanceGroup], *, tiered_storage_percentage: int, system_reserved_gib: int
) -> NodePlacement:
    """What one node of each group offers (for the instance types kvtiers knows), with the agents EKS and HyperPod
    run on every node already registered."""
    offers: list[NodeOffer] = []
    for group in groups:
        instance = G6E_INSTANCE_TYPES.get(group.instance_type)
        if instance is None:
            continue
        offers.append(
            node_offer(
                group=group.name,
                instance=instance,
                count=group.count,
                threads_per_core=group.threads_per_core,
                tiered_storage_percentage=tiered_storage_percentage,
                system_reserved_gib=system_reserved_gib,
                kubelet_disk_gb=group.ebs_volume_gb,
                reserve=kubelet_reserve(instance, threads_per_core=group.threads_per_core, max_pods=group.max_pods),
            )
        )
    placement = NodePlacement(
        offers, unchecked_groups=[g.name for g in groups if g.instance_type not in G6E_INSTANCE_TYPES]
    )
    register_agents(placement, NODE_AGENTS, groups)
    return placement


def register_agents(placement: NodePlacement, agents: Sequence[NodeAgent], groups: Sequence[InstanceGroup]) -> None:
    """Each agent's pods on the groups they land on: a DaemonSet on those of the instance types it selects, a
    controller on those no taint of their own protects."""
    facts = {
        g.name: GroupFacts(
            instance_type=g.instance_type,
            repels_controllers=any(t.effect in REPELLING_TAINT_EFFECTS for t in g.taints),
        )
        for g in groups
    }
    for agent in agents:
        workload = agent.workload(facts)
        if workload is not None:
            placement.add(workload)


@jsii.implements(IValidation)
class _PlacementFits:
    """Synth fails unless every pod registered on the HyperPod groups fits the node it must run on."""

    def __init__(self, placement: NodePlacement) -> None:
        self._placement = placement

    def validate(self) -> list[str]:
        return [f"HyperPodCluster: {problem}" for problem in self._placement.problems()]


PLACEMENT_ORDER_WARNING = "kvtiers:gpu-placement-order"
"""Id of the synth warning about GPU pods whose placement depends on the order the scheduler takes them in."""


@jsii.implements(cdk.IAspect)
class _PlacementWarnings:
    """What may go wrong though every pod fits, said once the stack is complete (an aspect runs after every construct
    has registered its pods)."""

    def __init__(self, cluster: HyperPodCluster | ImportedHyperPodCluster) -> None:
        self._cluster = cluster

    def visit(self, node: IConstruct) -> None:
        # jsii hands a construct made in Python back as the same object: no round trip per visited construct.
        if node is not self._cluster:
            return
        for warning in self._cluster.placement.warnings():
            cdk.Annotations.of(self._cluster).add_warning_v2(PLACEMENT_ORDER_WARNING, f"HyperPodCluster: {warning}")


def vpc_statements(*, subnet: ec2.ISubnet, security_group: ec2.ISecurityGroup) -> list[iam.PolicyStatement]:
    """What the execution role needs for nodes in the customer's VPC: HyperPod's own network interfaces and the
    VPC CNI on the nodes, which runs with this role (there is no node role).

    The action set is the union of AWS's "IAM role for SageMaker HyperPod" list for a custom VPC (network
    interfaces, their permissions and tags, and the VPC describe calls) and ``AmazonEKS_CNI_Policy``'s IPv4 actions,
    as both reference templates grant them (aws/sagemaker-hyperpod-cluster-setup
    ``eks/cloudformation/sagemaker-iam-role-template.yaml``, awsome-distributed-training
    ``cfn-templates/nested-stacks/sagemaker-iam-role-stack.yaml``); docs/aws-prerequisites.md cites each. Every action
    that takes a resource (Service Authorization Reference) is scoped to this account and region, the HyperPod
    subnet and the node security group; describe calls take none. The one exception is the instance of
    ``ec2:AttachNetworkInterface`` and ``ec2:DetachNetworkInterface``: HyperPod's instances live in a SageMaker
    service account (AWS documents these actions on ``*``), so their instance part is any account's instance in this
    region, their network interface ours.
    """
    stack = cdk.Stack.of(subnet)

    def ec2_arn(resource: str, name: str = "*", *, account: str | None = None) -> str:
        return stack.format_arn(service="ec2", resource=resource, resource_name=name, account=account)

    ours = [
        ec2_arn("instance"),
        ec2_arn("network-interface"),
        ec2_arn("subnet", subnet.subnet_id),
        ec2_arn("security-group", security_group.security_group_id),
    ]
    return [
        iam.PolicyStatement(
            sid="VpcEnis",
            actions=[
                "ec2:AssignPrivateIpAddresses",
                "ec2:CreateNetworkInterface",
                "ec2:CreateNetworkInterfacePermission",
                "ec2:DeleteNetworkInterface",
                "ec2:DeleteNetworkInterfacePermission",
                "ec2:ModifyNetworkInterfaceAttribute",
                "ec2:UnassignPrivateIpAddresses",
            ],
            resources=ours,
        ),
        iam.PolicyStatement(
            sid="VpcEniDetach",
            actions=["ec2:AttachNetworkInterface", "ec2:DetachNetworkInterface"],
            resources=[ec2_arn("network-interface"), ec2_arn("instance", account="*")],
        ),
        # The Service Authorization Reference lists no resource type for these: they cannot be scoped.
        iam.PolicyStatement(
            sid="VpcDescribe",
            actions=[
                "ec2:DescribeDhcpOptions",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSubnets",
                "ec2:DescribeTags",
                "ec2:DescribeVpcs",
            ],
            resources=["*"],
        ),
        iam.PolicyStatement(sid="VpcEniTags", actions=["ec2:CreateTags"], resources=[ec2_arn("network-interface")]),
    ]


@jsii.implements(cdk.IAspect)
class _AfterRolePolicies:
    """Makes the HyperPod cluster depend on every IAM policy resource of its stack attached to the execution role.
    A policy is a resource of its own: without the dependency CloudFormation may create the cluster (and HyperPod
    start nodes with the role) before the policy exists. An aspect, so that policies attached later, by grants or
    by a consumer of the construct, count too."""

    def __init__(self, cluster: sagemaker.CfnCluster, role: iam.Role) -> None:
        self._cluster = cluster
        self._role = role

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, (iam.CfnPolicy, iam.CfnManagedPolicy)):
            return
        stack = cdk.Stack.of(node)
        if stack is not cdk.Stack.of(self._cluster):
            return
        if stack.resolve(self._role.role_name) in (stack.resolve(node.roles) or []):
            self._cluster.add_resource_dependency(node)


def default_lifecycle_bucket_name(stack: cdk.Stack) -> str:
    """``sagemaker-<stack name>-lcs-<account>`` in at most 63 characters. An unresolved account (an
    environment-agnostic stack) is never cut: the stack name is shortened to leave room for its 12 digits."""
    if check.unresolved(stack.stack_name):
        raise ValueError(
            "HyperPodCluster: the stack name is resolved only at deploy time (a nested stack?), so no lifecycle "
            "bucket name can be derived from it; pass lifecycle_bucket_name"
        )
    name = stack.stack_name.lower()
    if check.unresolved(stack.account):
        room = 63 - len(LIFECYCLE_BUCKET_PREFIX) - len(LIFECYCLE_BUCKET_INFIX) - ACCOUNT_ID_LENGTH
        return f"{LIFECYCLE_BUCKET_PREFIX}{name[:room]}{LIFECYCLE_BUCKET_INFIX}{stack.account}"
    # Cut as a whole, as it always was: a changed name would replace the (retained) bucket of a deployed stack. A cut
    # that ends in a hyphen was never deployable (S3 names end in a letter or digit), so stripping it renames nothing.
    return f"{LIFECYCLE_BUCKET_PREFIX}{name}{LIFECYCLE_BUCKET_INFIX}{stack.account}"[:63].rstrip("-.")


def _check_bucket_name(name: str) -> None:
    if check.unresolved(name):
        return
    if not name.startswith(LIFECYCLE_BUCKET_PREFIX):
        raise ValueError(
            f"HyperPodCluster: lifecycle_bucket_name {name!r} must start with {LIFECYCLE_BUCKET_PREFIX!r} "
            f"({INSTANCE_ROLE_POLICY} lets nodes read only those buckets)"
        )
    if not re.match(BUCKET_NAME_PATTERN, name) or ".." in name:
        raise ValueError(f"HyperPodCluster: lifecycle_bucket_name {name!r} is not a valid S3 bucket name")


def _tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' rule: same key and effect, and any value (``Exists``) or the same one."""
    return (
        toleration.key == taint.key
        and toleration.effect == taint.effect
        and (toleration.value is None or toleration.value == taint.value)
    )
