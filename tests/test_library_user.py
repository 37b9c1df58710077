"""The constructs as a new user builds them: one bare ``cdk.App`` and ``cdk.Stack``, no environment file, only the
choices a user makes (the VPC's AZ, one HyperPod group, one Curvine master, one endpoint). What the synthesized
template says about node traffic, ordering and serving must equal what the app produces for the same choices
(``config/dev.yaml``): a rule a neighbour relies on that only the app adds is a platform that synthesizes and does
not work.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import aws_cdk as cdk
import cdk8s
import pytest
from aws_cdk import assertions
from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtiers.change import Action, deploy
from kvtiers.constructs import EksCluster, HyperPodCluster, HyperPodDependencies, HyperPodNetwork, InstanceGroup
from kvtiers.constructs.curvine import CurvineL2
from kvtiers.constructs.eks_cluster import NATIVE_OIDC_PROVIDER_FLAG, as_cluster_interface
from kvtiers.constructs.endpoint_secrets import SecretsStoreCsi
from kvtiers.constructs.hyperpod_cluster import Taint
from kvtiers.constructs.hyperpod_inference import InferenceOperator
from kvtiers.constructs.network import ExistingVpcAttributes, NewVpcOptions
from kvtiers.constructs.operator_serving import OperatorServingEndpoint
from kvtiers.constructs.serving import ServingEndpoint
from kvtiers.k8s_charts.namespaces import NamespaceChart
from kvtiers.k8s_charts.secrets import EndpointSecrets
from kvtiers.k8s_charts.serving import Engine, Router
from kvtiers.k8s_charts.vllm import HuggingFaceWeights, Routing, S3Weights
from tests.fakes.hyperpod_chart import write_stand_in_checkout
from tests.synth import cdk_context, synth

ACCOUNT, REGION = "111111111111", "us-east-1"
CURVINE_MANIFESTS = ("CurvineMasters", "CurvineWorkers", "CurvineCsi", "CurvineStorage")
MANIFESTS = (*CURVINE_MANIFESTS, "ServingNamespace")

QWEN2_7B_REVISION = "f2826a00ceef68f0f2b946d945ecc0477ce4450c"
"""The commit config/dev.yaml pins (part of the L2 namespace)."""
DEV_WEIGHTS = HuggingFaceWeights(revision=QWEN2_7B_REVISION)


@pytest.fixture(scope="module")
def chart_dir(tmp_path_factory) -> Path:
    return write_stand_in_checkout(tmp_path_factory.mktemp("vendor") / "sagemaker-hyperpod-cli")


@pytest.fixture(scope="module")
def app_result(chart_dir, tmp_path_factory):
    return synth("config/dev.yaml", tmp_path_factory.mktemp("app") / "cdk.out", chart_dir=chart_dir)


def library_platform(
    chart_dir: Path,
    *,
    dependencies: bool = True,
    taints: tuple[Taint, ...] = (),
    own_namespace: bool = False,
    masters: int = 1,
) -> dict[str, Construct]:
    """What a platform team writes from the README's construct section, up to the L2: the dev environment's choices
    only."""
    app = cdk.App(context=cdk_context())
    stack = cdk.Stack(app, "team-platform", env=cdk.Environment(account=ACCOUNT, region=REGION))
    network = HyperPodNetwork(stack, "Network", vpc=NewVpcOptions(hyperpod_az_id="use1-az2"))
    eks = EksCluster(
        stack,
        "Eks",
        vpc=network.vpc,
        subnets=network.eks_subnets,
        security_group=network.security_group,
        service_ipv4_cidr="172.20.0.0/16",
    )
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
    namespace = (
        eks_v2.KubernetesManifest(
            stack,
            "TeamNamespace",
            cluster=as_cluster_interface(eks.cluster),
            manifest=NamespaceChart(cdk8s.App(), "team-namespace", names=("serving",)).to_json(),
            overwrite=True,
        )
        if own_namespace
        else None
    )
    curvine = CurvineL2(
        stack,
        "Curvine",
        eks_cluster=eks,
        hyperpod=hyperpod,
        network=network,
        masters=masters,
        serving_namespace_manifest=namespace,
    )
    return {"stack": stack, "eks": eks, "network": network, "curvine": curvine}


def library_stack(
    chart_dir: Path,
    *,
    dependencies: bool = True,
    taints: tuple[Taint, ...] = (),
    own_namespace: bool = False,
    weights: HuggingFaceWeights | S3Weights = DEV_WEIGHTS,
    routing: Routing = "prefixaware",
    kv_aware_threshold: int | None = None,
) -> tuple[cdk.Stack, ServingEndpoint]:
    """:func:`library_platform` and the dev environment's endpoint."""
    platform = library_platform(chart_dir, dependencies=dependencies, taints=taints, own_namespace=own_namespace)
    stack, eks, network, curvine = (platform[k] for k in ("stack", "eks", "network", "curvine"))
    assert isinstance(stack, cdk.Stack) and isinstance(eks, EksCluster) and isinstance(curvine, CurvineL2)
    assert isinstance(network, HyperPodNetwork)
    # The endpoint's API key from Secrets Manager (the endpoint creates it, and the role that reads it).
    store = SecretsStoreCsi(stack, "SecretsStore", eks_cluster=eks, key_alias="alias/team/serving-secrets")
    endpoint = ServingEndpoint(
        stack,
        "Qwen",
        eks_cluster=eks,
        name="qwen2-7b",
        engine=Engine(
            model="Qwen/Qwen2-7B-Instruct",
            weights=weights,
            instance_group="g6e-serving",
            replicas=2,
        ),
        router=Router(routing=routing, kv_aware_threshold=kv_aware_threshold),
        l2=curvine,
        secrets=EndpointSecrets(region=REGION, api_key_secret="kvtiers/kvtiers-dev/qwen2-7b/api-key"),
        secrets_store=store,
        network=network,
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


def pods_manifest(template: dict) -> str:
    """The endpoint's own manifest (its pods), beside its NetworkPolicies' one."""
    (found,) = [
        k
        for k, r in template["Resources"].items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and k.startswith("Qwen") and "NetworkPolicies" not in k
    ]
    return found


def network_of(stack: cdk.Stack) -> HyperPodNetwork:
    return next(c for c in stack.node.children if isinstance(c, HyperPodNetwork))


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
    endpoint = pods_manifest(template)
    assert "manifest CurvineStorage" in depends_on(template, endpoint)
    storage = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "CurvineStorage")
    assert "manifest ServingNamespace" in depends_on(template, storage)
    # The namespace the construct creates is the app's, Pod Security labels included.
    manifest = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "ServingNamespace")
    (namespace,) = json.loads(template["Resources"][manifest]["Properties"]["Manifest"])
    labels = namespace["metadata"]["labels"]
    for prune in [k for k in labels if k.startswith("aws.cdk.eks/prune-")]:  # the manifest's own, added by CDK
        del labels[prune]
    # The app's namespace is the L2's.
    assert [namespace] == app_result.graph.workloads.chart_objects["ServingNamespace"]


def test_the_endpoints_network_policies_equal_the_apps_and_come_before_its_pods(library, app_result):
    template, endpoint = library
    assert endpoint.policies_objects == app_result.graph.workloads.chart_objects["NetworkPoliciesQwen27b"]
    assert {o["kind"] for o in endpoint.policies_objects} == {"NetworkPolicy"}
    manifest = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "QwenNetworkPolicies")
    pods = pods_manifest(template)
    assert manifest in template["Resources"][pods]["DependsOn"]
    assert "manifest CurvineStorage" in depends_on(template, manifest)


S3_WEIGHTS = S3Weights(bucket="team-models", prefix="Qwen/Qwen2-7B-Instruct")


@pytest.fixture(scope="module")
def s3_app(chart_dir, tmp_path_factory):
    """The app for the same choices as :func:`s3_library`: config/dev.yaml with the weights in S3 and kvaware."""
    text = (Path(__file__).resolve().parent.parent / "config" / "dev.yaml").read_text()
    source = text[text.index("      source:\n") : text.index("      instance_group: g6e-serving")]
    text = text.replace(
        source,
        f"      source:\n        type: s3\n        bucket: {S3_WEIGHTS.bucket}\n        prefix: {S3_WEIGHTS.prefix}\n",
    ).replace("routing: prefixaware", "routing: kvaware\n      api: completions")
    directory = tmp_path_factory.mktemp("s3-app")
    (directory / "dev-s3.yaml").write_text(text)
    return synth(directory / "dev-s3.yaml", directory / "cdk.out", chart_dir=chart_dir)


@pytest.fixture(scope="module")
def s3_library(chart_dir):
    # dev.yaml's expected_prompt_tokens 2500: the app routes by load past 1250 uncached tokens.
    stack, endpoint = library_stack(chart_dir, weights=S3_WEIGHTS, routing="kvaware", kv_aware_threshold=1250)
    return assertions.Template.from_stack(stack).to_json(), endpoint


def anonymous(value: object) -> object:
    """``value`` with every reference (same stack or imported) as ``<ref>``: the two stacks name them differently."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in ("Ref", "Fn::GetAtt", "Fn::ImportValue", "Fn::GetStackOutput"):
            return "<ref>"
        return {k: anonymous(v) for k, v in value.items()}
    if isinstance(value, list):
        return [anonymous(v) for v in value]
    return value


def pod_identities(template: dict) -> dict[str, object]:
    """Each Pod Identity association of the serving namespace: its service account -> what its role may do and who
    may assume it; and how many roles they use."""
    resources = template["Resources"]
    associations = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EKS::PodIdentityAssociation" and r["Properties"]["Namespace"] == "serving"
    ]
    roles = {a["RoleArn"]["Fn::GetAtt"][0] for a in associations}

    def grants(role: str) -> list[str]:
        statements = [
            statement
            for r in resources.values()
            if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"]
            for statement in r["Properties"]["PolicyDocument"]["Statement"]
        ]
        trust = resources[role]["Properties"]["AssumeRolePolicyDocument"]
        return sorted(json.dumps(anonymous(s), sort_keys=True) for s in [*statements, trust])

    secrets = sorted(r["Properties"]["Name"] for r in resources.values() if r["Type"] == "AWS::SecretsManager::Secret")
    return {
        "roles": len(roles),
        "accounts": {a["ServiceAccount"]: grants(a["RoleArn"]["Fn::GetAtt"][0]) for a in associations},
        "secrets": secrets,
    }


def test_s3_weights_and_an_api_key_get_the_apps_pod_identity_and_network_policies(s3_library, s3_app):
    """The engines read the weights, the kvaware router only the tokenizer from the same prefix, both their API key:
    a role each (a service account has one Pod Identity association; a router holds no weights role), as the app
    wires it."""
    template, endpoint = s3_library
    apps = s3_app.template_json(s3_app.graph.workloads)
    assert pod_identities(template) == pod_identities(apps)
    assert pod_identities(template)["roles"] == 2
    assert set(pod_identities(template)["accounts"]) == {"qwen2-7b-engine", "qwen2-7b-router"}
    assert endpoint.policies_objects == s3_app.graph.workloads.chart_objects["NetworkPoliciesQwen27b"]
    # The role's ARN, a token of each app, annotates the engines' service account in both.
    assert without_tokens(endpoint.objects) == without_tokens(s3_app.graph.workloads.chart_objects["EndpointQwen27b"])
    assert "kvtiers.io/model-role-arn" in json.dumps(endpoint.objects)


def without_tokens(objects: list[dict]) -> str:
    return re.sub(r"\$\{Token\[TOKEN\.\d+\]\}", "<token>", json.dumps(objects, sort_keys=True))


def test_hub_weights_with_an_api_key_get_the_apps_secret_role(library, app_result):
    """Without S3 weights the secrets get a role of their own for the engines, and the router one of its own."""
    template, endpoint = library
    ours = pod_identities(template)
    assert ours == pod_identities(app_result.template_json(app_result.graph.workloads))
    assert ours["roles"] == 2 and set(ours["accounts"]) == {"qwen2-7b-engine", "qwen2-7b-router"}
    assert endpoint.model_access is None and endpoint.secret_access is not None


def test_an_imported_vpc_without_subnet_cidrs_admits_the_api_proxy_from_the_whole_vpc(chart_dir):
    stack, _ = library_stack(chart_dir)
    eks = next(c for c in stack.node.children if isinstance(c, EksCluster))
    imported = HyperPodNetwork(
        stack,
        "ImportedNetwork",
        vpc=ExistingVpcAttributes(
            vpc_id="vpc-1",
            cidr="10.50.0.0/16",
            private_subnet_ids=["subnet-1", "subnet-2"],
            availability_zones=["us-east-1a", "us-east-1b"],
            hyperpod_subnet_id="subnet-3",
            hyperpod_availability_zone="us-east-1a",
        ),
    )
    endpoint = ServingEndpoint(
        stack,
        "Imported",
        eks_cluster=eks,
        name="imported",
        engine=Engine(model="Qwen/Qwen2-7B-Instruct", weights=HuggingFaceWeights(), instance_group="g6e-serving"),
        router=Router(routing="prefixaware"),
        network=imported,
    )
    router = next(o for o in endpoint.policies_objects if o["metadata"]["name"] == "imported-router")
    proxy = router["spec"]["ingress"][1]["from"]
    assert proxy == [{"ipBlock": {"cidr": "10.50.0.0/16"}}]
    assert {"ipBlock": {"cidr": "172.20.0.1/32"}} in router["spec"]["egress"][1]["to"]


def test_the_documented_s3_example_gets_the_apps_pod_identity_and_network_policies(chart_dir, s3_app):
    text = (Path(__file__).resolve().parent.parent / "docs" / "constructs.md").read_text()
    block = text.split("<!-- s3-example -->\n```python\n", 1)[1].split("```\n<!-- /s3-example -->", 1)[0]
    namespace: dict[str, object] = {"cdk": cdk, **library_platform(chart_dir)}
    exec(compile(block, "docs/constructs.md", "exec"), namespace)  # noqa: S102 (the documented code is under test)
    stack, endpoint = namespace["stack"], namespace["endpoint"]
    assert isinstance(stack, cdk.Stack) and isinstance(endpoint, ServingEndpoint)
    template = assertions.Template.from_stack(stack).to_json()
    apps = pod_identities(s3_app.template_json(s3_app.graph.workloads))
    ours = pod_identities(template)
    assert (ours["roles"], ours["accounts"]) == (apps["roles"], apps["accounts"])
    assert endpoint.policies_objects == s3_app.graph.workloads.chart_objects["NetworkPoliciesQwen27b"]


def test_the_endpoint_comes_after_its_access_its_secret_and_its_policies(s3_library):
    template, _ = s3_library
    resources = template["Resources"]
    pods = pods_manifest(template)
    after = {resources[d]["Type"] for d in resources[pods]["DependsOn"]}
    assert {
        "AWS::IAM::Role",
        "AWS::IAM::Policy",
        "AWS::EKS::PodIdentityAssociation",
        "AWS::SecretsManager::Secret",
        "AWS::EKS::Addon",
    } <= after


def test_a_role_of_ones_own_reads_the_weights_bound_to_the_engines_and_the_kvaware_router_gets_its_own(chart_dir):
    stack, _ = library_stack(chart_dir)
    eks = next(c for c in stack.node.children if isinstance(c, EksCluster))
    role = iam.Role(stack, "TeamModelRole", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
    endpoint = ServingEndpoint(
        stack,
        "Own",
        eks_cluster=eks,
        name="own",
        engine=Engine(model="Qwen/Qwen2-7B-Instruct", weights=S3_WEIGHTS, instance_group="g6e-serving"),
        router=Router(routing="kvaware"),
        model_role=role,
        network=network_of(stack),
    )
    assert endpoint.model_access is None and endpoint.role is role and endpoint.router_access is not None
    template = assertions.Template.from_stack(stack)
    for account, account_role in (("own-engine", role), ("own-router", endpoint.router_access.role)):
        template.has_resource_properties(
            "AWS::EKS::PodIdentityAssociation",
            {
                "ServiceAccount": account,
                "RoleArn": {"Fn::GetAtt": [stack.get_logical_id(account_role.node.default_child), "Arn"]},
            },
        )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"secrets": EndpointSecrets(region=REGION, api_key_secret="team/key")},
            r"ServingEndpoint 'x': secrets need secrets_store=SecretsStoreCsi",
        ),
        ({"network": None}, r"ServingEndpoint 'x': network is required .* or network_policies=False"),
        ({"model_role_arn": "arn:aws:iam::111111111111:role/r"}, r"engine.model_role_arn is set by the endpoint"),
    ],
    ids=["secrets-without-store", "no-network", "model-role-arn"],
)
def test_an_endpoint_missing_what_its_pods_need_is_refused(chart_dir, arguments, message):
    stack, _ = library_stack(chart_dir)
    eks = next(c for c in stack.node.children if isinstance(c, EksCluster))
    engine = {"model_role_arn": arguments.pop("model_role_arn")} if "model_role_arn" in arguments else {}
    with pytest.raises(ValueError, match=message):
        ServingEndpoint(
            stack,
            "X",
            eks_cluster=eks,
            name="x",
            engine=Engine(model="Qwen/Qwen2-7B-Instruct", weights=S3_WEIGHTS, instance_group="g6e-serving", **engine),
            router=Router(routing="prefixaware"),
            **{"network": network_of(stack), **arguments},
        )


def test_network_policies_are_left_out_only_when_asked(chart_dir):
    stack, _ = library_stack(chart_dir)
    eks = next(c for c in stack.node.children if isinstance(c, EksCluster))
    endpoint = ServingEndpoint(
        stack,
        "Open",
        eks_cluster=eks,
        name="open",
        engine=Engine(model="Qwen/Qwen2-7B-Instruct", weights=HuggingFaceWeights(), instance_group="g6e-serving"),
        router=Router(routing="prefixaware"),
        network_policies=False,
    )
    assert endpoint.policies is None


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
            network=network_of(stack),
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


def test_an_engine_on_a_group_the_cluster_does_not_have_is_refused(chart_dir):
    stack, _ = library_stack(chart_dir)
    with pytest.raises(ValueError, match=r"instance_group 'gpu-typo' is not a HyperPod instance group"):
        another_endpoint(stack, "Bad", instance_group="gpu-typo")


def another_endpoint(stack: cdk.Stack, id: str, **engine) -> ServingEndpoint:
    """A second endpoint in a stack of :func:`library_stack`, on its cluster, with ``engine``'s fields."""
    hyperpod = next(c for c in stack.node.children if isinstance(c, HyperPodCluster))
    eks = next(c for c in stack.node.children if isinstance(c, EksCluster))
    return ServingEndpoint(
        stack,
        id,
        eks_cluster=eks,
        hyperpod=hyperpod,
        name=id.lower(),
        engine=Engine(
            model="Qwen/Qwen2-7B-Instruct",
            weights=HuggingFaceWeights(),
            **{"instance_group": "g6e-serving", "replicas": 1, **engine},
        ),
        router=Router(routing="prefixaware"),
        network=network_of(stack),
    )


def synth_errors(stack: cdk.Stack) -> str:
    """What synth refuses (the constructs' validations), as the CDK reports it."""
    with pytest.raises(RuntimeError, match="Validation failed") as info:
        cdk.Stage.of(stack).synth()
    return str(info.value)


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        # dev's two engines (8 CPUs each) may share a node with this one: 16 + 40 + Curvine 9.8 + agents > 47.81.
        ({"cpu": 40}, r"'g6e-serving' \(2 x ml.g6e.12xlarge, threads_per_core 2\): cpu: the fullest node asks"),
        (
            {"tensor_parallel_size": 8},
            r"'g6e-serving' \(2 x ml.g6e.12xlarge\): gpus: .*big-engine asks 8 GPUs a pod, a node has 4",
        ),
        ({"l1_gib": 300}, r"'g6e-serving' .*: memory: the fullest node asks .* but offers 272.9 GiB"),
    ],
    ids=["cpu", "gpus", "memory"],
)
def test_an_engine_that_does_not_fit_its_group_beside_the_rest_is_refused_at_synth(chart_dir, engine, message):
    stack, _ = library_stack(chart_dir)
    another_endpoint(stack, "Big", **engine)
    errors = synth_errors(stack)
    assert re.search(message, errors), errors
    assert "[team-platform/HyperPod] HyperPodCluster: instance group" in errors, errors


def test_an_engine_all_reducing_over_four_pcie_gpus_is_advised_pipeline_stages(chart_dir):
    stack, _ = library_stack(chart_dir)
    # Read before synth: beside dev's two spread engines a 4-GPU pod does not fit these two nodes (the placement
    # check refuses the stack; tests/test_placement.py, the spread).
    wide = another_endpoint(stack, "Wide", tensor_parallel_size=4)
    (advice,) = [str(e.data) for e in wide.node.metadata if "tensor-parallel-over-pcie" in str(e.data)]
    assert "ServingEndpoint 'wide'" in advice and "tensor_parallel_size 2 x pipeline_parallel_size 2" in advice


def test_gpu_pods_that_fit_only_in_some_orders_are_a_synth_warning(chart_dir):
    from kvtiers.placement import Workload, pod

    stack = library_platform(chart_dir)["stack"]
    assert isinstance(stack, cdk.Stack)
    hyperpod = next(c for c in stack.node.children if isinstance(c, HyperPodCluster))
    for name, gpus in (("a", 4), ("b", 2), ("c", 2)):
        hyperpod.placement.add(
            Workload(name=name, groups=("g6e-serving",), spread="gpu_bound", pod=pod(gpus=gpus), spread_evenly=True)
        )
    warnings = assertions.Annotations.from_stack(stack).find_warning("*", assertions.Match.string_like_regexp(".*"))
    (warning,) = [str(w.entry.data) for w in warnings if "gpu-placement-order" in str(w.entry.data)]
    assert "not in every order the scheduler may take them" in warning


def test_more_curvine_masters_than_worker_nodes_is_refused_by_the_construct(chart_dir):
    with pytest.raises(ValueError, match=r"CurvineL2: masters 3 need 3 nodes in worker_groups .* they have 2"):
        library_platform(chart_dir, masters=3)


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
        network=network_of(stack),
    )
    warnings = assertions.Annotations.from_stack(stack).find_warning("*", assertions.Match.string_like_regexp(".*"))
    assert [w.entry.data for w in warnings if "serving-without-hyperpod" in str(w.entry.data)]


# ------------------------------------------------------------------------------------------------- the namespace


def test_moving_to_a_namespace_manifest_of_ones_own_keeps_the_namespace_and_the_l2(library, chart_dir):
    """Day two: the L2 first creates ``serving`` itself, then the team passes its own namespace manifest. The
    L2's ServingNamespace leaves the template; it is retained, so CloudFormation sends its handler no Delete (whose
    ``kubectl delete`` of the Namespace would take the claim, the janitor and every endpoint with it)."""
    before, _ = library
    stack, _ = library_stack(chart_dir, own_namespace=True)
    after = assertions.Template.from_stack(stack).to_json()
    old_id = the_one(before, "Custom::AWSCDK-EKS-KubernetesResource", "ServingNamespace")
    assert before["Resources"][old_id]["DeletionPolicy"] == "Retain"
    outcome = deploy({"s": before}, {"s": after})
    removal = outcome.change(old_id)
    assert removal.action is Action.DELETE and removal.deleted == ()
    assert outcome.lost == () and outcome.may_remain == ()
    assert {r.name for r in outcome.cluster.objects if r.kind == "Namespace"} >= {"serving"}
    assert any(r.namespace == "serving" and r.kind == "PersistentVolumeClaim" for r in outcome.cluster.objects)


def test_a_second_manifest_of_the_l2s_serving_namespace_is_refused(chart_dir):
    stack, _ = library_stack(chart_dir)
    eks = next(c for c in stack.node.children if isinstance(c, EksCluster))
    eks_v2.KubernetesManifest(
        stack,
        "AlsoServing",
        cluster=as_cluster_interface(eks.cluster),
        manifest=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "serving"}}],
    )
    with pytest.raises(RuntimeError, match=r"team-platform/AlsoServing also declares Namespace 'serving'"):
        assertions.Template.from_stack(stack)


# ------------------------------------------------------------------------------------------------- operator path

PROD_OPERATOR_ENDPOINT = "qwen2-7b-chat"


def operator_platform(
    chart_dir: Path, *, operator_endpoints: bool = True, taints: tuple = (), hash_seed: str = "42"
) -> dict[str, object]:
    """The platform under a team's operator endpoint, as config/prod.yaml builds it: an ml.g6e.2xlarge group for the
    endpoint and an ml.g6e.12xlarge group for the Curvine workers and master (a 2xlarge holds no worker: its NVMe is
    smaller than a worker's cache, its CPUs fewer than a worker, a master and an engine ask), tiered storage off."""
    app = cdk.App(context=cdk_context())
    stack = cdk.Stack(app, "team-operator", env=cdk.Environment(account=ACCOUNT, region=REGION))
    # prod's addresses: the operator pods admit the subnets its load balancer can be in.
    network = HyperPodNetwork(
        stack,
        "Network",
        vpc=NewVpcOptions(hyperpod_az_id="use1-az4", cidr="10.200.0.0/16", hyperpod_subnet_cidr="10.200.64.0/18"),
    )
    eks = EksCluster(
        stack,
        "Eks",
        vpc=network.vpc,
        subnets=network.eks_subnets,
        security_group=network.security_group,
        service_ipv4_cidr="172.20.0.0/16",
    )
    hyperpod = HyperPodCluster(
        stack,
        "HyperPod",
        eks_cluster=eks,
        dependencies=HyperPodDependencies(stack, "HyperPodDependencies", cluster=eks, chart_dir=chart_dir),
        subnet=network.hyperpod_subnet,
        security_group=network.security_group,
        instance_groups=[
            InstanceGroup(
                name=name,
                instance_type=instance_type,
                count=count,
                taints=taints,
                **({"deep_health_checks": ()} if taints else {}),
            )
            for name, instance_type, count in (("g6e-mid", "ml.g6e.12xlarge", 1), ("g6e-small", "ml.g6e.2xlarge", 2))
        ],
        tiered_storage_enabled=False,
    )
    curvine = CurvineL2(
        stack,
        "Curvine",
        eks_cluster=eks,
        hyperpod=hyperpod,
        network=network,
        worker_groups=["g6e-mid"],
        operator_endpoints=operator_endpoints,
        hash_seed=hash_seed,
    )
    return {"stack": stack, "eks": eks, "hyperpod": hyperpod, "curvine": curvine, "network": network}


def operator_stack(chart_dir: Path, *, hash_seed: str = "42") -> tuple[cdk.Stack, OperatorServingEndpoint]:
    """A team's operator endpoint, from the construct documentation only: config/prod.yaml's choices for
    ``qwen2-7b-chat`` (an ml.g6e.2xlarge group, S3 weights, the Curvine L2, seed 42)."""
    platform = operator_platform(chart_dir, hash_seed=hash_seed)
    stack, eks, hyperpod, curvine = (platform[k] for k in ("stack", "eks", "hyperpod", "curvine"))
    assert isinstance(stack, cdk.Stack) and isinstance(eks, EksCluster) and isinstance(hyperpod, HyperPodCluster)
    assert isinstance(curvine, CurvineL2)
    operator = InferenceOperator(
        stack,
        "Operator",
        cluster=eks,
        hyperpod_cluster_arn=hyperpod.cluster_arn,
        environment_name="team",
        model_buckets=["example-prod-models"],
    )
    endpoint = OperatorServingEndpoint(
        stack,
        "QwenChat",
        eks_cluster=eks,
        operator=operator,
        name=PROD_OPERATOR_ENDPOINT,
        engine=Engine(
            model="Qwen/Qwen2-7B-Instruct",
            weights=S3Weights(bucket="example-prod-models", prefix="Qwen/Qwen2-7B-Instruct"),
            instance_group="g6e-small",
            l1_gib=16,
            vllm_overhead_gib=12,
            shm_gib=4,
            cpu=2,
        ),
        routing="prefixaware",
        l2=curvine,
        network=next(c for c in stack.node.children if isinstance(c, HyperPodNetwork)),
    )
    return stack, endpoint


def another_operator_endpoint(stack: cdk.Stack, id: str, *, engine: Engine | None = None, **kwargs) -> None:
    """A second operator endpoint in a stack of :func:`operator_stack` or :func:`operator_platform` (its cluster and
    operator): Qwen2-7B from the Hub on ``g6e-small`` unless ``engine`` says otherwise."""
    children = stack.node.children
    OperatorServingEndpoint(
        stack,
        id,
        eks_cluster=next(c for c in children if isinstance(c, EksCluster)),
        operator=next(c for c in children if isinstance(c, InferenceOperator)),
        name=id.lower(),
        engine=engine
        or Engine(model="Qwen/Qwen2-7B-Instruct", weights=HuggingFaceWeights(), instance_group="g6e-small", l1_gib=8),
        routing="prefixaware",
        network=next(c for c in children if isinstance(c, HyperPodNetwork)),
        **kwargs,
    )


@pytest.fixture(scope="module")
def operator_library(chart_dir):
    stack, endpoint = operator_stack(chart_dir)
    return assertions.Template.from_stack(stack).to_json(), endpoint


def test_the_operator_endpoint_and_its_l2_policy_equal_the_apps(operator_library, prod_synth):
    """Memory, L1, the L2 directory and remote URL, the hash seed, the add-on version, the instance type and the
    fingerprinted names: computed by the construct from the engine, as the app computes them from its file."""
    _, endpoint = operator_library
    apps = prod_synth.graph.workloads.chart_objects
    assert endpoint.objects.keys() == {
        k for k in apps if k.startswith(("L2Policy", "OperatorEndpoint", "NetworkPolicies")) and "Qwen27bChat" in k
    }
    for name, objects in endpoint.objects.items():
        assert objects == apps[name], name
    assert endpoint.endpoint.memory_gib == 32 and endpoint.endpoint.l2_backend == "curvine"


def test_the_operator_endpoint_waits_for_kyverno_the_l2_and_its_policys_ready(operator_library):
    """Pods admitted before Kyverno serves the policy escape it (no L2 mount, no guard): the endpoint comes after
    the policy reports Ready, the policy after Kyverno and the L2 claim."""
    template, endpoint = operator_library
    policy = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "L2Policy")
    ready = the_one(template, "Custom::AWSCDK-EKS-KubernetesObjectValue", "L2PolicyReady")
    manifest = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "OperatorEndpoint")
    storage = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "CurvineStorage")
    kyverno = the_one(template, "Custom::AWSCDK-EKS-HelmChart", "Kyverno")
    resources = template["Resources"]
    assert {policy, ready} <= set(resources[manifest]["DependsOn"])
    assert policy in resources[ready]["DependsOn"]
    assert {kyverno, storage} <= set(resources[policy]["DependsOn"])
    assert resources[ready]["Properties"]["ObjectName"] == f"{endpoint.object_name}-curvine-l2"


def test_the_operator_endpoint_opens_its_invocation_port_to_the_system_nodes(operator_library, prod_synth):
    template, _ = operator_library
    platform = prod_synth.template_json(prod_synth.graph.platform)
    between_nodes = {k: r for k, r in platform["Resources"].items() if k.startswith("NodeTraffic")}
    rule = ("hyperpod", "system", "tcp", 8000, 8000)
    assert rule in node_rules([template])
    assert rule in node_rules([{"Resources": between_nodes}])


def test_an_immutable_change_renames_the_endpoints_logical_ids(chart_dir, operator_library):
    """A new seed changes the worker environment (immutable): new logical IDs, so CloudFormation creates the new
    endpoint and policy and deletes the old ones, never applies new names over the old resource."""
    template, _ = operator_library
    changed, _ = operator_stack(chart_dir, hash_seed="7")
    changed_template = assertions.Template.from_stack(changed).to_json()

    def operator_ids(t: dict) -> set[str]:
        return {k for k in t["Resources"] if "QwenChat" in k and ("L2Policy" in k or "OperatorEndpoint" in k)}

    before, after = operator_ids(template), operator_ids(changed_template)
    assert len(before) == len(after) == 3
    assert not before & after


def test_an_engine_field_the_operator_cannot_carry_is_refused(chart_dir):
    stack, _ = operator_stack(chart_dir)
    engine = Engine(
        model="Qwen/Qwen2-7B-Instruct",
        weights=HuggingFaceWeights(),
        instance_group="g6e-small",
        l1_gib=16,
        extra_args=("--enforce-eager",),
    )
    hyperpod = next(c for c in stack.node.children if isinstance(c, HyperPodCluster))
    with pytest.raises(ValueError, match=r"engine field\(s\) \['extra_args'\]"):
        another_operator_endpoint(stack, "Extra", engine=engine, hyperpod=hyperpod)


def test_an_operator_engine_its_group_cannot_run_is_refused_at_synth(chart_dir):
    stack, _ = operator_stack(chart_dir)
    engine = Engine(
        model="Qwen/Qwen2-7B-Instruct",
        weights=S3Weights(bucket="example-prod-models", prefix="Qwen/Qwen2-7B-Instruct"),
        instance_group="g6e-small",
        tensor_parallel_size=2,
        l1_gib=8,
    )
    hyperpod = next(c for c in stack.node.children if isinstance(c, HyperPodCluster))
    another_operator_endpoint(stack, "Wide", engine=engine, hyperpod=hyperpod)
    errors = synth_errors(stack)
    assert "'g6e-small' (2 x ml.g6e.2xlarge): gpus: " in errors and "asks 2 GPUs a pod, a node has 1" in errors, errors


def test_the_documented_operator_example_synthesizes_with_its_policy_wait(chart_dir):
    text = (Path(__file__).resolve().parent.parent / "docs" / "constructs.md").read_text()
    block = text.split("<!-- operator-example -->\n```python\n", 1)[1].split("```\n<!-- /operator-example -->", 1)[0]
    namespace: dict[str, object] = {"cdk": cdk, **operator_platform(chart_dir)}
    exec(compile(block, "docs/constructs.md", "exec"), namespace)  # noqa: S102 (the documented code is under test)
    stack = namespace["stack"]
    assert isinstance(stack, cdk.Stack)
    template = assertions.Template.from_stack(stack).to_json()
    ready = the_one(template, "Custom::AWSCDK-EKS-KubernetesObjectValue", "L2PolicyReady")
    manifest = the_one(template, "Custom::AWSCDK-EKS-KubernetesResource", "OperatorEndpoint")
    assert ready in template["Resources"][manifest]["DependsOn"]


@pytest.mark.parametrize(
    ("flag", "provider"),
    [(None, "AWS::IAM::OIDCProvider"), (False, "Custom::AWSCDKOpenIdConnectProvider")],
    ids=["unset-native", "app-keeps-false"],
)
def test_the_operators_oidc_provider_is_the_native_one_unless_the_app_chose(flag, provider):
    """An app without aws-cdk-lib's native-OIDC flag (no cdk.json) gets AWS::IAM::OIDCProvider, not the deprecated
    custom resource jsii warns about; an app that set the flag to false keeps its deployed provider."""
    context = {k: v for k, v in cdk_context().items() if k != NATIVE_OIDC_PROVIDER_FLAG}
    if flag is not None:
        context[NATIVE_OIDC_PROVIDER_FLAG] = flag
    stack = cdk.Stack(cdk.App(context=context), "oidc", env=cdk.Environment(account=ACCOUNT, region=REGION))
    network = HyperPodNetwork(stack, "Network", vpc=NewVpcOptions(hyperpod_az_id="use1-az2"))
    eks = EksCluster(
        stack,
        "Eks",
        vpc=network.vpc,
        subnets=network.eks_subnets,
        security_group=network.security_group,
        service_ipv4_cidr="172.20.0.0/16",
    )
    InferenceOperator(
        stack,
        "Operator",
        cluster=eks,
        hyperpod_cluster_arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/example",
        environment_name="team",
    )
    kinds = [r["Type"] for r in assertions.Template.from_stack(stack).to_json()["Resources"].values()]
    providers = [k for k in kinds if k in ("AWS::IAM::OIDCProvider", "Custom::AWSCDKOpenIdConnectProvider")]
    assert providers == [provider]


def test_an_operator_endpoint_in_a_baseline_namespace_of_the_l2_is_refused(chart_dir):
    platform = operator_platform(chart_dir, operator_endpoints=False)
    stack, eks, hyperpod, curvine = (platform[k] for k in ("stack", "eks", "hyperpod", "curvine"))
    assert isinstance(stack, cdk.Stack) and isinstance(eks, EksCluster) and isinstance(hyperpod, HyperPodCluster)
    assert isinstance(curvine, CurvineL2)
    operator = InferenceOperator(
        stack, "Operator", cluster=eks, hyperpod_cluster_arn=hyperpod.cluster_arn, environment_name="team"
    )
    with pytest.raises(ValueError, match=r"Pod Security 'baseline'.*operator_endpoints=True"):
        OperatorServingEndpoint(
            stack,
            "Qwen",
            eks_cluster=eks,
            operator=operator,
            name="qwen",
            engine=Engine(model="Qwen/Qwen2-7B-Instruct", weights=HuggingFaceWeights(), instance_group="g6e-small"),
            routing="prefixaware",
            l2=curvine,
            network=platform["network"],
        )


def test_an_operator_endpoint_on_a_tainted_group_is_refused(chart_dir):
    """The InferenceEndpointConfig has no tolerations field (CRDs of every reviewed add-on), so its pods could never
    be scheduled on a group whose taint repels them: refused where it is built, not left Pending on the cluster."""
    platform = operator_platform(
        chart_dir, taints=(Taint(key="kvtiers.io/dedicated", value="l2", effect="NoSchedule"),)
    )
    stack, eks, curvine = platform["stack"], platform["eks"], platform["curvine"]
    InferenceOperator(stack, "Operator", cluster=eks, hyperpod_cluster_arn="arn", environment_name="team")
    with pytest.raises(ValueError, match=r"g6e-small.*kvtiers.io/dedicated.*no tolerations field"):
        another_operator_endpoint(stack, "Chat", l2=curvine)


def test_endpoints_of_one_l2_take_its_seed_and_refuse_another(chart_dir):
    """One hash seed per L2 (it is part of every endpoint's namespace): given on CurvineL2, inherited."""
    stack, endpoint = operator_stack(chart_dir, hash_seed="42")
    assert endpoint.endpoint.hash_seed == "42"
    curvine = next(c for c in stack.node.children if isinstance(c, CurvineL2))
    with pytest.raises(ValueError, match=r"hash_seed '7' is not the L2's '42'"):
        another_operator_endpoint(stack, "Other", l2=curvine, hash_seed="7")


def test_an_operator_endpoint_with_weights_in_a_bucket_the_operator_was_not_granted_is_refused(chart_dir):
    """The operator's S3 CSI driver reads only ``model_buckets``: another bucket would fail the mount on the cluster."""
    stack, _ = operator_stack(chart_dir)
    engine = Engine(
        model="Qwen/Qwen2-7B-Instruct",
        weights=S3Weights(bucket="not-granted", prefix="Qwen/Qwen2-7B-Instruct"),
        instance_group="g6e-small",
        l1_gib=16,
    )
    hyperpod = next(c for c in stack.node.children if isinstance(c, HyperPodCluster))
    with pytest.raises(
        ValueError,
        match=r"engine.weights bucket 'not-granted' is not one of the InferenceOperator's model_buckets "
        r"\(example-prod-models\)",
    ):
        another_operator_endpoint(stack, "Other", engine=engine, hyperpod=hyperpod)


def test_an_imported_vpc_with_load_balancer_subnets_of_its_own_admits_them(chart_dir):
    """A team's VPC whose internal load balancers have subnets of their own, outside the EKS and HyperPod subnets:
    the operator's ALB connects from there, so the endpoint's pods admit those subnets on the invocation port."""
    platform = operator_platform(chart_dir)
    stack, eks, hyperpod = platform["stack"], platform["eks"], platform["hyperpod"]
    assert isinstance(stack, cdk.Stack) and isinstance(eks, EksCluster) and isinstance(hyperpod, HyperPodCluster)
    operator = InferenceOperator(
        stack,
        "Operator",
        cluster=eks,
        hyperpod_cluster_arn="arn",
        environment_name="team",
        model_buckets=["example-prod-models"],
    )
    team_vpc = HyperPodNetwork(
        stack,
        "TeamNetwork",
        vpc=ExistingVpcAttributes(
            vpc_id="vpc-1",
            cidr="10.50.0.0/16",
            private_subnet_ids=["subnet-1", "subnet-2"],
            availability_zones=["us-east-1a", "us-east-1b"],
            hyperpod_subnet_id="subnet-3",
            hyperpod_availability_zone="us-east-1a",
            private_subnet_cidrs=["10.50.0.0/24", "10.50.1.0/24"],
            hyperpod_subnet_cidr="10.50.64.0/18",
            load_balancer_subnet_cidrs=["10.50.200.0/24", "10.50.201.0/24"],
        ),
    )
    endpoint = OperatorServingEndpoint(
        stack,
        "Chat",
        eks_cluster=eks,
        operator=operator,
        name="chat",
        engine=Engine(
            model="Qwen/Qwen2-7B-Instruct",
            weights=S3Weights(bucket="example-prod-models", prefix="Qwen/Qwen2-7B-Instruct"),
            instance_group="g6e-small",
            l1_gib=8,
        ),
        routing="prefixaware",
        hyperpod=hyperpod,
        network=team_vpc,
    )
    (policy,) = (o for o in endpoint.objects["NetworkPoliciesChat"] if o["kind"] == "NetworkPolicy")
    blocks = [p["ipBlock"]["cidr"] for rule in policy["spec"]["ingress"] for p in rule["from"] if "ipBlock" in p]
    # The load balancer's subnets, and the EKS subnets for the API server's pod proxy; not the HyperPod subnet.
    assert blocks == ["10.50.200.0/24", "10.50.201.0/24", "10.50.0.0/24", "10.50.1.0/24"]
