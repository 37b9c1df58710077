"""The ports between system nodes and HyperPod nodes that the environment's components use, derived once from the
environment and the components' own port constants (see the README's node traffic matrix)."""

from __future__ import annotations

from kvtiers.config.schema import Environment
from kvtiers.constructs.node_traffic import PortRule
from kvtiers.k8s_charts.names import (
    ENGINE_PORT,
    LMCACHE_CONTROLLER_PULL_PORT,
    LMCACHE_CONTROLLER_REPLY_PORT,
    LMCACHE_WORKER_PORT_BASE,
    OPERATOR_PORT,
)

KUBELET_PORT = 10250
DNS_PORT = 53


def node_traffic_rules(env: Environment) -> tuple[tuple[PortRule, ...], tuple[PortRule, ...]]:
    """``(system_to_hyperpod, hyperpod_to_system)``: what pods on one kind of node must reach on the other."""
    endpoints = env.serving.endpoints
    self_managed = [e for e in endpoints if e.serving == "self_managed"]
    kvaware = [e for e in self_managed if e.routing == "kvaware"]
    to_hyperpod = [
        PortRule(
            "tcp", env.curvine.ports.master_rpc, "Curvine CSI controller creates L2 volumes on the Curvine masters"
        ),
    ]
    # CoreDNS is kept on the system nodes (EksCluster pins it there).
    to_system = [
        PortRule("udp", DNS_PORT, "pods on HyperPod nodes resolve names with CoreDNS"),
        PortRule("tcp", DNS_PORT, "pods on HyperPod nodes resolve names with CoreDNS (large answers)"),
    ]
    if any(e.serving == "operator" for e in endpoints):
        # metrics-server (an operator prerequisite) scrapes every kubelet, from whichever kind of node it runs on.
        to_hyperpod.append(PortRule("tcp", KUBELET_PORT, "metrics-server scrapes the HyperPod kubelets"))
        to_system.append(PortRule("tcp", KUBELET_PORT, "metrics-server on a HyperPod node scrapes the system kubelets"))
    if self_managed:
        to_hyperpod.append(
            PortRule("tcp", ENGINE_PORT, "routers send requests to the vLLM engines and discover models")
        )
    if kvaware:
        widest = max(e.tensor_parallel_size for e in kvaware)
        to_hyperpod.append(
            PortRule(
                "tcp",
                LMCACHE_WORKER_PORT_BASE,
                "kvaware: the router's LMCache controller asks the engines' "
                "LMCache workers (one port per tensor-parallel rank)",
                to_port=LMCACHE_WORKER_PORT_BASE + widest - 1,
            )
        )
        to_system.append(
            PortRule(
                "tcp",
                LMCACHE_CONTROLLER_PULL_PORT,
                "kvaware: engines report their cache to the router's LMCache controller (pull and reply sockets)",
                to_port=LMCACHE_CONTROLLER_REPLY_PORT,
            )
        )
    if any(e.serving == "operator" for e in endpoints):
        to_hyperpod.append(
            PortRule(
                "tcp",
                OPERATOR_PORT,
                "Inference Operator: its router and controller reach the model pods on their invocation port",
            )
        )
    return _merged(to_hyperpod), _merged(to_system)


def _merged(rules: list[PortRule]) -> tuple[PortRule, ...]:
    """One rule per port range; components that share a port share its rule, with both reasons."""
    by_range: dict[tuple, PortRule] = {}
    for rule in rules:
        key = (rule.protocol, rule.port, rule.to_port)
        if key in by_range:
            rule = PortRule(rule.protocol, rule.port, f"{by_range[key].reason}; {rule.reason}", rule.to_port)
        by_range[key] = rule
    return tuple(by_range.values())


KUBERNETES_API_PORT = 443


def scraper_rules(env: Environment) -> tuple[tuple[PortRule, ...], tuple[PortRule, ...]]:
    """``(to_hyperpod, to_system)``: what the managed metrics collector (its own security group, ENIs in the EKS
    subnets) must reach, from its scrape targets. The system side also carries the control plane's ENIs, which
    serve the Kubernetes API it discovers pods with."""
    from kvtiers.observability.scrape import ROUTER, targets

    to_hyperpod: list[PortRule] = []
    to_system = [
        PortRule(
            "tcp",
            KUBERNETES_API_PORT,
            "metrics collector discovers pods through the Kubernetes API (control plane ENIs)",
        )
    ]
    for target in targets(env):
        rule = PortRule("tcp", target.port, f"metrics collector scrapes {target.job} /metrics")
        (to_system if target.component == ROUTER else to_hyperpod).append(rule)
    return _merged(to_hyperpod), _merged(to_system)
