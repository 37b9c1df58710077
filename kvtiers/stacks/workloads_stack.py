"""``<env>-workloads``: every Kubernetes object (Curvine, serving), each chart one manifest, in explicit order.

Order: serving namespace -> its NetworkPolicies; Curvine masters (with the Curvine namespace) -> its
NetworkPolicies -> workers -> CSI -> StorageClass + L2 claim -> serving endpoints (after both policy sets).
cdk8s chart dependencies are not carried into CloudFormation, so each step is a ``node.add_dependency`` between
the manifest resources.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtiers.config import model
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.constructs.operator_serving import OperatorServingEndpoint
from kvtiers.k8s_charts import names
from kvtiers.stacks.platform_stack import PlatformStack
from kvtiers.stacks.wiring import serving as wiring
from kvtiers.stacks.wiring.curvine import curvine_l2


class WorkloadsStack(cdk.Stack):
    def __init__(
        self, scope: Construct, id: str, *, environment: Environment, platform: PlatformStack, **kwargs
    ) -> None:
        super().__init__(scope, id, **kwargs)
        env = environment
        self.config = env
        self.platform = platform
        # jsii's generated Cluster class does not match its ICluster protocol structurally for type checkers.
        self.cluster = cast(eks.ICluster, platform.eks.cluster)
        self.k8s_app = cdk8s.App()
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        self.charts: dict[str, cdk8s.Chart] = {}
        self.chart_objects: dict[str, list[dict]] = {}
        """Each chart's objects as rendered once for its manifest (reused for the per-object YAML)."""
        operator_endpoints = [e for e in env.serving.endpoints if e.serving == "operator"]
        if platform.hyperpod is None:
            raise ValueError("the workloads need the platform stack's HyperPod cluster")
        self.hyperpod = platform.hyperpod
        # The L2's volumes and EBS CSI live in the platform stack, its manifests (with the serving namespace and the
        # NetworkPolicies of both namespaces, which it builds) here.
        self.curvine = curvine_l2(
            platform,
            "CurvineL2",
            env,
            eks=platform.eks,
            hyperpod=platform.hyperpod,
            network=platform.network,
            manifests_scope=self,
        )
        for name, manifest in self.curvine.manifests.items():
            self.register(name, manifest, self.curvine.charts[name], self.curvine.objects[name])
        masters = self.curvine.manifests["CurvineMasters"]
        self.serving_namespace = self.curvine.manifests["ServingNamespace"]
        self.endpoints: dict[str, eks.KubernetesManifest] = {}
        self.inference_operator = platform.inference_operator
        if operator_endpoints:
            self._operator_endpoints(env, platform, operator_endpoints)
        for endpoint in env.serving.endpoints:
            if endpoint.serving == "self_managed":
                self._self_managed_endpoint(env, endpoint)
        if platform.observability is not None:
            from kvtiers.constructs.observability import COLLECTOR_USER

            rbac = wiring.scraper_rbac_chart(self.k8s_app, "metrics-collector-rbac", env, user=COLLECTOR_USER)
            self.add_chart("MetricsCollectorRbac", rbac, after=[self.serving_namespace, masters])

    def _operator_endpoints(self, env: Environment, platform: PlatformStack, endpoints: list[Endpoint]) -> None:
        operator = platform.inference_operator
        if operator is None:
            raise ValueError("operator endpoints need the platform stack's HyperPod Inference Operator")
        for endpoint in endpoints:
            served = OperatorServingEndpoint(
                self,
                self._free_id(f"Operator{names.pascal_case(endpoint.name)}"),
                eks_cluster=platform.eks,
                operator=operator,
                name=endpoint.name,
                engine=model.engine(env, endpoint),
                routing=endpoint.routing,
                api=endpoint.api,
                l2=self.curvine if model.operator_l2(env, endpoint) else None,
                hyperpod=self.hyperpod,
                namespace=env.serving.namespace,
                hash_seed=env.serving.hash_seed,
                l2_share_group=endpoint.l2_share_group,
                weights_region=env.region,
                network=platform.network,
                api_key=endpoint.authenticated,
                client_cidrs=endpoint.allowed_clients,
                # Without the L2 the namespace (and its default deny) is still the L2's to create.
                after=self.curvine.serving_namespace_ready,
            )
            for name, manifest in served.manifests.items():
                self.register(name, manifest, served.charts[name], served.objects[name])
            self.endpoints[endpoint.name] = served.manifest
            # The name clients invoke changes with the fingerprint: published under a stable output id.
            cdk.CfnOutput(
                self,
                f"OperatorEndpointName{names.pascal_case(endpoint.name)}",
                value=served.object_name,
                description=f"{endpoint.name}: the SageMaker endpoint name to invoke (changes when the endpoint's "
                "immutable fields change)",
            )

    def _self_managed_endpoint(self, env: Environment, endpoint: Endpoint) -> None:
        pascal = names.pascal_case(endpoint.name)
        served = wiring.serving_endpoint(
            self,
            self._free_id(f"Endpoint{pascal}"),
            env,
            endpoint.name,
            eks=self.platform.eks,
            hyperpod=self.hyperpod,
            l2=self.curvine if model.sizing(env).endpoint(endpoint.name).l2_enabled else None,
            network=self.platform.network,
            secrets_store=self.platform.serving_secrets,
            after=self.curvine.serving_namespace_ready,
        )
        if served.policies is not None and served.policies_chart is not None:
            self.register(f"NetworkPolicies{pascal}", served.policies, served.policies_chart, served.policies_objects)
        self.endpoints[endpoint.name] = self.register(
            f"Endpoint{pascal}", served.manifest, served.chart, served.objects
        )

    def _free_id(self, id: str) -> str:
        """``id``, or for a second endpoint of the same name an id of its own, so that the endpoint construct's rule
        refuses the name (with its message) rather than the construct tree."""
        taken = 0
        while self.node.try_find_child(id if not taken else f"{id}{taken}") is not None:
            taken += 1
        return id if not taken else f"{id}{taken}"

    def add_chart(self, name: str, chart: cdk8s.Chart, *, after: Sequence[Construct] = ()) -> eks.KubernetesManifest:
        """Deploy ``chart`` as one manifest that CloudFormation applies after everything in ``after``."""
        objects = chart.to_json()
        manifest = eks.KubernetesManifest(self, name, cluster=self.cluster, manifest=objects, overwrite=True)
        for dependency in after:
            manifest.node.add_dependency(dependency)
        return self.register(name, manifest, chart, objects)

    def register(
        self, name: str, manifest: eks.KubernetesManifest, chart: cdk8s.Chart, objects: list[dict]
    ) -> eks.KubernetesManifest:
        """Record a manifest of this stack (built here or by a construct) and its chart's rendered objects."""
        self.manifests[name] = manifest
        self.charts[name] = chart
        self.chart_objects[name] = objects
        return manifest
