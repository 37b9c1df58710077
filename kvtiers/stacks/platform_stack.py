"""``<env>-platform``: EKS, the HyperPod dependency chart, the HyperPod cluster, the EBS CSI driver and the
Curvine journal volumes, in the order HyperPod needs them.

The journal volumes live here, next to the EBS CSI role that must be granted their key, so that no grant points
from this stack into a later one.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtiers.config.schema import Environment, S3ModelSource
from kvtiers.constructs.eks_cluster import (
    CoreAddonVersions,
    EksCluster,
    EksClusterProps,
    SystemNodegroupProps,
    pod_identity_role,
)
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster, HyperPodClusterProps, InstanceGroupProps, TaintProps
from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies, HyperPodDependenciesProps
from kvtiers.constructs.hyperpod_inference import InferenceOperator, InferenceOperatorProps
from kvtiers.constructs.journal_volumes import (
    EBS_CSI_MANAGED_POLICY,
    EBS_CSI_SERVICE_ACCOUNT,
    CurvineJournalVolumes,
    JournalVolumesProps,
)
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.constructs.node_traffic import NodeTraffic, NodeTrafficProps
from kvtiers.stacks.hyperpod_chart import HyperPodChartPlan
from kvtiers.stacks.node_traffic_rules import node_traffic_rules, scraper_rules


class PlatformStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        environment: Environment,
        network: HyperPodNetwork,
        hyperpod_chart: HyperPodChartPlan,
        eks_only: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        env = environment
        self.network = network
        addons = env.eks.addons
        self.eks = EksCluster(
            self,
            "Eks",
            props=EksClusterProps(
                vpc=network.vpc,
                subnets=network.eks_subnets,
                security_group=network.security_group,
                addons=CoreAddonVersions(
                    vpc_cni=addons.vpc_cni,
                    coredns=addons.coredns,
                    kube_proxy=addons.kube_proxy,
                    eks_pod_identity_agent=addons.eks_pod_identity_agent,
                ),
                cluster_name=env.eks.cluster_name,
                kubernetes_version=env.eks.kubernetes_version,
                endpoint_access=env.eks.endpoint_access,
                public_access_cidrs=env.eks.public_access_cidrs,
                admin_role_arns=env.eks.admin_role_arns,
                logging=env.eks.control_plane_logging,
                service_ipv4_cidr=env.eks.service_ipv4_cidr,
                system_nodegroup=SystemNodegroupProps(
                    instance_type=env.eks.system_nodegroup.instance_type,
                    desired_size=env.eks.system_nodegroup.desired_size,
                )
                if env.eks.system_nodegroup.enabled
                else None,
            ),
        )
        cluster = self.eks.cluster
        self.node_traffic: NodeTraffic | None = None
        if self.eks.system_nodegroup is not None:
            to_hyperpod, to_system = node_traffic_rules(env)
            self.node_traffic = NodeTraffic(
                self,
                "NodeTraffic",
                props=NodeTrafficProps(
                    hyperpod_security_group=network.security_group,
                    system_security_group_id=cluster.cluster_security_group_id,
                    system_to_hyperpod=to_hyperpod,
                    hyperpod_to_system=to_system,
                ),
            )
        self.observability = self._observability(env, network) if env.observability.enabled else None
        self.hyperpod_dependencies: HyperPodDependencies | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.inference_operator: InferenceOperator | None = None
        if eks_only:
            # First stage of a deploy with an externally installed dependency chart: the chart goes in between.
            return
        if hyperpod_chart.chart_dir is not None:
            self.hyperpod_dependencies = HyperPodDependencies(
                self,
                "HyperPodDependencies",
                props=HyperPodDependenciesProps(
                    cluster=cluster,
                    region=env.region,
                    chart_dir=hyperpod_chart.chart_dir,
                    tolerations=env.hyperpod.taint_tolerations,
                    wait=self.eks.system_nodegroup is not None,
                ),
            )
            # Its controllers need a node with pod networking before HyperPod's nodes exist.
            for prerequisite in (self.eks.addons["vpc-cni"], self.eks.addons["kube-proxy"], self.eks.system_nodegroup):
                if prerequisite is not None:
                    self.hyperpod_dependencies.node.add_dependency(prerequisite)
        if hyperpod_chart.review_only:
            self._refuse_deploy(
                "offline review synth without the HyperPod dependency chart; run `make hyperpod-chart` and synthesize "
                "again to deploy"
            )
        self.hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            props=HyperPodClusterProps(
                eks_cluster=cluster,
                subnet=network.hyperpod_subnet,
                security_group=network.security_group,
                cluster_name=env.hyperpod.cluster_name,
                node_recovery=env.hyperpod.node_recovery,
                tiered_storage_enabled=env.hyperpod.tiered_storage.enabled,
                tiered_storage_memory_percentage=env.hyperpod.tiered_storage.memory_percentage,
                instance_groups=tuple(
                    InstanceGroupProps(
                        name=g.name,
                        instance_type=g.instance_type,
                        count=g.count,
                        threads_per_core=g.threads_per_core,
                        ebs_volume_gb=g.ebs_volume_gb,
                        deep_health_checks=g.deep_health_checks,
                        labels=dict(g.labels),
                        taints=tuple(TaintProps(key=t.key, value=t.value, effect=t.effect) for t in g.taints),
                    )
                    for g in env.hyperpod.instance_groups
                ),
            ),
        )
        # HyperPod joins its nodes to the cluster: the networking add-ons and the dependency chart come first.
        for name in ("vpc-cni", "kube-proxy", "eks-pod-identity-agent"):
            self.hyperpod.cluster.node.add_dependency(self.eks.addons[name])
        if self.hyperpod_dependencies is not None:
            self.hyperpod.cluster.node.add_dependency(self.hyperpod_dependencies.chart)

        master = env.curvine.master
        self.journal_volumes = CurvineJournalVolumes(
            self,
            "CurvineJournal",
            props=JournalVolumesProps(
                availability_zone=network.hyperpod_availability_zone,
                masters=master.replicas,
                meta_size_gib=master.meta_volume_gib,
                journal_size_gib=master.journal_volume_gib,
                iops=master.volume_iops,
                throughput_mibps=master.volume_throughput_mibps,
                snapshot_on_delete=master.snapshot_on_delete,
            ),
        )
        self.ebs_csi_role = ebs_role = pod_identity_role(
            self, "EbsCsiRole", "EBS CSI controller (Curvine journal volumes on HyperPod)"
        )
        ebs_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(EBS_CSI_MANAGED_POLICY))
        self.journal_volumes.grant_attach(
            ebs_role, hyperpod_cluster_arn=self.hyperpod.cluster_arn, eks_cluster_arn=cluster.cluster_arn
        )
        self.ebs_csi = self.eks.add_addon(
            "aws-ebs-csi-driver", addons.aws_ebs_csi_driver, role=ebs_role, service_account=EBS_CSI_SERVICE_ACCOUNT
        )
        # The driver's node pods run on HyperPod nodes, and it attaches through the HyperPod cluster's API.
        self.ebs_csi.node.add_dependency(self.hyperpod.cluster)

        endpoints = [e for e in env.serving.endpoints if e.serving == "operator"]
        if endpoints:
            versions = env.inference_operator.addons
            self.operator_model_buckets = tuple(
                sorted({e.source.bucket for e in endpoints if isinstance(e.source, S3ModelSource)})
            )
            self.inference_operator = InferenceOperator(
                self,
                "InferenceOperator",
                props=InferenceOperatorProps(
                    cluster=cluster,
                    hyperpod_cluster_arn=self.hyperpod.cluster_arn,
                    environment_name=env.name,
                    operator_version=versions.inference_operator,
                    cert_manager_version=versions.cert_manager,
                    s3_csi_version=versions.s3_csi_driver,
                    fsx_csi_version=versions.fsx_csi_driver,
                    metrics_server_version=versions.metrics_server,
                    kyverno_chart_version=env.inference_operator.kyverno_chart_version,
                    model_buckets=self.operator_model_buckets,
                ),
            )
            # The operator reads the HyperPod cluster (hyperpodClusterArn): it comes after the cluster.
            self.inference_operator.node.add_dependency(self.hyperpod.cluster)

    def _refuse_deploy(self, reason: str) -> None:
        """Make the template undeployable: CloudFormation evaluates rules before it changes anything. Rules may
        only refer to parameters, hence the parameter, whose default fails the rule."""
        review_only = cdk.CfnParameter(
            self,
            "ReviewOnlySynth",
            type="String",
            default="true",
            allowed_values=["true"],
            description="Set by an offline review synth: this template lacks the HyperPod dependency chart",
        )
        cdk.CfnRule(
            self,
            "ReviewOnly",
            assertions=[
                cdk.CfnRuleAssertion(
                    assert_=cdk.Fn.condition_equals(review_only.value_as_string, "false"), assert_description=reason
                )
            ],
        )
        cdk.Annotations.of(self).add_warning_v2("kvtiers:review-only", reason)

    def _observability(self, env: Environment, network: HyperPodNetwork):
        # Imported only when enabled: the workspace, collector and topic modules cost synth time otherwise.
        from kvtiers.constructs.observability import Observability, ObservabilityProps
        from kvtiers.observability.alertmanager import alertmanager_definition
        from kvtiers.observability.rules import rules_yaml
        from kvtiers.observability.scrape import scrape_configuration

        cluster = self.eks.cluster
        to_hyperpod, to_system = scraper_rules(env)
        return Observability(
            self,
            "Observability",
            props=ObservabilityProps(
                cluster_name=cluster.cluster_name,
                cluster_arn=cluster.cluster_arn,
                vpc=network.vpc,
                subnets=network.eks_subnets,
                hyperpod_security_group=network.security_group,
                system_security_group_id=cluster.cluster_security_group_id,
                to_hyperpod=to_hyperpod,
                to_system=to_system,
                scrape_configuration=scrape_configuration(env),
                rule_groups=rules_yaml(env),
                alert_topic_name=env.alert_topic_name,
                alertmanager_definition=lambda topic: alertmanager_definition(topic, env.region, env.name),
                environment_name=env.name,
            ),
        )
