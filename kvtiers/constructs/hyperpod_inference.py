"""The HyperPod Inference Operator as its EKS add-on, its prerequisites as pinned add-ons, its IAM and TLS bucket,
and the Kyverno policy engine that attaches the Curvine L2 to operator pods.

Order: HyperPod cluster (via the stack dependency) -> cert-manager, S3 and FSx CSI drivers, metrics-server ->
operator add-on -> Kyverno -> endpoints. The operator's init check refuses to start without both CSI drivers and
the cert-manager CRDs, so the FSx driver is installed even when no endpoint uses FSx.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from kvtiers.constructs.eks_cluster import pinned_addon, pod_identity_role
from kvtiers.k8s_charts.hyperpod_operator.contract import kyverno_values

OPERATOR_ADDON = "amazon-sagemaker-hyperpod-inference"
OPERATOR_NAMESPACE = "hyperpod-inference-system"
OPERATOR_SERVICE_ACCOUNT = "hyperpod-inference-controller-manager"
KEDA_SERVICE_ACCOUNT = "keda-operator"
EXECUTION_ROLE_PREFIX = "SageMakerHyperPodInference"
"""The add-on refuses an execution role whose name does not start with this."""


@dataclass(frozen=True)
class InferenceOperatorProps:
    cluster: eks.Cluster
    hyperpod_cluster_arn: str
    environment_name: str
    operator_version: str
    cert_manager_version: str
    s3_csi_version: str
    fsx_csi_version: str
    metrics_server_version: str
    kyverno_chart_version: str
    model_buckets: tuple[str, ...] = ()
    """Buckets the S3 CSI driver may read model weights from. Default: none."""


class InferenceOperator(Construct):
    """``operator_addon`` and ``kyverno`` are what endpoint manifests must depend on."""

    def __init__(self, scope: Construct, id: str, *, props: InferenceOperatorProps) -> None:
        super().__init__(scope, id)
        cluster = self._cluster = props.cluster
        self.tls_bucket = s3.Bucket(
            self,
            "TlsCertificates",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        provider = cluster.open_id_connect_provider
        issuer = provider.open_id_connect_provider_issuer
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            role_name=f"{EXECUTION_ROLE_PREFIX}-{props.environment_name}"[:64],
            assumed_by=iam.CompositePrincipal(
                iam.ServicePrincipal("sagemaker.amazonaws.com"),
                iam.OpenIdConnectPrincipal(provider).with_conditions(
                    {
                        "StringEquals": cdk.CfnJson(
                            self,
                            "OperatorSubject",
                            value={
                                f"{issuer}:sub": f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}",
                                f"{issuer}:aud": "sts.amazonaws.com",
                            },
                        )
                    }
                ),
            ),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSageMakerHyperPodInferenceAccess")],
        )
        self.tls_bucket.grant_read_write(self.execution_role)
        self.keda_role = iam.Role(
            self,
            "KedaRole",
            assumed_by=iam.OpenIdConnectPrincipal(provider).with_conditions(
                {
                    "StringEquals": cdk.CfnJson(
                        self,
                        "KedaSubject",
                        value={
                            f"{issuer}:sub": f"system:serviceaccount:{OPERATOR_NAMESPACE}:{KEDA_SERVICE_ACCOUNT}",
                            f"{issuer}:aud": "sts.amazonaws.com",
                        },
                    )
                }
            ),
        )
        self.keda_role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics", "cloudwatch:ListMetrics"],
                resources=["*"],
            )
        )
        s3_role = pod_identity_role(self, "S3CsiRole", "Mountpoint S3 CSI driver: read model weights")
        for bucket in props.model_buckets:
            s3_role.add_to_policy(
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{bucket}"])
            )
            s3_role.add_to_policy(
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{bucket}/*"])
            )
        self.s3_csi_role = s3_role
        self.prerequisites = [
            self._addon("CertManager", "cert-manager", props.cert_manager_version),
            self._addon(
                "S3Csi",
                "aws-mountpoint-s3-csi-driver",
                props.s3_csi_version,
                pod_identity=(s3_role, "s3-csi-driver-sa"),
            ),
            self._addon("FsxCsi", "aws-fsx-csi-driver", props.fsx_csi_version),
            self._addon("MetricsServer", "metrics-server", props.metrics_server_version),
        ]
        self.configuration = {
            "executionRoleArn": self.execution_role.role_arn,
            "tlsCertificateS3Bucket": self.tls_bucket.bucket_name,
            "hyperpodClusterArn": props.hyperpod_cluster_arn,
            # Endpoints are reached through the operator's routing Service inside the VPC; no ALB is created.
            "alb": {"enabled": False},
            "keda": {"enabled": True, "auth": {"aws": {"irsa": {"enabled": True, "roleArn": self.keda_role.role_arn}}}},
        }
        self.operator_addon = self._addon(
            "Operator", OPERATOR_ADDON, props.operator_version, configuration=self.configuration
        )
        for prerequisite in self.prerequisites:
            self.operator_addon.node.add_dependency(prerequisite)
        self.kyverno = eks.HelmChart(
            self,
            "Kyverno",
            cluster=cluster,
            chart="kyverno",
            repository="https://kyverno.github.io/kyverno/",
            version=props.kyverno_chart_version,
            namespace="kyverno",
            release="kyverno",
            create_namespace=True,
            atomic=True,
            wait=True,
            timeout=cdk.Duration.minutes(10),
            # Three admission replicas and a PodDisruptionBudget: the operator endpoints' pods are admitted only
            # through Kyverno (fail-closed for them), so one replica down must not stop them.
            values=kyverno_values(),
        )
        self.kyverno.node.add_dependency(self.operator_addon)

    def _addon(
        self, id: str, name: str, version: str, *, pod_identity=None, configuration: dict | None = None
    ) -> eks_l1.CfnAddon:
        role, service_account = pod_identity or (None, None)
        return pinned_addon(
            self,
            id,
            cluster=self._cluster,
            name=name,
            version=version,
            role=role,
            service_account=service_account,
            configuration_values=configuration,
        )
