"""One endpoint served by the HyperPod Inference Operator, as a CDK construct: its ``InferenceEndpointConfig`` and,
with the Curvine L2, the Kyverno policy that attaches the L2 to its pods, in the order the pods need them, with the
node traffic the operator's router needs to reach them, checked against the HyperPod group it runs on.

Why the order: Kyverno registers a policy's webhook asynchronously, and a pod admitted before that escapes the
policy (no L2 mount, no L2 guard); so the endpoint waits for Kyverno, the policy and the policy's ``Ready``.

Why the fingerprint is in the logical IDs: the operator refuses a change to an endpoint's immutable fields, so such
a change is a new object under a new name (``<name>-<fingerprint>``). A new logical ID makes CloudFormation create
the new manifest and delete the old one (kubectl delete of its objects) after the update; applying the new names
under the old ID would leave the old objects running, since kubectl's default prune list has no custom resources
(:mod:`kvtiers.change.kubectl`). A change that keeps the name keeps the IDs and updates in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtiers.catalog.serving_defaults import API
from kvtiers.constructs.cluster_network import cluster_network
from kvtiers.constructs.curvine import ImportedCurvineL2
from kvtiers.constructs.eks_cluster import (
    ChartManifests,
    ClusterLike,
    EksCluster,
    kubernetes_cluster,
)
from kvtiers.constructs.endpoint_registry import register_endpoint
from kvtiers.constructs.hyperpod_cluster import register_agents
from kvtiers.constructs.hyperpod_inference import InferenceOperator, allow_invocation_traffic
from kvtiers.constructs.interfaces import ICurvineL2, IHyperPodCluster
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.constructs.serving import endpoint_hash_seed, endpoint_namespace, engine_group
from kvtiers.k8s_charts.hyperpod_operator import (
    CurvineL2PolicyChart,
    InferenceEndpointConfigChart,
    OperatorEndpoint,
    policy_name,
)
from kvtiers.k8s_charts.hyperpod_operator import contract as operator_contract
from kvtiers.k8s_charts.hyperpod_operator.endpoint import Api
from kvtiers.k8s_charts.hyperpod_operator.placement import operator_workload
from kvtiers.k8s_charts.names import pascal_case
from kvtiers.k8s_charts.network_policies import ClusterNetwork, OperatorTraffic, ServingNetworkPolicyChart
from kvtiers.k8s_charts.operator_addons import check_group_schedulable
from kvtiers.k8s_charts.serving import Engine
from kvtiers.k8s_charts.vllm import Routing, S3Weights
from kvtiers.node_agents import OPERATOR_AGENTS, OPERATOR_CONTROLLERS

POLICY_READY_TIMEOUT = cdk.Duration.minutes(10)
"""How long the endpoint waits for Kyverno to report its policy Ready (the handler's wait; Kyverno takes seconds)."""


def check_client_authentication(where: str, *, api_key: bool, client_cidrs: Sequence[str] | None) -> None:
    """Refuse a promise about an operator endpoint's clients that nothing keeps (docs/security.md, "Operator
    endpoints: who is authenticated"). Clients are authenticated only through the SageMaker endpoint
    (``InvokeEndpoint``, SigV4, IAM ``sagemaker:InvokeEndpoint`` on its ARN); the operator's internal ALB forwards
    over HTTPS with no authenticate action to the router or the pods, and the ``InferenceEndpointConfig`` (chart
    2.0.0) has no key and no source field."""
    if api_key:
        raise ValueError(
            f"{where}: api_key true is refused: the InferenceEndpointConfig has no API-key field and nothing on the "
            "operator's paths checks a key (its internal ALB forwards to the router without authentication); "
            "clients are authenticated only by calling the SageMaker endpoint (InvokeEndpoint, signed with IAM "
            "credentials allowed sagemaker:InvokeEndpoint on it). Leave api_key false, or serve the endpoint "
            "self-managed (its router and engines check a key)"
        )
    if client_cidrs is not None:
        raise ValueError(
            f"{where}: client_cidrs (allowed_clients) is refused: the operator creates its internal ALB and the "
            "ALB's security group itself, so kvtiers cannot narrow who calls it; the endpoint's pods admit the "
            "subnets that ALB can be in. Restrict callers with IAM on the SageMaker endpoint, or serve the endpoint "
            "self-managed"
        )


class OperatorServingEndpoint(Construct):
    """An operator endpoint: the ``InferenceEndpointConfig`` manifest and, with ``l2``, its L2 policy manifest and
    the wait for the policy's Ready.

    Attributes: ``endpoint`` (the :class:`OperatorEndpoint`, computed once), ``object_name`` (the SageMaker
    endpoint name clients invoke; it changes with the fingerprint), ``charts``, ``objects`` (each chart's, rendered
    once) and ``manifests`` by construct id, ``manifest`` (the endpoint's), ``policy`` and ``policy_ready`` (None
    without ``l2``).

    Construct ids: ``OperatorEndpoint<Name><fingerprint>``, ``L2Policy<Name><fingerprint>``,
    ``L2PolicyReady<Name><fingerprint>`` and ``NetworkPolicies<Name>``, where ``<Name>`` is ``name`` in PascalCase.

    :param scope: the parent construct.
    :param id: the construct id.
    :param eks_cluster: the EKS cluster. Given the :class:`EksCluster` construct with a system node group, the
        endpoint opens its invocation port on the HyperPod nodes to the system nodes (the operator's router and
        controller). An imported cluster's rules are its owner's.
    :param operator: the Inference Operator: its add-on version decides the spec fields, and the endpoint comes after
        its Kyverno.
    :param name: the endpoint's name (at most 43 characters: the policy name derived from it stays within 63).
    :param engine: the model and its pods, sized as a self-managed engine is (pod memory from
        :attr:`Engine.sizing`, LMCache's L1 per GPU worker ``engine.l1_gib``). S3 weights must be in one of the
        operator's ``model_buckets`` (its S3 CSI driver mounts them). Fields the operator cannot carry
        (tolerations, extra arguments or environment, model role, model-sync image, startup timeout) are refused.
    :param routing: the operator's routing strategy (``prefixaware``, ``kvaware``, ``session``, ``roundrobin``).
    :param api: the OpenAI API clients call, ``completions`` or ``chat``; ``kvaware`` needs ``completions``.
        @default ``chat``
    :param l2: the Curvine L2 its pods mount, attached at admission by a Kyverno policy: the endpoint runs in the
        L2's serving namespace, after its claim and after Kyverno reports the policy Ready. A namespace the L2 created
        itself must be built for operator endpoints (``CurvineL2(operator_endpoints=True)``). @default None (no L2)
    :param hyperpod: the HyperPod cluster the endpoint runs on: ``engine.instance_group`` must be one of its groups
        (whose instance type the operator places the pods by: every group of that type may get them), and its
        workers (and the operator's CSI node plugins) are registered in its ``placement``, which fails synth unless
        they fit. @default the L2's HyperPod cluster (one of the two is required)
    :param namespace: the namespace of the endpoint; with ``l2``, its serving namespace. Without ``l2`` the
        construct does not create it: give the manifest that does in ``after``. @default the L2's serving namespace,
        else ``serving``
    :param hash_seed: ``PYTHONHASHSEED`` of the workers, and part of the L2 namespace. With ``l2`` it is the L2's
        (``CurvineL2(hash_seed=)``; another value is refused). @default the L2's, else ``"0"``
    :param l2_share_group: the L2 directory shared with the other endpoints of this group (same model and L2
        namespace). @default None: a directory of the endpoint's own
    :param weights_region: the region of S3 weights' bucket. @default the stack's region
    :param network: where the Kubernetes API and its pod proxy are, for the endpoint's NetworkPolicies: the
        :class:`HyperPodNetwork` (with ``EksCluster(service_ipv4_cidr=)``) or a
        :class:`~kvtiers.k8s_charts.network_policies.ClusterNetwork`. Required unless ``network_policies=False``.
        @default None
    :param network_policies: deploy the endpoint's NetworkPolicy (its pods admit the invocation port from the
        operator's namespace and pods, the subnets its load balancer can be in and the API server's proxy only) in a
        manifest of its own, before its pods. ``False`` leaves them to the namespace's own policies; only an app that
        deploys equivalent ones itself should say so. @default True
    :param api_key: clients must present an API key. ``True`` is refused: nothing on the operator's paths checks
        one (see :func:`check_client_authentication`). @default False
    :param client_cidrs: who may call the endpoint. Any value is refused: the operator owns its load balancer and
        its sources. @default None
    :param after: what the endpoint (and its policy) wait for besides Kyverno and the L2 claim: the namespace's
        manifest without ``l2``, the namespace's NetworkPolicies. @default none
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        eks_cluster: EksCluster | ClusterLike,
        operator: InferenceOperator,
        name: str,
        engine: Engine,
        routing: Routing,
        api: Api = API,
        l2: ICurvineL2 | None = None,
        hyperpod: IHyperPodCluster | None = None,
        namespace: str | None = None,
        hash_seed: str | None = None,
        l2_share_group: str | None = None,
        weights_region: str | None = None,
        network: HyperPodNetwork | ClusterNetwork | None = None,
        network_policies: bool = True,
        api_key: bool = False,
        client_cidrs: Sequence[str] | None = None,
        after: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id)
        where = f"OperatorServingEndpoint {name!r}"
        check_client_authentication(where, api_key=api_key, client_cidrs=client_cidrs)
        hash_seed = endpoint_hash_seed(where, hash_seed, l2)
        namespace = endpoint_namespace(where, namespace, l2)
        if l2 is not None and l2.serving_namespace_enforce not in (None, "privileged"):
            raise ValueError(
                f"{where}: the L2 created its serving namespace {l2.serving_namespace!r} with Pod Security "
                f"{l2.serving_namespace_enforce!r}, which may refuse the pods the operator writes; build the L2 with "
                "CurvineL2(..., operator_endpoints=True) (enforce 'privileged'), or give it a "
                "serving_namespace_manifest of your own"
            )
        if isinstance(l2, ImportedCurvineL2) and l2.serving_namespace_enforce is None:
            raise ValueError(
                f"{where}: the imported L2's serving namespace {l2.serving_namespace!r} enforces an unknown Pod "
                "Security level; give CurvineL2.from_curvine_l2_attributes(serving_namespace_enforce=...) (the "
                "operator's pods need 'privileged')"
            )
        if hyperpod is None and l2 is not None:
            hyperpod = l2.hyperpod
        if hyperpod is None:
            raise ValueError(
                f"{where}: give hyperpod=HyperPodCluster(...) (or l2=): the operator places the endpoint by the "
                f"instance type of engine.instance_group {engine.instance_group!r}"
            )
        if isinstance(engine.weights, S3Weights) and engine.weights.bucket not in operator.model_buckets:
            granted = ", ".join(operator.model_buckets) or "none"
            raise ValueError(
                f"{where}: engine.weights bucket {engine.weights.bucket!r} is not one of the InferenceOperator's "
                f"model_buckets ({granted}): its S3 CSI driver could not mount the weights; add the bucket to "
                "InferenceOperator(model_buckets=...)"
            )
        group = engine_group(self, where, engine, hyperpod)
        check_group_schedulable(where, group.name, ((t.key, t.effect) for t in group.taints))
        self.endpoint = OperatorEndpoint.from_engine(
            name=name,
            namespace=namespace,
            engine=engine,
            instance_type=group.instance_type,
            region=weights_region if weights_region is not None else cdk.Stack.of(self).region,
            routing=routing,
            api=api,
            hash_seed=hash_seed,
            addon_version=operator.addons.inference_operator,
            l2=l2.claim if l2 is not None else None,
            l2_share_group=l2_share_group,
        )
        self.object_name = self.endpoint.object_name
        hyperpod.placement.add(
            operator_workload(self.endpoint, group_types={g.name: g.instance_type for g in hyperpod.instance_groups})
        )
        register_agents(hyperpod.placement, (*OPERATOR_AGENTS, *OPERATOR_CONTROLLERS), hyperpod.instance_groups)
        cluster = kubernetes_cluster(eks_cluster)
        register_endpoint(
            self,
            where,
            cluster=cluster,
            namespace=namespace,
            name=name,
            l2_namespace=engine.l2_namespace(hash_seed),
            serving="operator",
            l2_share_group=l2_share_group,
        )
        network_ = cluster_network(where, network, eks_cluster) if network_policies else None

        suffix = f"{pascal_case(name)}{self.endpoint.fingerprint}"
        k8s_app = cdk8s.App()
        deployed = ChartManifests(self, cluster)
        self.charts, self.objects, self.manifests = deployed.charts, deployed.objects, deployed.manifests
        deploy = deployed.deploy

        before: list[Construct] = [
            operator.kyverno,
            *([l2.ready] if l2 is not None and l2.ready is not None else []),
            *after,
        ]
        self.network_policies: eks.KubernetesManifest | None = None
        if network_ is not None:
            # Its own manifest, before the pods: removing or renaming the endpoint deletes it and so its policy.
            self.network_policies = deploy(
                f"NetworkPolicies{pascal_case(name)}",
                ServingNetworkPolicyChart(
                    k8s_app,
                    "network-policies",
                    namespace=namespace,
                    network=network_,
                    endpoints=[OperatorTraffic(name=name, object_name=self.object_name)],
                    namespace_wide=False,
                ),
                before,
            )
            before = [*before, self.network_policies]
        self.policy: eks.KubernetesManifest | None = None
        self.policy_ready: eks.KubernetesObjectValue | None = None
        if self.endpoint.curvine_l2:
            self.policy = deploy(
                f"L2Policy{suffix}", CurvineL2PolicyChart(k8s_app, "l2-policy", endpoint=self.endpoint), before
            )
            self.policy_ready = eks.KubernetesObjectValue(
                self,
                f"L2PolicyReady{suffix}",
                cluster=cluster,
                object_type=operator_contract.POLICY_RESOURCE,
                object_name=policy_name(self.endpoint),
                object_namespace=namespace,
                json_path=operator_contract.READY_JSONPATH,
                timeout=POLICY_READY_TIMEOUT,
            )
            self.policy_ready.node.add_dependency(self.policy)
            before = [self.policy, self.policy_ready]
        self.manifest = deploy(
            f"OperatorEndpoint{suffix}",
            InferenceEndpointConfigChart(k8s_app, "endpoint", endpoint=self.endpoint),
            before,
        )
        cdk.Annotations.of(self.manifest).add_info(
            f"{name}: InferenceEndpointConfig {self.object_name}; a change to its immutable fields "
            "(intelligentRoutingSpec.enabled, worker environment) changes this name: CloudFormation creates the new "
            "endpoint and its policy, then deletes the old ones"
        )
        if isinstance(eks_cluster, EksCluster) and eks_cluster.node_traffic is not None:
            allow_invocation_traffic(eks_cluster.node_traffic)
