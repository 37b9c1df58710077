"""An EKS control plane shaped for HyperPod: ``aws_eks_v2`` (access entries, no aws-auth), no Auto Mode, pinned
managed core add-ons, control-plane logging, KMS-encrypted secrets and a kubectl provider whose layer matches the
Kubernetes version.
"""

from __future__ import annotations

import importlib
import json
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, cast

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct, IConstruct

import kvtiers.checks as check
from kvtiers.catalog.kubernetes import DEFAULT_KUBERNETES_VERSION, Support, release, support, support_note
from kvtiers.catalog.platform_defaults import (
    ADDON_VERSION_PATTERN,
    CONTROL_PLANE_LOGGING,
    COREDNS_VERSION,
    EKS_CLUSTER_NAME_PATTERN,
    EKS_POD_IDENTITY_AGENT_VERSION,
    ENDPOINT_ACCESS,
    IAM_ROLE_ARN_PATTERN,
    KUBE_PROXY_VERSION,
    MIN_VPC_CNI_VERSION,
    SYSTEM_NODE_COUNT,
    SYSTEM_NODE_INSTANCE_TYPE,
    VPC_CNI_VERSION,
    ControlPlaneLogType,
    EndpointAccess,
)
from kvtiers.constructs.node_traffic import IpProtocol, NodeTraffic, PortRule
from kvtiers.k8s_charts.names import pascal_case

ClusterLike = eks.ICluster | eks.Cluster
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
"""An EKS cluster. ``aws_eks_v2.Cluster`` implements ``ICluster``, but its Python class lacks
``kubectl_provider_options`` (a jsii binding gap), so type checkers need both named."""

LOG_TYPES = {
    "api": eks.ClusterLoggingTypes.API,
    "audit": eks.ClusterLoggingTypes.AUDIT,
    "authenticator": eks.ClusterLoggingTypes.AUTHENTICATOR,
    "controllerManager": eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    "scheduler": eks.ClusterLoggingTypes.SCHEDULER,
}

VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
"""The VPC CNI enforces NetworkPolicies (its network policy agent, eBPF on each pod's host interface) only when the
add-on configuration turns it on. Needs VPC CNI >= 1.14, kernel >= 5.10 and the BPF filesystem on every node,
HyperPod nodes included (docs/security.md, "Network isolation")."""
ADDON_CONFIGURATION = {"vpc-cni": VPC_CNI_CONFIGURATION}

SYSTEM_NODE_LABELS = {"kvtiers.io/role": "system"}
"""Labels of the system node group's nodes, where CoreDNS (and other cluster controllers) run."""
DNS_PORT = 53


def as_cluster_interface(cluster: ClusterLike) -> eks.ICluster:
    """``cluster`` typed as the ``ICluster`` it is (see :data:`ClusterLike`)."""
    return cast(eks.ICluster, cluster)


class ChartManifests:
    """cdk8s charts deployed one manifest each under ``target`` (``overwrite``: an apply, never a create that fails on
    an object already there), each after what it is given, and kept by id for review (``cdk.out/k8s/``, tests)."""

    def __init__(self, target: Construct, cluster: eks.ICluster) -> None:
        self._target = target
        self._cluster = cluster
        self.charts: dict[str, cdk8s.Chart] = {}
        self.objects: dict[str, list[dict[str, Any]]] = {}
        self.manifests: dict[str, eks.KubernetesManifest] = {}

    def deploy(self, id: str, chart: cdk8s.Chart, after: Sequence[Construct] = ()) -> eks.KubernetesManifest:
        objects: list[dict[str, Any]] = chart.to_json()
        manifest = eks.KubernetesManifest(self._target, id, cluster=self._cluster, manifest=objects, overwrite=True)
        for dependency in after:
            manifest.node.add_dependency(dependency)
        self.charts[id] = chart
        self.objects[id] = objects
        self.manifests[id] = manifest
        return manifest


_NAMED_CLUSTERS: weakref.WeakKeyDictionary[IConstruct, dict[tuple[str, str], str]] = weakref.WeakKeyDictionary()
"""Per app: the literal name of each ``EksCluster`` built with ``cluster_name``, by its stack and reference."""


def cluster_key(stack: cdk.Stack, cluster_name: Any) -> str:
    """Which cluster a name refers to, across the stacks of one app: a literal name (given, or the one an
    ``EksCluster`` of the stack was built with) in its stack's account and region, so that a cluster built here and
    imported elsewhere by its name are one; a reference to a cluster resource of the stack itself with a generated
    name by that stack (two environments' stacks refer to their own clusters by the same logical ID); any other
    reference (another stack's output) as it is."""
    name = stack.resolve(cluster_name)
    if isinstance(name, dict) and set(name) == {"Ref"}:
        name = _NAMED_CLUSTERS.get(stack.node.root, {}).get((stack.node.path, json.dumps(name)), name)
    if isinstance(name, str):
        return json.dumps([stack.resolve(stack.account), stack.resolve(stack.region), name], sort_keys=True)
    if isinstance(name, dict) and set(name) == {"Ref"}:
        return json.dumps([stack.node.path, name], sort_keys=True)
    return json.dumps(name, sort_keys=True)


def addon_version(version: str) -> tuple[int, ...]:
    """``v1.20.4-eksbuild.1`` -> ``(1, 20, 4)``."""
    return tuple(int(x) for x in version[1:].split("-")[0].split("."))


@dataclass(frozen=True, kw_only=True)
class CoreAddonVersions:
    """Exact versions of the EKS-managed core add-ons (``aws eks describe-addon-versions``), never resolved at
    synth, so that ``cdk diff`` shows every upgrade.

    The defaults are the versions for the default Kubernetes version (``kvtiers.catalog.platform_defaults``); change
    them together with ``EksCluster(kubernetes_version=...)``.

    :param vpc_cni: ``vpc-cni``; HyperPod needs 1.18.3 or later. @default ``platform_defaults.VPC_CNI_VERSION``
    :param coredns: ``coredns``. @default ``platform_defaults.COREDNS_VERSION``
    :param kube_proxy: ``kube-proxy``, of the cluster's minor version. @default
        ``platform_defaults.KUBE_PROXY_VERSION``
    :param eks_pod_identity_agent: ``eks-pod-identity-agent``. @default
        ``platform_defaults.EKS_POD_IDENTITY_AGENT_VERSION``
    """

    vpc_cni: str = VPC_CNI_VERSION
    coredns: str = COREDNS_VERSION
    kube_proxy: str = KUBE_PROXY_VERSION
    eks_pod_identity_agent: str = EKS_POD_IDENTITY_AGENT_VERSION

    def __post_init__(self) -> None:
        check.exact_addon_versions(self, ADDON_VERSION_PATTERN, "v1.20.4-eksbuild.1")
        if addon_version(self.vpc_cni) < MIN_VPC_CNI_VERSION:
            minimum = ".".join(map(str, MIN_VPC_CNI_VERSION))
            raise ValueError(
                f"CoreAddonVersions: vpc_cni {self.vpc_cni} is older than v{minimum}, the oldest HyperPod supports"
            )


@dataclass(frozen=True, kw_only=True)
class SystemNodegroup:
    """A small managed node group for the cluster's controllers (CoreDNS, CSI controllers, routers).

    :param instance_type: EC2 instance type. @default ``m7i.xlarge`` (4 vCPU / 16 GiB)
    :param desired_size: nodes; the group may grow to at least 4. @default 2, so controllers survive one node's loss
    """

    instance_type: str = SYSTEM_NODE_INSTANCE_TYPE
    desired_size: int = SYSTEM_NODE_COUNT

    def __post_init__(self) -> None:
        check.in_range("SystemNodegroup", "desired_size", self.desired_size, 1)


def kubectl_layer(scope: Construct, version: str) -> Any:
    """The kubectl Lambda layer matching ``version`` (for example 1.33 -> ``lambda_layer_kubectl_v33``)."""
    minor = version.split(".")[1]
    module_name = f"aws_cdk.lambda_layer_kubectl_v{minor}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise ValueError(
            f"Kubernetes {version} needs the kubectl layer package aws-cdk.lambda-layer-kubectl-v{minor}; "
            f"install it beside kvtiers (pip install aws-cdk.lambda-layer-kubectl-v{minor})"
        ) from None
    return getattr(module, f"KubectlV{minor}Layer")(scope, "KubectlLayer")


NATIVE_OIDC_PROVIDER_FLAG = "@aws-cdk/aws-eks:useNativeOidcProvider"
"""aws-cdk-lib's feature flag for the cluster's OpenID Connect provider: ``AWS::IAM::OIDCProvider``
(``aws_eks_v2.OidcProviderNative``) instead of the deprecated custom resource (``aws_eks_v2.OpenIdConnectProvider``)."""


class EksCluster(Construct):
    """The EKS cluster HyperPod is orchestrated by.

    Attributes: ``cluster`` (the ``aws_eks_v2.Cluster``), ``secrets_key``, ``addons`` (the pinned add-ons by name),
    ``system_nodegroup``, ``service_ipv4_cidr`` (as given) and ``node_traffic`` (the rules between system and
    HyperPod nodes, to which the constructs that deploy components add their ports; ``system_nodegroup`` and
    ``node_traffic`` are ``None`` without a system node group).

    The cluster's OpenID Connect provider (created when a construct such as :class:`InferenceOperator` first needs
    it) is the native ``AWS::IAM::OIDCProvider``: the construct sets ``@aws-cdk/aws-eks:useNativeOidcProvider`` for
    itself unless the app's context sets it (``false`` keeps a deployed custom-resource provider).

    :param scope: the parent construct.
    :param id: the construct id.
    :param vpc: the cluster's VPC.
    :param subnets: private subnets (with egress) for the control plane's ENIs and the system node group, in at
        least two availability zones.
    :param security_group: the control plane's additional security group (the one the HyperPod nodes carry).
    :param addons: exact versions of the managed core add-ons. @default ``CoreAddonVersions()``
    :param cluster_name: the EKS cluster name. @default a CloudFormation-generated name
    :param kubernetes_version: a version HyperPod documents (``kvtiers.catalog.kubernetes``); the kubectl layer
        package must match (``aws-cdk.lambda-layer-kubectl-vNN``). @default ``"1.34"``, the newest HyperPod documents
    :param support_date: the day the cluster is deployed, to check EKS's support for ``kubernetes_version`` on it: a
        version past EKS extended support is refused, one in extended support (paid) gives a synth warning. The
        construct reads no clock. @default ``None``: no support check
    :param endpoint_access: ``"private"`` (the API is reachable only inside the VPC) or ``"public_and_private"``
        (also from ``public_access_cidrs``). @default ``"private"``
    :param public_access_cidrs: IPv4 networks allowed to reach the public endpoint; required with
        ``"public_and_private"``, so that a public API is never open to the internet by omission, and refused with
        ``"private"``. @default none
    :param admin_role_arns: IAM roles given cluster-admin access entries. @default none
    :param logging: control-plane log types. @default ``("api", "audit", "authenticator")``, the ones needed to
        audit who changed what
    :param system_nodegroup: the managed node group for controllers, or ``None`` for none. @default
        ``SystemNodegroup()``
    :param service_ipv4_cidr: the Kubernetes Service CIDR, a private IPv4 range from /12 to /24; set it when
        NetworkPolicies must name the ``kubernetes`` Service's address. @default none: EKS picks 10.100.0.0/16 or
        172.20.0.0/16, whichever does not overlap the VPC
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        addons: CoreAddonVersions = CoreAddonVersions(),
        cluster_name: str | None = None,
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
        endpoint_access: EndpointAccess = ENDPOINT_ACCESS,
        public_access_cidrs: Sequence[str] = (),
        admin_role_arns: Sequence[str] = (),
        logging: Sequence[ControlPlaneLogType] = CONTROL_PLANE_LOGGING,
        system_nodegroup: SystemNodegroup | None = SystemNodegroup(),
        service_ipv4_cidr: str | None = None,
        support_date: date | None = None,
    ) -> None:
        super().__init__(scope, id)
        if self.node.try_get_context(NATIVE_OIDC_PROVIDER_FLAG) is None:
            # Unset, aws-cdk-lib 2.275.0 gives the cluster the deprecated custom-resource OpenIdConnectProvider (jsii
            # warns on every synth); an app that set the flag either way keeps its choice (turning it on replaces a
            # deployed provider: cx-api FEATURE_FLAGS.md).
            self.node.set_context(NATIVE_OIDC_PROVIDER_FLAG, True)
            cdk.Annotations.of(self).add_info(
                f"kvtiers:native-oidc-provider: {NATIVE_OIDC_PROVIDER_FLAG} is unset in this app, so EksCluster uses "
                "the native AWS::IAM::OIDCProvider. If this cluster was deployed with the custom-resource provider "
                "(an operator's roles trust it), set the flag to false in cdk.json to keep it: IAM refuses a second "
                "provider for the same issuer, and the deploy would roll back"
            )
        access = _endpoint_access(endpoint_access, public_access_cidrs)
        try:
            release(kubernetes_version)
        except ValueError as error:
            raise ValueError(f"EksCluster: kubernetes_version: {error}") from None
        if support_date is not None:
            status = support(kubernetes_version, support_date)
            if status is Support.ENDED:
                raise ValueError(f"EksCluster: kubernetes_version: {support_note(kubernetes_version, support_date)}")
            if status is Support.EXTENDED:
                cdk.Annotations.of(self).add_warning_v2(
                    "kvtiers:kubernetes-extended-support", support_note(kubernetes_version, support_date)
                )
        _check_kube_proxy(addons.kube_proxy, kubernetes_version)
        if len(subnets) < 2:
            raise ValueError(f"EksCluster: subnets needs at least two subnets in two AZs (EKS), got {len(subnets)}")
        if cluster_name is not None:
            check.matches("EksCluster", "cluster_name", cluster_name, EKS_CLUSTER_NAME_PATTERN, "an EKS cluster name")
        for arn in admin_role_arns:
            check.matches("EksCluster", "admin_role_arns", arn, IAM_ROLE_ARN_PATTERN, "an IAM role ARN")
        for log_type in logging:
            check.one_of("EksCluster", "logging", log_type, ControlPlaneLogType)
        if service_ipv4_cidr is not None:
            _check_service_cidr(service_ipv4_cidr)
        self.service_ipv4_cidr = service_ipv4_cidr

        self.secrets_key = kms.Key(self, "SecretsKey", enable_key_rotation=True, description="EKS secrets envelope key")
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=list(subnets))],
            security_group=security_group,
            endpoint_access=access,
            cluster_logging=[LOG_TYPES[name] for name in logging],
            secrets_encryption_key=self.secrets_key,
            service_ipv4_cidr=service_ipv4_cidr,
            default_capacity=0,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            # The core add-ons below are EKS-managed and pinned; self-managed copies would conflict with them.
            bootstrap_self_managed_addons=False,
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=kubectl_layer(self, kubernetes_version)),
        )
        if cluster_name is not None:
            stack = cdk.Stack.of(self)
            reference = json.dumps(stack.resolve(self.cluster.cluster_name))
            _NAMED_CLUSTERS.setdefault(self.node.root, {})[(stack.node.path, reference)] = cluster_name
        self.addons: dict[str, eks_l1.CfnAddon] = {
            name: pinned_addon(
                self,
                pascal_case(name),
                cluster=self.cluster,
                name=name,
                version=version,
                configuration_values=ADDON_CONFIGURATION.get(name),
            )
            for name, version in (
                ("vpc-cni", addons.vpc_cni),
                ("kube-proxy", addons.kube_proxy),
                ("coredns", addons.coredns),
                ("eks-pod-identity-agent", addons.eks_pod_identity_agent),
            )
        }
        for i, arn in enumerate(admin_role_arns):
            self.cluster.grant_access(
                f"Admin{i}",
                arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
        self.system_nodegroup: eks.Nodegroup | None = None
        self.node_traffic: NodeTraffic | None = None
        if system_nodegroup is not None:
            self.system_nodegroup = self.cluster.add_nodegroup_capacity(
                "System",
                instance_types=[ec2.InstanceType(system_nodegroup.instance_type)],
                ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
                min_size=1,
                desired_size=system_nodegroup.desired_size,
                max_size=max(system_nodegroup.desired_size, 4),
                subnets=ec2.SubnetSelection(subnets=list(subnets)),
                labels=dict(SYSTEM_NODE_LABELS),
            )
            # CoreDNS needs a node to become ACTIVE; without this the add-on waits on a cluster with no nodes.
            self.addons["coredns"].node.add_dependency(self.system_nodegroup)
            # And it stays there, where the node traffic rules expect it (HyperPod pods reach it on port 53). The
            # add-on's configuration schema takes a pod affinity (AWS blog "Amazon EKS add-ons: advanced configuration").
            self.addons["coredns"].configuration_values = cdk.Stack.of(self).to_json_string(
                {"affinity": _required_node_labels(SYSTEM_NODE_LABELS)}
            )
            self.node_traffic = _node_traffic(self, security_group, self.cluster.cluster_security_group_id)
            dns: tuple[tuple[IpProtocol, str], ...] = (("udp", ""), ("tcp", " (large answers)"))
            for protocol, detail in dns:
                self.node_traffic.allow_to_system(
                    PortRule(
                        protocol=protocol,
                        port=DNS_PORT,
                        reason=f"pods on HyperPod nodes resolve names with CoreDNS{detail}",
                    )
                )

    def add_addon(
        self,
        name: str,
        version: str,
        *,
        role: iam.IRole | None = None,
        service_account: str | None = None,
        configuration_values: Mapping[str, Any] | None = None,
    ) -> eks_l1.CfnAddon:
        """A pinned EKS add-on installed after the Pod Identity agent (its role, if any, is handed out by it). One per
        name: EKS installs an add-on once per cluster."""
        if name in self.addons:
            raise ValueError(
                f"EksCluster: add-on {name!r} is already installed on this cluster (version "
                f"{self.addons[name].addon_version}); a construct that needs it (CurvineL2 installs aws-ebs-csi-driver) "
                "and your own add_addon cannot both install it: keep one"
            )
        addon = pinned_addon(
            self,
            pascal_case(name),
            cluster=self.cluster,
            name=name,
            version=version,
            role=role,
            service_account=service_account,
            configuration_values=configuration_values,
        )
        addon.node.add_dependency(self.addons["eks-pod-identity-agent"])
        self.addons[name] = addon
        return addon


def _node_traffic(eks: EksCluster, hyperpod_group: ec2.ISecurityGroup, system_group_id: str) -> NodeTraffic:
    """The stack's node traffic rules, as a child of the stack: their logical IDs are then named by port alone, and a
    deployed rule keeps its ID whichever construct added it."""
    stack = cdk.Stack.of(eks)
    id = "NodeTraffic" if stack.node.try_find_child("NodeTraffic") is None else f"{eks.node.id}NodeTraffic"
    return NodeTraffic(stack, id, hyperpod_security_group=hyperpod_group, system_security_group_id=system_group_id)


def _endpoint_access(endpoint_access: str, public_access_cidrs: Sequence[str]) -> eks.EndpointAccess:
    check.one_of("EksCluster", "endpoint_access", endpoint_access, EndpointAccess)
    for cidr in public_access_cidrs:
        check.ipv4_network("EksCluster", "public_access_cidrs", cidr)
    if endpoint_access == "private":
        if public_access_cidrs:
            raise ValueError(
                "EksCluster: public_access_cidrs is set but endpoint_access is 'private' (no public endpoint)"
            )
        return eks.EndpointAccess.PRIVATE
    if not public_access_cidrs:
        raise ValueError("EksCluster: endpoint_access 'public_and_private' needs public_access_cidrs")
    return eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*public_access_cidrs)


def _check_kube_proxy(kube_proxy: str, kubernetes_version: str) -> None:
    """kube-proxy's minor version is the cluster's: EKS refuses another (``Addon version specified is not
    supported``) after the cluster exists."""
    proxy = addon_version(kube_proxy)[:2]
    if proxy != tuple(int(x) for x in kubernetes_version.split(".")):
        raise ValueError(
            f"EksCluster: addons.kube_proxy {kube_proxy} is for Kubernetes {proxy[0]}.{proxy[1]}, not "
            f"kubernetes_version {kubernetes_version}: kube-proxy's minor version is the cluster's"
        )


def _check_service_cidr(value: str) -> None:
    network = check.ipv4_network("EksCluster", "service_ipv4_cidr", value)
    if not network.is_private or not 12 <= network.prefixlen <= 24:
        raise ValueError(f"EksCluster: service_ipv4_cidr {value!r} must be a private IPv4 range between /12 and /24")


def _required_node_labels(labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in labels.items()]}
                ]
            }
        }
    }


def kubernetes_cluster(eks_cluster: EksCluster | ClusterLike) -> eks.ICluster:
    """The Kubernetes cluster manifests and charts deploy to: the :class:`EksCluster`'s, or an imported one."""
    return as_cluster_interface(eks_cluster.cluster if isinstance(eks_cluster, EksCluster) else eks_cluster)


def pinned_addon(
    scope: Construct,
    id: str,
    *,
    cluster: ClusterLike,
    name: str,
    version: str,
    role: iam.IRole | None = None,
    service_account: str | None = None,
    service_account_role: iam.IRole | None = None,
    configuration_values: Mapping[str, Any] | None = None,
) -> eks_l1.CfnAddon:
    """An EKS add-on at an exact version, overwriting self-managed copies, removed with the stack, optionally with
    an EKS Pod Identity role for its service account (``role`` and ``service_account``), or an IAM role for its
    service account through the cluster's OpenID Connect provider (``service_account_role``, the add-on's
    ``ServiceAccountRoleArn``), and configuration values (tokens allowed)."""
    pod_identity = None
    if role is not None and service_account is not None:
        pod_identity = [
            eks_l1.CfnAddon.PodIdentityAssociationProperty(role_arn=role.role_arn, service_account=service_account)
        ]
    elif role is not None or service_account is not None:
        raise ValueError(f"add-on {name}: give both a role and the service account it is for, or neither")
    return eks_l1.CfnAddon(
        scope,
        id,
        cluster_name=cluster.cluster_name,
        addon_name=name,
        addon_version=version,
        resolve_conflicts="OVERWRITE",
        preserve_on_delete=False,
        configuration_values=cdk.Stack.of(scope).to_json_string(configuration_values) if configuration_values else None,
        pod_identity_associations=pod_identity,
        service_account_role_arn=service_account_role.role_arn if service_account_role is not None else None,
    )


def pod_identity_role(scope: Construct, id: str, *, cluster: ClusterLike, description: str) -> iam.Role:
    """A role that EKS Pod Identity can hand to a service account of ``cluster``, and only of it.

    The trust names this account (``aws:SourceAccount``, the confused-deputy guard IAM recommends for service
    principals) and the cluster (``aws:RequestTag/eks-cluster-arn``: EKS Pod Identity tags every session with the
    cluster's ARN, EKS User Guide "Create IAM role with trust policy required by EKS Pod Identity" and "Grant Pods
    access to AWS resources based on tags"), so no other cluster of the account can be handed the role. Not
    ``aws:SourceArn``: no AWS page says what EKS Pod Identity sets it to, and a wrong value denies every pod its
    credentials (docs/security.md, "Pod Identity trust")."""
    return iam.Role(
        scope,
        id,
        description=description,
        assumed_by=iam.ServicePrincipal(
            POD_IDENTITY_PRINCIPAL,
            conditions={
                "StringEquals": {
                    "aws:SourceAccount": cdk.Stack.of(scope).account,
                    "aws:RequestTag/eks-cluster-arn": cluster.cluster_arn,
                }
            },
        ).with_session_tags(),
    )


def pod_identity_association(
    scope: Construct, id: str, *, cluster_name: str, namespace: str, service_account: str, role: iam.IRole
) -> eks_l1.CfnPodIdentityAssociation:
    """Hand ``role`` to a service account with EKS Pod Identity (one association per service account)."""
    return eks_l1.CfnPodIdentityAssociation(
        scope,
        id,
        cluster_name=cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.role_arn,
    )
