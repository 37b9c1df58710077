"""The synthesized NetworkPolicies of every shipped environment, evaluated against the hand-written matrix in the
docs/security.md ("Network isolation"), and validated against the Kubernetes 1.34 schemas."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import cdk8s
import kubernetes_validate
import pytest

from kvtiers.k8s_charts.network_policies import ClusterNetwork, OperatorTraffic, ServingNetworkPolicyChart
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
            # The operator's router as production-stack's chart labels it (vllm-stack-0.1.12
            # helm/templates/_helpers.tpl chart.routerStandardLabels, values.yaml routerSpec.labels): no `app` label.
            found["op-router"] = Endpoint(
                "op-router",
                system_ip,
                env.serving.namespace,
                {
                    "app.kubernetes.io/name": "router",
                    "app.kubernetes.io/instance": "router",
                    "app.kubernetes.io/component": "router",
                    "app.kubernetes.io/part-of": "vllm-stack",
                    "app.kubernetes.io/managed-by": "helm",
                    "environment": "router",
                    "release": "router",
                },
            )
            # The same router, should the operator label it `app` as it labels the model pods.
            found["op-router-app"] = Endpoint(
                "op-router-app", system_ip, env.serving.namespace, {"app": f"{e.name}-router"}
            )
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


def _operator_policies(network: ClusterNetwork) -> list[dict]:
    chart = ServingNetworkPolicyChart(
        cdk8s.App(),
        "np",
        namespace="serving",
        network=network,
        endpoints=(OperatorTraffic(name="op", object_name="op-1234abcd"),),
    )
    return [o for o in chart.to_json() if o["metadata"]["name"] in ("operator-managed", "op-operator-endpoint")]


def _blocks_by_port(policy: dict) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for rule in policy["spec"]["ingress"]:
        blocks = [p["ipBlock"]["cidr"] for p in rule.get("from", []) if "ipBlock" in p]
        for port in rule.get("ports", []):
            found.setdefault(port["port"], []).extend(blocks)
    return found


@pytest.mark.parametrize(
    "load_balancer_cidrs, expected",
    [
        # A new VPC: the pod proxy's EKS subnets are among the load balancer's.
        (("10.0.0.0/24", "10.0.1.0/24", "10.0.64.0/18"), ["10.0.0.0/24", "10.0.1.0/24", "10.0.64.0/18"]),
        # An imported VPC without its load-balancer subnets: the whole VPC holds the EKS subnets.
        ((), ["10.0.0.0/16"]),
    ],
)
def test_an_operator_policy_names_each_address_block_once_per_port(load_balancer_cidrs, expected):
    network = ClusterNetwork(
        node_cidr="10.0.0.0/16",
        api_service_ip="172.20.0.1",
        control_plane_cidrs=("10.0.0.0/24", "10.0.1.0/24"),
        load_balancer_cidrs=load_balancer_cidrs,
    )
    for policy in _operator_policies(network):
        by_port = _blocks_by_port(policy)
        assert by_port[8000] == expected, policy["metadata"]["name"]
        for port, blocks in by_port.items():
            networks = [ipaddress.ip_network(b) for b in blocks]
            assert len(set(networks)) == len(networks), (policy["metadata"]["name"], port, blocks)
            assert not any(a != b and a.subnet_of(b) for a in networks for b in networks), (port, blocks)


def test_the_load_balancer_reaches_operator_pods_only_on_the_ports_it_can_target():
    """AWS's walkthrough (aws/sagemaker-hyperpod-cli 51b8dd2, examples/end_to_end_walkthrough): a model server on
    `--container-port 8080` (02-inference-deployment/01-custom-model-endpoint.md) behind ALB targets on 8081
    (images/alb-resource-map.png); kvtiers' model server listens on 8000."""
    network = ClusterNetwork(
        node_cidr="10.0.0.0/16",
        api_service_ip="172.20.0.1",
        control_plane_cidrs=("10.0.0.0/24",),
        load_balancer_cidrs=("10.0.64.0/18",),
    )
    (shared,) = (p for p in _operator_policies(network) if p["metadata"]["name"] == "operator-managed")
    by_port = _blocks_by_port(shared)
    assert {port for port, blocks in by_port.items() if "10.0.64.0/18" in blocks} == {8000, 8080, 8081}
    assert all("ports" in rule for rule in shared["spec"]["ingress"] if any("ipBlock" in p for p in rule["from"]))
