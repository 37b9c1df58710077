"""A small NetworkPolicy evaluator (networking.k8s.io/v1 semantics) for the tests.

A connection from a source to a destination port is allowed when the source's egress allows it *and* the
destination's ingress allows it. A side is unrestricted when no policy of that type selects the pod; when any does,
the union of their rules applies (an empty rule list denies). Host-network pods are never selected by a policy and,
as peers, match only ``ipBlock`` rules (by their node IP). Non-pod endpoints (the control plane, the internet) are
peers by IP only. Pod IPs match ``ipBlock`` too (the VPC CNI sees addresses, not pods).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Endpoint:
    name: str
    ip: str
    namespace: str | None = None
    """``None``: not a pod (control plane, internet); policies never select it and selectors never match it."""
    labels: dict = field(default_factory=dict)
    host_network: bool = False

    @property
    def is_pod(self) -> bool:
        return self.namespace is not None


def matches(selector: dict, labels: dict) -> bool:
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


class Cluster:
    def __init__(self, policies: list[dict], namespace_labels: dict[str, dict] | None = None) -> None:
        self.policies = [p for p in policies if p.get("kind") == "NetworkPolicy"]
        self.namespace_labels = namespace_labels or {}

    def _ns_labels(self, namespace: str) -> dict:
        return {"kubernetes.io/metadata.name": namespace, **self.namespace_labels.get(namespace, {})}

    def _selecting(self, pod: Endpoint, kind: str) -> list[dict]:
        if not pod.is_pod or pod.host_network:
            return []
        found = []
        for policy in self.policies:
            spec = policy["spec"]
            if policy["metadata"]["namespace"] != pod.namespace or not matches(spec["podSelector"], pod.labels):
                continue
            types = spec.get("policyTypes") or (["Ingress", "Egress"] if "egress" in spec else ["Ingress"])
            if kind in types:
                found.append(policy)
        return found

    def _peer_matches(self, peer: dict, other: Endpoint, policy_namespace: str) -> bool:
        if "ipBlock" in peer:
            block = peer["ipBlock"]
            ip = ipaddress.ip_address(other.ip)
            if ip not in ipaddress.ip_network(block["cidr"]):
                return False
            return not any(ip in ipaddress.ip_network(e) for e in block.get("except", []))
        if not other.is_pod or other.host_network:
            return False
        if "namespaceSelector" in peer:
            if not matches(peer["namespaceSelector"], self._ns_labels(other.namespace)):
                return False
        elif other.namespace != policy_namespace:
            return False
        return matches(peer.get("podSelector", {}), other.labels)

    @staticmethod
    def _port_matches(ports: list[dict] | None, port: int, protocol: str) -> bool:
        if not ports:
            return True
        for p in ports:
            if p.get("protocol", "TCP") != protocol:
                continue
            if "port" not in p:
                return True
            if p["port"] == port or (p.get("endPort") and p["port"] <= port <= p["endPort"]):
                return True
        return False

    def _side(self, pod: Endpoint, other: Endpoint, port: int, protocol: str, kind: str) -> bool:
        selecting = self._selecting(pod, kind)
        if not selecting:
            return True
        rules_key, peers_key = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
        for policy in selecting:
            for rule in policy["spec"].get(rules_key, []):
                peers = rule.get(peers_key)
                if peers and not any(self._peer_matches(p, other, pod.namespace) for p in peers):
                    continue
                if self._port_matches(rule.get("ports"), port, protocol):
                    return True
        return False

    def allowed(self, src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
        return self._side(src, dst, port, protocol, "Egress") and self._side(dst, src, port, protocol, "Ingress")
