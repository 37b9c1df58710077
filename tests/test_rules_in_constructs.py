"""Every deploy rule lives in the construct that creates the thing: the app (which only maps its file onto props)
and a library user building the same thing from the constructs get the same refusal, with the same message.

Each case is one bad input, written twice: as a change to config/dev.yaml (built into the app's deploy graph) and as
the constructs a library user would write. Both must raise, and the construct's message must appear in the app's.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import cdk8s
import pytest
import yaml

from kvtiers.config.loader import ConfigError, load_environment
from kvtiers.constructs import (
    CurvineL2,
    EksCluster,
    ExistingVpcAttributes,
    HyperPodCluster,
    HyperPodNetwork,
    InstanceGroup,
    NewVpcOptions,
    ServingEndpoint,
)
from kvtiers.constructs.eks_cluster import CoreAddonVersions
from kvtiers.k8s_charts.l2 import L2Volume
from kvtiers.k8s_charts.network_policies import ClusterNetwork
from kvtiers.k8s_charts.serving import Engine, HuggingFaceWeights, Router, ServingChart
from kvtiers.stacks.deploy_graph import build_deploy_graph
from tests.synth import ROOT, cdk_context

DEV = yaml.safe_load((ROOT / "config/dev.yaml").read_text())
REVISION = DEV["serving"]["endpoints"][0]["source"]["revision"]
OLD_ENGINE = "lmcache/vllm-openai:v0.3.7"


def app_error(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> str:
    """The message the app refuses the changed dev environment with (the deploy graph built in memory)."""
    document = copy.deepcopy(DEV)
    change(document)
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises((ValueError, ConfigError)) as refused:
        build_deploy_graph(cdk.App(context=cdk_context()), load_environment(path), review=True, nag=False)
    return str(refused.value)


def library_platform(*, vpc: NewVpcOptions | ExistingVpcAttributes | None = None) -> dict[str, Any]:
    app = cdk.App(context=cdk_context())
    stack = cdk.Stack(app, "team", env=cdk.Environment(account="111111111111", region="us-east-1"))
    network = HyperPodNetwork(stack, "Network", vpc=vpc or NewVpcOptions(hyperpod_az_id="use1-az2"))
    eks = EksCluster(
        stack,
        "Eks",
        vpc=network.vpc,
        subnets=network.eks_subnets,
        security_group=network.security_group,
        service_ipv4_cidr="172.20.0.0/16",
        cluster_name="kvtiers-team",
    )
    hyperpod = HyperPodCluster(
        stack,
        "HyperPod",
        eks_cluster=eks,
        subnet=network.hyperpod_subnet,
        security_group=network.security_group,
        instance_groups=[InstanceGroup(name="g6e-serving", instance_type="ml.g6e.12xlarge", count=2)],
        external_dependency_chart=True,
    )
    return {"stack": stack, "network": network, "eks": eks, "hyperpod": hyperpod}


def engine(**changes: Any) -> Engine:
    fields = {
        "model": "Qwen/Qwen2-7B-Instruct",
        "weights": HuggingFaceWeights(revision=REVISION),
        "instance_group": "g6e-serving",
        **changes,
    }
    return Engine(**fields)


def endpoint(platform: dict[str, Any], id: str, *, name: str = "qwen2-7b", **props: Any) -> ServingEndpoint:
    props = {"engine": engine(), "router": Router(routing="prefixaware"), **props}
    return ServingEndpoint(
        platform["stack"],
        id,
        eks_cluster=platform["eks"],
        name=name,
        hyperpod=platform["hyperpod"],
        network=platform["network"],
        **props,
    )


def first_endpoint(document: dict[str, Any]) -> dict[str, Any]:
    return document["serving"]["endpoints"][0]


# --------------------------------------------------------------------------------------------------------- cases


def lmcache_under_the_guard_app(d: dict[str, Any]) -> None:
    d["serving"]["images"] = {"vllm_image": OLD_ENGINE}
    first_endpoint(d)["l2"] = "on"


def lmcache_under_the_guard_library() -> None:
    ServingChart(
        cdk8s.App(),
        "ep",
        name="qwen2-7b",
        namespace="serving",
        engine=engine(image=OLD_ENGINE),
        router=Router(routing="prefixaware"),
        l2=L2Volume(claim_name="curvine-l2", mount_path="/mnt/curvine/l2cache"),
    )


def controller_protocol_app(d: dict[str, Any]) -> None:
    d["serving"]["images"] = {"vllm_image": OLD_ENGINE}
    first_endpoint(d).update(l2="off", routing="kvaware", api="completions")


def controller_protocol_library() -> None:
    ServingChart(
        cdk8s.App(),
        "ep",
        name="qwen2-7b",
        namespace="serving",
        engine=engine(image=OLD_ENGINE),
        router=Router(routing="kvaware"),
    )


def kube_proxy_app(d: dict[str, Any]) -> None:
    d["eks"]["addons"] = {"kube_proxy": "v1.33.3-eksbuild.6"}


def kube_proxy_library() -> None:
    platform_app = cdk.App(context=cdk_context())
    stack = cdk.Stack(platform_app, "s", env=cdk.Environment(account="111111111111", region="us-east-1"))
    network = HyperPodNetwork(stack, "Network", vpc=NewVpcOptions(hyperpod_az_id="use1-az2"))
    EksCluster(
        stack,
        "Eks",
        vpc=network.vpc,
        subnets=network.eks_subnets,
        security_group=network.security_group,
        addons=CoreAddonVersions(kube_proxy="v1.33.3-eksbuild.6"),
        kubernetes_version="1.34",
    )


def duplicate_names_app(d: dict[str, Any]) -> None:
    d["serving"]["endpoints"].append(copy.deepcopy(first_endpoint(d)))


def duplicate_names_library() -> None:
    platform = library_platform()
    endpoint(platform, "First", engine=engine(replicas=1))
    endpoint(platform, "Second", engine=engine(replicas=1))


def share_group_app(d: dict[str, Any]) -> None:
    other = copy.deepcopy(first_endpoint(d))
    other.update(name="qwen2-7b-fp16", dtype="float16", replicas=1, l2_share_group="qwen")
    first_endpoint(d).update(replicas=1, l2_share_group="qwen")
    d["serving"]["endpoints"].append(other)


def share_group_library() -> None:
    platform = library_platform()
    endpoint(platform, "First", engine=engine(replicas=1), l2_share_group="qwen")
    endpoint(
        platform, "Second", name="qwen2-7b-fp16", engine=engine(replicas=1, dtype="float16"), l2_share_group="qwen"
    )


EXISTING_VPC = {
    "mode": "existing",
    "vpc_id": "vpc-0a1b2c3d4e5f60718",
    "cidr": "10.50.0.0/16",
    "private_subnet_ids": ["subnet-0a1b2c3d4e5f60711", "subnet-0a1b2c3d4e5f60712"],
    "availability_zones": ["us-east-1a", "us-east-1b"],
    "hyperpod_subnet_id": "subnet-0a1b2c3d4e5f60713",
    "hyperpod_availability_zone": "us-east-1b",
}


def voided_clients_app(d: dict[str, Any]) -> None:
    d["network"] = EXISTING_VPC
    first_endpoint(d)["allowed_clients"] = ["10.50.8.0/24"]


def voided_clients_library() -> None:
    attributes = {k: v for k, v in EXISTING_VPC.items() if k != "mode"}
    platform = library_platform(vpc=ExistingVpcAttributes(**attributes))
    endpoint(platform, "Ep", router=Router(routing="prefixaware", client_cidrs=("10.50.8.0/24",)))


def weights_too_large_app(d: dict[str, Any]) -> None:
    first_endpoint(d)["gpu_memory_utilization"] = 0.3


def weights_too_large_library() -> None:
    engine(gpu_memory_utilization=0.3)


def namespaces_collide_app(d: dict[str, Any]) -> None:
    d["curvine"]["namespace"] = "serving"


def namespaces_collide_library() -> None:
    platform = library_platform()
    from kvtiers.k8s_charts.curvine_l2 import CurvineSettings

    CurvineL2(
        platform["stack"],
        "L2",
        eks_cluster=platform["eks"],
        hyperpod=platform["hyperpod"],
        network=platform["network"],
        settings=CurvineSettings(namespace="serving"),
    )


def masters_above_worker_nodes_app(d: dict[str, Any]) -> None:
    d["curvine"]["master"]["replicas"] = 3


def masters_above_worker_nodes_library() -> None:
    platform = library_platform()
    CurvineL2(
        platform["stack"],
        "L2",
        eks_cluster=platform["eks"],
        hyperpod=platform["hyperpod"],
        network=platform["network"],
        masters=3,
    )


def taints_with_health_checks_app(d: dict[str, Any]) -> None:
    d["hyperpod"]["instance_groups"][0]["taints"] = [{"key": "team", "value": "a", "effect": "NoSchedule"}]


def taints_with_health_checks_library() -> None:
    from kvtiers.constructs import Taint

    InstanceGroup(
        name="g6e-serving",
        instance_type="ml.g6e.12xlarge",
        count=2,
        taints=(Taint(key="team", value="a", effect="NoSchedule"),),
    )


CASES = {
    "lmcache-under-the-guard": (lmcache_under_the_guard_app, lmcache_under_the_guard_library),
    "controller-protocol": (controller_protocol_app, controller_protocol_library),
    "kube-proxy-minor": (kube_proxy_app, kube_proxy_library),
    "duplicate-endpoint-names": (duplicate_names_app, duplicate_names_library),
    "share-group-namespace": (share_group_app, share_group_library),
    "client-cidrs-voided": (voided_clients_app, voided_clients_library),
    "weights-too-large": (weights_too_large_app, weights_too_large_library),
    "curvine-and-serving-namespace": (namespaces_collide_app, namespaces_collide_library),
    "taints-with-deep-health-checks": (taints_with_health_checks_app, taints_with_health_checks_library),
    "curvine-masters-above-worker-nodes": (masters_above_worker_nodes_app, masters_above_worker_nodes_library),
}


ENGINE_BOUNDS = [
    ("replicas", 65),
    ("tensor_parallel_size", 9),
    ("pipeline_parallel_size", 9),
    ("gpu_memory_utilization", 0.96),
    ("gpu_memory_utilization", 0.1),
    ("max_model_len", 255),
    ("vllm_overhead_gib", 3),
    ("startup_timeout_seconds", 59),
    ("cpu", 0),
    ("l1_gib", 0),
]
"""The bounds of an endpoint's engine settings: the file's field and the Engine prop share a name."""


@pytest.mark.parametrize(("field", "value"), ENGINE_BOUNDS, ids=[f"{f}={v}" for f, v in ENGINE_BOUNDS])
def test_an_engine_setting_out_of_bounds_is_refused_alike(field, value, tmp_path):
    with pytest.raises(ValueError) as refused:
        engine(**{field: value})
    assert str(refused.value) in app_error(tmp_path, lambda d: first_endpoint(d).update({field: value}))


def test_a_router_setting_out_of_bounds_is_refused_alike(tmp_path):
    with pytest.raises(ValueError) as refused:
        Router(routing="prefixaware", replicas=11)
    assert str(refused.value) in app_error(tmp_path, lambda d: first_endpoint(d).update(router_replicas=11))


def test_a_moving_image_tag_is_refused_alike(tmp_path):
    image = "public.ecr.aws/aws-cli/aws-cli:latest"
    with pytest.raises(ValueError) as refused:
        engine(model_sync_image=image)
    assert str(refused.value) in app_error(tmp_path, lambda d: d["serving"].update(images={"model_sync_image": image}))


@pytest.mark.parametrize(
    ("source", "weights"),
    [
        ({"type": "huggingface", "revision": "main"}, {"revision": "main"}),
        ({"type": "s3", "bucket": "Bad_Bucket", "prefix": "qwen"}, {"bucket": "Bad_Bucket", "prefix": "qwen"}),
        (
            {"type": "s3", "bucket": "models", "prefix": "qwen", "revision": "a b"},
            {"bucket": "models", "prefix": "qwen", "revision": "a b"},
        ),
    ],
    ids=["hub-branch", "s3-bucket", "s3-revision"],
)
def test_weights_the_l2_namespace_cannot_name_are_refused_alike(source, weights, tmp_path):
    from kvtiers.k8s_charts.serving import S3Weights

    with pytest.raises(ValueError) as refused:
        S3Weights(**weights) if source["type"] == "s3" else HuggingFaceWeights(**weights)
    assert str(refused.value) in app_error(tmp_path, lambda d: first_endpoint(d).update(source=source))


def test_kvaware_on_a_gated_hub_model_without_a_token_is_refused_alike(tmp_path):
    llama = {"model": "meta-llama/Llama-3.1-8B-Instruct", "weights": HuggingFaceWeights()}
    with pytest.raises(ValueError) as refused:
        ServingChart(
            cdk8s.App(),
            "ep",
            name="qwen2-7b",
            namespace="serving",
            engine=engine(**llama),
            router=Router(routing="kvaware"),
        )
    message = str(refused.value).split(": ", 1)[1]

    def kvaware_llama(d: dict[str, Any]) -> None:
        first_endpoint(d).update(
            routing="kvaware", api="completions", model=llama["model"], source={"type": "huggingface"}, l2="off"
        )

    assert message in app_error(tmp_path, kvaware_llama)


@pytest.mark.parametrize("case", CASES)
def test_the_app_and_a_library_user_get_the_same_refusal(case, tmp_path):
    app_change, library = CASES[case]
    with pytest.raises(ValueError) as refused:
        library()
    # The construct's message without its owner prefix ("ServingChart 'x': ", "Engine: "...).
    message = str(refused.value).split(": ", 1)[1].split(" The other: ")[0]
    assert message in app_error(tmp_path, app_change)


def test_the_voided_clients_rule_lets_the_subnet_cidrs_through():
    attributes = {k: v for k, v in EXISTING_VPC.items() if k != "mode"}
    vpc = ExistingVpcAttributes(**attributes, private_subnet_cidrs=("10.50.0.0/24", "10.50.1.0/24"))
    endpoint(library_platform(vpc=vpc), "Ep", router=Router(routing="prefixaware", client_cidrs=("10.50.8.0/24",)))


def test_a_second_cluster_may_reuse_an_endpoint_name():
    """Names are unique per cluster and namespace, not per app."""
    platform = library_platform()
    endpoint(platform, "First", engine=engine(replicas=1))
    other = dataclasses.replace(
        ClusterNetwork(node_cidr="10.192.0.0/16", api_service_ip="172.20.0.1"), control_plane_cidrs=()
    )
    second = library_platform()
    ServingEndpoint(
        second["stack"],
        "Same",
        eks_cluster=second["eks"],
        name="qwen2-7b",
        engine=engine(replicas=1),
        router=Router(routing="prefixaware"),
        hyperpod=second["hyperpod"],
        network=other,
    )


def test_two_environments_in_one_app_are_two_clusters(tmp_path):
    """Each environment's stacks refer to their own cluster by the same logical ID: the rules that join endpoints and
    namespaces per cluster must not take the two for one (same endpoint name, same serving namespace)."""
    app = cdk.App(context=cdk_context(), outdir=str(tmp_path / "cdk.out"))
    for name in ("kvtiers-dev", "kvtiers-dev2"):
        document = copy.deepcopy(DEV)
        document["name"] = document["eks"]["cluster_name"] = document["hyperpod"]["cluster_name"] = name
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(document))
        build_deploy_graph(app, load_environment(path), review=True, nag=False)
    app.synth()


def test_a_cluster_built_here_and_imported_by_its_name_elsewhere_is_one_cluster():
    """Same name, same namespace, same cluster: the second endpoint would overwrite the first's objects."""
    from aws_cdk import aws_eks_v2 as eks
    from aws_cdk import aws_iam as iam

    platform = library_platform()
    built = platform["eks"].cluster
    endpoint(platform, "First", engine=engine(replicas=1))
    stack = cdk.Stack(
        platform["stack"].node.root, "team-b", env=cdk.Environment(account="111111111111", region="us-east-1")
    )
    name = platform["stack"].resolve(built.cluster_name)
    assert isinstance(name, dict)  # a reference: the name the EksCluster was built with is what the import gives
    imported = eks.Cluster.from_cluster_attributes(
        stack,
        "Shared",
        cluster_name="kvtiers-team",
        kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            stack,
            "Kubectl",
            service_token="arn:aws:lambda:us-east-1:111111111111:function:kubectl",
            role=iam.Role.from_role_arn(stack, "Role", "arn:aws:iam::111111111111:role/kubectl"),
        ),
    )
    with pytest.raises(ValueError, match="another endpoint of this app is named 'qwen2-7b'"):
        ServingEndpoint(
            stack,
            "Same",
            eks_cluster=imported,
            name="qwen2-7b",
            engine=engine(replicas=1),
            router=Router(routing="prefixaware"),
            network=ClusterNetwork(node_cidr="10.192.0.0/16", api_service_ip="172.20.0.1"),
        )
