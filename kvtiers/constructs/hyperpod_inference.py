"""The HyperPod Inference Operator as its EKS add-on, its prerequisites as pinned add-ons, its IAM and TLS bucket,
and the Kyverno policy engine that attaches the Curvine L2 to operator pods.

Order: HyperPod cluster (via the stack dependency) -> cert-manager, S3 and FSx CSI drivers, metrics-server ->
operator add-on -> Kyverno -> endpoints. The operator's init check refuses to start without both CSI drivers and
the cert-manager CRDs, so the FSx driver is installed even when no endpoint uses FSx.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

import kvtiers.checks as check
from kvtiers.catalog import platform_defaults
from kvtiers.catalog.platform_defaults import ADDON_VERSION_PATTERN
from kvtiers.constructs.eks_cluster import ClusterLike, EksCluster, as_cluster_interface, pinned_addon
from kvtiers.constructs.load_balancer_controller import load_balancer_controller_statements
from kvtiers.constructs.node_traffic import NodeTraffic, PortRule
from kvtiers.k8s_charts.hyperpod_operator.contract import kyverno_values
from kvtiers.k8s_charts.names import OPERATOR_PORT

OPERATOR_ADDON = "amazon-sagemaker-hyperpod-inference"
OPERATOR_NAMESPACE = "hyperpod-inference-system"
OPERATOR_SERVICE_ACCOUNT = "hyperpod-inference-controller-manager"
KEDA_SERVICE_ACCOUNT = "keda-operator"
ALB_SERVICE_ACCOUNT = "aws-load-balancer-controller"
"""The add-on's load balancer controller (``alb.serviceAccount``; AWS's helm_to_addon.sh trusts this subject in the
operator's namespace)."""
S3_CSI_NAMESPACE = "kube-system"
S3_CSI_SERVICE_ACCOUNT = "s3-csi-driver-sa"
"""The Mountpoint S3 CSI add-on's service account (AWS's helm_to_addon.sh trusts exactly this subject)."""
EXECUTION_ROLE_PREFIX = "SageMakerHyperPodInference"
"""The add-on refuses an execution role whose name does not start with this."""
CHART_VERSION_PATTERN = r"^\d+\.\d+\.\d+$"


@dataclass(frozen=True, kw_only=True)
class OperatorAddonVersions:
    """Exact EKS add-on versions of the HyperPod Inference Operator and its prerequisites.

    :param inference_operator: ``amazon-sagemaker-hyperpod-inference``. @default
        ``platform_defaults.INFERENCE_OPERATOR_VERSION``
    :param cert_manager: ``cert-manager``. @default ``platform_defaults.CERT_MANAGER_VERSION``
    :param s3_csi_driver: ``aws-mountpoint-s3-csi-driver``. @default ``platform_defaults.S3_CSI_DRIVER_VERSION``
    :param fsx_csi_driver: ``aws-fsx-csi-driver``. @default ``platform_defaults.FSX_CSI_DRIVER_VERSION``
    :param metrics_server: ``metrics-server``. @default ``platform_defaults.METRICS_SERVER_VERSION``
    """

    inference_operator: str = platform_defaults.INFERENCE_OPERATOR_VERSION
    cert_manager: str = platform_defaults.CERT_MANAGER_VERSION
    s3_csi_driver: str = platform_defaults.S3_CSI_DRIVER_VERSION
    fsx_csi_driver: str = platform_defaults.FSX_CSI_DRIVER_VERSION
    metrics_server: str = platform_defaults.METRICS_SERVER_VERSION

    def __post_init__(self) -> None:
        check.exact_addon_versions(self, ADDON_VERSION_PATTERN, "v1.0.0-eksbuild.1")


KUBELET_PORT = 10250


def _allow_operator_traffic(traffic: NodeTraffic) -> None:
    # metrics-server (a prerequisite) scrapes every kubelet, from whichever kind of node it runs on.
    traffic.allow_to_hyperpod(
        PortRule(protocol="tcp", port=KUBELET_PORT, reason="metrics-server scrapes the HyperPod kubelets")
    )
    traffic.allow_to_system(
        PortRule(
            protocol="tcp", port=KUBELET_PORT, reason="metrics-server on a HyperPod node scrapes the system kubelets"
        )
    )


def allow_invocation_traffic(traffic: NodeTraffic) -> None:
    """What an operator endpoint's pods need: the operator's router and controller (on the system nodes) reach them
    on their invocation port."""
    traffic.allow_to_hyperpod(
        PortRule(
            protocol="tcp",
            port=OPERATOR_PORT,
            reason="Inference Operator: its router and controller reach the model pods on their invocation port",
        )
    )


class InferenceOperator(Construct):
    """The operator add-on with its prerequisites, roles and TLS bucket, and Kyverno.

    Attributes: ``operator_addon`` and ``kyverno`` (what endpoint manifests must depend on), ``addons`` (the
    versions), ``alb_role``, ``prerequisites``, ``execution_role``, ``keda_role``, ``s3_csi_role``, ``tls_bucket``,
    ``configuration`` (the add-on's), ``model_buckets`` (as given) and ``model_object_arns`` (the objects the S3 CSI
    driver may read).

    :param scope: the parent construct.
    :param id: the construct id.
    :param cluster: the EKS cluster (with an OpenID Connect provider). Given the :class:`EksCluster` construct, the
        operator opens the ports it needs between system and HyperPod nodes (kubelets for metrics-server) in its
        node traffic; each :class:`~kvtiers.constructs.operator_serving.OperatorServingEndpoint` opens its pods'
        invocation port.
    :param hyperpod_cluster_arn: the HyperPod cluster the operator schedules on.
    :param environment_name: names the execution role ``SageMakerHyperPodInference-<environment_name>`` (cut to 64
        characters) and describes the resources.
    :param addons: exact versions of the operator add-on and its prerequisites. @default
        ``OperatorAddonVersions()``
    :param kyverno_chart_version: the Kyverno Helm chart version, ``X.Y.Z``. @default
        ``platform_defaults.KYVERNO_CHART_VERSION``
    :param model_buckets: buckets the S3 CSI driver may read model weights from. @default none
    :param controller_node_labels: node labels every Kyverno pod is scheduled by (the cluster's system nodes), so
        that the fail-closed admission never runs on HyperPod nodes. @default none: anywhere
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: EksCluster | ClusterLike,
        hyperpod_cluster_arn: str,
        environment_name: str,
        addons: OperatorAddonVersions | None = None,
        kyverno_chart_version: str = platform_defaults.KYVERNO_CHART_VERSION,
        model_buckets: Sequence[str] = (),
        controller_node_labels: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(scope, id)
        addons = addons if addons is not None else OperatorAddonVersions()
        self.addons = addons
        if not environment_name:
            raise ValueError("InferenceOperator: environment_name must not be empty")
        check.matches(
            "InferenceOperator",
            "kyverno_chart_version",
            kyverno_chart_version,
            CHART_VERSION_PATTERN,
            "a chart version X.Y.Z",
        )
        check.distinct("InferenceOperator", "model_buckets", model_buckets)
        self.model_buckets = tuple(model_buckets)
        if isinstance(cluster, EksCluster):
            if cluster.node_traffic is not None:
                _allow_operator_traffic(cluster.node_traffic)
            cluster = cluster.cluster
        self._cluster = cluster
        self.tls_bucket = s3.Bucket(
            self,
            "TlsCertificates",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            role_name=f"{EXECUTION_ROLE_PREFIX}-{environment_name}"[:64],
            assumed_by=iam.CompositePrincipal(
                iam.ServicePrincipal("sagemaker.amazonaws.com"),
                self._service_account_principal("OperatorSubject", OPERATOR_NAMESPACE, OPERATOR_SERVICE_ACCOUNT),
            ),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSageMakerHyperPodInferenceAccess")],
        )
        self.tls_bucket.grant_read_write(self.execution_role)
        self.keda_role = iam.Role(
            self,
            "KedaRole",
            assumed_by=self._service_account_principal("KedaSubject", OPERATOR_NAMESPACE, KEDA_SERVICE_ACCOUNT),
        )
        self.keda_role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics", "cloudwatch:ListMetrics"],
                resources=["*"],
            )
        )
        # The Mountpoint S3 CSI add-on at the version AWS's add-on migration script installs, with the identity it
        # gives it there: an IAM role for the driver's service account (charts/inference-operator/migration/
        # helm_to_addon.sh: --service-account-role-arn, trust on kube-system:s3-csi-driver-sa).
        s3_role = iam.Role(
            self,
            "S3CsiRole",
            description="Mountpoint S3 CSI driver: read model weights",
            assumed_by=self._service_account_principal("S3CsiSubject", S3_CSI_NAMESPACE, S3_CSI_SERVICE_ACCOUNT),
        )
        bucket_arns = [f"arn:{cdk.Aws.PARTITION}:s3:::{bucket}" for bucket in model_buckets]
        self.model_object_arns = tuple(f"{arn}/*" for arn in bucket_arns)
        for bucket_arn, objects in zip(bucket_arns, self.model_object_arns, strict=True):
            s3_role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket_arn]))
            s3_role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]))
        self.s3_csi_role = s3_role
        # The operator's endpoints are reached through their ALB, in front of the operator's intelligent router
        # (the CRD's loadBalancer is the ALB; a SageMaker endpoint registers on it). AWS's add-on migration script
        # and the awslabs Terraform module both enable it with a role of its own.
        self.alb_role = iam.Role(
            self,
            "AlbControllerRole",
            description="Inference Operator add-on: AWS Load Balancer Controller for the endpoints' ALB",
            assumed_by=self._service_account_principal("AlbSubject", OPERATOR_NAMESPACE, ALB_SERVICE_ACCOUNT),
        )
        for statement in load_balancer_controller_statements():
            self.alb_role.add_to_policy(statement)
        self.prerequisites = [
            self._addon("CertManager", "cert-manager", addons.cert_manager),
            self._addon("S3Csi", "aws-mountpoint-s3-csi-driver", addons.s3_csi_driver, service_account_role=s3_role),
            self._addon("FsxCsi", "aws-fsx-csi-driver", addons.fsx_csi_driver),
            self._addon("MetricsServer", "metrics-server", addons.metrics_server),
        ]
        self.configuration: dict[str, Any] = {
            "executionRoleArn": self.execution_role.role_arn,
            "tlsCertificateS3Bucket": self.tls_bucket.bucket_name,
            "hyperpodClusterArn": hyperpod_cluster_arn,
            "alb": {"enabled": True, "serviceAccount": {"create": True, "roleArn": self.alb_role.role_arn}},
            "keda": {"enabled": True, "auth": {"aws": {"irsa": {"enabled": True, "roleArn": self.keda_role.role_arn}}}},
        }
        self.operator_addon = self._addon(
            "Operator", OPERATOR_ADDON, addons.inference_operator, configuration=self.configuration
        )
        for prerequisite in self.prerequisites:
            self.operator_addon.node.add_dependency(prerequisite)
        self.kyverno = eks.HelmChart(
            self,
            "Kyverno",
            cluster=as_cluster_interface(cluster),
            chart="kyverno",
            repository="https://kyverno.github.io/kyverno/",
            version=kyverno_chart_version,
            namespace="kyverno",
            release="kyverno",
            create_namespace=True,
            atomic=True,
            wait=True,
            timeout=cdk.Duration.minutes(10),
            # Three admission replicas and a PodDisruptionBudget on the system nodes: the operator endpoints' pods
            # are admitted only through Kyverno (fail-closed for them), so one replica down must not stop them.
            values=kyverno_values(controller_node_labels),
        )
        self.kyverno.node.add_dependency(self.operator_addon)

    def _addon(
        self,
        id: str,
        name: str,
        version: str,
        *,
        service_account_role: iam.IRole | None = None,
        configuration: Mapping[str, Any] | None = None,
    ) -> eks_l1.CfnAddon:
        return pinned_addon(
            self,
            id,
            cluster=self._cluster,
            name=name,
            version=version,
            service_account_role=service_account_role,
            configuration_values=configuration,
        )

    def _service_account_principal(self, id: str, namespace: str, service_account: str) -> iam.IPrincipal:
        """The cluster's OpenID Connect provider, for exactly this service account and audience."""
        provider = self._cluster.open_id_connect_provider
        issuer = provider.open_id_connect_provider_issuer
        subject = cdk.CfnJson(
            self,
            id,
            value={
                f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                f"{issuer}:aud": "sts.amazonaws.com",
            },
        )
        return iam.OpenIdConnectPrincipal(provider).with_conditions({"StringEquals": subject})
