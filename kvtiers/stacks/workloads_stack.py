"""``<env>-workloads``: every Kubernetes object (Curvine, serving), each chart one manifest, in explicit order."""

from __future__ import annotations

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtiers.config.schema import Environment
from kvtiers.k8s_charts.namespaces import NamespaceChart
from kvtiers.stacks.platform_stack import PlatformStack


class WorkloadsStack(cdk.Stack):
    def __init__(
        self, scope: Construct, id: str, *, environment: Environment, platform: PlatformStack, **kwargs
    ) -> None:
        super().__init__(scope, id, **kwargs)
        self.config = environment
        self.cluster = platform.eks.cluster
        self.k8s_app = cdk8s.App()
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        self.charts: dict[str, cdk8s.Chart] = {}
        self.serving_namespace = self.add_chart(
            "ServingNamespace", NamespaceChart(self.k8s_app, "serving-namespace", names=(environment.serving.namespace,))
        )

    def add_chart(self, name: str, chart: cdk8s.Chart, *, after: list[Construct] = ()) -> eks.KubernetesManifest:
        """Deploy ``chart`` as one manifest that CloudFormation applies after everything in ``after``."""
        manifest = eks.KubernetesManifest(self, name, cluster=self.cluster, manifest=chart.to_json(), overwrite=True)
        for dependency in after:
            manifest.node.add_dependency(dependency)
        self.manifests[name] = manifest
        self.charts[name] = chart
        return manifest
