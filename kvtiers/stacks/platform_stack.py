"""``<env>-platform``: EKS, the HyperPod dependency chart, the HyperPod cluster, the EBS CSI driver and the
Curvine journal volumes, in the order HyperPod needs them.

The journal volumes live here, next to the EBS CSI role that must be granted their key, so that no grant points
from this stack into a later one.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtiers.config.schema import Environment
from kvtiers.constructs.eks_cluster import pod_identity_role
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster
from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies
from kvtiers.constructs.journal_volumes import EBS_CSI_MANAGED_POLICY, EBS_CSI_SERVICE_ACCOUNT
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.constructs.node_traffic import NodeTraffic
from kvtiers.stacks.hyperpod_chart import HyperPodChartPlan
from kvtiers.stacks.wiring import platform as wiring

if TYPE_CHECKING:
    # Built only when the environment asks for them (see the wiring): their modules cost synth time otherwise.
    from kvtiers.constructs.hyperpod_inference import InferenceOperator
    from kvtiers.constructs.observability import Observability


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
        support_date: date | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        env = environment
        self.network = network
        self.eks = wiring.eks_cluster(self, "Eks", env, network, support_date=support_date)
        cluster = self.eks.cluster
        self.node_traffic: NodeTraffic | None = None
        if self.eks.system_nodegroup is not None:
            self.node_traffic = wiring.node_traffic(self, "NodeTraffic", env, network, cluster)
        self.observability: Observability | None = wiring.observability(self, "Observability", env, network, cluster)
        self.hyperpod_dependencies: HyperPodDependencies | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.inference_operator: InferenceOperator | None = None
        if eks_only:
            # First stage of a deploy with an externally installed dependency chart: the chart goes in between.
            return
        if hyperpod_chart.chart_dir is not None:
            self.hyperpod_dependencies = wiring.hyperpod_dependencies(
                self,
                "HyperPodDependencies",
                env,
                cluster,
                chart_dir=hyperpod_chart.chart_dir,
                wait=self.eks.system_nodegroup is not None,
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
        self.hyperpod = hyperpod = wiring.hyperpod_cluster(self, "HyperPod", env, network, cluster)
        # HyperPod joins its nodes to the cluster: the networking add-ons and the dependency chart come first.
        for name in ("vpc-cni", "kube-proxy", "eks-pod-identity-agent"):
            hyperpod.cluster.node.add_dependency(self.eks.addons[name])
        if self.hyperpod_dependencies is not None:
            hyperpod.cluster.node.add_dependency(self.hyperpod_dependencies.chart)

        self.journal_volumes = journal_volumes = wiring.journal_volumes(
            self, "CurvineJournal", env, network.hyperpod_availability_zone
        )
        self.ebs_csi_role = ebs_role = pod_identity_role(
            self, "EbsCsiRole", description="EBS CSI controller (Curvine journal volumes on HyperPod)"
        )
        ebs_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(EBS_CSI_MANAGED_POLICY))
        journal_volumes.grant_attach(
            ebs_role, hyperpod_cluster_arn=hyperpod.cluster_arn, eks_cluster_arn=cluster.cluster_arn
        )
        self.ebs_csi = self.eks.add_addon(
            "aws-ebs-csi-driver",
            wiring.ebs_csi_driver_version(env),
            role=ebs_role,
            service_account=EBS_CSI_SERVICE_ACCOUNT,
        )
        # The driver's node pods run on HyperPod nodes, and it attaches through the HyperPod cluster's API.
        self.ebs_csi.node.add_dependency(hyperpod.cluster)

        self.inference_operator = wiring.inference_operator(
            self, "InferenceOperator", env, cluster, hyperpod.cluster_arn
        )
        if self.inference_operator is not None:
            # The operator reads the HyperPod cluster (hyperpodClusterArn): it comes after the cluster.
            self.inference_operator.node.add_dependency(hyperpod.cluster)

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
