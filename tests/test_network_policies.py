"""The synthesized NetworkPolicies of every shipped environment, evaluated against the hand-written matrix in the
docs/security.md ("Network isolation"), and validated against the Kubernetes 1.34 schemas."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import kubernetes_validate
import pytest

from tests.netpol_eval import Cluster, Endpoint

SECURITY_DOC = Path(__file__).resolve().parent.parent / "docs" / "security.md"


def matrix_rows() -> list[dict]:
    text = SECURITY_DOC.read_text()
    block = text.split("<!-- network-policy-matrix -->")[1].split("<!-- /network-policy-matrix -->")[0]
    rows = []
    for line in block.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        src, dst, traffic, dev, prod, why = cells
        protocol, port = traffic.split()
        rows.append(
            {
                "from": src,
                "to": dst,
                "protocol": protocol.upper(),
                "port": int(port),
                "dev": dev,
                "prod": prod,
                "why": why,
            }
        )
    return rows


def objects(synth) -> list[dict]:
    return [o for objs in synth.graph.workloads.chart_objects.values() for o in objs]


def pod_labels(objs: list[dict], kind: str, name: str) -> tuple[str, dict]:
    obj = next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)
    return obj["metadata"]["namespace"], obj["spec"]["template"]["metadata"]["labels"]


def endpoints(synth) -> dict[str, Endpoint]:
    env = synth.graph.workloads.config
    objs = objects(synth)
    vpc = ipaddress.ip_network(env.network.cidr)
    hyperpod = ipaddress.ip_network(env.network.hyperpod_subnet_cidr)
    system_ip = str(vpc.network_address + 0x0105)  # an EKS subnet address, outside the HyperPod subnet
    assert ipaddress.ip_address(system_ip) not in hyperpod

    def hp_ip(n: int) -> str:
        return str(hyperpod.network_address + 10 + n)

    found = {
        "client": Endpoint("client", system_ip, "apps", {"app": "client"}),
        "hp-pod": Endpoint("hp-pod", hp_ip(1), "apps", {"app": "batch"}),
        "api": Endpoint("api", str(vpc.network_address + 0x0210)),
        # The `kubernetes` Service address: what in-cluster clients dial (checked before translation by the CNI).
        "api-service": Endpoint(
            "api-service", str(ipaddress.ip_network(env.eks.service_ipv4_cidr).network_address + 1)
        ),
        # A pod of another namespace on a system node: its address is in an EKS subnet, like the control plane's.
        "system-pod": Endpoint("system-pod", str(vpc.network_address + 0x0220), "apps", {"app": "tools"}),
        "internet": Endpoint("internet", "52.94.0.10"),
        # A host of a peered network or a VPN, routed into the VPC: neither a pod nor in a subnet of the VPC.
        "peer": Endpoint("peer", "100.64.0.10"),
        "pod-identity": Endpoint("pod-identity", "169.254.170.23"),
        "coredns": Endpoint("coredns", system_ip, "kube-system", {"k8s-app": "kube-dns"}),
        "worker": Endpoint(
            "worker", hp_ip(2), env.curvine.namespace, {"app.kubernetes.io/name": "curvine-worker"}, host_network=True
        ),
        "fuse": Endpoint(
            "fuse", hp_ip(3), env.curvine.namespace, {"app.kubernetes.io/name": "curvine-csi-node"}, host_network=True
        ),
        "operator": Endpoint("operator", system_ip, "hyperpod-inference-system", {"app": "controller"}),
    }
    ns, labels = pod_labels(objs, "StatefulSet", "curvine-master")
    found["master"] = Endpoint("master", hp_ip(4), ns, labels)
    ns, labels = pod_labels(objs, "Deployment", "curvine-csi-controller")
    found["csi-controller"] = Endpoint("csi-controller", system_ip, ns, labels)
    ns, labels = pod_labels(objs, "Deployment", "curvine-l2-janitor")
    found["janitor"] = Endpoint("janitor", hp_ip(5), ns, labels)
    self_managed = [e for e in env.serving.endpoints if e.serving == "self_managed"]
    for i, e in enumerate(self_managed, start=1):
        ns, labels = pod_labels(objs, "Deployment", f"{e.name}-engine")
        found[f"engine(e{i})"] = Endpoint(f"engine(e{i})", hp_ip(10 + i), ns, labels)
        ns, labels = pod_labels(objs, "Deployment", f"{e.name}-router")
        found[f"router(e{i})"] = Endpoint(f"router(e{i})", system_ip, ns, labels)
    for e in env.serving.endpoints:
        if e.serving == "operator":
            iec = next(o for o in objs if o["kind"] == "InferenceEndpointConfig")
            # What the operator creates (not rendered by kvtiers): assumed labels, no kvtiers part-of label.
            found["op"] = Endpoint("op", hp_ip(30), env.serving.namespace, {"app": iec["metadata"]["name"]})
            found["op-router"] = Endpoint("op-router", system_ip, env.serving.namespace, {"app": f"{e.name}-router"})
            # A pod of the serving namespace that neither kvtiers nor the operator made (`kubectl run` labels it
            # `run: <name>`): not one of the operator's pods.
            found["serving-debug"] = Endpoint("serving-debug", hp_ip(31), env.serving.namespace, {"run": "debug"})
    return found


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_network_policies_agree_with_the_readme_matrix(env_name, request):
    synth = request.getfixturevalue(f"{env_name}_synth")
    cluster = Cluster(objects(synth))
    known = endpoints(synth)
    rows = matrix_rows()
    assert len(rows) > 30
    wrong = []
    for row in rows:
        expected = row[env_name]
        if expected == "n/a":
            assert row["from"] not in known or row["to"] not in known, f"row {row} is n/a but both exist in {env_name}"
            continue
        assert expected in ("allowed", "denied"), row
        src, dst = known[row["from"]], known[row["to"]]
        got = "allowed" if cluster.allowed(src, dst, row["port"], row["protocol"]) else "denied"
        if got != expected:
            wrong.append(
                f"{row['from']} -> {row['to']} {row['protocol']} {row['port']}: {got}, docs/security.md says {expected}"
            )
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_namespaces_kvtiers_creates_deny_by_default(env_name, request):
    synth = request.getfixturevalue(f"{env_name}_synth")
    objs = objects(synth)
    namespaces = {o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"}
    assert namespaces == {"serving", "curvine"}
    for ns in namespaces:
        deny = [
            o
            for o in objs
            if o["kind"] == "NetworkPolicy"
            and o["metadata"]["namespace"] == ns
            and o["spec"]["podSelector"] == {}
            and "ingress" not in o["spec"]
            and "egress" not in o["spec"]
        ]
        assert deny and set(deny[0]["spec"]["policyTypes"]) == {"Ingress", "Egress"}, ns


def test_network_policies_are_valid_kubernetes_1_33(dev_synth, prod_synth):
    policies = [o for s in (dev_synth, prod_synth) for o in objects(s) if o["kind"] == "NetworkPolicy"]
    assert len(policies) > 10
    for obj in policies:
        kubernetes_validate.validate(obj, "1.34", strict=True)


def test_the_evaluator_applies_default_deny_and_needs_both_sides():
    a = Endpoint("a", "10.0.0.1", "x", {"app": "a"})
    b = Endpoint("b", "10.0.0.2", "x", {"app": "b"})
    deny = {
        "kind": "NetworkPolicy",
        "metadata": {"name": "d", "namespace": "x"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }
    ingress_b = {
        "kind": "NetworkPolicy",
        "metadata": {"name": "i", "namespace": "x"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "b"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "a"}}}], "ports": [{"port": 80}]}],
        },
    }
    egress_a = {
        "kind": "NetworkPolicy",
        "metadata": {"name": "e", "namespace": "x"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "a"}},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "b"}}}], "ports": [{"port": 80}]}],
        },
    }
    assert Cluster([]).allowed(a, b, 80)
    assert not Cluster([deny]).allowed(a, b, 80)
    assert not Cluster([deny, ingress_b]).allowed(a, b, 80)  # a's egress still denied
    assert not Cluster([deny, egress_a]).allowed(a, b, 80)  # b's ingress still denied
    assert Cluster([deny, ingress_b, egress_a]).allowed(a, b, 80)
    assert not Cluster([deny, ingress_b, egress_a]).allowed(a, b, 81)
    host = Endpoint("h", "10.0.0.3", "x", {"app": "a"}, host_network=True)
    assert not Cluster([deny, ingress_b]).allowed(host, b, 80)  # host network matches no pod selector


def test_matrix_is_readable():
    for row in matrix_rows():
        assert re.fullmatch(r"[a-z0-9()-]+", row["from"]) and row["why"], row


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_vpc_cni_enforces_network_policies(env_name, request):
    import json

    synth = request.getfixturevalue(f"{env_name}_synth")
    template = synth.template_json(synth.graph.platform)
    cni = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == "vpc-cni"
    ]
    assert len(cni) == 1
    assert json.loads(cni[0]["Properties"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_only_the_endpoints_router_and_the_api_proxy_reach_its_engines_unauthenticated_routes(env_name, request):
    """vLLM checks the API key only on ``/v1`` (``/invocations``, ``/tokenize``, ``/pause``... answer without one), so
    the engine port is the boundary: of every known peer, only the endpoint's own router and the API server's proxy
    (the control plane's subnets, for ``kvtiers verify``) may reach it; no other endpoint's router, no pod on a
    HyperPod node, no client."""
    synth = request.getfixturevalue(f"{env_name}_synth")
    cluster = Cluster(objects(synth))
    known = endpoints(synth)
    engines = [k for k in known if k.startswith("engine(")]
    assert engines
    for engine in engines:
        router = engine.replace("engine", "router")
        reach = {k for k, src in known.items() if k != engine and cluster.allowed(src, known[engine], 8000)}
        # system-pod: a pod on a system node has an address in the EKS subnets, where the control plane's ENIs are,
        # so the API-proxy rule admits it too (docs/security.md, "API keys": the known gap, and how to close it).
        assert reach == {router, "api", "system-pod"}, f"{env_name}: {engine}:8000 is reachable from {sorted(reach)}"
