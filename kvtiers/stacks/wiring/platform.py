"""The environment -> the platform constructs: the network, EKS, the HyperPod dependency chart and cluster, the
Inference Operator and the metrics collection (the node traffic between the two kinds of nodes is added by the
constructs that deploy each component). Each function builds one construct with the environment's values; the stacks compose and order them.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from constructs import Construct

from kvtiers.config.schema import Environment, ExistingVpc, S3ModelSource
from kvtiers.constructs.eks_cluster import (
    SYSTEM_NODE_LABELS,
    ClusterLike,
    CoreAddonVersions,
    EksCluster,
    SystemNodegroup,
)
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster, InstanceGroup, Taint
from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies
from kvtiers.constructs.network import ExistingVpcAttributes, HyperPodNetwork, NewVpcOptions
from kvtiers.constructs.node_traffic import PortRule
from kvtiers.k8s_charts.tolerations import tolerating

if TYPE_CHECKING:
    from kvtiers.constructs.endpoint_secrets import SecretsStoreCsi
    from kvtiers.constructs.hyperpod_inference import InferenceOperator
    from kvtiers.constructs.observability import Observability

KUBERNETES_API_PORT = 443


def network_vpc(env: Environment) -> NewVpcOptions | ExistingVpcAttributes:
    net = env.network
    if isinstance(net, ExistingVpc):
        return ExistingVpcAttributes(
            vpc_id=net.vpc_id,
            cidr=net.cidr,
            private_subnet_ids=net.private_subnet_ids,
            availability_zones=net.availability_zones,
            hyperpod_subnet_id=net.hyperpod_subnet_id,
            hyperpod_availability_zone=net.hyperpod_availability_zone,
            security_group_id=net.security_group_id,
            private_subnet_cidrs=net.private_subnet_cidrs,
            hyperpod_subnet_cidr=net.hyperpod_subnet_cidr,
            load_balancer_subnet_cidrs=net.load_balancer_subnet_cidrs,
        )
    return NewVpcOptions(
        hyperpod_az_id=net.hyperpod_az_id,
        cidr=net.cidr,
        availability_zones=net.availability_zones,
        hyperpod_subnet_cidr=net.hyperpod_subnet_cidr,
        nat_gateways=net.nat_gateways,
    )


def eks_cluster(
    scope: Construct, id: str, env: Environment, network: HyperPodNetwork, *, support_date: date | None = None
) -> EksCluster:
    eks = env.eks
    addons = eks.addons
    nodes = eks.system_nodegroup
    return EksCluster(
        scope,
        id,
        vpc=network.vpc,
        subnets=network.eks_subnets,
        security_group=network.security_group,
        addons=CoreAddonVersions(
            vpc_cni=addons.vpc_cni,
            coredns=addons.coredns,
            kube_proxy=addons.kube_proxy,
            eks_pod_identity_agent=addons.eks_pod_identity_agent,
        ),
        cluster_name=eks.cluster_name,
        kubernetes_version=eks.kubernetes_version,
        support_date=support_date,
        endpoint_access=eks.endpoint_access,
        public_access_cidrs=eks.public_access_cidrs,
        admin_role_arns=eks.admin_role_arns,
        logging=eks.control_plane_logging,
        service_ipv4_cidr=eks.service_ipv4_cidr,
        system_nodegroup=SystemNodegroup(instance_type=nodes.instance_type, desired_size=nodes.desired_size)
        if nodes.enabled
        else None,
    )


def hyperpod_dependencies(
    scope: Construct, id: str, env: Environment, eks: EksCluster, *, chart_dir: Path
) -> HyperPodDependencies:
    return HyperPodDependencies(
        scope,
        id,
        cluster=eks,
        chart_dir=chart_dir,
        region=env.region,
        tolerations=tolerating((t.key, t.value, t.effect) for g in env.hyperpod.instance_groups for t in g.taints),
    )


def hyperpod_cluster(
    scope: Construct,
    id: str,
    env: Environment,
    network: HyperPodNetwork,
    eks: EksCluster,
    *,
    dependencies: HyperPodDependencies | None,
    external_dependency_chart: bool,
) -> HyperPodCluster:
    hyperpod = env.hyperpod
    return HyperPodCluster(
        scope,
        id,
        eks_cluster=eks,
        dependencies=dependencies,
        external_dependency_chart=external_dependency_chart,
        subnet=network.hyperpod_subnet,
        security_group=network.security_group,
        cluster_name=hyperpod.cluster_name,
        node_recovery=hyperpod.node_recovery,
        tiered_storage_enabled=hyperpod.tiered_storage.enabled,
        tiered_storage_memory_percentage=hyperpod.tiered_storage.memory_percentage,
        system_reserved_gib=hyperpod.system_reserved_gib,
        instance_groups=[
            InstanceGroup(
                name=g.name,
                instance_type=g.instance_type,
                count=g.count,
                threads_per_core=g.threads_per_core,
                ebs_volume_gb=g.ebs_volume_gb,
                deep_health_checks=g.deep_health_checks,
                labels=g.labels,
                taints=[Taint(key=t.key, value=t.value, effect=t.effect) for t in g.taints],
                max_pods=g.max_pods,
            )
            for g in hyperpod.instance_groups
        ],
    )


def inference_operator(
    scope: Construct, id: str, env: Environment, eks: EksCluster, hyperpod_cluster_arn: str
) -> InferenceOperator | None:
    """The operator, or ``None`` when no endpoint is served by it."""
    endpoints = [e for e in env.serving.endpoints if e.serving == "operator"]
    if not endpoints:
        return None
    from kvtiers.constructs.hyperpod_inference import InferenceOperator, OperatorAddonVersions

    versions = env.inference_operator.addons
    return InferenceOperator(
        scope,
        id,
        cluster=eks,
        hyperpod_cluster_arn=hyperpod_cluster_arn,
        environment_name=env.name,
        addons=OperatorAddonVersions(
            inference_operator=versions.inference_operator,
            cert_manager=versions.cert_manager,
            s3_csi_driver=versions.s3_csi_driver,
            fsx_csi_driver=versions.fsx_csi_driver,
            metrics_server=versions.metrics_server,
        ),
        kyverno_chart_version=env.inference_operator.kyverno_chart_version,
        model_buckets=sorted({e.source.bucket for e in endpoints if isinstance(e.source, S3ModelSource)}),
        controller_node_labels=SYSTEM_NODE_LABELS if env.eks.system_nodegroup.enabled else None,
    )


def serving_secrets(scope: Construct, id: str, env: Environment, eks: EksCluster) -> SecretsStoreCsi | None:
    """ASCP and the serving secrets' KMS key, when an endpoint reads a secret (an API key, a Hugging Face token)."""
    if not env.serving_secrets:
        return None
    from kvtiers.constructs.endpoint_secrets import SecretsStoreCsi

    return SecretsStoreCsi(
        scope,
        id,
        eks_cluster=eks,
        key_alias=env.serving_secrets_key_alias,
        version=env.eks.addons.aws_secrets_store_csi_driver_provider,
    )


def observability(
    scope: Construct, id: str, env: Environment, network: HyperPodNetwork, cluster: ClusterLike
) -> Observability | None:
    """The metrics collection, or ``None`` when the environment has it off."""
    if not env.observability.enabled:
        return None
    # Imported only when enabled: the workspace, collector and topic modules cost synth time otherwise.
    from kvtiers.constructs.observability import Observability
    from kvtiers.observability.alertmanager import alertmanager_definition
    from kvtiers.observability.rules import rules_yaml
    from kvtiers.observability.scrape import scrape_configuration

    to_hyperpod, to_system = scraper_rules(env)
    return Observability(
        scope,
        id,
        cluster=cluster,
        vpc=network.vpc,
        subnets=network.eks_subnets,
        hyperpod_security_group=network.security_group,
        to_hyperpod=to_hyperpod,
        to_system=to_system,
        scrape_configuration=scrape_configuration(env),
        rule_groups=rules_yaml(env),
        alert_topic_name=env.alert_topic_name,
        alertmanager_definition=lambda topic: alertmanager_definition(topic, env.region, env.name),
        environment_name=env.name,
    )


def scraper_rules(env: Environment) -> tuple[tuple[PortRule, ...], tuple[PortRule, ...]]:
    """``(to_hyperpod, to_system)``: what the managed metrics collector (its own security group, ENIs in the EKS
    subnets) must reach, from its scrape targets. The system side also carries the control plane's ENIs, which
    serve the Kubernetes API it discovers pods with."""
    from kvtiers.observability.scrape import ROUTER, targets

    to_hyperpod: list[PortRule] = []
    to_system = [
        PortRule(
            protocol="tcp",
            port=KUBERNETES_API_PORT,
            reason="metrics collector discovers pods through the Kubernetes API (control plane ENIs)",
        )
    ]
    for target in targets(env):
        rule = PortRule(protocol="tcp", port=target.port, reason=f"metrics collector scrapes {target.job} /metrics")
        (to_system if target.component == ROUTER else to_hyperpod).append(rule)
    return _merged(to_hyperpod), _merged(to_system)


def _merged(rules: list[PortRule]) -> tuple[PortRule, ...]:
    """One rule per port range; components that share a port share its rule, with both reasons."""
    by_range: dict[tuple[str, int, int | None], PortRule] = {}
    for rule in rules:
        key = (rule.protocol, rule.port, rule.to_port)
        if key in by_range:
            rule = PortRule(
                protocol=rule.protocol,
                port=rule.port,
                reason=f"{by_range[key].reason}; {rule.reason}",
                to_port=rule.to_port,
            )
        by_range[key] = rule
    return tuple(by_range.values())
