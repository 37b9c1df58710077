"""The README's library example (``examples/reuse_app/app.py``: a second team's endpoint on the prod platform's L2,
imported by attributes) works in the scenario it describes: under the platform's own namespace policies (default
deny, as the prod app deploys them) its pods reach S3, Pod Identity, DNS, the Kubernetes API, each other and their
clients, nothing else reaches its engines, and calling it needs the key."""

from __future__ import annotations

import ipaddress
import os
import runpy

import pytest

from kvtiers.constructs import ServingEndpoint
from tests.netpol_eval import Cluster, Endpoint
from tests.synth import ROOT

EXAMPLE = ROOT / "examples" / "reuse_app" / "app.py"


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> ServingEndpoint:
    os.environ["CDK_OUTDIR"] = str(tmp_path_factory.mktemp("reuse") / "cdk.out")
    try:
        namespace = runpy.run_path(str(EXAMPLE), run_name="example")
    finally:
        del os.environ["CDK_OUTDIR"]
    (endpoint,) = [c for c in namespace["app"].node.find_all() if isinstance(c, ServingEndpoint)]
    return endpoint


def pod(objects: list[dict], name: str, ip: str) -> Endpoint:
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name)
    return Endpoint(name, ip, deployment["metadata"]["namespace"], deployment["spec"]["template"]["metadata"]["labels"])


@pytest.fixture(scope="module")
def traffic(example, prod_synth) -> tuple[Cluster, dict[str, Endpoint]]:
    platform = prod_synth.graph.workloads.chart_objects["ServingNetworkPolicies"]
    assert {p["metadata"]["name"] for p in platform} >= {"default-deny", "allow-dns"}
    cluster = Cluster([*platform, *example.policies_objects])
    vpc = ipaddress.ip_network(prod_synth.graph.environment.network.cidr)
    system_ip, hyperpod_ip = str(vpc.network_address + 0x0105), str(vpc.network_address + 0x4010)
    peers = {
        "engine": pod(example.objects, "team-llama8b-engine", hyperpod_ip),
        "router": pod(example.objects, "team-llama8b-router", system_ip),
        "client": Endpoint("client", str(vpc.network_address + 0x0A01), "apps", {"app": "client"}),
        # Another team's pod on a HyperPod node (the EKS subnets also hold the API server's proxy, which is admitted).
        "other-pod": Endpoint("other-pod", str(vpc.network_address + 0x4028), "apps", {"app": "tools"}),
        "internet": Endpoint("internet", "52.94.0.10"),
        "pod-identity": Endpoint("pod-identity", "169.254.170.23"),
        "coredns": Endpoint("coredns", system_ip, "kube-system", {"k8s-app": "kube-dns"}),
        "api-service": Endpoint("api-service", "172.20.0.1"),
    }
    return cluster, peers


def allowed(traffic, source: str, target: str, port: int, protocol: str = "TCP") -> bool:
    cluster, peers = traffic
    return cluster.allowed(peers[source], peers[target], port, protocol)


@pytest.mark.parametrize(
    ("source", "target", "port", "protocol", "why"),
    [
        ("engine", "internet", 443, "TCP", "model-sync copies the weights from S3"),
        ("engine", "pod-identity", 80, "TCP", "model-sync's credentials"),
        ("engine", "coredns", 53, "UDP", "DNS"),
        ("router", "engine", 8000, "TCP", "requests and model discovery"),
        ("router", "api-service", 443, "TCP", "the router discovers engines through the Kubernetes API"),
        ("client", "router", 8000, "TCP", "clients in the VPC"),
    ],
)
def test_the_example_reaches_what_it_needs_under_the_platforms_policies(traffic, source, target, port, protocol, why):
    assert allowed(traffic, source, target, port, protocol), why


def test_nothing_else_reaches_its_engines_or_leaves_them(traffic):
    assert not allowed(traffic, "other-pod", "engine", 8000)
    assert not allowed(traffic, "client", "engine", 8000)
    assert not allowed(traffic, "engine", "other-pod", 8000)


def test_the_platforms_default_deny_is_what_a_bare_chart_met(prod_synth, example):
    """Without the endpoint's own policies (the old example's bare chart) the router could not reach its engines."""
    cluster = Cluster(prod_synth.graph.workloads.chart_objects["ServingNetworkPolicies"])
    router = pod(example.objects, "team-llama8b-router", "10.200.1.5")
    engine = pod(example.objects, "team-llama8b-engine", "10.200.64.16")
    assert not cluster.allowed(router, engine, 8000, "TCP")


def test_calling_it_needs_the_key(example):
    kinds = {o["kind"] for o in example.objects}
    assert "SecretProviderClass" in kinds
    assert example.secret_access is not None and example.secret_access.api_key is not None
    engine = next(o for o in example.objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("engine"))
    volumes = engine["spec"]["template"]["spec"]["volumes"]
    assert any("csi" in v and v["csi"]["driver"] == "secrets-store.csi.k8s.io" for v in volumes)
