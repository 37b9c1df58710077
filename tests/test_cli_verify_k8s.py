"""Kubernetes and cross-pod checks against a local fake API server (127.0.0.1), each failure path included."""

from __future__ import annotations

import pytest
from kubernetes.client import AppsV1Api, CoreV1Api

from kvtiers.cli.verify import crosspod, k8s, proxy, runner
from kvtiers.k8s_charts import names as chart_names
from tests.fakes import secrets_manager
from tests.fakes.cluster import build_healthy
from tests.fakes.kube_server import FakeEngine, FakeKube, json_reply

FAST = {"metrics_timeout": 0.3, "poll": 0.05}


@pytest.fixture
def world(dev_env, dev_objects):
    with FakeKube() as kube:
        handles = build_healthy(kube, dev_env, dev_objects)
        api = kube.api_client()
        yield kube, handles, api, CoreV1Api(api), AppsV1Api(api)


def engine_port(objects) -> int:
    """The port the rendered engine Deployment declares (``http``)."""
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "qwen2-7b-engine")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return next(p["containerPort"] for p in container["ports"] if p["name"] == "http")


def by_name(results):
    return {r.name: r for r in results}


def kube_checks(env, api):
    clients = runner.Clients(sagemaker=None, kube=api, secretsmanager=secrets_manager.for_environment(env))
    results = runner.run(env, clients, show_progress=False, **FAST)
    return by_name(r for r in results if r.area != "hyperpod")


def test_healthy_cluster_passes_every_kubernetes_check(world, dev_env):
    kube, _handles, api, _core, _apps = world
    results = kube_checks(dev_env, api)
    assert all(r.ok for r in results.values()), [r for r in results.values() if not r.ok]
    assert set(results) >= {
        "HyperPod nodes joined",
        "masters Ready",
        "master leader",
        "workers registered",
        "Curvine worker on every GPU node",
        "CSI node on every GPU node",
        "L2 claim Bound",
        "engine pods Ready",
        "router available",
        "router sees engines",
        "API key required",
        crosspod.NAME,
    }
    cross = results[crosspod.NAME]
    assert "stored 1941" in cross.detail and "hit 1941" in cross.detail and "100%" in cross.detail
    # the completions went to the engines through a port-forward (the engines check the key, which the pod proxy
    # would strip); their /metrics and /tokenize, served without a key, through the pod proxy; never to pod IPs
    assert any(
        path == "/api/v1/namespaces/serving/pods/qwen2-7b-engine-1/portforward?ports=8000" for _, path in kube.log
    )
    assert not any("/proxy/v1/completions" in path and "/pods/" in path for _, path in kube.log)
    assert any("/pods/qwen2-7b-engine-1:8000/proxy/metrics" in path for _, path in kube.log)
    assert any("/services/qwen2-7b-router:80/proxy/engines" in path for _, path in kube.log)


def test_node_not_ready(world, dev_env):
    kube, _handles, _api, core, _apps = world
    kube.nodes[1]["status"]["conditions"][0]["status"] = "False"
    check = k8s.check_gpu_nodes(core, dev_env)
    assert not check.ok and "not Ready: hyperpod-i-g6e-serving-1" in check.detail and check.hint


def test_masters_not_ready(world, dev_env):
    kube, _handles, api, core, apps = world
    kube.objects[f"/apis/apps/v1/namespaces/curvine/statefulsets/{chart_names.CURVINE_MASTER}"]["status"][
        "readyReplicas"
    ] = 0
    check = by_name(k8s.check_curvine_masters(core, apps, api, dev_env))["masters Ready"]
    assert not check.ok and "0 Ready of 1" in check.detail


def test_no_leader(world, dev_env):
    _kube, handles, api, core, apps = world
    handles["overview"]["curvine-master-0"]["master_state"] = "Standby"
    results = by_name(k8s.check_curvine_masters(core, apps, api, dev_env))
    assert not results["master leader"].ok and "0 leaders" in results["master leader"].detail
    assert "/api/overview" in results["master leader"].hint


def test_master_web_unreachable(world, dev_env):
    kube, _handles, api, core, apps = world
    del kube.proxies[("pods", "curvine", "curvine-master-0", dev_env.curvine.ports.master_web)]
    check = by_name(k8s.check_curvine_masters(core, apps, api, dev_env))["master leader"]
    assert not check.ok and "no /api/overview from curvine-master-0" in check.detail


def test_workers_not_registered(world, dev_env):
    _kube, handles, api, core, apps = world
    handles["overview"]["curvine-master-0"].update(live_workers=1, lost_workers=1)
    check = by_name(k8s.check_curvine_masters(core, apps, api, dev_env))["workers registered"]
    assert not check.ok and "1 live worker(s) (1 lost), expected 2" in check.detail


def test_worker_missing_on_a_node(world, dev_env):
    kube, _handles, _api, core, apps = world
    kube.pods.remove(kube.pod(f"{chart_names.CURVINE_WORKER}-1"))
    kube.pod(f"{chart_names.CURVINE_CSI_NODE}-0")["status"]["conditions"][0]["status"] = "False"
    results = by_name(k8s.check_curvine_nodes(core, apps, dev_env))
    worker, csi = results["Curvine worker on every GPU node"], results["CSI node on every GPU node"]
    assert not worker.ok and "hyperpod-i-g6e-serving-1" in worker.detail and "(1/2)" in worker.detail
    assert not csi.ok and "hyperpod-i-g6e-serving-0" in csi.detail


def test_l2_claim_pending(world, dev_env):
    kube, _handles, _api, core, _apps = world
    kube.objects["/api/v1/namespaces/serving/persistentvolumeclaims/curvine-l2"]["status"]["phase"] = "Pending"
    check = k8s.check_l2_claim(core, dev_env)
    assert not check.ok and "is Pending" in check.detail and "describe pvc" in check.hint


def test_missing_objects_become_failed_checks(world, dev_env):
    kube, _handles, api, _core, _apps = world
    del kube.objects["/api/v1/namespaces/serving/persistentvolumeclaims/curvine-l2"]
    del kube.objects["/apis/apps/v1/namespaces/serving/deployments/qwen2-7b-router"]
    results = kube_checks(dev_env, api)
    assert not results["L2 claim Bound"].ok and "HTTP 404" in results["L2 claim Bound"].detail
    assert not results["router"].ok and "HTTP 404" in results["router"].detail


def test_engine_not_ready(world, dev_env):
    kube, _handles, _api, core, _apps = world
    kube.pod("qwen2-7b-engine-1")["status"]["conditions"][0]["status"] = "False"
    endpoint = dev_env.serving.endpoints[0]
    check = k8s.check_engines(core, dev_env, endpoint)
    assert not check.ok and "1 Ready of 2" in check.detail and "not Ready: qwen2-7b-engine-1" in check.detail


def test_router_sees_too_few_engines(world, dev_env):
    kube, handles, api, core, apps = world
    handles["routers"]["qwen2-7b"]["engines"].pop()
    handles["routers"]["qwen2-7b"]["health"] = 503
    kube.objects["/apis/apps/v1/namespaces/serving/deployments/qwen2-7b-router"]["status"]["availableReplicas"] = 0
    results = by_name(k8s.check_router(core, apps, api, dev_env, dev_env.serving.endpoints[0]))
    assert not results["router available"].ok
    assert not results["router healthy"].ok and "HTTP 503" in results["router healthy"].detail
    assert not results["router sees engines"].ok and "lists 1 engine(s)" in results["router sees engines"].detail


def test_router_service_without_endpoints(world, dev_env):
    kube, _handles, api, core, apps = world
    del kube.proxies[("services", "serving", "qwen2-7b-router", 80)]
    results = by_name(k8s.check_router(core, apps, api, dev_env, dev_env.serving.endpoints[0]))
    assert not results["router sees engines"].ok and "/engines HTTP 503" in results["router sees engines"].detail


def cross(world, dev_env, secrets=None):
    _kube, _handles, api, core, _apps = world
    store = secrets if secrets is not None else secrets_manager.for_environment(dev_env)
    return crosspod.check_cross_pod(core, api, dev_env, dev_env.serving.endpoints[0], 0.3, 0.05, store)


def test_cross_pod_needs_two_nodes(world, dev_env):
    world[0].pod("qwen2-7b-engine-1")["spec"]["nodeName"] = "hyperpod-i-g6e-serving-0"
    check = cross(world, dev_env)
    assert not check.ok and "on 1 node(s)" in check.detail


def test_cross_pod_without_shared_l2(world, dev_env):
    _kube, handles, _api, _core, _apps = world
    for engine in handles["engines"].values():
        engine.l2 = None  # each engine keeps its own cache: B never hits what A stored
    check = cross(world, dev_env)
    assert not check.ok and "hit 0" in check.detail and "PYTHONHASHSEED" in check.hint


def test_cross_pod_without_lmcache_metrics(world, dev_env):
    _kube, handles, _api, _core, _apps = world
    for engine in handles["engines"].values():
        engine.lmcache = False
    check = cross(world, dev_env)
    assert not check.ok and "no lmcache:* counters" in check.detail


def test_cross_pod_store_never_happens(world, dev_env, dev_objects):
    kube, handles, _api, _core, _apps = world
    original = handles["engines"]["qwen2-7b-engine-0"]

    def no_store(method, path, body, authorization=None):
        if path == "/" + crosspod.completions_path(next(e for e in dev_env.serving.endpoints if e.name == "qwen2-7b")):
            return json_reply(200, {"choices": [{"text": "x"}], "usage": {"prompt_tokens": 1941}})
        return original(method, path, body, authorization)

    kube.proxy("pods", "serving", "qwen2-7b-engine-0", engine_port(dev_objects), no_store)
    check = cross(world, dev_env)
    assert not check.ok and "stored 0 of 1941 tokens" in check.detail


def test_cross_pod_completion_error(world, dev_env, dev_objects):
    kube, _handles, _api, _core, _apps = world
    kube.proxy("pods", "serving", "qwen2-7b-engine-0", engine_port(dev_objects), FakeEngine("other/model", set()))
    check = cross(world, dev_env)
    assert not check.ok and "HTTP 404" in check.detail


def test_cross_pod_sends_the_key_through_a_port_forward_to_engines_that_refuse_without_it(world, dev_env):
    kube, handles, api, _core, _apps = world
    endpoint = dev_env.serving.endpoints[0]
    assert endpoint.authenticated and all(e.key_check is not None for e in handles["engines"].values())
    # without a key (the pod proxy strips it) the engine refuses a completion, as kvtiers_api_auth decides
    refused = proxy.request(api, "pods", "serving", "qwen2-7b-engine-0", 8000, "v1/completions", "POST", {"p": 1})
    assert refused.status == 401
    store = secrets_manager.for_environment(dev_env)
    check = cross(world, dev_env, store)
    assert check.ok, check
    assert store.reads == [dev_env.api_key_secret_name(endpoint.name)]
    forwarded = [p for _, p in kube.log if p.endswith("/portforward?ports=8000")]
    assert forwarded == [
        "/api/v1/namespaces/serving/pods/qwen2-7b-engine-0/portforward?ports=8000",
        "/api/v1/namespaces/serving/pods/qwen2-7b-engine-1/portforward?ports=8000",
    ]


def test_cross_pod_fails_when_the_engines_refuse_the_key(world, dev_env):
    secret = dev_env.api_key_secret_name(dev_env.serving.endpoints[0].name)
    check = cross(world, dev_env, secrets_manager.FakeSecretsManager({secret: "rotated-elsewhere"}))
    assert not check.ok and "qwen2-7b-engine-0 completion: HTTP 401" in check.detail
    assert "KVTIERS_API_KEY_FILE" in check.hint


def test_cross_pod_fails_naming_the_secret_it_cannot_read(world, dev_env):
    check = cross(world, dev_env, secrets_manager.FakeSecretsManager({}))
    secret = dev_env.api_key_secret_name(dev_env.serving.endpoints[0].name)
    assert not check.ok and secret in check.detail and "ResourceNotFoundException" in check.detail


def test_cross_pod_fails_naming_the_pod_when_the_port_forward_is_refused(world, dev_env):
    world[0].portforward_forbidden = True
    check = cross(world, dev_env)
    assert not check.ok
    assert check.detail.startswith("port-forward to pod qwen2-7b-engine-0 port 8000: HTTP 403: ")
    assert 'cannot create resource "pods/portforward"' in check.detail
    assert "get and create on pods/portforward in serving" in check.hint


def test_cross_pod_fails_naming_the_pod_when_nothing_listens_on_its_port(world, dev_env):
    kube = world[0]
    kube.pod_servers[("serving", "qwen2-7b-engine-1", 8000)].__exit__(None, None, None)  # its port now refuses
    check = cross(world, dev_env)
    assert not check.ok
    assert check.detail.startswith("port-forward to pod qwen2-7b-engine-1 port 8000: error forwarding port 8000")
    assert "failed to connect to localhost:8000" in check.detail
    assert "qwen2-7b-engine-1 8000" in check.hint


@pytest.mark.parametrize("drift", ["engine-label", "router-service-port", "master-web-port"])
def test_a_chart_that_drifts_from_verify_fails_it(dev_env, dev_objects, drift):
    """The fake cluster is the rendered objects: a chart change that verify does not follow fails a check."""
    import copy

    objects = copy.deepcopy(dev_objects)
    kind, name = {
        "engine-label": ("Deployment", "qwen2-7b-engine"),
        "router-service-port": ("Service", "qwen2-7b-router"),
        "master-web-port": ("StatefulSet", "curvine-master"),
    }[drift]
    obj = next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)
    if drift == "engine-label":
        obj["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] = "model-server"
    elif drift == "router-service-port":
        obj["spec"]["ports"][0]["port"] = 8080
    else:
        next(p for c in obj["spec"]["template"]["spec"]["containers"] for p in c["ports"] if p["name"] == "web")[
            "containerPort"
        ] = 9100
    with FakeKube() as kube:
        build_healthy(kube, dev_env, objects)
        failed = {r.name for r in kube_checks(dev_env, kube.api_client()).values() if not r.ok}
    assert (
        failed
        >= {
            "engine-label": {"engine pods Ready"},
            "router-service-port": {"router sees engines"},
            "master-web-port": {"master leader"},
        }[drift]
    )


def test_verify_finds_a_pod_that_mounts_the_whole_l2_or_another_endpoints_directory(world, dev_env):
    """The healthy fake runs the rendered engine and janitor pod specs; a pod added beside them, or an engine edited
    after admission, that mounts the claim otherwise is named."""
    kube, _handles, _api, core, _apps = world
    assert k8s.check_l2_isolation(core, dev_env).ok
    engine = kube.pod("qwen2-7b-engine-0")
    claim_volume = next(
        v["name"] for v in engine["spec"]["volumes"] if (v.get("persistentVolumeClaim") or {}).get("claimName")
    )
    spy = {
        "volumes": [{"name": "l2", "persistentVolumeClaim": {"claimName": dev_env.serving.l2_claim_name}}],
        "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "l2", "mountPath": "/all"}]}],
    }
    kube.add_pod("serving", "spy", {"app": "spy"}, "system-1", spec=spy)
    engine["spec"].setdefault("initContainers", []).append(
        {
            "name": "peek",
            "image": "busybox",
            "volumeMounts": [{"name": claim_volume, "mountPath": "/x", "subPath": "endpoint-other"}],
        }
    )
    check = k8s.check_l2_isolation(core, dev_env)
    assert not check.ok
    assert "spy/c mounts curvine-l2 (its root)" in check.detail
    assert "qwen2-7b-engine-0/peek mounts endpoint-other, not endpoint-qwen2-7b/" in check.detail
