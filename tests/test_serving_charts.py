"""Self-managed serving charts: every object valid against the Kubernetes 1.34 schemas, and the objects agree
with each other and with the sizing (L2 path, hash seed, discovery selector, GPUs, memory)."""

from __future__ import annotations

import copy
import json

import cdk8s
import kubernetes_validate
import pytest
import yaml

from kvtiers.config import model
from kvtiers.config.schema import Environment
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.serving.endpoint import CONFIG_CHECKSUM_ANNOTATION, LMCACHE_CONFIG_KEY
from kvtiers.k8s_charts.serving.lmcache import per_pod_env
from kvtiers.stacks.wiring import serving as wiring
from tests.conftest import CONFIG_DIR

DEV = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())
SECOND = {
    "name": "llama-8b",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "source": {
        "type": "s3",
        "bucket": "kvtiers-models",
        "prefix": "llama/3.1-8b-instruct",
    },
    "instance_group": "g6e-serving",
    "replicas": 2,
    "tensor_parallel_size": 2,
    "l1_gib": 20,
    "l2": "off",
    "routing": "kvaware",
    "api": "completions",
    "internal_load_balancer": True,
}
ROLE_ARN = "arn:aws:iam::111111111111:role/kvtiers-llama-8b-weights"


def two_endpoint_env(**second) -> Environment:
    raw = copy.deepcopy(DEV)
    raw["serving"]["endpoints"].append({**SECOND, **second})
    return Environment.model_validate(raw)


@pytest.fixture(scope="module")
def env() -> Environment:
    return two_endpoint_env()


def render(env: Environment, endpoint: str, **kwargs) -> list[dict]:
    return wiring.serving_chart(cdk8s.App(), endpoint, env, endpoint, **kwargs).to_json()


@pytest.fixture(scope="module")
def charts(env) -> dict[str, list[dict]]:
    return {"qwen2-7b": render(env, "qwen2-7b"), "llama-8b": render(env, "llama-8b", model_role_arn=ROLE_ARN)}


def one(objs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, [(o["kind"], o["metadata"]["name"]) for o in objs]
    return found[0]


def engine_deployment(objs):
    return one(
        objs, "Deployment", next(o["metadata"]["name"] for o in objs if o["metadata"]["name"].endswith("-engine"))
    )


def router_deployment(objs):
    return next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-router"))


def vllm(objs) -> dict:
    return next(c for c in engine_deployment(objs)["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")


def lmcache_config_map(objs) -> dict:
    return one(
        objs, "ConfigMap", next(o["metadata"]["name"] for o in objs if o["metadata"]["name"].endswith("-lmcache"))
    )


def lmcache_yaml(objs) -> dict:
    return yaml.safe_load(lmcache_config_map(objs)["data"][LMCACHE_CONFIG_KEY])


def flag(args: list[str], name: str) -> str:
    assert args.count(name) == 1, (name, args)
    return args[args.index(name) + 1]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def selector_matches(selector: str, pod_labels: dict[str, str]) -> bool:
    pairs = dict(term.split("=", 1) for term in selector.split(","))
    return all(pod_labels.get(k) == v for k, v in pairs.items())


def test_every_object_is_valid_kubernetes_1_33(charts):
    for objs in charts.values():
        for obj in objs:
            if obj["kind"] == "SecretProviderClass":
                continue  # a CRD: tests/test_endpoint_secrets.py validates it against the driver's schema
            kubernetes_validate.validate(obj, "1.34", strict=True)


def test_all_objects_in_the_serving_namespace_and_no_namespace_or_claim_created(env, charts):
    for objs in charts.values():
        kinds = {o["kind"] for o in objs}
        assert not kinds & {"Namespace", "PersistentVolumeClaim"}
        assert {o["metadata"]["namespace"] for o in objs} == {env.serving.namespace}


def test_l2_mount_path_matches_remote_url_and_the_claim(env, charts):
    objs = charts["qwen2-7b"]
    assert model.sizing(env).endpoint("qwen2-7b").l2_enabled
    pod = engine_deployment(objs)["spec"]["template"]["spec"]
    remote = lmcache_yaml(objs)["remote_url"]
    assert remote.startswith("fs://localhost:0/")
    path = remote.removeprefix("fs://localhost:0")
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
    }
    mounts = {m["mountPath"].rstrip("/") + "/": m for m in vllm(objs)["volumeMounts"]}
    endpoint = next(e for e in env.serving.endpoints if e.name == "qwen2-7b")
    directory = f"endpoint-qwen2-7b/{model.l2_namespace(env, endpoint).directory}"
    assert path == env.serving.l2_mount_path.rstrip("/") + f"/{directory}/"
    # LMCache writes at the root of its mount, which is the endpoint's own directory of the claim (nothing above it)
    assert mounts[path]["subPath"] == directory
    assert claims[mounts[path]["name"]] == env.serving.l2_claim_name
    assert lmcache_yaml(objs)["remote_serde"] == "naive"


def test_l2_off_means_no_remote_and_no_mount(env, charts):
    objs = charts["llama-8b"]
    assert not model.sizing(env).endpoint("llama-8b").l2_enabled
    assert "remote_url" not in lmcache_yaml(objs)
    pod = engine_deployment(objs)["spec"]["template"]["spec"]
    assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert env.serving.l2_mount_path not in {m["mountPath"] for m in vllm(objs)["volumeMounts"]}


def test_lmcache_is_configured_only_through_the_file(env, charts):
    for name, objs in charts.items():
        container = vllm(objs)
        variables = env_of(container)
        # LMCACHE_TRACK_USAGE is no configuration key: LMCache's usage reporting reads it (usage_context.py).
        lmcache_vars = {k for k in variables if k.startswith("LMCACHE_")} - {"LMCACHE_TRACK_USAGE"}
        # Only the per-pod values come from variables: the instance id (kvaware) and the temp dir (L2 on).
        lmcache = wiring.serving_chart(cdk8s.App(), name, env, name).lmcache
        assert lmcache_vars == {"LMCACHE_CONFIG_FILE"} | set(per_pod_env(lmcache))
        extra = {"LMCACHE_LMCACHE_INSTANCE_ID"} if name == "llama-8b" else {"LMCACHE_EXTRA_CONFIG"}
        assert set(per_pod_env(lmcache)) == extra
        order = [e["name"] for e in container["env"]]
        assert all(order.index("POD_NAME") < order.index(k) for k in extra)
        path = variables["LMCACHE_CONFIG_FILE"]["value"]
        mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
        volume = next(
            v for v in engine_deployment(objs)["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]
        )
        assert volume["configMap"]["name"] == lmcache_config_map(objs)["metadata"]["name"]
        assert path.endswith("/" + LMCACHE_CONFIG_KEY)
        config = lmcache_yaml(objs)
        sizing = model.sizing(env).endpoint(name)
        assert config["chunk_size"] == 256 and config["local_cpu"] is True
        assert config["max_local_cpu_size"] == sizing.l1_bytes / sizing.gpus_per_replica / 1024**3


def test_config_checksum_annotation_follows_the_config(env, charts):
    import hashlib

    for objs in charts.values():
        data = lmcache_config_map(objs)["data"]
        # the LMCache config, then the scripts the engines load from the same ConfigMap, by name (the preStop hook, the
        # key check, the L2 guard)
        texts = [data[LMCACHE_CONFIG_KEY], *(v for k, v in data.items() if k != LMCACHE_CONFIG_KEY)]
        annotations = engine_deployment(objs)["spec"]["template"]["metadata"]["annotations"]
        assert annotations[CONFIG_CHECKSUM_ANNOTATION] == hashlib.sha256("\0".join(texts).encode()).hexdigest()
    assert (
        len(
            {
                engine_deployment(o)["spec"]["template"]["metadata"]["annotations"][CONFIG_CHECKSUM_ANNOTATION]
                for o in charts.values()
            }
        )
        == 2
    )


def test_one_hash_seed_on_every_engine_and_router(env, charts):
    seeds = set()
    for objs in charts.values():
        for deployment in (o for o in objs if o["kind"] == "Deployment"):
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                seeds.add(env_of(container)["PYTHONHASHSEED"]["value"])
    assert seeds == {env.serving.hash_seed}


def test_router_selector_matches_only_its_own_engines(charts):
    pods = {
        (name, kind): dep["spec"]["template"]["metadata"]["labels"]
        for name, objs in charts.items()
        for kind, dep in (("engine", engine_deployment(objs)), ("router", router_deployment(objs)))
    }
    for name, objs in charts.items():
        router = router_deployment(objs)["spec"]["template"]["spec"]["containers"][0]
        selector = flag(router["args"], "--k8s-label-selector")
        assert selector == names.label_selector(names.engine_selector(name))  # the contract kvtiers verify reads
        matched = {key for key, pod_labels in pods.items() if selector_matches(selector, pod_labels)}
        assert matched == {(name, "engine")}
        assert flag(router["args"], "--k8s-namespace") == objs[0]["metadata"]["namespace"]
        assert flag(router["args"], "--service-discovery") == "k8s"


def test_labels_and_names_match_what_verify_looks_for(charts):
    for name, objs in charts.items():
        router = router_deployment(objs)
        assert router["metadata"]["name"] == names.router_name(name)
        assert one(objs, "Service", names.router_name(name))["spec"]["ports"][0]["port"] == names.ROUTER_SERVICE_PORT
        assert selector_matches(
            names.label_selector(names.router_selector(name)), router["spec"]["template"]["metadata"]["labels"]
        )
        assert selector_matches(
            names.label_selector(names.engine_selector(name)),
            engine_deployment(objs)["spec"]["template"]["metadata"]["labels"],
        )
        assert vllm(objs)["ports"][0]["containerPort"] == names.ENGINE_PORT


def test_services_and_pdb_select_their_own_pods(charts):
    for objs in charts.values():
        engine_labels = engine_deployment(objs)["spec"]["template"]["metadata"]["labels"]
        router_labels = router_deployment(objs)["spec"]["template"]["metadata"]["labels"]
        for svc in (o for o in objs if o["kind"] == "Service"):
            target = engine_labels if svc["metadata"]["name"].endswith("-engine") else router_labels
            assert svc["spec"]["selector"].items() <= target.items()
        pdbs = {p["metadata"]["name"]: p for p in objs if p["kind"] == "PodDisruptionBudget"}
        engine_pdb = pdbs[engine_deployment(objs)["metadata"]["name"]]
        router_pdb = pdbs[router_deployment(objs)["metadata"]["name"]]
        assert len(pdbs) == 2 and engine_pdb["spec"]["maxUnavailable"] == router_pdb["spec"]["maxUnavailable"] == 1
        assert engine_pdb["spec"]["selector"]["matchLabels"].items() <= engine_labels.items()
        assert router_pdb["spec"]["selector"]["matchLabels"].items() <= router_labels.items()


def test_gpus_equal_tensor_parallel_size_and_memory_equals_sizing(env, charts):
    for name, objs in charts.items():
        container = vllm(objs)
        sizing = model.sizing(env).endpoint(name)
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        tp = int(flag(container["args"], "--tensor-parallel-size"))
        assert int(requests[names.GPU_RESOURCE]) == int(limits[names.GPU_RESOURCE]) == tp == sizing.gpus_per_replica
        assert requests["memory"] == limits["memory"] == f"{sizing.pod_memory_gib}Gi"
        endpoint = next(e for e in env.serving.endpoints if e.name == name)
        assert int(requests["cpu"]) == int(limits["cpu"]) == endpoint.cpu
        assert flag(container["args"], "--dtype") == endpoint.dtype
        assert flag(container["args"], "--served-model-name") == endpoint.model


def test_every_container_has_requests_and_limits(charts):
    for objs in charts.values():
        for deployment in (o for o in objs if o["kind"] == "Deployment"):
            spec = deployment["spec"]["template"]["spec"]
            for container in spec["containers"] + spec.get("initContainers", []):
                assert container["resources"]["requests"] and container["resources"]["limits"], container["name"]


def test_engine_placement_shm_probes_and_spread(env, charts):
    objs = charts["qwen2-7b"]
    endpoint = env.serving.endpoints[0]
    pod = engine_deployment(objs)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {names.HYPERPOD_INSTANCE_GROUP: endpoint.instance_group}
    assert {"key": names.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{endpoint.shm_gib}Gi"}
    assert {"name": "shm", "mountPath": "/dev/shm"} in vllm(objs)["volumeMounts"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "DoNotSchedule"
    container = vllm(objs)
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/health"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= endpoint.startup_timeout_seconds
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
    assert container["ports"][0]["containerPort"] == 8000


def test_group_taints_are_tolerated():
    raw = copy.deepcopy(DEV)
    raw["hyperpod"]["instance_groups"][0].update(
        taints=[{"key": "kvtiers.io/gpu", "value": "serving"}], deep_health_checks=[]
    )
    env = Environment.model_validate(raw)
    pod = engine_deployment(render(env, "qwen2-7b"))["spec"]["template"]["spec"]
    assert {"key": "kvtiers.io/gpu", "operator": "Equal", "value": "serving", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_vllm_arguments(charts):
    args = vllm(charts["qwen2-7b"])["args"]
    assert args[0] == "Qwen/Qwen2-7B-Instruct"
    # qwen2-7b has the L2: LMCache is loaded through the L2 guard (kvtiers/k8s_charts/kvtiers_l2_guard.py)
    assert json.loads(flag(args, "--kv-transfer-config")) == {
        "kv_connector": "KvtiersLMCacheConnectorV1",
        "kv_connector_module_path": "kvtiers_l2_guard",
        "kv_role": "kv_both",
    }
    plain = vllm(charts["llama-8b"])["args"]
    assert json.loads(flag(plain, "--kv-transfer-config")) == {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
    }
    assert "--enable-prefix-caching" in args
    assert flag(args, "--max-model-len") == "16384" and flag(args, "--gpu-memory-utilization") == "0.9"


def test_huggingface_source_uses_a_cache_dir_and_the_token_secret():
    raw = copy.deepcopy(DEV)
    raw["serving"]["endpoints"][0]["source"] = {"type": "huggingface", "token_secret": "hf-token"}
    objs = render(Environment.model_validate(raw), "qwen2-7b")
    variables = env_of(vllm(objs))
    assert variables["HF_TOKEN_PATH"]["value"] == "/var/run/kvtiers/secrets/hf-token" and "HF_TOKEN" not in variables
    assert variables["HF_HOME"]["value"].startswith("/models/")
    assert "initContainers" not in engine_deployment(objs)["spec"]["template"]["spec"]


def test_s3_source_syncs_into_an_empty_dir_and_serves_that_path(charts):
    objs = charts["llama-8b"]
    pod = engine_deployment(objs)["spec"]["template"]["spec"]
    (sync,) = pod["initContainers"]
    assert sync["command"][:3] == ["aws", "s3", "sync"]
    assert sync["command"][3] == "s3://kvtiers-models/llama/3.1-8b-instruct"
    # The path is the model id on every endpoint: LMCache's key holds it, so endpoints of one model can share.
    assert sync["command"][4] == "/models/meta-llama/Llama-3.1-8B-Instruct"
    assert vllm(objs)["args"][0] == "/models/meta-llama/Llama-3.1-8B-Instruct"
    assert flag(vllm(objs)["args"], "--served-model-name") == "meta-llama/Llama-3.1-8B-Instruct"
    models = next(v for v in pod["volumes"] if v["name"] == "models")
    assert "emptyDir" in models
    sa = one(objs, "ServiceAccount", "llama-8b-engine")
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert sa["metadata"]["annotations"]["kvtiers.io/model-role-arn"] == ROLE_ARN


def test_kvaware_wires_engines_to_the_router_controller(env, charts):
    objs = charts["llama-8b"]
    config = lmcache_yaml(objs)
    router = router_deployment(objs)["spec"]["template"]["spec"]["containers"][0]
    pull_port = int(flag(router["args"], "--lmcache-controller-port"))
    reply_port = int(flag(router["args"], "--lmcache-controller-reply-port"))
    service = one(objs, "Service", "llama-8b-router")
    host = f"llama-8b-router.{env.serving.namespace}.svc"
    assert config["enable_controller"] is True
    assert config["controller_pull_url"] == f"{host}:{pull_port}"
    assert config["controller_reply_url"] == f"{host}:{reply_port}"
    assert {pull_port, reply_port} <= {p["port"] for p in service["spec"]["ports"]}
    assert len(config["lmcache_worker_ports"]) == int(flag(vllm(objs)["args"], "--tensor-parallel-size"))
    variables = env_of(vllm(objs))
    assert variables["LMCACHE_LMCACHE_INSTANCE_ID"]["value"] == "$(POD_NAME)"
    assert variables["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "lmcache_instance_id" not in config
    assert flag(router["args"], "--routing-logic") == "kvaware"
    # prefixaware: no controller anywhere
    qwen = charts["qwen2-7b"]
    assert "enable_controller" not in lmcache_yaml(qwen)
    assert (
        "--lmcache-controller-port" not in router_deployment(qwen)["spec"]["template"]["spec"]["containers"][0]["args"]
    )


def test_session_routing_passes_the_session_key():
    raw = copy.deepcopy(DEV)
    raw["serving"]["endpoints"][0].update(routing="session", session_key="x-user-id")
    router = router_deployment(render(Environment.model_validate(raw), "qwen2-7b"))
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert flag(args, "--routing-logic") == "session" and flag(args, "--session-key") == "x-user-id"


def test_router_rbac_is_read_only_on_pods(charts):
    for objs in charts.values():
        role = one(objs, "Role")
        assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
        binding = one(objs, "RoleBinding")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        sa = router_deployment(objs)["spec"]["template"]["spec"]["serviceAccountName"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": role["metadata"]["namespace"]}
        ]
        assert one(objs, "ServiceAccount", sa)


def test_internal_load_balancer_only_when_asked(charts):
    assert not [o for o in charts["qwen2-7b"] if o["kind"] == "Service" and o["spec"].get("type") == "LoadBalancer"]
    nlb = next(o for o in charts["llama-8b"] if o["kind"] == "Service" and o["spec"].get("type") == "LoadBalancer")
    assert nlb["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-internal"] == "true"
    assert [p["name"] for p in nlb["spec"]["ports"]] == ["http"]


def _load_balancer(objs: list[dict]) -> dict:
    return next(o for o in objs if o["kind"] == "Service" and o["spec"].get("type") == "LoadBalancer")


def test_the_load_balancer_admits_only_the_endpoints_allowed_clients(env, charts):
    # Default: internal, the VPC only. The in-tree AWS cloud provider writes the ranges into the nodes' security
    # groups (0.0.0.0/0 without them); Local keeps the client's address, which the router's NetworkPolicy checks.
    nlb = _load_balancer(charts["llama-8b"])
    assert nlb["spec"]["loadBalancerSourceRanges"] == [env.network.cidr]
    assert nlb["spec"]["externalTrafficPolicy"] == "Local"
    narrowed = two_endpoint_env(allowed_clients=["10.192.8.0/24", "172.16.0.0/12"])
    nlb = _load_balancer(render(narrowed, "llama-8b", model_role_arn=ROLE_ARN))
    assert nlb["spec"]["loadBalancerSourceRanges"] == ["10.192.8.0/24", "172.16.0.0/12"]


def test_a_router_behind_the_nlb_outlasts_the_nlbs_health_checks_in_a_rollout(charts):
    """With ``externalTrafficPolicy: Local`` the NLB sends new connections to a node until its health check on the
    Service's healthCheckNodePort has failed ``unhealthy-threshold`` times ``interval`` apart, and to a new router's
    node only after ``healthy-threshold`` passes (cloud-provider-aws v1.34.3 ``aws.go``
    ``buildNLBHealthCheckConfiguration``: HTTP, 10 s, 2 and 2, annotations override). A stopping router must keep
    serving past the first; a new one must count as available (so that the old one stops) only after the second. And
    only nodes the NLB registers can carry it: instances of the cluster's account, not HyperPod's."""
    objs = charts["llama-8b"]
    annotations = _load_balancer(objs)["metadata"]["annotations"]
    prefix = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-"
    interval = int(annotations[prefix + "interval"])
    unhealthy, healthy = (
        int(annotations[prefix + "unhealthy-threshold"]),
        int(annotations[prefix + "healthy-threshold"]),
    )
    router = router_deployment(objs)
    pod = router["spec"]["template"]["spec"]
    assert pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"] > unhealthy * interval
    assert router["spec"]["minReadySeconds"] > healthy * interval
    assert pod["terminationGracePeriodSeconds"] > pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    ((key, value),) = names.HYPERPOD_NODE_SELECTOR.items()
    assert {"key": key, "operator": "NotIn", "values": [value]} in required["nodeSelectorTerms"][0]["matchExpressions"]
    # Without the NLB nothing waits on a health check: the router keeps its short delay and may use a GPU node.
    plain = router_deployment(charts["qwen2-7b"])
    assert "minReadySeconds" not in plain["spec"]
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution"
        not in plain["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    )


def test_constructs_reject_what_they_cannot_build(env):
    with pytest.raises(ValueError, match="no endpoint named 'nope'"):
        render(env, "nope")
    with pytest.raises(ValueError, match="Router: replicas must be 1 when routing is 'kvaware'"):
        render(two_endpoint_env(router_replicas=2), "llama-8b")
    operator_env = two_endpoint_env(serving="operator")
    with pytest.raises(ValueError, match="serving is 'operator', not 'self_managed'"):
        render(operator_env, "llama-8b")


def test_l2_report(env):
    assert model.l2_report(env) == (
        "qwen2-7b: L2 on (auto: expected prompt 2500 >= threshold 1000 tokens)",
        "llama-8b: L2 off (l2: off)",
    )


def test_rendering_is_deterministic(env):
    assert render(env, "llama-8b") == render(env, "llama-8b")


def test_pod_identity_association_names_the_engine_service_account(prod_synth):
    """The S3 weights role is bound to the service accounts the engine and router pods actually run as (the router
    reads its endpoint's API key with it, and kvaware's copies the tokenizer from the weights' prefix)."""
    resources = prod_synth.template_json(prod_synth.graph.workloads)["Resources"]
    associations = {
        r["Properties"]["ServiceAccount"] for r in resources.values() if r["Type"] == "AWS::EKS::PodIdentityAssociation"
    }
    accounts = {
        o["spec"]["template"]["spec"]["serviceAccountName"]
        for name, chart in prod_synth.graph.workloads.charts.items()
        if name.startswith("Endpoint")
        for o in chart.to_json()
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith(("-engine", "-router"))
    }
    assert (
        associations
        == accounts
        == {
            "llama31-70b-engine",
            "qwen25-32b-engine",
            "llama31-70b-router",
            "qwen25-32b-router",
        }
    )


# ------------------------------------------------------------------------------------------- rollouts and drains


def test_engines_drain_before_they_stop(charts):
    """The preStop hook runs the ConfigMap's script with the settings the engines register with; the grace period
    covers the hook's bound and vLLM's shutdown (tests/test_engine_drain.py runs the hook itself)."""
    for objs in charts.values():
        pod = engine_deployment(objs)["spec"]["template"]["spec"]
        container = vllm(objs)
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        mount = next(m for m in container["volumeMounts"] if command[1].startswith(m["mountPath"] + "/"))
        assert (
            next(v for v in pod["volumes"] if v["name"] == mount["name"])["configMap"]["name"]
            == (lmcache_config_map(objs)["metadata"]["name"])
        )
        assert command[1].rpartition("/")[2] in lmcache_config_map(objs)["data"]
        assert command[0] == "/opt/venv/bin/python3"  # the engine image's venv, beside its vllm
        assert container["command"][-1] == "/opt/venv/bin/vllm"  # started by the metrics wipe's shell
        assert flag(command, "--metrics-url") == f"http://127.0.0.1:{container['ports'][0]['containerPort']}/metrics"
        bound = float(flag(command, "--settle-seconds")) + float(flag(command, "--max-seconds"))
        assert pod["terminationGracePeriodSeconds"] >= bound + 30
        config = lmcache_yaml(objs)
        if config.get("enable_controller"):
            assert flag(command, "--controller") == config["controller_pull_url"]
            assert flag(command, "--worker-ports") == ",".join(map(str, config["lmcache_worker_ports"]))
            assert float(flag(command, "--resend-seconds")) <= config["lmcache_worker_heartbeat_time"]
            assert env_of(container)["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        else:
            assert "--controller" not in command and "POD_IP" not in env_of(container)
        # A lost node's engines are evicted after 30 s, which is what drops them from the router's discovery.
        tolerated = {t["key"]: t["tolerationSeconds"] for t in pod["tolerations"] if t["effect"] == "NoExecute"}
        assert tolerated == {"node.kubernetes.io/not-ready": 30, "node.kubernetes.io/unreachable": 30}


def test_routers_survive_a_rollout_and_a_node_loss(charts):
    for name, objs in charts.items():
        router = router_deployment(objs)
        pod = router["spec"]["template"]["spec"]
        kvaware = name == "llama-8b"
        assert router["spec"]["replicas"] == (1 if kvaware else 2)
        assert router["spec"]["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        }
        pdb = one(objs, "PodDisruptionBudget", router["metadata"]["name"])
        assert pdb["spec"]["maxUnavailable"] == 1
        spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
        assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
        assert spread["kubernetes.io/hostname"]["matchLabelKeys"] == ["pod-template-hash"]
        assert (
            spread["kubernetes.io/hostname"]["labelSelector"]["matchLabels"]
            == router["spec"]["selector"]["matchLabels"]
        )
        assert spread["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"
        container = pod["containers"][0]
        delay = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert 5 <= delay < pod["terminationGracePeriodSeconds"]
        assert container["startupProbe"]["periodSeconds"] == 1
        tolerated = {t["key"]: t["tolerationSeconds"] for t in pod["tolerations"] if t["effect"] == "NoExecute"}
        assert tolerated == {"node.kubernetes.io/not-ready": 30, "node.kubernetes.io/unreachable": 30}
        # kvaware loads the fallback for departed engines from its own ConfigMap (before the key check, which
        # --callbacks names when the endpoint has a key: tests/test_endpoint_secrets.py)
        module = flag(container["args"], "--callbacks").rpartition(".")[0]
        scripts = one(objs, "ConfigMap", names.router_scripts_config_map_name(name))
        assert f"{module}.py" in scripts["data"]
        assert ("kvtiers_kvaware_fallback.py" in scripts["data"]) is kvaware
        mount = next(m for m in container["volumeMounts"] if m["name"] == "kvtiers")
        assert env_of(container)["PYTHONPATH"]["value"] == mount["mountPath"]


def test_router_replicas_default_to_two_and_kvaware_to_one():
    raw = copy.deepcopy(DEV)
    endpoint = Environment.model_validate(raw).serving.endpoints[0]
    assert endpoint.routing == "prefixaware" and endpoint.router_replicas == 2
    assert two_endpoint_env().serving.endpoints[1].router_replicas == 1
    raw["serving"]["endpoints"][0]["router_replicas"] = 3
    assert Environment.model_validate(raw).serving.endpoints[0].router_replicas == 3


def test_the_engines_spread_counts_every_revision_and_skips_tainted_nodes(charts):
    """With maxSurge 0, counting old and new pods together keeps every node within one of the others throughout a
    rollout. Counting one revision (matchLabelKeys: pod-template-hash) lets the ReplicaSet delete an old pod beside
    the first new one, and the next new pod must then go to the node still full of old pods: Pending for good."""
    for objs in charts.values():
        engines = engine_deployment(objs)
        assert engines["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
        (spread,) = engines["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert (spread["topologyKey"], spread["maxSkew"], spread["whenUnsatisfiable"]) == (
            "kubernetes.io/hostname",
            1,
            "DoNotSchedule",
        )
        assert "matchLabelKeys" not in spread
        assert spread["nodeTaintsPolicy"] == "Honor"
