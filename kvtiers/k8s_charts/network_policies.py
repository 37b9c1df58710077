"""NetworkPolicies of the namespaces kvtiers creates (serving and Curvine): deny everything, then allow what each
component needs, port by port.

What NetworkPolicies can and cannot see:
- Host-network pods (Curvine workers, the CSI node plugin with its FUSE clients) are not isolated by any policy:
  their exposure is the node security-group matrix (README, "Node traffic matrix"). As *peers* they have the node's
  IP, so a policy can admit them only by an ``ipBlock``; pods on HyperPod nodes get addresses from the same subnet,
  so such a rule admits them too (for pods of the kvtiers namespaces their own egress policies still say no).
- Traffic needs both sides: the sender's egress and the receiver's ingress. Default deny covers both directions.

Operator endpoints: the HyperPod Inference Operator creates their pods. They are keyed by the label
``app: <InferenceEndpointConfig name>`` (ASSUMED: the operator's CLI lists an endpoint's pods by it; not confirmed on
a cluster), and the operator's other pods in the namespace (its router) by carrying no kvtiers ``part-of`` label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import cdk8s
from constructs import Construct

from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.curvine_l2.charts import api_object
from kvtiers.k8s_charts.names import CURVINE_CSI_CONTROLLER as CSI_CONTROLLER
from kvtiers.k8s_charts.names import CURVINE_MASTER as MASTER
from kvtiers.k8s_charts.serving.props import (
    ENGINE_PORT,
    LMCACHE_CONTROLLER_PULL_PORT,
    LMCACHE_CONTROLLER_REPLY_PORT,
    LMCACHE_WORKER_PORT_BASE,
    ROUTER_PORT,
    engine_pod_labels,
    router_pod_labels,
)

if TYPE_CHECKING:
    from kvtiers.config.schema import Environment

OPERATOR_NAMESPACE = "hyperpod-inference-system"
"""Namespace of the Inference Operator add-on (its controller, KEDA and, when enabled, the ALB controller)."""
OPERATOR_POD_LABEL = "app"
"""ASSUMED: the operator labels an endpoint's pods ``app: <InferenceEndpointConfig name>``."""
OPERATOR_INVOCATION_PORT = 8000
"""``worker.modelInvocationPort`` of the operator endpoints (kvtiers' operator chart sets 8000)."""
POD_IDENTITY_AGENT = "169.254.170.23/32"
"""EKS Pod Identity agent (credentials for the S3 weights copy), reached on port 80 from the pod network."""
ANYWHERE = "0.0.0.0/0"
DNS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
KUBE_DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
NOT_KVTIERS = {"matchExpressions": [{"key": names.PART_OF_KEY, "operator": "NotIn", "values": [names.PART_OF]}]}
"""Pods the project does not render (the operator's): their ``app.kubernetes.io/part-of`` label is absent or another
project's (``NotIn`` matches both; the operator might set the label to its own name)."""


def tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": p} for p in ports]


@dataclass(frozen=True)
class EndpointTraffic:
    """One endpoint, as far as the network is concerned."""

    name: str
    serving: str = "self_managed"
    """``self_managed`` (kvtiers' engines and router) or ``operator``."""
    kvaware_worker_ports: tuple[int, ...] = ()
    """kvaware only: the engines' LMCache worker ports the router's controller calls (one per TP rank)."""
    s3_weights: bool = False
    """The engine pod copies its weights from S3 with EKS Pod Identity credentials."""
    operator_object: str | None = None
    """Operator endpoints: the InferenceEndpointConfig name, the value of their pods' ``app`` label."""

    @property
    def kvaware(self) -> bool:
        return bool(self.kvaware_worker_ports)


@dataclass(frozen=True)
class NetworkPolicyProps:
    serving_namespace: str
    curvine_namespace: str
    node_cidr: str
    """The VPC CIDR: where the Kubernetes API's endpoints (the control plane's ENIs) are."""
    api_service_ip: str
    """The ``kubernetes`` Service's ClusterIP (the first address of the service CIDR): in-cluster clients dial it,
    and the VPC CNI checks egress before the address is translated, without resolving a selector-less Service
    (amazon-network-policy-controller-k8s ``pkg/resolvers/endpoints.go``)."""
    hyperpod_cidr: str
    """Where the HyperPod nodes are: the node IPs of the host-network Curvine workers and FUSE clients."""
    curvine_ports: dict[str, int]
    endpoints: tuple[EndpointTraffic, ...]
    metrics_scraper: dict | None = None
    """Hook: a NetworkPolicy peer (``namespaceSelector``/``podSelector``) of the metrics collector, admitted to the
    engines' and routers' HTTP port and the masters' web port. Default: none (no scraper deployed yet)."""
    client_peers: tuple[dict, ...] = field(default_factory=tuple)
    """Who may call the routers. Default (empty): anyone, on the router port only (routers are the entry point)."""
    operator_namespace: str = OPERATOR_NAMESPACE
    control_plane_cidrs: tuple[str, ...] = ()
    """Subnets of the control plane's ENIs, from which the API server's pod proxy connects (``kvtiers verify``).
    Default: the whole VPC (an imported VPC's subnet ranges are not known at synth)."""

    @property
    def api_server(self) -> list[dict]:
        """Peers for calls to the Kubernetes API: its Service address and its endpoints."""
        return [_ip(f"{self.api_service_ip}/32"), _ip(self.node_cidr)]

    @property
    def api_proxy(self) -> list[dict]:
        """Peers the API server's pod proxy connects from."""
        return [_ip(c) for c in self.control_plane_cidrs] or [_ip(self.node_cidr)]

    @classmethod
    def from_environment(cls, env: Environment, *, control_plane_cidrs: tuple[str, ...] = ()) -> NetworkPolicyProps:
        from kvtiers.config.schema import S3ModelSource
        from kvtiers.k8s_charts.hyperpod_operator import OperatorEndpointProps

        endpoints = []
        for e in env.serving.endpoints:
            if e.serving == "operator":
                obj = OperatorEndpointProps.from_environment(env, e.name).object_name
                endpoints.append(EndpointTraffic(e.name, serving="operator", operator_object=obj))
                continue
            gpus = env.sizing.endpoint(e.name).gpus_per_replica
            ports = tuple(LMCACHE_WORKER_PORT_BASE + i for i in range(gpus)) if e.routing == "kvaware" else ()
            endpoints.append(
                EndpointTraffic(e.name, kvaware_worker_ports=ports, s3_weights=isinstance(e.source, S3ModelSource))
            )
        return cls(
            serving_namespace=env.serving.namespace,
            curvine_namespace=env.curvine.namespace,
            node_cidr=env.network.cidr,
            api_service_ip=env.eks.api_service_ip,
            control_plane_cidrs=control_plane_cidrs,
            # An existing VPC names its HyperPod subnet by ID only: fall back to the whole VPC.
            hyperpod_cidr=getattr(env.network, "hyperpod_subnet_cidr", None) or env.network.cidr,
            curvine_ports=env.curvine.ports.model_dump(),
            endpoints=tuple(endpoints),
        )


def _policy(
    chart: Construct,
    name: str,
    namespace: str,
    pod_selector: dict,
    *,
    ingress: list[dict] | None = None,
    egress: list[dict] | None = None,
) -> None:
    types = [t for t, rules in (("Ingress", ingress), ("Egress", egress)) if rules is not None]
    spec: dict = {"podSelector": pod_selector, "policyTypes": types}
    if ingress:
        spec["ingress"] = ingress
    if egress:
        spec["egress"] = egress
    api_object(
        chart,
        name,
        "networking.k8s.io/v1",
        "NetworkPolicy",
        {"name": name, "namespace": namespace, "labels": {names.PART_OF_KEY: names.PART_OF}},
        {"spec": spec},
    )


def _baseline(chart: Construct, namespace: str) -> None:
    """Deny all traffic of every pod of the namespace; every pod may resolve names."""
    _policy(chart, "default-deny", namespace, {}, ingress=[], egress=[])
    _policy(chart, "allow-dns", namespace, {}, egress=[{"to": [KUBE_DNS], "ports": DNS}])


def _ip(cidr: str) -> dict:
    return {"ipBlock": {"cidr": cidr}}


class ServingNetworkPolicyChart(cdk8s.Chart):
    """Policies of the serving namespace: routers, their engines, and the operator's pods."""

    def __init__(self, scope: Construct, id: str, *, props: NetworkPolicyProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        p = props
        ns = p.serving_namespace
        _baseline(self, ns)
        scraper = [p.metrics_scraper] if p.metrics_scraper else []
        for e in p.endpoints:
            if e.serving == "operator":
                continue
            router = {"podSelector": {"matchLabels": router_pod_labels(e.name)}}
            engines = {"podSelector": {"matchLabels": engine_pod_labels(e.name)}}
            controller = tcp(LMCACHE_CONTROLLER_PULL_PORT, LMCACHE_CONTROLLER_REPLY_PORT)
            client_rule: dict = {"ports": tcp(ROUTER_PORT)}
            if p.client_peers:
                client_rule["from"] = list(p.client_peers)
            router_ingress = [client_rule]
            router_egress = [
                {"to": [engines], "ports": tcp(ENGINE_PORT, *e.kvaware_worker_ports)},
                # Pod discovery: the Kubernetes API.
                {"to": p.api_server, "ports": tcp(443)},
            ]
            if e.kvaware:
                # The engines register with the controller hosted in the router (pull and reply sockets).
                router_ingress.append({"from": [engines], "ports": controller})
                # kvaware tokenizes in the router: the Hugging Face tokenizer download.
                router_egress.append({"to": [_ip(ANYWHERE)], "ports": tcp(443)})
            _policy(self, f"{e.name}-router", ns, router["podSelector"], ingress=router_ingress, egress=router_egress)
            engine_ingress = [
                {"from": [router], "ports": tcp(ENGINE_PORT, *e.kvaware_worker_ports)},
                # `kvtiers verify` calls each engine through the API server's pod proxy (the cross-pod check).
                {"from": p.api_proxy, "ports": tcp(ENGINE_PORT)},
            ]
            if scraper:
                engine_ingress.append({"from": scraper, "ports": tcp(ENGINE_PORT)})
            # The model source (S3 through the gateway endpoint, or the Hugging Face Hub), HTTPS only.
            engine_egress = [{"to": [_ip(ANYWHERE)], "ports": tcp(443)}]
            if e.s3_weights:
                engine_egress.append({"to": [_ip(POD_IDENTITY_AGENT)], "ports": tcp(80)})
            if e.kvaware:
                engine_egress.append({"to": [router], "ports": controller})
            _policy(self, f"{e.name}-engine", ns, engines["podSelector"], ingress=engine_ingress, egress=engine_egress)
        operator = [e for e in p.endpoints if e.serving == "operator"]
        if operator:
            self._operator(p, operator)

    def _operator(self, p: NetworkPolicyProps, endpoints: list[EndpointTraffic]) -> None:
        """Pods the operator creates. Its documentation names no ports beyond the invocation port, so its own pods
        (router, sidecars) may talk to each other and to the operator's namespace on any port; clients reach the
        invocation port; egress is HTTPS (S3, Hugging Face, AWS APIs) and the operator's namespace."""
        operator_ns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": p.operator_namespace}}}
        operator_pods = {"podSelector": NOT_KVTIERS}
        _policy(
            self,
            "operator-managed",
            p.serving_namespace,
            NOT_KVTIERS,
            ingress=[{"from": [operator_ns, operator_pods]}, {"ports": tcp(OPERATOR_INVOCATION_PORT)}],
            egress=[{"to": [operator_ns, operator_pods]}, {"to": [_ip(ANYWHERE)], "ports": tcp(443)}],
        )
        for e in endpoints:
            # The endpoint's own pods, keyed by the (assumed) app label: the same, stated for each endpoint so
            # that a wrong assumption shows as one missing match in `kubectl describe networkpolicy`.
            _policy(
                self,
                f"{e.name}-operator-endpoint",
                p.serving_namespace,
                {"matchLabels": {OPERATOR_POD_LABEL: str(e.operator_object)}},
                ingress=[{"from": [operator_ns, operator_pods], "ports": tcp(OPERATOR_INVOCATION_PORT)}],
            )


class CurvineNetworkPolicyChart(cdk8s.Chart):
    """Policies of the Curvine namespace: masters and the CSI controller (workers and the CSI node plugin are on
    the host network and are not covered)."""

    def __init__(self, scope: Construct, id: str, *, props: NetworkPolicyProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        p = props
        ns = p.curvine_namespace
        ports = p.curvine_ports
        _baseline(self, ns)
        masters = {"podSelector": {"matchLabels": {names.NAME: MASTER}}}
        controller = {"podSelector": {"matchLabels": {names.NAME: CSI_CONTROLLER}}}
        hyperpod = _ip(p.hyperpod_cidr)
        scraper = [p.metrics_scraper] if p.metrics_scraper else []
        master_ingress = [
            {"from": [masters], "ports": tcp(ports["master_rpc"], ports["journal"])},
            {"from": [controller], "ports": tcp(ports["master_rpc"])},
            # Workers and FUSE clients are on the host network: only their node IPs identify them.
            {"from": [hyperpod], "ports": tcp(ports["master_rpc"])},
            # `kvtiers verify` reads the web API through the API server's pod proxy (control-plane ENIs).
            {"from": p.api_proxy, "ports": tcp(ports["master_web"])},
        ]
        if scraper:
            master_ingress.append({"from": scraper, "ports": tcp(ports["master_web"])})
        _policy(
            self,
            MASTER,
            ns,
            masters["podSelector"],
            ingress=master_ingress,
            egress=[
                {"to": [masters], "ports": tcp(ports["master_rpc"], ports["journal"])},
                {"to": [hyperpod], "ports": tcp(ports["worker_rpc"])},
            ],
        )
        _policy(
            self,
            CSI_CONTROLLER,
            ns,
            controller["podSelector"],
            ingress=[],
            egress=[
                {"to": [masters], "ports": tcp(ports["master_rpc"])},
                # The provisioner and leader election call the Kubernetes API.
                {"to": p.api_server, "ports": tcp(443)},
            ],
        )
