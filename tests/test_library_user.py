"""The constructs as a new user builds them: one bare ``cdk.App`` and ``cdk.Stack``, no environment file, only the
choices a user makes (the VPC's AZ, one HyperPod group, one Curvine master, one endpoint). What the synthesized
template says about node traffic, ordering and serving must equal what the app produces for the same choices
(``config/dev.yaml``): a rule a neighbour relies on that only the app adds is a platform that synthesizes and does
not work.
"""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import assertions

from kvtiers.constructs import EksCluster, HyperPodCluster, HyperPodDependencies, HyperPodNetwork, InstanceGroup
from kvtiers.constructs.curvine import CurvineL2
from kvtiers.constructs.endpoint_secrets import EndpointSecretAccess, SecretsStoreCsi
from kvtiers.constructs.hyperpod_cluster import Taint
from kvtiers.constructs.network import NewVpcOptions
from kvtiers.constructs.serving import ServingEndpoint
from kvtiers.k8s_charts.secrets import EndpointSecrets
from kvtiers.k8s_charts.serving import Engine, Router
from kvtiers.k8s_charts.vllm import HuggingFaceWeights
from tests.fakes.hyperpod_chart import write_stand_in_checkout
from tests.synth import cdk_context, synth

ACCOUNT, REGION = "111111111111", "us-east-1"
CURVINE_MANIFESTS = ("CurvineMasters", "CurvineWorkers", "CurvineCsi", "CurvineStorage")
MANIFESTS = (*CURVINE_MANIFESTS, "ServingNamespace")

QWEN2_7B_REVISION = "f2826a00ceef68f0f2b946d945ecc0477ce4450c"
"""The commit config/dev.yaml pins (part of the L2 namespace)."""


@pytest.fixture(scope="module")
def chart_dir(tmp_path_factory) -> Path:
    return write_stand_in_checkout(tmp_path_factory.mktemp("vendor") / "sagemaker-hyperpod-cli")


@pytest.fixture(scope="module")
def app_result(chart_dir, tmp_path_factory):
    return synth("config/dev.yaml", tmp_path_factory.mktemp("app") / "cdk.out", chart_dir=chart_dir)


def library_stack(
    chart_dir: Path, *, dependencies: bool = True, taints: tuple[Taint, ...] = ()
) -> tuple[cdk.Stack, ServingEndpoint]:
    """What a platform team writes from the README's construct section: the dev environment's choices only."""
    app = cdk.App(context=cdk_context())
    stack = cdk.Stack(app, "team-platform", env=cdk.Environment(account=ACCOUNT, region=REGION))
    network = HyperPodNetwork(stack, "Network", vpc=NewVpcOptions(hyperpod_az_id="use1-az2"))
    eks = EksCluster(stack, "Eks", vpc=network.vpc, subnets=network.eks_subnets, security_group=network.security_group)
    chart = (
        HyperPodDependencies(stack, "HyperPodDependencies", cluster=eks, chart_dir=chart_dir) if dependencies else None
    )
    hyperpod = HyperPodCluster(
        stack,
        "HyperPod",
        eks_cluster=eks,
        dependencies=chart,
        subnet=network.hyperpod_subnet,
        security_group=network.security_group,
        instance_groups=[
            InstanceGroup(
                name="g6e-serving",
                instance_type="ml.g6e.12xlarge",
                count=2,
                labels={"kvtiers.io/role": "serving"},
                taints=taints,
                **({"deep_health_checks": ()} if taints else {}),
            )
        ],
    )
    curvine = CurvineL2(stack, "Curvine", eks_cluster=eks, hyperpod=hyperpod, network=network, masters=1)
    # The endpoint's API key from Secrets Manager, readable by its router's and engines' Pod Identity role only.
    store = SecretsStoreCsi(stack, "SecretsStore", eks_cluster=eks, key_alias="alias/team/serving-secrets")
    key_name = "kvtiers/kvtiers-dev/qwen2-7b/api-key"
    access = EndpointSecretAccess(
        stack,
        "QwenSecrets",
        cluster=eks.cluster,
        namespace=curvine.serving_namespace,
        key=store.key,
        api_key_secret_name=key_name,
        service_accounts=["qwen2-7b-router", "qwen2-7b-engine"],
    )
    endpoint = ServingEndpoint(
        stack,
        "Qwen",
        eks_cluster=eks,
        name="qwen2-7b",
        engine=Engine(
            model="Qwen/Qwen2-7B-Instruct",
            weights=HuggingFaceWeights(revision=QWEN2_7B_REVISION),
            instance_group="g6e-serving",
            replicas=2,
        ),
        router=Router(routing="prefixaware"),
        l2=curvine,
        secrets=EndpointSecrets(region=REGION, api_key_secret=key_name),
        after=[access],
    )
    return stack, endpoint


@pytest.fixture(scope="module")
def library(chart_dir):
    stack, endpoint = library_stack(chart_dir)
    return assertions.Template.from_stack(stack).to_json(), endpoint


# ------------------------------------------------------------------------------------------------- helpers


def node_kind(reference: object) -> str:
    text = json.dumps(reference)
    if "ClusterSecurityGroupId" in text:
        return "system"
    if "NetworkSecurityGroup" in text:
        return "hyperpod"
    raise AssertionError(f"unknown security group {text}")


def node_rules(templates: list[dict]) -> set[tuple]:
    """Every ingress rule as (to, from, protocol, first port, last port)."""
    return {
        (
            node_kind(r["Properties"]["GroupId"]),
            node_kind(r["Properties"]["SourceSecurityGroupId"]),
            str(r["Properties"]["IpProtocol"]),
            r["Properties"].get("FromPort"),
            r["Properties"].get("ToPort"),
        )
        for t in templates
        for r in t["Resources"].values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress"
    }


def describe(template: dict, logical_id: str) -> str:
    """A resource as the same choice names it in any template: its type, plus the add-on name or manifest role."""
    resource = template["Resources"][logical_id]
    kind = resource["Type"]
    if kind == "AWS::EKS::Addon":
        return f"addon {resource['Properties']['AddonName']}"
    if kind == "Custom::AWSCDK-EKS-KubernetesResource":
        return next((f"manifest {m}" for m in MANIFESTS if m in logical_id), "manifest other")
    return kind


def depends_on(template: dict, logical_id: str) -> set[str]:
    return {describe(template, d) for d in template["Resources"][logical_id].get("DependsOn", [])}


def the_one(template: dict, kind: str, containing: str = "") -> str:
    found = [k for k, r in template["Resources"].items() if r["Type"] == kind and containing in k]
    assert len(found) == 1, f"{kind} {containing}: {found}"
    return found[0]


# ------------------------------------------------------------------------------------------------- node traffic


def test_the_node_traffic_equals_the_apps(library, app_result):
    template, _ = library
    app_templates = [app_result.template_json(s) for s in app_result.graph.stacks]
    assert node_rules([template]) == node_rules(app_templates)
    assert {
        ("system", "hyperpod", "udp", 53, 53),
        ("system", "hyperpod", "tcp", 53, 53),
        ("hyperpod", "system", "tcp", 8995, 8995),
        ("hyperpod", "system", "tcp", 8000, 8000),
    } <= node_rules([template])


# ------------------------------------------------------------------------------------------------- ordering


def test_the_hyperpod_cluster_waits_for_what_the_apps_waits_for(library, app_result):
    template, _ = library
    platform = app_result.template_json(app_result.graph.platform)
    mine = depends_on(template, the_one(template, "AWS::SageMaker::Cluster"))
    apps = depends_on(platform, the_one(platform, "AWS::SageMaker::Cluster"))
    eks_side = {d for d in apps if d.startswith("addon") or "HelmChart" in d}
    assert eks_side == {
        "addon vpc-cni",
        "addon kube-proxy",
        "addon eks-pod-identity-agent",
        "Custom::AWSCDK-EKS-HelmChart",
    }
    assert eks_side <= mine


def test_the_curvine_order_equals_the_apps(library, app_result):
    template, _ = library
    workloads = app_result.template_json(app_result.graph.workloads)
    platform = app_result.template_json(app_result.graph.platform)
    for name in CURVINE_MANIFESTS:
        mine = depends_on(template, the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", name))
        apps = depends_on(workloads, the_one(workloads, "Custom::AWSCDK-EKS-KubernetesResource", name))
        relevant = {f"manifest {m}" for m in CURVINE_MANIFESTS} | {"addon aws-ebs-csi-driver"}
        assert {d for d in apps if d in relevant} <= mine, name
    # The app's masters wait for the EBS CSI add-on (in another stack: a stack dependency), and the add-on for the
    # HyperPod cluster its node pods run on.
    assert "AWS::SageMaker::Cluster" in depends_on(platform, the_one(platform, "AWS::EKS::Addon", "AwsEbsCsiDriver"))
    assert "AWS::SageMaker::Cluster" in depends_on(template, the_one(template, "AWS::EKS::Addon", "AwsEbsCsiDriver"))
    masters = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "CurvineMasters")
    assert "addon aws-ebs-csi-driver" in depends_on(template, masters)


def test_the_journal_volumes_have_one_size_source(library, app_result):
    template, _ = library
    platform = app_result.template_json(app_result.graph.platform)

    def sizes(t: dict) -> list[int]:
        return sorted(r["Properties"]["Size"] for r in t["Resources"].values() if r["Type"] == "AWS::EC2::Volume")

    assert sizes(template) == sizes(platform) == [20, 50]


def test_without_the_dependency_chart_the_hyperpod_cluster_warns(chart_dir):
    stack, _ = library_stack(chart_dir, dependencies=False)
    warnings = assertions.Annotations.from_stack(stack).find_warning("*", assertions.Match.string_like_regexp(".*"))
    assert any("dependency chart" in str(w.entry.data) for w in warnings), [w.entry.data for w in warnings]


# ------------------------------------------------------------------------------------------------- serving


def test_the_serving_objects_equal_the_apps(library, app_result):
    _, endpoint = library
    apps = app_result.graph.workloads.chart_objects["EndpointQwen27b"]
    assert endpoint.objects == apps


def test_the_endpoint_waits_for_the_l2_claim_in_a_namespace_that_exists(library, app_result):
    template, _ = library
    endpoint = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "Qwen")
    assert "manifest CurvineStorage" in depends_on(template, endpoint)
    storage = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "CurvineStorage")
    assert "manifest ServingNamespace" in depends_on(template, storage)
    # The namespace the construct creates is the app's, Pod Security labels included.
    manifest = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "ServingNamespace")
    (namespace,) = json.loads(template["Resources"][manifest]["Properties"]["Manifest"])
    labels = namespace["metadata"]["labels"]
    for prune in [k for k in labels if k.startswith("aws.cdk.eks/prune-")]:  # the manifest's own, added by CDK
        del labels[prune]
    assert [namespace] == app_result.graph.workloads.chart_objects["ServingNamespace"]


def test_a_kvaware_endpoint_opens_its_lmcache_ports_for_its_tensor_parallel_size(chart_dir):
    """kvaware: the router's LMCache controller asks each engine's workers (one port per rank) and the engines
    report to the controller; two endpoints share the rules, the range widened to the larger TP."""
    stack, _ = library_stack(chart_dir)
    eks = next(c for c in stack.node.children if isinstance(c, EksCluster))
    for name, tp in (("kv-small", 1), ("kv-large", 2)):
        ServingEndpoint(
            stack,
            name,
            eks_cluster=eks,
            name=name,
            engine=Engine(
                model="Qwen/Qwen2-7B-Instruct",
                weights=HuggingFaceWeights(),
                instance_group="g6e-serving",
                tensor_parallel_size=tp,
                replicas=1,
            ),
            router=Router(routing="kvaware"),
        )
    rules = node_rules([assertions.Template.from_stack(stack).to_json()])
    assert {("hyperpod", "system", "tcp", 8001, 8002), ("system", "hyperpod", "tcp", 9000, 9001)} <= rules
    assert ("hyperpod", "system", "tcp", 8001, 8001) not in rules


# ------------------------------------------------------------------------------------------------- HyperPod groups


def engine_tolerations(endpoint: ServingEndpoint) -> list[dict]:
    (engines,) = [o for o in endpoint.objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("engine")]
    return engines["spec"]["template"]["spec"]["tolerations"]


def test_the_engines_tolerate_the_groups_custom_taints_as_curvine_does(chart_dir):
    _, endpoint = library_stack(chart_dir, taints=(Taint(key="team", value="ml"),))
    assert {"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"} in engine_tolerations(endpoint)


def test_the_dependency_chart_that_does_not_tolerate_a_groups_taint_is_a_warning(chart_dir):
    stack, _ = library_stack(chart_dir, taints=(Taint(key="team"),))
    warnings = assertions.Annotations.from_stack(stack).find_warning("*", assertions.Match.string_like_regexp(".*"))
    assert any("'team'" in str(w.entry.data) and "tolerat" in str(w.entry.data) for w in warnings), [
        w.entry.data for w in warnings
    ]


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ({"instance_group": "gpu-typo"}, r"instance_group 'gpu-typo' is not a HyperPod instance group"),
        ({"tensor_parallel_size": 8}, r"tensor_parallel_size 8 is larger than the 4 GPU\(s\) of ml.g6e.12xlarge"),
        ({"l1_gib": 300}, r"does not fit the 384 GiB of ml.g6e.12xlarge"),
    ],
    ids=["instance-group", "gpus", "memory"],
)
def test_an_engine_its_hyperpod_group_cannot_run_is_refused(chart_dir, engine, message):
    stack, _ = library_stack(chart_dir)
    hyperpod = next(c for c in stack.node.children if isinstance(c, HyperPodCluster))
    eks = next(c for c in stack.node.children if isinstance(c, EksCluster))
    with pytest.raises(ValueError, match=message):
        ServingEndpoint(
            stack,
            "Bad",
            eks_cluster=eks,
            hyperpod=hyperpod,
            name="bad",
            engine=Engine(
                model="Qwen/Qwen2-7B-Instruct",
                weights=HuggingFaceWeights(),
                **{"instance_group": "g6e-serving", "replicas": 1, **engine},
            ),
            router=Router(routing="prefixaware"),
        )


def test_an_endpoint_given_no_hyperpod_cluster_warns_that_nothing_about_its_group_is_checked(chart_dir):
    stack, _ = library_stack(chart_dir)
    eks = next(c for c in stack.node.children if isinstance(c, EksCluster))
    ServingEndpoint(
        stack,
        "Unplaced",
        eks_cluster=eks,
        name="unplaced",
        engine=Engine(model="Qwen/Qwen2-7B-Instruct", weights=HuggingFaceWeights(), instance_group="anywhere"),
        router=Router(routing="prefixaware"),
    )
    warnings = assertions.Annotations.from_stack(stack).find_warning("*", assertions.Match.string_like_regexp(".*"))
    assert [w.entry.data for w in warnings if "serving-without-hyperpod" in str(w.entry.data)]
