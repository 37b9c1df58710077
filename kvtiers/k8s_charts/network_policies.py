"""NetworkPolicies of the namespaces kvtiers creates (serving and Curvine): deny everything, then allow what each
component needs, port by port.

What NetworkPolicies can and cannot see:
- Host-network pods (Curvine workers, the CSI node plugin with its FUSE clients) are not isolated by any policy:
  their exposure is the node security-group matrix (docs/security.md, "Node traffic matrix"). As *peers* they have the node's
  IP, so a policy can admit them only by an ``ipBlock``; pods on HyperPod nodes get addresses from the same subnet,
  so such a rule admits them too (for pods of the kvtiers namespaces their own egress policies still say no).
- Traffic needs both sides: the sender's egress and the receiver's ingress. Default deny covers both directions.

Operator endpoints: the HyperPod Inference Operator creates their pods. It labels them ``app: <InferenceEndpointConfig
name>`` (sagemaker-hyperpod SDK ``hp_endpoint.py`` ``list_pods`` selects an endpoint's pods by that key; not confirmed
on a cluster). Its intelligent router's labels are not public; its routing strategies are production-stack's, whose
chart labels the router ``app.kubernetes.io/component: router`` and gives it no ``app`` label (vllm-stack-0.1.12
``helm/templates/_helpers.tpl`` ``chart.routerStandardLabels``), so the operator's pods are selected both ways: by
``app`` and by that component, neither with kvtiers' ``part-of``. Their invocation port is admitted only from the
operator's namespace, those pods, the subnets the operator's internal load balancer can be in (on the ports it can
target) and the API server's pod proxy (docs/operator-contract.md, "Who reaches the operator's pods").

The policies are cdk8s's typed ``KubeNetworkPolicy``: cdk8s-plus's ``NetworkPolicy`` writes one rule per peer, and
several rules here admit two peers (the API server's Service address and its endpoints) in one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from kvtiers import checks
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.int_or_string import int_or_string
from kvtiers.k8s_charts.names import CURVINE_CSI_CONTROLLER as CSI_CONTROLLER
from kvtiers.k8s_charts.names import CURVINE_MASTER as MASTER

OPERATOR_NAMESPACE = "hyperpod-inference-system"
"""Namespace of the Inference Operator add-on (its controller, KEDA and, when enabled, the ALB controller)."""
POD_IDENTITY_AGENT = "169.254.170.23/32"
"""EKS Pod Identity agent (credentials for the S3 weights copy), reached on port 80 from the pod network."""
ANYWHERE = "0.0.0.0/0"
HTTPS_PORT = 443
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
OPERATOR_PODS = k8s.LabelSelector(
    match_expressions=[
        k8s.LabelSelectorRequirement(key=names.OPERATOR_POD_LABEL, operator="Exists"),
        k8s.LabelSelectorRequirement(key=names.PART_OF_KEY, operator="NotIn", values=[names.PART_OF]),
    ]
)
"""The operator's pods: they carry its ``app`` label (``names.OPERATOR_POD_LABEL``), and are not rendered by kvtiers
(their ``app.kubernetes.io/part-of`` label is absent or another project's: ``NotIn`` matches both). Another pod of the
namespace (a debugging pod, another tool's) is not selected and keeps the default deny."""
OPERATOR_ROUTER_PODS = k8s.LabelSelector(
    match_labels={names.COMPONENT: names.ROUTER_COMPONENT},
    match_expressions=[
        k8s.LabelSelectorRequirement(key=names.PART_OF_KEY, operator="NotIn", values=[names.PART_OF]),
    ],
)
"""The operator's intelligent router, should it carry no ``app`` label: production-stack's chart labels its router
``app.kubernetes.io/component: router`` and ``part-of: <chart name>`` and sets no ``app`` (vllm-stack-0.1.12
``helm/templates/_helpers.tpl`` ``chart.routerStandardLabels``, ``values.yaml`` ``routerSpec.labels``); kvtiers' own
routers carry the same component with kvtiers' ``part-of`` and are not selected. Which labels the operator gives
its router is not public: a router with neither label would keep the default deny (docs/operator-contract.md)."""
OPERATOR_LOAD_BALANCER_PORTS = (names.OPERATOR_PORT, 8080, 8081)
"""The ports the operator's ALB (target type ``ip``) can target on its pods: the invocation port kvtiers renders
(``modelInvocationPort``, also production-stack's router port, ``routerSpec.containerPort``), and the two of AWS's
walkthrough (aws/sagemaker-hyperpod-cli ``examples/end_to_end_walkthrough`` at ``51b8dd2``: a model server on
``--container-port 8080``, ``02-inference-deployment/01-custom-model-endpoint.md``, and ALB targets on port 8081,
``images/alb-resource-map.png``). Nothing public names the operator's target port for a model server on 8000."""


def tcp(*ports: int) -> list[k8s.NetworkPolicyPort]:
    return [k8s.NetworkPolicyPort(protocol="TCP", port=int_or_string(p)) for p in ports]


def ip_peer(cidr: str) -> k8s.NetworkPolicyPeer:
    return k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=cidr))


def pods(labels: dict[str, str]) -> k8s.NetworkPolicyPeer:
    return k8s.NetworkPolicyPeer(pod_selector=k8s.LabelSelector(match_labels=labels))


def in_namespace(namespace: str) -> k8s.LabelSelector:
    return k8s.LabelSelector(match_labels={NAMESPACE_NAME_LABEL: namespace})


DNS = [
    k8s.NetworkPolicyPort(protocol="UDP", port=int_or_string(53)),
    k8s.NetworkPolicyPort(protocol="TCP", port=int_or_string(53)),
]
KUBE_DNS = k8s.NetworkPolicyPeer(
    namespace_selector=in_namespace("kube-system"),
    pod_selector=k8s.LabelSelector(match_labels={"k8s-app": "kube-dns"}),
)


@dataclass(frozen=True, kw_only=True)
class ClusterNetwork:
    """Where the peers that are not pods are: the Kubernetes API and its pod proxy (passed like ``vpc=``)."""

    node_cidr: str
    """The VPC CIDR: where the Kubernetes API's endpoints (the control plane's ENIs) are."""
    api_service_ip: str
    """The ``kubernetes`` Service's ClusterIP (the first address of the service CIDR): in-cluster clients dial it,
    and the VPC CNI checks egress before the address is translated, without resolving a selector-less Service
    (amazon-network-policy-controller-k8s ``pkg/resolvers/endpoints.go``)."""
    control_plane_cidrs: tuple[str, ...] = ()
    """Subnets of the control plane's ENIs, from which the API server's pod proxy connects (``kvtiers verify``).
    @default () (the whole ``node_cidr``: an imported VPC's subnet ranges are not known at synth)"""
    load_balancer_cidrs: tuple[str, ...] = ()
    """Subnets the Inference Operator's internal ALB can have its addresses in (target type ``ip``: its health checks
    and requests come from them): the subnets tagged ``kubernetes.io/role/internal-elb`` and the EKS cluster's subnets
    (``HyperPodNetwork.load_balancer_subnet_cidrs``). @default () (the whole ``node_cidr``)"""

    def __post_init__(self) -> None:
        checks.ipv4_network("ClusterNetwork", "node_cidr", self.node_cidr)
        for field in ("control_plane_cidrs", "load_balancer_cidrs"):
            for cidr in getattr(self, field):
                checks.ipv4_network("ClusterNetwork", field, cidr)
        try:
            ipaddress.ip_address(self.api_service_ip)
        except ValueError:
            raise ValueError(f"ClusterNetwork: api_service_ip {self.api_service_ip!r} is not an IP address") from None

    @property
    def api_server(self) -> list[k8s.NetworkPolicyPeer]:
        """Peers for calls to the Kubernetes API: its Service address and its endpoints."""
        return [ip_peer(f"{self.api_service_ip}/32"), ip_peer(self.node_cidr)]

    @property
    def api_proxy(self) -> list[k8s.NetworkPolicyPeer]:
        """Peers the API server's pod proxy connects from."""
        return [ip_peer(c) for c in self.api_proxy_blocks]

    @property
    def api_proxy_blocks(self) -> tuple[str, ...]:
        """CIDRs the API server's pod proxy connects from (``api_proxy`` as addresses)."""
        return self.control_plane_cidrs or (self.node_cidr,)

    @property
    def load_balancer_blocks(self) -> tuple[str, ...]:
        """CIDRs the operator's internal load balancer connects from."""
        return self.load_balancer_cidrs or (self.node_cidr,)


@dataclass(frozen=True, kw_only=True)
class SelfManagedTraffic:
    """A self-managed endpoint (kvtiers' engines and router), as far as the network is concerned."""

    name: str
    kvaware_worker_ports: tuple[int, ...] = ()
    """kvaware only: the engines' LMCache worker ports the router's controller calls (one per TP rank).
    @default () (not kvaware)"""
    s3_weights: bool = False
    """The engine pod copies its weights from S3 with EKS Pod Identity credentials. @default False"""
    client_cidrs: tuple[str, ...] | None = None
    """Who may call the router (IPv4 CIDRs). @default None: internal, the network's ``node_cidr`` (the VPC)"""

    def __post_init__(self) -> None:
        for cidr in self.client_cidrs or ():
            checks.ipv4_network("SelfManagedTraffic", "client_cidrs", cidr)
        if self.client_cidrs is not None and not self.client_cidrs:
            raise ValueError("SelfManagedTraffic: client_cidrs is empty; leave it None for the VPC")

    @property
    def kvaware(self) -> bool:
        return bool(self.kvaware_worker_ports)


@dataclass(frozen=True, kw_only=True)
class OperatorTraffic:
    """An operator endpoint: its pods carry ``app: <object_name>``."""

    name: str
    object_name: str
    """The endpoint's InferenceEndpointConfig name (``OperatorEndpoint.object_name``)."""

    def __post_init__(self) -> None:
        if not self.object_name:
            raise ValueError(f"OperatorTraffic: object_name of endpoint {self.name!r} is empty")


EndpointTraffic = SelfManagedTraffic | OperatorTraffic


@dataclass(frozen=True, kw_only=True)
class JanitorTraffic:
    """The Curvine L2 janitor in the serving namespace: it asks the masters' web API which files are lost, and is
    scraped on its metrics port."""

    curvine_namespace: str
    master_web_port: int
    metrics_port: int

    def __post_init__(self) -> None:
        checks.dns_label("JanitorTraffic", "curvine_namespace", self.curvine_namespace)


JANITOR_LABELS = {names.NAME: names.CURVINE_JANITOR}


def _policy(
    chart: Construct,
    name: str,
    namespace: str,
    pod_selector: k8s.LabelSelector,
    *,
    ingress: list[k8s.NetworkPolicyIngressRule] | None = None,
    egress: list[k8s.NetworkPolicyEgressRule] | None = None,
) -> k8s.KubeNetworkPolicy:
    """``ingress``/``egress``: None leaves the direction open; an empty list denies it."""
    types = [t for t, rules in (("Ingress", ingress), ("Egress", egress)) if rules is not None]
    return k8s.KubeNetworkPolicy(
        chart,
        name,
        metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels={names.PART_OF_KEY: names.PART_OF}),
        spec=k8s.NetworkPolicySpec(
            pod_selector=pod_selector, policy_types=types, ingress=ingress or None, egress=egress or None
        ),
    )


def _baseline(chart: Construct, namespace: str) -> None:
    """Deny all traffic of every pod of the namespace; every pod may resolve names."""
    _policy(chart, "default-deny", namespace, k8s.LabelSelector(), ingress=[], egress=[])
    _policy(
        chart,
        "allow-dns",
        namespace,
        k8s.LabelSelector(),
        egress=[k8s.NetworkPolicyEgressRule(to=[KUBE_DNS], ports=DNS)],
    )


class ServingNetworkPolicyChart(cdk8s.Chart):
    """Policies of the serving namespace: routers, their engines, and the operator's pods.

    :param namespace: the serving namespace.
    :param network: where the Kubernetes API and its pod proxy are.
    :param endpoints: the namespace's endpoints, each once.
    :param metrics_scraper: a peer (the metrics collector) admitted to the engines' HTTP port.
        @default None (no in-cluster scraper)
    :param operator_namespace: the Inference Operator add-on's namespace. @default ``OPERATOR_NAMESPACE``
    :param janitor: the Curvine L2 janitor's traffic. @default None (no janitor in this namespace)
    :param namespace_wide: the namespace's own policies (default deny, DNS, the janitor, the operator's shared
        pods). @default True
    :param operator_managed: with ``namespace_wide``, the policy of the pods the Inference Operator creates in the
        namespace (its router and sidecars). @default whether ``endpoints`` has an operator endpoint
    :param per_endpoint: each endpoint's policies. @default True. A deploy keeps them in a manifest per endpoint,
        apart from the namespace-wide ones: removing an endpoint then deletes its manifest (and its policies), where
        an update of a shared manifest would leave them behind (``kubectl apply --prune`` skips NetworkPolicies).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        network: ClusterNetwork,
        endpoints: Sequence[EndpointTraffic],
        metrics_scraper: k8s.NetworkPolicyPeer | None = None,
        operator_namespace: str = OPERATOR_NAMESPACE,
        janitor: JanitorTraffic | None = None,
        namespace_wide: bool = True,
        per_endpoint: bool = True,
        operator_managed: bool | None = None,
    ) -> None:
        checks.dns_label("ServingNetworkPolicyChart", "namespace", namespace)
        checks.dns_label("ServingNetworkPolicyChart", "operator_namespace", operator_namespace)
        endpoint_names = [e.name for e in endpoints]
        duplicates = sorted({n for n in endpoint_names if endpoint_names.count(n) > 1})
        if duplicates:
            raise ValueError(f"ServingNetworkPolicyChart: endpoints has duplicate names {duplicates}")
        for e in endpoints:
            if isinstance(e, SelfManagedTraffic):
                _check_clients_not_voided(e, network)
        super().__init__(scope, id, disable_resource_name_hashes=True)
        ns = namespace
        if namespace_wide:
            _baseline(self, ns)
        scraper = [metrics_scraper] if metrics_scraper else []
        for e in endpoints:
            if not isinstance(e, SelfManagedTraffic) or not per_endpoint:
                continue
            router_labels = names.router_pod_labels(e.name)
            engine_labels = names.engine_pod_labels(e.name)
            router, engines = pods(router_labels), pods(engine_labels)
            controller = tcp(names.LMCACHE_CONTROLLER_PULL_PORT, names.LMCACHE_CONTROLLER_REPLY_PORT)
            clients = [ip_peer(c) for c in e.client_cidrs or (network.node_cidr,)]
            router_ingress = [
                k8s.NetworkPolicyIngressRule(from_=clients, ports=tcp(names.ROUTER_PORT)),
                # `kvtiers verify` checks the router through the API server's service proxy.
                k8s.NetworkPolicyIngressRule(from_=network.api_proxy, ports=tcp(names.ROUTER_PORT)),
            ]
            router_egress = [
                k8s.NetworkPolicyEgressRule(to=[engines], ports=tcp(names.ENGINE_PORT, *e.kvaware_worker_ports)),
                # Pod discovery: the Kubernetes API.
                k8s.NetworkPolicyEgressRule(to=network.api_server, ports=tcp(HTTPS_PORT)),
            ]
            if e.kvaware:
                # The engines register with the controller hosted in the router (pull and reply sockets).
                router_ingress.append(k8s.NetworkPolicyIngressRule(from_=[engines], ports=controller))
                # kvaware tokenizes in the router: the tokenizer from the Hugging Face Hub, or with S3 weights the
                # engines' own tokenizer files from S3 (through the gateway endpoint) with Pod Identity credentials.
                router_egress.append(k8s.NetworkPolicyEgressRule(to=[ip_peer(ANYWHERE)], ports=tcp(HTTPS_PORT)))
                if e.s3_weights:
                    router_egress.append(k8s.NetworkPolicyEgressRule(to=[ip_peer(POD_IDENTITY_AGENT)], ports=tcp(80)))
            _policy(
                self,
                f"{e.name}-router",
                ns,
                k8s.LabelSelector(match_labels=router_labels),
                ingress=router_ingress,
                egress=router_egress,
            )
            engine_ingress = [
                k8s.NetworkPolicyIngressRule(from_=[router], ports=tcp(names.ENGINE_PORT, *e.kvaware_worker_ports)),
                # The API server's pod proxy (`kvtiers verify` reads /metrics and tokenizes) and the managed collector,
                # both from the EKS subnets, which system nodes share: the engines' key check refuses them the model.
                k8s.NetworkPolicyIngressRule(from_=network.api_proxy, ports=tcp(names.ENGINE_PORT)),
            ]
            if scraper:
                engine_ingress.append(k8s.NetworkPolicyIngressRule(from_=scraper, ports=tcp(names.ENGINE_PORT)))
            # The model source (S3 through the gateway endpoint, or the Hugging Face Hub), HTTPS only.
            engine_egress = [k8s.NetworkPolicyEgressRule(to=[ip_peer(ANYWHERE)], ports=tcp(HTTPS_PORT))]
            if e.s3_weights:
                engine_egress.append(k8s.NetworkPolicyEgressRule(to=[ip_peer(POD_IDENTITY_AGENT)], ports=tcp(80)))
            if e.kvaware:
                engine_egress.append(k8s.NetworkPolicyEgressRule(to=[router], ports=controller))
            _policy(
                self,
                f"{e.name}-engine",
                ns,
                k8s.LabelSelector(match_labels=engine_labels),
                ingress=engine_ingress,
                egress=engine_egress,
            )
        operator = [e for e in endpoints if isinstance(e, OperatorTraffic)]
        shared = namespace_wide and (operator_managed if operator_managed is not None else bool(operator))
        if shared or (operator and per_endpoint):
            self._operator(ns, operator_namespace, network, operator, shared=shared, own=per_endpoint)
        if janitor is not None and namespace_wide:
            masters = k8s.NetworkPolicyPeer(
                namespace_selector=in_namespace(janitor.curvine_namespace),
                pod_selector=k8s.LabelSelector(match_labels={names.NAME: MASTER}),
            )
            _policy(
                self,
                names.CURVINE_JANITOR,
                ns,
                k8s.LabelSelector(match_labels=JANITOR_LABELS),
                # The collector scrapes /metrics from the EKS subnets (the pod-proxy ipBlock, as for the engines).
                ingress=[
                    k8s.NetworkPolicyIngressRule(from_=[*network.api_proxy, *scraper], ports=tcp(janitor.metrics_port))
                ],
                # The masters' web API: which workers are live, which files have no live block.
                egress=[k8s.NetworkPolicyEgressRule(to=[masters], ports=tcp(janitor.master_web_port))],
            )

    def _operator(
        self,
        namespace: str,
        operator_namespace: str,
        network: ClusterNetwork,
        endpoints: list[OperatorTraffic],
        *,
        shared: bool,
        own: bool,
    ) -> None:
        """Pods the operator creates. Its chart and CRD name no ports beyond the invocation port, and neither its
        router's port nor the port its ALB targets is public. So its own pods (model pods, router, sidecars) may talk
        to each other and to the operator's namespace on any port; the load balancer's subnets reach them only on
        the ports the ALB can target, and the API server's pod proxy on the invocation port. Egress is HTTPS (S3,
        Hugging Face, AWS APIs, the Kubernetes API for the router's discovery) and the operator's namespace; DNS is
        the namespace's ``allow-dns``. One set of rules under two policies: a label selector cannot say "``app``
        or the router's component", and the router may carry either. ``operator-routers``, a name no endpoint's
        policy can take (theirs end in ``-router``, ``-engine`` or ``-operator-endpoint``)."""
        operator_ns = k8s.NetworkPolicyPeer(namespace_selector=in_namespace(operator_namespace))
        operator_pods = [
            k8s.NetworkPolicyPeer(pod_selector=OPERATOR_PODS),
            k8s.NetworkPolicyPeer(pod_selector=OPERATOR_ROUTER_PODS),
        ]
        if shared:
            ingress = [
                k8s.NetworkPolicyIngressRule(from_=[operator_ns, *operator_pods]),
                *address_rules(
                    # The ALB (target type ip), whose target is the router or the model pods' proxy.
                    (network.load_balancer_blocks, OPERATOR_LOAD_BALANCER_PORTS),
                    # `kvtiers verify` and the managed collector read /metrics through the API server's proxy.
                    (network.api_proxy_blocks, (names.OPERATOR_PORT,)),
                ),
            ]
            egress = [
                k8s.NetworkPolicyEgressRule(to=[operator_ns, *operator_pods]),
                k8s.NetworkPolicyEgressRule(to=[ip_peer(ANYWHERE)], ports=tcp(HTTPS_PORT)),
            ]
            for name, selector in (("operator-managed", OPERATOR_PODS), ("operator-routers", OPERATOR_ROUTER_PODS)):
                _policy(self, name, namespace, selector, ingress=ingress, egress=egress)
        for e in endpoints if own else ():
            # The endpoint's own model pods, keyed by the operator's app label: who reaches their invocation port,
            # stated for each endpoint so that a wrong label shows as one missing match in `kubectl describe`.
            _policy(
                self,
                f"{e.name}-operator-endpoint",
                namespace,
                k8s.LabelSelector(match_labels=names.operator_pod_labels(e.object_name)),
                ingress=[
                    k8s.NetworkPolicyIngressRule(from_=[operator_ns, *operator_pods], ports=tcp(names.OPERATOR_PORT)),
                    *address_rules(
                        (network.load_balancer_blocks, (names.OPERATOR_PORT,)),
                        (network.api_proxy_blocks, (names.OPERATOR_PORT,)),
                    ),
                ],
            )


def address_rules(*grants: tuple[Sequence[str], Sequence[int]]) -> list[k8s.NetworkPolicyIngressRule]:
    """Ingress rules that admit each ``(cidrs, ports)`` grant, every address block named once per port: a block equal
    to or inside another admitted on the same port is left out (the pod proxy's EKS subnets are among the load
    balancer's), and ports admitting the same blocks share a rule."""
    blocks_by_port: dict[int, list[str]] = {}
    for cidrs, ports in grants:
        for port in ports:
            blocks_by_port.setdefault(port, []).extend(cidrs)
    ports_by_blocks: dict[tuple[str, ...], list[int]] = {}
    for port, cidrs in blocks_by_port.items():
        ports_by_blocks.setdefault(outermost(cidrs), []).append(port)
    return [
        k8s.NetworkPolicyIngressRule(from_=[ip_peer(c) for c in blocks], ports=tcp(*ports))
        for blocks, ports in ports_by_blocks.items()
    ]


def outermost(cidrs: Sequence[str]) -> tuple[str, ...]:
    """``cidrs`` in their order without repeats and without the blocks inside another of them."""
    networks = [ipaddress.IPv4Network(c) for c in cidrs]
    return tuple(
        cidr
        for i, (cidr, net) in enumerate(zip(cidrs, networks, strict=True))
        if net not in networks[:i] and not any(net != other and net.subnet_of(other) for other in networks)
    )


def _check_clients_not_voided(endpoint: SelfManagedTraffic, network: ClusterNetwork) -> None:
    """Routers also admit the API server's pod proxy; without the control plane's subnets that rule admits the whole
    VPC, so ``client_cidrs`` that leave part of the VPC out would narrow nothing."""
    if network.control_plane_cidrs or not endpoint.client_cidrs:
        return
    vpc = ipaddress.IPv4Network(network.node_cidr)
    if any(vpc.subnet_of(ipaddress.IPv4Network(c)) for c in endpoint.client_cidrs):
        return
    raise ValueError(
        f"endpoint {endpoint.name!r}: client_cidrs {', '.join(endpoint.client_cidrs)} narrow who may call the router, "
        "but the network gives no control_plane_cidrs, so the rule that admits the API server's pod proxy admits the "
        f"whole VPC ({network.node_cidr}) and voids them; give the EKS subnets' CIDRs "
        "(ExistingVpcAttributes(private_subnet_cidrs=...) or ClusterNetwork(control_plane_cidrs=...))"
    )


class CurvineNetworkPolicyChart(cdk8s.Chart):
    """Policies of the Curvine namespace: masters and the CSI controller (workers and the CSI node plugin are on
    the host network and are not covered).

    :param namespace: the Curvine namespace.
    :param network: where the Kubernetes API and its pod proxy are.
    :param hyperpod_cidr: where the HyperPod nodes are (the node IPs of the host-network workers and FUSE clients);
        inside ``network.node_cidr``.
    :param master_rpc_port: the masters' RPC port (workers, FUSE clients, the CSI controller, other masters).
    :param journal_port: the masters' Raft journal port.
    :param master_web_port: the masters' web port (``kvtiers verify`` through the pod proxy, metrics).
    :param worker_rpc_port: the workers' RPC port (the masters call it).
    :param metrics_scraper: a peer (the metrics collector) admitted to the masters' web port.
        @default None (no in-cluster scraper)
    :param janitor_namespace: where the L2 janitor runs; its pods reach the masters' web port.
        @default None (no janitor)
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        network: ClusterNetwork,
        hyperpod_cidr: str,
        master_rpc_port: int,
        journal_port: int,
        master_web_port: int,
        worker_rpc_port: int,
        metrics_scraper: k8s.NetworkPolicyPeer | None = None,
        janitor_namespace: str | None = None,
    ) -> None:
        where = "CurvineNetworkPolicyChart"
        checks.dns_label(where, "namespace", namespace)
        if not checks.ipv4_network(where, "hyperpod_cidr", hyperpod_cidr).subnet_of(
            checks.ipv4_network(where, "network.node_cidr", network.node_cidr)
        ):
            raise ValueError(
                f"{where}: hyperpod_cidr {hyperpod_cidr} is not inside network.node_cidr {network.node_cidr}"
            )
        ports = {
            "master_rpc_port": master_rpc_port,
            "journal_port": journal_port,
            "master_web_port": master_web_port,
            "worker_rpc_port": worker_rpc_port,
        }
        if len(set(ports.values())) != len(ports):
            raise ValueError(f"{where}: the ports must be distinct, got {ports}")
        super().__init__(scope, id, disable_resource_name_hashes=True)
        ns = namespace
        _baseline(self, ns)
        master_labels = {names.NAME: MASTER}
        controller_labels = {names.NAME: CSI_CONTROLLER}
        masters, controller = pods(master_labels), pods(controller_labels)
        hyperpod = ip_peer(hyperpod_cidr)
        master_ingress = [
            k8s.NetworkPolicyIngressRule(from_=[masters], ports=tcp(master_rpc_port, journal_port)),
            k8s.NetworkPolicyIngressRule(from_=[controller], ports=tcp(master_rpc_port)),
            # Workers and FUSE clients are on the host network: only their node IPs identify them.
            k8s.NetworkPolicyIngressRule(from_=[hyperpod], ports=tcp(master_rpc_port)),
            # `kvtiers verify` reads the web API through the API server's pod proxy (control-plane ENIs).
            k8s.NetworkPolicyIngressRule(from_=network.api_proxy, ports=tcp(master_web_port)),
        ]
        if metrics_scraper:
            master_ingress.append(k8s.NetworkPolicyIngressRule(from_=[metrics_scraper], ports=tcp(master_web_port)))
        if janitor_namespace is not None:
            checks.dns_label(where, "janitor_namespace", janitor_namespace)
            janitor = k8s.NetworkPolicyPeer(
                namespace_selector=in_namespace(janitor_namespace),
                pod_selector=k8s.LabelSelector(match_labels=JANITOR_LABELS),
            )
            # The janitor reads the web API: the leader, the live workers, the block locations of suspect files.
            master_ingress.append(k8s.NetworkPolicyIngressRule(from_=[janitor], ports=tcp(master_web_port)))
        _policy(
            self,
            MASTER,
            ns,
            k8s.LabelSelector(match_labels=master_labels),
            ingress=master_ingress,
            egress=[
                k8s.NetworkPolicyEgressRule(to=[masters], ports=tcp(master_rpc_port, journal_port)),
                k8s.NetworkPolicyEgressRule(to=[hyperpod], ports=tcp(worker_rpc_port)),
            ],
        )
        _policy(
            self,
            CSI_CONTROLLER,
            ns,
            k8s.LabelSelector(match_labels=controller_labels),
            ingress=[],
            egress=[
                k8s.NetworkPolicyEgressRule(to=[masters], ports=tcp(master_rpc_port)),
                # The provisioner and leader election call the Kubernetes API.
                k8s.NetworkPolicyEgressRule(to=network.api_server, ports=tcp(HTTPS_PORT)),
            ],
        )
