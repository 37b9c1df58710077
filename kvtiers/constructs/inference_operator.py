"""HyperPod Inference Operator (EKS add-on ``amazon-sagemaker-hyperpod-inference``) with its prerequisites.

Order (explicit ``node.add_dependency``): IAM roles + TLS bucket + prerequisite add-ons (cert-manager,
aws-mountpoint-s3-csi-driver, aws-fsx-csi-driver, metrics-server) -> operator add-on -> Kyverno (``add_kyverno``)
-> endpoints (the caller makes each endpoint chart depend on ``operator_addon`` and on the Kyverno chart).
The operator's init check refuses to start unless both CSIDrivers (s3, fsx) and the cert-manager CRDs exist, so the
FSx driver is installed even when no endpoint reads from FSx.

IAM uses IRSA on the cluster's OIDC provider (``cluster.open_id_connect_provider``; native ``OidcProviderNative``
when the ``@aws-cdk/aws-eks:useNativeOidcProvider`` flag is set), each role trusting exactly one service account.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

OPERATOR_ADDON = "amazon-sagemaker-hyperpod-inference"
OPERATOR_NAMESPACE = "hyperpod-inference-system"
OPERATOR_SA = "hyperpod-inference-controller-manager"
ALB_SA = "aws-load-balancer-controller"
KEDA_SA = "keda-operator"
S3_CSI_NAMESPACE = "kube-system"
S3_CSI_SA = "s3-csi-driver-sa"
EXECUTION_ROLE_PREFIX = "SageMakerHyperPodInference"
"""The add-on rejects an execution role whose name does not start with this."""
KYVERNO_REPOSITORY = "https://kyverno.github.io/kyverno/"
KYVERNO_NAMESPACE = "kyverno"


@dataclass(frozen=True)
class InferenceOperatorProps:
    cluster: eks.ICluster
    hyperpod_cluster_arn: str
    """May be a token (``CfnCluster.attr_cluster_arn``)."""
    name: str
    """Deterministic suffix of the execution role name (for example the environment name); <= 30 chars."""
    vpc_id: str
    region: str
    operator_version: str
    cert_manager_version: str
    s3_csi_version: str
    fsx_csi_version: str
    metrics_server_version: str
    kyverno_chart_version: str
    model_buckets: tuple[str, ...] = ()
    """Buckets the Mountpoint S3 CSI driver may read (ListBucket + GetObject). Default: none."""
    alb_enabled: bool = True
    """Let the operator run its AWS Load Balancer Controller (IRSA role created). Default: True."""
    keda_enabled: bool = True
    """Let the operator run KEDA for ``autoScalingSpec`` (IRSA role created). Default: True."""
    tls_bucket_access_logs: s3.IBucket | None = None
    """Server-access-log bucket for the TLS bucket. Default: None (cdk-nag S1 acknowledged with a reason)."""
    extra_config: dict[str, Any] = field(default_factory=dict)
    """Extra top-level add-on configuration keys (merged last). Default: none."""


def irsa_principal(scope: Construct, id: str, cluster: eks.ICluster, namespace: str, sa: str) -> iam.IPrincipal:
    provider = cluster.open_id_connect_provider
    issuer = provider.open_id_connect_provider_issuer
    conditions = cdk.CfnJson(
        scope, id,
        value={f"{issuer}:sub": f"system:serviceaccount:{namespace}:{sa}", f"{issuer}:aud": "sts.amazonaws.com"},
    )
    return iam.OpenIdConnectPrincipal(provider).with_conditions({"StringEquals": conditions})


def _ack(scope: Construct, id: str, reason: str) -> None:
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=id, reason=reason))


class InferenceOperator(Construct):
    """Exposes ``operator_addon`` (endpoints depend on it), ``prerequisites``, the roles, ``tls_bucket``,
    ``configuration`` (the add-on configuration dict) and :meth:`add_kyverno`."""

    def __init__(self, scope: Construct, id: str, *, props: InferenceOperatorProps) -> None:
        super().__init__(scope, id)
        self.props = props
        cluster = props.cluster
        partition = cdk.Aws.PARTITION

        self.tls_bucket = s3.Bucket(
            self, "TlsCertificates",
            encryption=s3.BucketEncryption.S3_MANAGED, enforce_ssl=True, versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL, removal_policy=cdk.RemovalPolicy.RETAIN,
            server_access_logs_bucket=props.tls_bucket_access_logs,
            server_access_logs_prefix="tls-certificates/" if props.tls_bucket_access_logs else None,
        )
        if props.tls_bucket_access_logs is None:
            _ack(self.tls_bucket, "AwsSolutions-S1",
                 "holds only the operator's generated endpoint TLS certificates; writes are CloudTrail-audited by the "
                 "execution role; pass tls_bucket_access_logs to enable server access logs")

        # ---- execution role (operator controller SA via IRSA, and SageMaker)
        self.execution_role = iam.Role(
            self, "ExecutionRole",
            role_name=f"{EXECUTION_ROLE_PREFIX}-{props.name}-{props.region}"[:64],
            assumed_by=iam.CompositePrincipal(
                iam.ServicePrincipal("sagemaker.amazonaws.com"),
                irsa_principal(self, "OperatorSubject", cluster, OPERATOR_NAMESPACE, OPERATOR_SA),
            ),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSageMakerHyperPodInferenceAccess")],
        )
        self.tls_bucket.grant_read_write(self.execution_role)
        self.execution_role.add_to_policy(iam.PolicyStatement(
            actions=["s3:PutObjectTagging"], resources=[self.tls_bucket.arn_for_objects("*")]))
        _ack(self.execution_role, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSageMakerHyperPodInferenceAccess]",
             "the HyperPod inference add-on requires this AWS managed policy on its execution role")
        _ack(self.execution_role, "AwsSolutions-IAM5[Action::s3:Abort*]", "grant_read_write on the TLS bucket only")
        _ack(self.execution_role, "AwsSolutions-IAM5[Action::s3:DeleteObject*]", "grant_read_write on the TLS bucket only")
        _ack(self.execution_role, "AwsSolutions-IAM5[Action::s3:GetBucket*]", "grant_read_write on the TLS bucket only")
        _ack(self.execution_role, "AwsSolutions-IAM5[Action::s3:GetObject*]", "grant_read_write on the TLS bucket only")
        _ack(self.execution_role, "AwsSolutions-IAM5[Action::s3:List*]", "grant_read_write on the TLS bucket only")
        stack = cdk.Stack.of(self)
        bucket_logical_id = stack.resolve(stack.get_logical_id(self.tls_bucket.node.default_child))
        _ack(self.execution_role, f"AwsSolutions-IAM5[Resource::<{bucket_logical_id}.Arn>/*]",
             "TLS bucket objects only: certificate object names are generated by the operator per endpoint")

        # ---- KEDA (reads CloudWatch metrics for autoScalingSpec)
        self.keda_role: iam.Role | None = None
        if props.keda_enabled:
            self.keda_role = iam.Role(
                self, "KedaRole", assumed_by=irsa_principal(self, "KedaSubject", cluster, OPERATOR_NAMESPACE, KEDA_SA))
            self.keda_role.add_to_policy(iam.PolicyStatement(
                actions=["cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics", "cloudwatch:ListMetrics"],
                resources=["*"]))
            _ack(self.keda_role, "AwsSolutions-IAM5[Resource::*]",
                 "CloudWatch metric read APIs do not support resource-level permissions")

        # ---- ALB controller (the operator's own LBC for the endpoint ALB)
        self.alb_role: iam.Role | None = None
        if props.alb_enabled:
            self.alb_role = iam.Role(
                self, "AlbControllerRole", assumed_by=irsa_principal(self, "AlbSubject", cluster, OPERATOR_NAMESPACE, ALB_SA))
            self.alb_role.add_to_policy(iam.PolicyStatement(
                actions=["ec2:Describe*", "elasticloadbalancing:Describe*", "acm:ListCertificates", "acm:DescribeCertificate",
                         "iam:ListServerCertificates", "iam:GetServerCertificate", "wafv2:GetWebACLForResource",
                         "shield:GetSubscriptionState", "ec2:GetSecurityGroupsForVpc"],
                resources=["*"]))
            self.alb_role.add_to_policy(iam.PolicyStatement(
                actions=["ec2:CreateSecurityGroup", "ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress",
                         "ec2:DeleteSecurityGroup", "ec2:CreateTags", "ec2:DeleteTags"],
                resources=["*"],
            ))
            self.alb_role.add_to_policy(iam.PolicyStatement(
                actions=["elasticloadbalancing:Create*", "elasticloadbalancing:Modify*", "elasticloadbalancing:Delete*",
                         "elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags",
                         "elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets",
                         "elasticloadbalancing:SetSecurityGroups", "elasticloadbalancing:SetSubnets",
                         "elasticloadbalancing:SetIpAddressType"],
                resources=[f"arn:{partition}:elasticloadbalancing:{props.region}:{cdk.Aws.ACCOUNT_ID}:*"]))
            _ack(self.alb_role, "AwsSolutions-IAM5[Resource::*]",
                 "AWS Load Balancer Controller: Describe/Get APIs have no resource-level permissions; security groups "
                 "are created by the controller with generated ids")
            for a in ("ec2:Describe*", "elasticloadbalancing:Describe*", "elasticloadbalancing:Create*",
                      "elasticloadbalancing:Modify*", "elasticloadbalancing:Delete*"):
                _ack(self.alb_role, f"AwsSolutions-IAM5[Action::{a}]", "standard AWS Load Balancer Controller action set")
            _ack(self.alb_role, "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:elasticloadbalancing:"
                 f"{props.region}:<AWS::AccountId>:*]", "load balancers and target groups are named by the controller")

        # ---- Mountpoint S3 CSI driver (reads model weights)
        self.s3_csi_role = iam.Role(
            self, "S3CsiRole", assumed_by=irsa_principal(self, "S3CsiSubject", cluster, S3_CSI_NAMESPACE, S3_CSI_SA))
        for bucket in props.model_buckets:
            self.s3_csi_role.add_to_policy(iam.PolicyStatement(
                actions=["s3:ListBucket"], resources=[f"arn:{partition}:s3:::{bucket}"]))
            self.s3_csi_role.add_to_policy(iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[f"arn:{partition}:s3:::{bucket}/*"]))
            _ack(self.s3_csi_role, f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{bucket}/*]",
                 "model weights bucket, read-only")

        # ---- prerequisites
        self.cert_manager = self._addon("CertManager", "cert-manager", props.cert_manager_version)
        self.s3_csi = self._addon("S3Csi", "aws-mountpoint-s3-csi-driver", props.s3_csi_version,
                                  service_account_role=self.s3_csi_role)
        self.fsx_csi = self._addon("FsxCsi", "aws-fsx-csi-driver", props.fsx_csi_version)
        self.metrics_server = self._addon("MetricsServer", "metrics-server", props.metrics_server_version)
        self.prerequisites: tuple[eks.Addon, ...] = (self.cert_manager, self.s3_csi, self.fsx_csi, self.metrics_server)

        # ---- operator
        self.configuration = self.build_configuration()
        self.operator_addon = self._addon("Operator", OPERATOR_ADDON, props.operator_version)
        cfn: eks_l1.CfnAddon = self.operator_addon.node.default_child  # type: ignore[assignment]
        cfn.add_property_override("ConfigurationValues", self.configuration_json())
        for prerequisite in self.prerequisites:
            self.operator_addon.node.add_dependency(prerequisite)
        for role in (self.execution_role, self.keda_role, self.alb_role, self.s3_csi_role):
            if role is not None:
                self.operator_addon.node.add_dependency(role)
        self.operator_addon.node.add_dependency(self.tls_bucket)
        self.kyverno: eks.HelmChart | None = None

    def build_configuration(self) -> dict[str, Any]:
        p = self.props
        config: dict[str, Any] = {
            "executionRoleArn": self.execution_role.role_arn,
            "tlsCertificateS3Bucket": self.tls_bucket.bucket_name,
            "hyperpodClusterArn": p.hyperpod_cluster_arn,
            "alb": {"enabled": p.alb_enabled},
            "keda": {"enabled": p.keda_enabled},
        }
        if self.alb_role is not None:
            config["alb"]["serviceAccount"] = {"create": True, "roleArn": self.alb_role.role_arn}
        if self.keda_role is not None:
            config["keda"]["auth"] = {"aws": {"irsa": {"enabled": True, "roleArn": self.keda_role.role_arn}}}
        config.update(p.extra_config)
        return config

    def configuration_json(self) -> str:
        """``json.dumps`` of :attr:`configuration` (string tokens stay embedded; CloudFormation joins them)."""
        return json.dumps(self.configuration, separators=(",", ":"), sort_keys=True)

    def add_kyverno(self) -> eks.HelmChart:
        """The Kyverno Helm chart (pinned), after the operator add-on; endpoints and policies must depend on it."""
        if self.kyverno is None:
            self.kyverno = eks.HelmChart(
                self, "Kyverno", cluster=self.props.cluster, chart="kyverno", repository=KYVERNO_REPOSITORY,
                version=self.props.kyverno_chart_version, namespace=KYVERNO_NAMESPACE, release="kyverno",
                create_namespace=True, atomic=True, wait=True, timeout=cdk.Duration.minutes(10),
            )
            self.kyverno.node.add_dependency(self.operator_addon)
        return self.kyverno

    def _addon(self, id: str, name: str, version: str, *, service_account_role: iam.IRole | None = None) -> eks.Addon:
        addon = eks.Addon(self, id, cluster=self.props.cluster, addon_name=name, addon_version=version,
                          preserve_on_delete=False)
        if service_account_role is not None:
            cfn: eks_l1.CfnAddon = addon.node.default_child  # type: ignore[assignment]
            cfn.add_property_override("ServiceAccountRoleArn", service_account_role.role_arn)
        return addon
