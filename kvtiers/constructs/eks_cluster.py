"""An EKS control plane shaped for HyperPod: ``aws_eks_v2`` (access entries, no aws-auth), no Auto Mode, pinned
managed core add-ons, control-plane logging, KMS-encrypted secrets and a kubectl provider whose layer matches the
Kubernetes version.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

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
HyperPod nodes included (README, "Network isolation")."""
ADDON_CONFIGURATION = {"vpc-cni": VPC_CNI_CONFIGURATION}

SYSTEM_NODE_LABELS = {"kvtiers.io/role": "system"}
"""Labels of the system node group's nodes, where CoreDNS (and other cluster controllers) run."""


@dataclass(frozen=True)
class CoreAddonVersions:
    """Pinned versions of the managed core add-ons (never resolved at synth, so upgrades show in ``cdk diff``)."""

    vpc_cni: str
    coredns: str
    kube_proxy: str
    eks_pod_identity_agent: str


@dataclass(frozen=True)
class SystemNodegroupProps:
    instance_type: str = "m7i.xlarge"
    """Default: 4 vCPU / 16 GiB, enough for CoreDNS, the CSI controller and the routers."""
    desired_size: int = 2
    """Default: two nodes, so controllers survive one node's loss."""


@dataclass(frozen=True)
class EksClusterProps:
    vpc: ec2.IVpc
    subnets: list[ec2.ISubnet]
    security_group: ec2.ISecurityGroup
    addons: CoreAddonVersions
    cluster_name: str | None = None
    """Default: a CloudFormation-generated name."""
    kubernetes_version: str = "1.33"
    """Default: 1.33, the newest version HyperPod documents."""
    endpoint_access: str = "private"
    """``private`` (default: the API is reachable only inside the VPC) or ``public_and_private``."""
    public_access_cidrs: tuple[str, ...] = ()
    """Networks allowed to reach the public endpoint; required with ``public_and_private`` so that a public API is
    never open to the internet by omission. Default: none."""
    admin_role_arns: tuple[str, ...] = ()
    """IAM roles given cluster-admin access entries. Default: none."""
    logging: tuple[str, ...] = ("api", "audit", "authenticator")
    """Control-plane log types. Default: the ones needed to audit who changed what."""
    system_nodegroup: SystemNodegroupProps | None = field(default_factory=SystemNodegroupProps)
    service_ipv4_cidr: str | None = None
    """Kubernetes Service CIDR. Default: none, EKS picks 10.100.0.0/16 or 172.20.0.0/16 (whichever does not
    overlap the VPC); set it when NetworkPolicies must name the ``kubernetes`` Service's address."""
    """Default: a small managed node group; ``None`` for none."""


def kubectl_layer(scope: Construct, version: str):
    """The kubectl Lambda layer matching ``version`` (for example 1.33 -> ``lambda_layer_kubectl_v33``)."""
    minor = version.split(".")[1]
    module_name = f"aws_cdk.lambda_layer_kubectl_v{minor}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise ValueError(
            f"Kubernetes {version} needs the kubectl layer package aws-cdk.lambda-layer-kubectl-v{minor}; "
            "add it to the dependencies in pyproject.toml"
        ) from None
    return getattr(module, f"KubectlV{minor}Layer")(scope, "KubectlLayer")


class EksCluster(Construct):
    """The EKS cluster HyperPod is orchestrated by. ``cluster`` is the ``aws_eks_v2.Cluster``."""

    def __init__(self, scope: Construct, id: str, *, props: EksClusterProps) -> None:
        super().__init__(scope, id)
        self.secrets_key = kms.Key(self, "SecretsKey", enable_key_rotation=True, description="EKS secrets envelope key")
        if props.endpoint_access not in ("private", "public_and_private"):
            raise ValueError(
                f"EksCluster: endpoint_access must be 'private' or 'public_and_private', got {props.endpoint_access!r}"
            )
        access = eks.EndpointAccess.PRIVATE
        if props.endpoint_access == "public_and_private":
            if not props.public_access_cidrs:
                raise ValueError("EksCluster: endpoint_access 'public_and_private' needs public_access_cidrs")
            access = eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*props.public_access_cidrs)
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=props.cluster_name,
            version=eks.KubernetesVersion.of(props.kubernetes_version),
            vpc=props.vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=props.subnets)],
            security_group=props.security_group,
            endpoint_access=access,
            cluster_logging=[LOG_TYPES[name] for name in props.logging],
            secrets_encryption_key=self.secrets_key,
            service_ipv4_cidr=props.service_ipv4_cidr,
            default_capacity=0,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            # The core add-ons below are EKS-managed and pinned; self-managed copies would conflict with them.
            bootstrap_self_managed_addons=False,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, props.kubernetes_version)
            ),
        )
        self.addons: dict[str, eks_l1.CfnAddon] = {
            name: pinned_addon(
                self,
                _pascal(name),
                cluster=self.cluster,
                name=name,
                version=version,
                configuration_values=ADDON_CONFIGURATION.get(name),
            )
            for name, version in (
                ("vpc-cni", props.addons.vpc_cni),
                ("kube-proxy", props.addons.kube_proxy),
                ("coredns", props.addons.coredns),
                ("eks-pod-identity-agent", props.addons.eks_pod_identity_agent),
            )
        }
        for i, arn in enumerate(props.admin_role_arns):
            self.cluster.grant_access(
                f"Admin{i}",
                arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
        self.system_nodegroup = None
        if props.system_nodegroup is not None:
            self.system_nodegroup = self.cluster.add_nodegroup_capacity(
                "System",
                instance_types=[ec2.InstanceType(props.system_nodegroup.instance_type)],
                ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
                min_size=1,
                desired_size=props.system_nodegroup.desired_size,
                max_size=max(props.system_nodegroup.desired_size, 4),
                subnets=ec2.SubnetSelection(subnets=props.subnets),
                labels=dict(SYSTEM_NODE_LABELS),
            )
            # CoreDNS needs a node to become ACTIVE; without this the add-on waits on a cluster with no nodes.
            self.addons["coredns"].node.add_dependency(self.system_nodegroup)
            # And it stays there, where the node traffic rules expect it (HyperPod pods reach it on port 53). The
            # add-on's configuration schema takes a pod affinity (AWS blog "Amazon EKS add-ons: advanced configuration").
            self.addons["coredns"].configuration_values = cdk.Stack.of(self).to_json_string(
                {"affinity": _required_node_labels(SYSTEM_NODE_LABELS)}
            )

    def add_addon(
        self,
        name: str,
        version: str,
        *,
        role: iam.IRole | None = None,
        service_account: str | None = None,
        configuration_values: dict | None = None,
    ) -> eks_l1.CfnAddon:
        """A pinned EKS add-on installed after the Pod Identity agent (its role, if any, is handed out by it)."""
        addon = pinned_addon(
            self,
            _pascal(name),
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


def _required_node_labels(labels: dict[str, str]) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in labels.items()]}
                ]
            }
        }
    }


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


def pinned_addon(
    scope: Construct,
    id: str,
    *,
    cluster: eks.ICluster,
    name: str,
    version: str,
    role: iam.IRole | None = None,
    service_account: str | None = None,
    configuration_values: dict | None = None,
) -> eks_l1.CfnAddon:
    """An EKS add-on at an exact version, overwriting self-managed copies, removed with the stack, optionally with
    an EKS Pod Identity role for its service account and configuration values (tokens allowed)."""
    if (role is None) != (service_account is None):
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
        pod_identity_associations=[
            eks_l1.CfnAddon.PodIdentityAssociationProperty(role_arn=role.role_arn, service_account=service_account)
        ]
        if role is not None
        else None,
    )


def pod_identity_role(scope: Construct, id: str, description: str) -> iam.Role:
    """A role that EKS Pod Identity can hand to a service account."""
    return iam.Role(
        scope,
        id,
        description=description,
        assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
    )
