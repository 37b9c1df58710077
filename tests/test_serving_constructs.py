"""The serving and operator-path charts as a library consumer builds them: each in a bare cdk8s app with explicit,
minimal arguments (no environment file), valid against the Kubernetes 1.34 schemas; and each rule a construct checks
on its inputs, with the error naming the construct and the field."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import cdk8s
import kubernetes_validate
import pytest
from cdk8s_plus_33 import k8s

from kvtiers.catalog.models import ModelShape
from kvtiers.k8s_charts import kvtiers_l2_guard
from kvtiers.k8s_charts.hyperpod_operator import (
    CurvineL2PolicyChart,
    InferenceEndpointConfigChart,
    OperatorEndpoint,
    policy_name,
)
from kvtiers.k8s_charts.l2 import L2Mount, L2Namespace, L2Volume, l2_owner
from kvtiers.k8s_charts.namespaces import NamespaceChart
from kvtiers.k8s_charts.network_policies import (
    ClusterNetwork,
    CurvineNetworkPolicyChart,
    OperatorTraffic,
    SelfManagedTraffic,
    ServingNetworkPolicyChart,
)
from kvtiers.k8s_charts.scraper_rbac import ScraperRbacChart
from kvtiers.k8s_charts.serving import (
    Engine,
    HuggingFaceWeights,
    LMCache,
    LMCacheController,
    Router,
    S3Weights,
    ServingChart,
    Toleration,
)
from kvtiers.k8s_charts.serving import endpoint as endpoint_module
from kvtiers.k8s_charts.vllm import kv_transfer_config, vllm_args

L2 = L2Volume(claim_name="curvine-l2", mount_path="/mnt/l2")
NAMESPACE = L2Namespace(
    weights="hf://org/model",
    model="org/model",
    revision="unpinned",
    dtype="bfloat16",
    kv_dtype="bfloat16",
    tensor_parallel_size=1,
    pipeline_parallel_size=1,
    chunk_size=256,
    lmcache_version="0.3.11",
    serde="naive",
    hash_seed="0",
)
OPERATOR_L2 = L2.mount(NAMESPACE, owner=l2_owner(endpoint="op"))
REMOTE_URL = OPERATOR_L2.remote_url
ENGINE = Engine(
    model="org/model",
    weights=HuggingFaceWeights(),
    image="vllm/vllm-openai:v0.12.0",
    lmcache_version="0.3.11",
    model_shape=ModelShape(layers=28, kv_heads=4, head_dim=128, parameters=7e9),
    instance_group="gpu",
    replicas=1,
    max_model_len=4096,
    cpu=4,
    l1_gib=8,
    shm_gib=4,
    startup_timeout_seconds=600,
)
ROUTER = Router(routing="prefixaware", replicas=1)
LMCACHE = LMCache(max_local_cpu_size_gib=8)
OPERATOR = OperatorEndpoint(
    name="op",
    namespace="serving",
    model="org/model",
    weights=S3Weights(bucket="models", prefix="org/model"),
    region="us-east-1",
    instance_type="ml.g6e.2xlarge",
    image="vllm/vllm-openai:v0.12.0",
    replicas=1,
    tensor_parallel_size=1,
    cpu=4,
    memory_gib=32,
    max_model_len=4096,
    gpu_memory_utilization=0.9,
    routing="prefixaware",
    api="chat",
    lmcache=LMCACHE,
    hash_seed="0",
    addon_version="v1.0.0-eksbuild.1",
)
CURVINE_OPERATOR = dataclasses.replace(
    OPERATOR, l2_backend="curvine", l2=OPERATOR_L2, lmcache=dataclasses.replace(LMCACHE, remote_url=REMOTE_URL)
)
NETWORK = ClusterNetwork(node_cidr="10.0.0.0/16", api_service_ip="172.20.0.1")


def serving(**overrides) -> list[dict]:
    kwargs = {
        "name": "ep",
        "namespace": "serving",
        "engine": ENGINE,
        "router": ROUTER,
        "hash_seed": "0",
        **overrides,
    }
    return ServingChart(cdk8s.App(), "ep", **kwargs).to_json()


def valid(objs: list[dict]) -> list[dict]:
    for obj in objs:
        kubernetes_validate.validate(obj, "1.34", strict=True)
    return objs


def container(objs: list[dict], deployment: str) -> dict:
    obj = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == deployment)
    return obj["spec"]["template"]["spec"]["containers"][0]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# --------------------------------------------------------------------------------------------- bare charts


def test_a_minimal_serving_chart_renders_engines_and_router_in_its_namespace():
    objs = valid(serving())
    assert [o["kind"] for o in objs] == [
        "ServiceAccount",
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    ]
    assert {o["metadata"]["namespace"] for o in objs} == {"serving"}
    assert flag(container(objs, "ep-router")["args"], "--k8s-namespace") == "serving"
    assert "--session-key" not in container(objs, "ep-router")["args"]
    # no L2: no claim mounted and no remote backend
    assert not [v for v in objs[2]["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert "remote_url" not in objs[1]["data"]["lmcache.yaml"]


def test_a_kvaware_serving_chart_with_the_l2_and_s3_weights():
    engine = dataclasses.replace(
        ENGINE,
        weights=S3Weights(bucket="models", prefix="org/model"),
        model_sync_image="public.ecr.aws/aws-cli/aws-cli:2.31.3",
        tensor_parallel_size=2,
        tolerations=(Toleration(key="dedicated", effect="NoSchedule", value="gpu"),),
    )
    objs = valid(
        serving(
            engine=engine,
            router=dataclasses.replace(
                ROUTER, routing="kvaware", internal_load_balancer=True, client_cidrs=("10.0.0.0/16",)
            ),
            l2=L2,
        )
    )
    engine_pod = next(o for o in objs if o["metadata"]["name"] == "ep-engine" and o["kind"] == "Deployment")
    spec = engine_pod["spec"]["template"]["spec"]
    assert {"name": "l2-cache", "persistentVolumeClaim": {"claimName": "curvine-l2"}} in spec["volumes"]
    assert spec["tolerations"][:2] == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert {t["key"] for t in spec["tolerations"][2:]} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    assert spec["initContainers"][0]["command"][3] == "s3://models/org/model"
    config = next(o for o in objs if o["kind"] == "ConfigMap")["data"]["lmcache.yaml"]
    kvaware_s3 = dataclasses.replace(NAMESPACE, tensor_parallel_size=2, weights="s3://models/org/model")
    remote_url = L2.mount(kvaware_s3, owner="endpoint-ep").remote_url
    assert f"remote_url: {remote_url}" in config and "controller_pull_url: ep-router.serving.svc:9000" in config
    assert [p["containerPort"] for p in container(objs, "ep-engine")["ports"]] == [8000, 8001, 8002]
    assert [o["spec"]["type"] for o in objs if o["kind"] == "Service"] == ["ClusterIP", "ClusterIP", "LoadBalancer"]


def test_extra_args_and_env_reach_the_engine_and_router_after_kvtiers_own():
    objs = valid(
        serving(
            engine=dataclasses.replace(
                ENGINE, extra_args=("--max-num-seqs", "64"), extra_env={"VLLM_LOGGING_LEVEL": "DEBUG"}
            ),
            router=dataclasses.replace(ROUTER, extra_args=("--log-level", "debug"), extra_env={"LOG_FORMAT": "json"}),
        )
    )
    engine, router = container(objs, "ep-engine"), container(objs, "ep-router")
    assert engine["args"][-2:] == ["--max-num-seqs", "64"] and "--kv-transfer-config" in engine["args"]
    assert engine["env"][-1] == {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}
    assert router["args"][-2:] == ["--log-level", "debug"] and "--routing-logic" in router["args"]
    assert router["env"][-1] == {"name": "LOG_FORMAT", "value": "json"}


def test_session_routing_renders_the_session_key():
    objs = valid(serving(router=dataclasses.replace(ROUTER, routing="session", session_key="x-user")))
    assert flag(container(objs, "ep-router")["args"], "--session-key") == "x-user"


def test_the_operator_charts_in_a_bare_app():
    app = cdk8s.App()
    (iec,) = InferenceEndpointConfigChart(app, "iec", endpoint=CURVINE_OPERATOR).to_json()
    guard, policy = CurvineL2PolicyChart(app, "policy", endpoint=CURVINE_OPERATOR).to_json()
    # the ConfigMap with the L2 guard comes first (pods the policy admits mount it), named by the endpoint object
    assert guard["kind"] == "ConfigMap" and guard["metadata"]["name"] == f"{CURVINE_OPERATOR.object_name}-l2-guard"
    assert guard["data"] == {"kvtiers_l2_guard.py": Path(kvtiers_l2_guard.__file__).read_text()}
    assert iec["metadata"]["name"] == CURVINE_OPERATOR.object_name and iec["metadata"]["namespace"] == "serving"
    assert iec["spec"]["modelSourceConfig"]["s3Storage"] == {"bucketName": "models", "region": "us-east-1"}
    env = {e["name"]: e["value"] for e in iec["spec"]["worker"]["environmentVariables"]}
    assert env["LMCACHE_REMOTE_URL"] == REMOTE_URL and env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "8"
    assert policy["metadata"]["name"] == policy_name(CURVINE_OPERATOR)
    assert REMOTE_URL in json.dumps(policy) and L2.mount_path in json.dumps(policy)
    # without an L2 the endpoint carries no remote backend, and its name (fingerprint) differs
    (plain,) = InferenceEndpointConfigChart(cdk8s.App(), "iec", endpoint=OPERATOR).to_json()
    assert "LMCACHE_REMOTE_URL" not in json.dumps(plain)
    assert plain["metadata"]["name"] != iec["metadata"]["name"]


@pytest.mark.parametrize("l2", [False, True], ids=["no-l2", "l2"])
def test_both_serving_paths_run_one_vllm_command_line(l2):
    lmcache = dataclasses.replace(LMCACHE, remote_url=REMOTE_URL) if l2 else LMCACHE
    engine_args = container(serving(l2=L2 if l2 else None), "ep-engine")["args"]
    operator = CURVINE_OPERATOR if l2 else OPERATOR
    worker_args = operator.spec()["worker"]["args"]
    common = {
        "served_model_name": "org/model",
        "tensor_parallel_size": 1,
        "max_model_len": 4096,
        "gpu_memory_utilization": 0.9,
        "lmcache": lmcache,
    }
    assert engine_args == vllm_args(model_path="org/model", dtype="bfloat16", port=8000, **common)
    # the operator's worker passes the connector as one argument, the form its admission check compares
    assert worker_args == vllm_args(model_path="/opt/ml/model", inline_kv_transfer_config=True, **common)
    # one serialisation of the JSON argument, byte for byte
    assert f"--kv-transfer-config={flag(engine_args, '--kv-transfer-config')}" in worker_args
    assert flag(engine_args, "--kv-transfer-config") == kv_transfer_config(l2=l2)


def test_with_an_l2_the_engines_load_lmcache_through_the_shipped_l2_guard():
    objs = serving(l2=L2)
    engine = container(objs, "ep-engine")
    transfer = json.loads(flag(engine["args"], "--kv-transfer-config"))
    module = transfer["kv_connector_module_path"]
    env = {e["name"]: e.get("value") for e in engine["env"]}
    config_map = next(o for o in objs if o["kind"] == "ConfigMap")
    mount = next(m for m in engine["volumeMounts"] if m["name"] == "lmcache-config")
    # vLLM imports the module by name from PYTHONPATH: the mounted ConfigMap must hold <module>.py there
    assert env["PYTHONPATH"] == mount["mountPath"]
    assert config_map["data"][f"{module}.py"] == Path(kvtiers_l2_guard.__file__).read_text()
    assert transfer["kv_connector"] == kvtiers_l2_guard.CONNECTOR_CLASS
    assert env["LMCACHE_TRACK_USAGE"] == "false"
    # without an L2 nothing of the guard is shipped
    plain = container(serving(), "ep-engine")
    assert "PYTHONPATH" not in {e["name"] for e in plain["env"]}
    assert "kv_connector_module_path" not in flag(plain["args"], "--kv-transfer-config")


def test_a_change_of_the_l2_guard_rolls_the_engines(monkeypatch):
    def checksum() -> str:
        objs = serving(l2=L2)
        deployment = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "ep-engine")
        return deployment["spec"]["template"]["metadata"]["annotations"]["kvtiers.io/lmcache-config-sha256"]

    before = checksum()
    monkeypatch.setattr(endpoint_module, "l2_guard_source", lambda: "# another guard\n")
    assert checksum() != before


def test_the_network_policy_charts_in_a_bare_app():
    objs = valid(
        ServingNetworkPolicyChart(
            cdk8s.App(),
            "np",
            namespace="serving",
            network=NETWORK,
            endpoints=(
                SelfManagedTraffic(name="ep", kvaware_worker_ports=(8001,), s3_weights=True),
                OperatorTraffic(name="op", object_name="op-1234abcd"),
            ),
        ).to_json()
    )
    names = [o["metadata"]["name"] for o in objs]
    assert names == [
        "default-deny",
        "allow-dns",
        "ep-router",
        "ep-engine",
        "operator-managed",
        "operator-routers",
        "op-operator-endpoint",
    ]
    deny = objs[0]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert objs[-1]["spec"]["podSelector"] == {"matchLabels": {"app": "op-1234abcd"}}
    # Clients: internal (the node CIDR, the VPC) unless the endpoint names its own.
    router_from = objs[2]["spec"]["ingress"][0]["from"]
    assert router_from == [{"ipBlock": {"cidr": "10.0.0.0/16"}}]
    narrowing = (SelfManagedTraffic(name="ep", client_cidrs=("10.0.8.0/24", "192.168.0.0/16")),)
    # Without the control plane's subnets, the pod-proxy rule would admit the whole VPC and void the narrowing.
    with pytest.raises(ValueError, match="voids them; give the EKS subnets' CIDRs"):
        ServingNetworkPolicyChart(cdk8s.App(), "np", namespace="serving", network=NETWORK, endpoints=narrowing)
    with_subnets = dataclasses.replace(NETWORK, control_plane_cidrs=("10.0.0.0/24",))
    narrowed = ServingNetworkPolicyChart(
        cdk8s.App(), "np", namespace="serving", network=with_subnets, endpoints=narrowing
    ).to_json()
    router = next(o for o in narrowed if o["metadata"]["name"] == "ep-router")
    assert router["spec"]["ingress"][0]["from"] == [
        {"ipBlock": {"cidr": "10.0.8.0/24"}},
        {"ipBlock": {"cidr": "192.168.0.0/16"}},
    ]
    curvine = valid(
        CurvineNetworkPolicyChart(
            cdk8s.App(),
            "cv",
            namespace="curvine",
            network=NETWORK,
            hyperpod_cidr="10.0.64.0/18",
            master_rpc_port=8995,
            journal_port=8996,
            master_web_port=9000,
            worker_rpc_port=8997,
        ).to_json()
    )
    assert [o["metadata"]["name"] for o in curvine] == [
        "default-deny",
        "allow-dns",
        "curvine-master",
        "curvine-csi-controller",
    ]


def test_the_namespace_and_collector_rbac_charts_in_a_bare_app():
    (ns,) = valid(NamespaceChart(cdk8s.App(), "ns", names=("serving",), enforce={"serving": "privileged"}).to_json())
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    objs = valid(ScraperRbacChart(cdk8s.App(), "rbac", user="collector", namespaces=("serving", "curvine")).to_json())
    bindings = [o for o in objs if o["kind"] == "RoleBinding"]
    assert [b["metadata"]["namespace"] for b in bindings] == ["serving", "curvine"]
    assert bindings[0]["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "collector"}]
    assert bindings[0]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "kvtiers-metrics-collector",
    }


def test_a_misspelled_field_of_a_typed_object_fails_at_synth():
    """The charts build Kubernetes objects from cdk8s's typed classes: a field name that does not exist is an
    error when the object is built, where a raw dict would have rendered it."""
    with pytest.raises(TypeError, match="policy_type"):
        k8s.NetworkPolicySpec(pod_selector=k8s.LabelSelector(), policy_type=["Ingress"])


def test_the_serving_and_operator_constructs_import_nothing_from_the_config():
    modules = [
        "kvtiers.k8s_charts.serving",
        "kvtiers.k8s_charts.hyperpod_operator",
        "kvtiers.k8s_charts.namespaces",
        "kvtiers.k8s_charts.scraper_rbac",
        "kvtiers.k8s_charts.l2",
        "kvtiers.k8s_charts.vllm",
        "kvtiers.k8s_charts.names",
    ]
    probe = (
        f"import sys; import {', '.join(modules)}; print([m for m in sys.modules if m.startswith('kvtiers.config')])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------- rules


@pytest.mark.parametrize(
    ("build", "message"),
    [
        # The cases: each rendered a broken endpoint before.
        (
            lambda: Router(image="example/router:1", routing="session"),
            "Router: session_key is required when routing is 'session'",
        ),
        # The schema's endpoint rules, now the constructs' own.
        (
            lambda: Router(image="example/router:1", routing="kvaware", replicas=2),
            "Router: replicas must be 1 when routing is 'kvaware'",
        ),
        (
            lambda: dataclasses.replace(ENGINE, model_shape=None),
            "Engine: model_shape is required for 'org/model', which is not one of the known models",
        ),
        (
            lambda: dataclasses.replace(ENGINE, lmcache_version=None),
            "Engine: image 'vllm/vllm-openai:v0.12.0' is not in the version matrix",
        ),
        # Escape hatches: what kvtiers sets is refused, naming the extra setting and kvtiers' own.
        (
            lambda: serving(engine=dataclasses.replace(ENGINE, extra_args=("--max-model-len=8192",))),
            (
                "Engine: extra_args '--max-model-len=8192' sets --max-model-len, which kvtiers already sets "
                "\\('--max-model-len 4096'\\)"
            ),
        ),
        (
            lambda: serving(engine=dataclasses.replace(ENGINE, extra_env={"PYTHONHASHSEED": "1"})),
            (
                "Engine: extra_env PYTHONHASHSEED='1' sets PYTHONHASHSEED, which kvtiers already sets "
                "\\(PYTHONHASHSEED=0\\)"
            ),
        ),
        (
            lambda: serving(router=dataclasses.replace(ROUTER, extra_args=("--routing-logic", "roundrobin"))),
            (
                "Router: extra_args '--routing-logic' sets --routing-logic, which kvtiers already sets "
                "\\('--routing-logic prefixaware'\\)"
            ),
        ),
        (
            lambda: serving(router=dataclasses.replace(ROUTER, extra_env={"HOME": "/root"})),
            "Router: extra_env HOME='/root' sets HOME, which kvtiers already sets",
        ),
        # Other spellings of what kvtiers sets (vLLM's parser turns '_' into '-' and reads dotted JSON keys), short
        # aliases, abbreviations, and what changes the KV bytes without changing the L2 namespace (review finding).
        (
            lambda: serving(engine=dataclasses.replace(ENGINE, extra_args=("--max_model_len", "8192"))),
            "Engine: extra_args '--max_model_len' sets --max-model-len, which kvtiers already sets",
        ),
        (
            lambda: serving(engine=dataclasses.replace(ENGINE, extra_args=("--kv-transfer-config.kv_connector=X",))),
            "Engine: extra_args '--kv-transfer-config.kv_connector=X' sets --kv-transfer-config, which kvtiers",
        ),
        (
            lambda: serving(engine=dataclasses.replace(ENGINE, extra_args=("-tp", "2"))),
            "Engine: extra_args '-tp' is a short option: use its long form",
        ),
        (
            lambda: serving(router=dataclasses.replace(ROUTER, extra_args=("--routing", "roundrobin"))),
            "Router: extra_args '--routing' abbreviates --routing-logic, which kvtiers already sets",
        ),
        (
            lambda: serving(engine=dataclasses.replace(ENGINE, extra_args=("--quantization", "fp8"))),
            "Engine: extra_args '--quantization' changes the bytes of the KV cache, which the L2 namespace does not",
        ),
        (
            lambda: serving(engine=dataclasses.replace(ENGINE, extra_env={"LMCACHE_CHUNK_SIZE": "128"})),
            "Engine: extra_env LMCACHE_CHUNK_SIZE='128': LMCache reads LMCACHE_\\* over the configuration kvtiers",
        ),
        (lambda: serving(name="Ep"), "ServingChart: name 'Ep' is not a DNS-1123 label"),
        (lambda: serving(name="e" * 53), "ServingChart: name 'e+' is not a DNS-1123 label of at most 52"),
        (lambda: serving(namespace="serving_ns"), "ServingChart: namespace 'serving_ns' is not a DNS-1123 label"),
        (lambda: serving(hash_seed="random"), "ServingChart: hash_seed 'random' is not a PYTHONHASHSEED"),
        (
            lambda: Router(image="example/router:1", routing="loadaware", replicas=1),
            "Router: routing must be one of .*, got 'loadaware'",
        ),
        (
            lambda: Router(image="example/router:1", routing="prefixaware", replicas=0),
            "Router: replicas must be 1 to 10",
        ),
        (lambda: dataclasses.replace(ENGINE, model_sync_image=""), "Engine: model_sync_image is empty"),
        (
            lambda: dataclasses.replace(ENGINE, gpu_memory_utilization=1.5),
            "Engine: gpu_memory_utilization must be above 0.1 and at most 0.95",
        ),
        (
            lambda: dataclasses.replace(ENGINE, dtype="float32"),
            "Engine: dtype must be one of 'bfloat16', 'float16', got 'float32'",
        ),
        (
            lambda: dataclasses.replace(ENGINE, tensor_parallel_size=0),
            "Engine: tensor_parallel_size must be 1 to 8",
        ),
        (lambda: Toleration(key="k", effect="Never"), "Toleration: effect must be one of .*, got 'Never'"),
        (lambda: S3Weights(bucket="b", prefix="/p/"), "S3Weights: .* without a leading or trailing slash"),
        (lambda: LMCache(max_local_cpu_size_gib=0), "LMCache: max_local_cpu_size_gib must be positive"),
        (lambda: LMCache(max_local_cpu_size_gib=1, chunk_size=0), "LMCache: chunk_size must be at least 1"),
        (lambda: LMCacheController(heartbeat_seconds=0), "LMCacheController: heartbeat_seconds must be at least 1"),
        (
            lambda: L2Volume(claim_name="c", mount_path="relative"),
            "L2Volume: mount_path 'relative' must be an absolute path",
        ),
        (
            lambda: L2Mount(
                claim_name="c", sub_path="endpoint-a/../endpoint-b", mount_path="/l2/endpoint-a/../endpoint-b"
            ),
            "L2Mount: sub_path 'endpoint-a/../endpoint-b' must be a relative path without",
        ),
        (
            lambda: Router(routing="prefixaware", internal_load_balancer=True),
            "Router: internal_load_balancer needs client_cidrs",
        ),
        (
            lambda: Router(routing="prefixaware", client_cidrs=("10.0.0.0/8", "nope")),
            "Router: client_cidrs 'nope' is not an IPv4 CIDR",
        ),
        (
            lambda: SelfManagedTraffic(name="ep", client_cidrs=("10.0.0.1/8",)),
            "SelfManagedTraffic: client_cidrs '10.0.0.1/8' is not an IPv4 CIDR",
        ),
        (
            lambda: L2Mount(claim_name="c", sub_path="endpoint-a/x", mount_path="/l2/endpoint-b/x"),
            "L2Mount: mount_path '/l2/endpoint-b/x' does not end with sub_path",
        ),
        # The operator path.
        (
            lambda: dataclasses.replace(OPERATOR, routing="kvaware"),
            "OperatorEndpoint '[a-z0-9-]*': api must be 'completions' when routing is 'kvaware'",
        ),
        (
            lambda: dataclasses.replace(OPERATOR, l2_backend="curvine"),
            "OperatorEndpoint '[a-z0-9-]*': l2_backend 'curvine' needs l2 and lmcache.remote_url",
        ),
        (
            lambda: dataclasses.replace(CURVINE_OPERATOR, l2_backend="tieredstorage"),
            "OperatorEndpoint '[a-z0-9-]*': l2_backend 'tieredstorage' is refused: the operator configures that L2 itself",
        ),
        (
            lambda: dataclasses.replace(
                CURVINE_OPERATOR, lmcache=LMCache(max_local_cpu_size_gib=8, remote_url="fs://localhost:0/x/")
            ),
            "OperatorEndpoint '[a-z0-9-]*': lmcache.remote_url .* is not the endpoint's L2 directory",
        ),
        (
            lambda: dataclasses.replace(
                OPERATOR, lmcache=LMCache(max_local_cpu_size_gib=8, controller=LMCacheController())
            ),
            "OperatorEndpoint '[a-z0-9-]*': lmcache.controller must be None",
        ),
        (
            lambda: dataclasses.replace(OPERATOR, memory_gib=4),
            "OperatorEndpoint '[a-z0-9-]*': memory_gib 4 is less than the LMCache L1",
        ),
        (
            lambda: dataclasses.replace(OPERATOR, api="responses"),
            "OperatorEndpoint '[a-z0-9-]*': api must be one of 'completions', 'chat', got 'responses'",
        ),
        (
            lambda: CurvineL2PolicyChart(cdk8s.App(), "p", endpoint=OPERATOR),
            "CurvineL2PolicyChart: endpoint.l2_backend must be 'curvine'",
        ),
        # Network policies, namespaces, RBAC.
        (
            lambda: ClusterNetwork(node_cidr="10.0.0.0/33", api_service_ip="172.20.0.1"),
            "ClusterNetwork: node_cidr '10.0.0.0/33' is not an IPv4 CIDR",
        ),
        (
            lambda: ClusterNetwork(node_cidr="10.0.0.0/16", api_service_ip="kubernetes"),
            "ClusterNetwork: api_service_ip 'kubernetes' is not an IP address",
        ),
        (lambda: OperatorTraffic(name="op", object_name=""), "OperatorTraffic: object_name of endpoint 'op' is empty"),
        (
            lambda: ServingNetworkPolicyChart(
                cdk8s.App(),
                "np",
                namespace="serving",
                network=NETWORK,
                endpoints=(SelfManagedTraffic(name="ep"), SelfManagedTraffic(name="ep")),
            ),
            r"ServingNetworkPolicyChart: endpoints has duplicate names \['ep'\]",
        ),
        (
            lambda: CurvineNetworkPolicyChart(
                cdk8s.App(),
                "cv",
                namespace="curvine",
                network=NETWORK,
                hyperpod_cidr="192.168.0.0/18",
                master_rpc_port=8995,
                journal_port=8996,
                master_web_port=9000,
                worker_rpc_port=8997,
            ),
            "CurvineNetworkPolicyChart: hyperpod_cidr 192.168.0.0/18 is not inside network.node_cidr",
        ),
        (
            lambda: CurvineNetworkPolicyChart(
                cdk8s.App(),
                "cv",
                namespace="curvine",
                network=NETWORK,
                hyperpod_cidr="10.0.64.0/18",
                master_rpc_port=8995,
                journal_port=8995,
                master_web_port=9000,
                worker_rpc_port=8997,
            ),
            "CurvineNetworkPolicyChart: the ports must be distinct",
        ),
        (lambda: NamespaceChart(cdk8s.App(), "ns", names=()), "NamespaceChart: names needs at least one"),
        (
            lambda: NamespaceChart(cdk8s.App(), "ns", names=("serving",), enforce={"curvine": "baseline"}),
            r"NamespaceChart: enforce names \['curvine'\], which are not in names",
        ),
        (
            lambda: NamespaceChart(cdk8s.App(), "ns", names=("serving",), enforce={"serving": "strict"}),
            "NamespaceChart: enforce must be one of .*, got 'strict'",
        ),
        (
            lambda: ScraperRbacChart(cdk8s.App(), "rbac", user="collector", namespaces=()),
            "ScraperRbacChart: namespaces needs at least one",
        ),
    ],
)
def test_each_rule_names_the_construct_and_the_field(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_engines_and_router_share_the_charts_one_namespace():
    """The issue's third case: a consumer could put engines and router in different namespaces, and the router then
    discovered no engine. The namespace is now one argument of the chart, not a field of either part."""
    fields = {f.name for part in (Engine, Router) for f in dataclasses.fields(part)}
    assert "namespace" not in fields
    objs = serving(namespace="team-a")
    assert {o["metadata"]["namespace"] for o in objs} == {"team-a"}
    assert flag(container(objs, "ep-router")["args"], "--k8s-namespace") == "team-a"
