"""``<env>-platform``: EKS, the HyperPod dependency chart, the HyperPod cluster, the Inference Operator and the
metrics collection; the constructs order themselves (the HyperPod cluster after the add-ons and the chart).

The Curvine L2's journal volumes, EBS CSI role and add-on live here too: the workloads stack builds the
:class:`~kvtiers.constructs.curvine.CurvineL2` in this stack (its manifests in its own), so that no grant points
from this stack into a later one.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from constructs import Construct

from kvtiers.config.schema import Environment
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster
from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.constructs.node_traffic import NodeTraffic
from kvtiers.stacks.hyperpod_chart import HyperPodChartPlan
from kvtiers.stacks.wiring import platform as wiring

if TYPE_CHECKING:
    # Built only when the environment asks for them (see the wiring): their modules cost synth time otherwise.
    from kvtiers.constructs.endpoint_secrets import SecretsStoreCsi
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
        self.node_traffic: NodeTraffic | None = self.eks.node_traffic
        self.observability: Observability | None = wiring.observability(self, "Observability", env, network, cluster)
        self.serving_secrets: SecretsStoreCsi | None = wiring.serving_secrets(self, "ServingSecrets", env, self.eks)
        self.hyperpod_dependencies: HyperPodDependencies | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.inference_operator: InferenceOperator | None = None
        if eks_only:
            # First stage of a deploy with an externally installed dependency chart: the chart goes in between.
            return
        if hyperpod_chart.chart_dir is not None:
            self.hyperpod_dependencies = wiring.hyperpod_dependencies(
                self, "HyperPodDependencies", env, self.eks, chart_dir=hyperpod_chart.chart_dir
            )
        if hyperpod_chart.review_only:
            self._refuse_deploy(
                "offline review synth without the HyperPod dependency chart; run `make hyperpod-chart` and synthesize "
                "again to deploy"
            )
        self.hyperpod = hyperpod = wiring.hyperpod_cluster(
            self,
            "HyperPod",
            env,
            network,
            self.eks,
            dependencies=self.hyperpod_dependencies,
            # Installed by hand (dependency_chart.source: external), or absent in a review synth that says so itself.
            external_dependency_chart=self.hyperpod_dependencies is None,
        )
        self.inference_operator = wiring.inference_operator(
            self, "InferenceOperator", env, self.eks, hyperpod.cluster_arn
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
