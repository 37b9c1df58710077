"""Kubernetes checks: Curvine masters and leader, per-node Curvine pods, the L2 claim, endpoints and routers."""

from __future__ import annotations

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api

from kvtiers.cli.verify import proxy
from kvtiers.cli.verify.result import CheckResult, failed, passed
from kvtiers.config import model
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.k8s_charts import names as k8s_names


def pod_ready(pod) -> bool:
    if pod.metadata.deletion_timestamp is not None or (pod.status.phase != "Running"):
        return False
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def node_ready(node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def selector(match_labels: dict[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((match_labels or {}).items()))


def hyperpod_nodes(core: CoreV1Api, groups: set[str] | None = None) -> list:
    nodes = core.list_node(label_selector=k8s_names.label_selector(k8s_names.HYPERPOD_NODE_SELECTOR)).items
    if groups is None:
        return nodes
    return [n for n in nodes if (n.metadata.labels or {}).get(k8s_names.HYPERPOD_INSTANCE_GROUP) in groups]


# ------------------------------------------------------------------------------------------------- nodes


def check_gpu_nodes(core: CoreV1Api, env: Environment) -> CheckResult:
    nodes = hyperpod_nodes(core)
    expected = sum(g.count for g in env.hyperpod.instance_groups)
    not_ready = [n.metadata.name for n in nodes if not node_ready(n)]
    if len(nodes) != expected or not_ready:
        return failed(
            "kubernetes",
            "HyperPod nodes joined",
            f"{len(nodes) - len(not_ready)} Ready of {len(nodes)} HyperPod nodes, config expects {expected}"
            + (f"; not Ready: {', '.join(not_ready)}" if not_ready else ""),
            "kubectl get nodes -l sagemaker.amazonaws.com/compute-type=hyperpod; kubectl describe node <name>",
        )
    return passed("kubernetes", "HyperPod nodes joined", f"{len(nodes)}/{expected} Ready")


# ------------------------------------------------------------------------------------------------- Curvine


def master_overviews(
    core: CoreV1Api, api: ApiClient, env: Environment, match_labels: dict[str, str]
) -> tuple[dict[str, dict], list[str]]:
    """``/api/overview`` of every Ready master pod (by name), and the Ready pods that did not answer."""
    ns = env.curvine.namespace
    bodies: dict[str, dict] = {}
    unreachable: list[str] = []
    for pod in sorted(
        core.list_namespaced_pod(ns, label_selector=selector(match_labels)).items, key=lambda p: p.metadata.name
    ):
        if not pod_ready(pod):
            continue
        try:
            response = proxy.request(
                api,
                "pods",
                ns,
                pod.metadata.name,
                env.curvine.ports.master_web,
                k8s_names.CURVINE_MASTER_OVERVIEW_PATH,
                timeout=15,
            )
            body = response.json() if response.ok else None
        except (proxy.ProxyError, ValueError):
            body = None
        if isinstance(body, dict) and "master_state" in body:
            bodies[pod.metadata.name] = body
        else:
            unreachable.append(pod.metadata.name)
    return bodies, unreachable


def check_curvine_masters(core: CoreV1Api, apps: AppsV1Api, api: ApiClient, env: Environment) -> list[CheckResult]:
    ns, want = env.curvine.namespace, env.curvine.master.replicas
    sts = apps.read_namespaced_stateful_set(k8s_names.CURVINE_MASTER, ns)
    ready = sts.status.ready_replicas or 0
    hint = f"kubectl -n {ns} get statefulset {k8s_names.CURVINE_MASTER}; kubectl -n {ns} logs <master pod>"
    results = []
    if sts.spec.replicas != want or ready != want:
        results.append(
            failed("curvine", "masters Ready", f"{ready} Ready of {sts.spec.replicas} (config: {want})", hint)
        )
    else:
        results.append(passed("curvine", "masters Ready", f"{ready}/{want} Ready"))
    bodies, unreachable = master_overviews(core, api, env, sts.spec.selector.match_labels)
    states = {pod: body["master_state"] for pod, body in bodies.items()}
    overview = next((b for b in bodies.values() if b["master_state"] == k8s_names.CURVINE_LEADER_STATE), None)
    leaders = [p for p, s in states.items() if s == k8s_names.CURVINE_LEADER_STATE]
    detail = ", ".join(f"{p}: {s}" for p, s in states.items()) or "no master answered"
    if unreachable:
        detail += f"; no /api/overview from {', '.join(unreachable)}"
    if len(leaders) == 1:
        results.append(passed("curvine", "master leader", f"leader {leaders[0]} ({detail})"))
    else:
        results.append(
            failed(
                "curvine",
                "master leader",
                f"{len(leaders)} leaders ({detail})",
                f"Raft journal: master logs in {ns}; the web port {env.curvine.ports.master_web} must serve "
                "/api/overview (master_state Active on the leader)",
            )
        )
    if overview is not None:
        live, workers = int(overview.get("live_workers", 0)), model.sizing(env).curvine_workers
        if live >= workers:
            results.append(
                passed("curvine", "workers registered", f"{live} live, {overview.get('lost_workers', 0)} lost")
            )
        else:
            results.append(
                failed(
                    "curvine",
                    "workers registered",
                    f"leader sees {live} live worker(s) ({overview.get('lost_workers', 0)} lost), expected {workers}",
                    f"kubectl -n {ns} logs daemonset/{k8s_names.CURVINE_WORKER}; worker RPC port reachability",
                )
            )
    return results


def check_daemonset_on_nodes(
    core: CoreV1Api, apps: AppsV1Api, namespace: str, daemonset: str, nodes: list, what: str
) -> CheckResult:
    ds = apps.read_namespaced_daemon_set(daemonset, namespace)
    pods = core.list_namespaced_pod(namespace, label_selector=selector(ds.spec.selector.match_labels)).items
    ready_on = {p.spec.node_name for p in pods if pod_ready(p)}
    missing = sorted(n.metadata.name for n in nodes if n.metadata.name not in ready_on)
    name = f"{what} on every GPU node"
    if not nodes:
        return failed("curvine", name, "no HyperPod nodes found", "kubectl get nodes --show-labels")
    if missing:
        return failed(
            "curvine",
            name,
            f"no Ready {daemonset} pod on {', '.join(missing)} ({len(nodes) - len(missing)}/{len(nodes)})",
            f"kubectl -n {namespace} get pods -o wide -l {selector(ds.spec.selector.match_labels)}; "
            "node taints/tolerations, NVMe hostPath, image pull",
        )
    return passed("curvine", name, f"{len(nodes)}/{len(nodes)} nodes")


def check_curvine_nodes(core: CoreV1Api, apps: AppsV1Api, env: Environment) -> list[CheckResult]:
    ns = env.curvine.namespace
    worker_nodes = hyperpod_nodes(core, {g.name for g in env.curvine_worker_groups})
    all_nodes = hyperpod_nodes(core)
    return [
        check_daemonset_on_nodes(core, apps, ns, k8s_names.CURVINE_WORKER, worker_nodes, "Curvine worker"),
        check_daemonset_on_nodes(core, apps, ns, k8s_names.CURVINE_CSI_NODE, all_nodes, "CSI node"),
    ]


def check_l2_claim(core: CoreV1Api, env: Environment) -> CheckResult:
    ns, claim = env.serving.namespace, env.serving.l2_claim_name
    pvc = core.read_namespaced_persistent_volume_claim(claim, ns)
    phase = pvc.status.phase if pvc.status else None
    if phase == "Bound":
        return passed("storage", "L2 claim Bound", f"{ns}/{claim} -> {pvc.spec.volume_name}")
    return failed(
        "storage",
        "L2 claim Bound",
        f"{ns}/{claim} is {phase}",
        f"kubectl -n {ns} describe pvc {claim}; Curvine CSI controller logs (master-addrs, fs-path)",
    )


L2_ISOLATION_NAME = "each pod mounts only its own L2 directory"


def l2_mount_problems(pod, claim: str, expected_sub_path: str | None) -> list[str]:
    """How ``pod`` mounts the L2 claim against what it may: the root (``expected_sub_path`` ``""``, the janitor),
    exactly its endpoint's directory, or nothing (``None``). Every kind of container counts."""
    volumes = {
        v.name
        for v in (pod.spec.volumes or [])
        if v.persistent_volume_claim is not None and v.persistent_volume_claim.claim_name == claim
    }
    containers = [
        *(pod.spec.containers or []),
        *(pod.spec.init_containers or []),
        *(pod.spec.ephemeral_containers or []),
    ]
    problems = []
    for c in containers:
        for m in c.volume_mounts or []:
            if m.name not in volumes:
                continue
            sub_path = m.sub_path or ""
            if expected_sub_path is None:
                problems.append(f"{pod.metadata.name}/{c.name} mounts {claim} ({sub_path or 'its root'})")
            elif sub_path != expected_sub_path or m.sub_path_expr:
                wanted = expected_sub_path or "its root"
                problems.append(f"{pod.metadata.name}/{c.name} mounts {sub_path or 'the root'}, not {wanted}")
    return problems


def check_l2_isolation(core: CoreV1Api, env: Environment) -> CheckResult:
    """What the cluster runs keeps the rule the charts render: each endpoint's pods mount only that endpoint's L2
    directory (or its share group's), only the janitor mounts the claim's root, and no other pod mounts it."""
    ns, claim = env.serving.namespace, env.serving.l2_claim_name
    allowed: dict[str, str] = {}
    for endpoint in env.serving.endpoints:
        sub_path = model.l2_mount(env, endpoint).sub_path
        allowed.update((p.metadata.name, sub_path) for p in engine_pods(core, env, endpoint))
    janitor = k8s_names.label_selector(
        {k8s_names.COMPONENT: k8s_names.CURVINE_JANITOR_COMPONENT, k8s_names.PART_OF_KEY: k8s_names.PART_OF}
    )
    allowed.update((p.metadata.name, "") for p in core.list_namespaced_pod(ns, label_selector=janitor).items)
    pods = core.list_namespaced_pod(ns).items
    problems = [problem for p in pods for problem in l2_mount_problems(p, claim, allowed.get(p.metadata.name))]
    if problems:
        return failed(
            "storage",
            L2_ISOLATION_NAME,
            "; ".join(problems),
            f"kubectl -n {ns} get pod <pod> -o yaml: a pod outside kvtiers' charts, or edited after admission, can "
            "read or overwrite other endpoints' KV (docs/security.md, L2 isolation between endpoints)",
        )
    mounting = sum(1 for p in pods if p.metadata.name in allowed)
    return passed("storage", L2_ISOLATION_NAME, f"{len(pods)} pods in {ns}, {mounting} of them kvtiers' L2 users")


# ------------------------------------------------------------------------------------------------- endpoints


def engine_selector(env: Environment, endpoint: Endpoint) -> str:
    """Our own labels on self-managed engines; the operator's endpoint label on operator-managed ones."""
    if endpoint.serving == "operator":
        return model.operator_pod_selector(env, endpoint.name)
    return k8s_names.label_selector(k8s_names.engine_selector(endpoint.name))


def engine_pods(core: CoreV1Api, env: Environment, endpoint: Endpoint) -> list:
    pods = core.list_namespaced_pod(env.serving.namespace, label_selector=engine_selector(env, endpoint)).items
    return sorted(pods, key=lambda p: p.metadata.name)


def check_engines(core: CoreV1Api, env: Environment, endpoint: Endpoint) -> CheckResult:
    pods = engine_pods(core, env, endpoint)
    ready = [p for p in pods if pod_ready(p)]
    area = f"endpoint:{endpoint.name}"
    if len(ready) == endpoint.replicas and len(pods) == endpoint.replicas:
        nodes = sorted({p.spec.node_name for p in ready})
        return passed(area, "engine pods Ready", f"{len(ready)}/{endpoint.replicas} on {', '.join(nodes)}")
    not_ready = [p.metadata.name for p in pods if not pod_ready(p)]
    return failed(
        area,
        "engine pods Ready",
        f"{len(ready)} Ready of {len(pods)} pods, config {endpoint.replicas}"
        + (f"; not Ready: {', '.join(not_ready)}" if not_ready else ""),
        f"kubectl -n {env.serving.namespace} describe pod -l {engine_selector(env, endpoint)} "
        "(startup probe: weight download, GPU memory, L2 mount)",
    )


def check_router(
    core: CoreV1Api, apps: AppsV1Api, api: ApiClient, env: Environment, endpoint: Endpoint
) -> list[CheckResult]:
    ns, area, router = env.serving.namespace, f"endpoint:{endpoint.name}", k8s_names.router_name(endpoint.name)
    results = []
    deployment = apps.read_namespaced_deployment(router, ns)
    available = deployment.status.available_replicas or 0
    if available >= endpoint.router_replicas:
        results.append(passed(area, "router available", f"{available}/{endpoint.router_replicas}"))
    else:
        results.append(
            failed(
                area,
                "router available",
                f"{available} available of {endpoint.router_replicas}",
                f"kubectl -n {ns} describe deployment {router}",
            )
        )
    ready = [p for p in engine_pods(core, env, endpoint) if pod_ready(p)]
    hint = f"kubectl -n {ns} logs deployment/{router} (service discovery label selector, RBAC to list pods)"
    try:
        health = proxy.request(api, "services", ns, router, k8s_names.ROUTER_SERVICE_PORT, k8s_names.ROUTER_HEALTH_PATH)
        engines = proxy.request(
            api, "services", ns, router, k8s_names.ROUTER_SERVICE_PORT, k8s_names.ROUTER_ENGINES_PATH
        )
    except proxy.ProxyError as exc:
        return results + [failed(area, "router sees engines", str(exc), hint)]
    if not health.ok:
        results.append(failed(area, "router healthy", f"/health HTTP {health.status}: {health.text[:200]}", hint))
    try:
        cards = engines.json() if engines.ok else None
    except ValueError:
        cards = None
    if not isinstance(cards, list):
        return results + [
            failed(area, "router sees engines", f"/engines HTTP {engines.status}: {engines.text[:200]}", hint)
        ]
    serving = [c for c in cards if endpoint.model in (c.get("serving_models") or [])]
    if len(serving) >= max(len(ready), 1) and len(serving) >= endpoint.replicas:
        results.append(passed(area, "router sees engines", f"{len(serving)} engine(s) serving {endpoint.model}"))
    else:
        results.append(
            failed(
                area,
                "router sees engines",
                f"router lists {len(serving)} engine(s) serving {endpoint.model}, {len(ready)} pod(s) Ready, "
                f"config {endpoint.replicas}",
                hint,
            )
        )
    return results


OPERATOR_DEPLOYED = "DeploymentComplete"
"""``status.state`` of an InferenceEndpointConfig the operator has finished deploying (the CRD's enum)."""


def check_operator_endpoint(api: ApiClient, env: Environment, endpoint: Endpoint) -> CheckResult:
    """The InferenceEndpointConfig the workloads stack applied: deployed by the operator, with managed routing on."""
    from kubernetes.client import CustomObjectsApi

    from kvtiers.k8s_charts.hyperpod_operator import API_VERSION

    props = model.operator_endpoint(env, endpoint.name)
    group, version = API_VERSION.split("/")
    ns, area, name = env.serving.namespace, f"endpoint:{endpoint.name}", "operator endpoint deployed"
    obj = CustomObjectsApi(api).get_namespaced_custom_object(
        group, version, ns, "inferenceendpointconfigs", props.object_name
    )
    state = (obj.get("status") or {}).get("state")
    routing = ((obj.get("spec") or {}).get("intelligentRoutingSpec") or {}).get("enabled")
    hint = (
        f"kubectl -n {ns} describe inferenceendpointconfig {props.object_name}; "
        "operator logs: kubectl -n hyperpod-inference-system logs deployment/hyperpod-inference-controller-manager"
    )
    if state != OPERATOR_DEPLOYED:
        return failed(area, name, f"{props.object_name} is {state or 'without status'}, not {OPERATOR_DEPLOYED}", hint)
    if routing is not True:
        return failed(area, name, f"{props.object_name}: intelligentRoutingSpec.enabled is {routing}", hint)
    return passed(area, name, f"{props.object_name} {state}, managed routing {props.routing}")


def missing_l2(pod, env: Environment, endpoint: Endpoint) -> list[str]:
    """What an operator pod lacks of the Curvine L2 the admission policy attaches (empty: attached). The same
    conditions as the policy's CEL check: containers that mount the model are the model servers."""
    from kvtiers.k8s_charts.hyperpod_operator import L2_VOLUME, MODEL_MOUNT

    l2 = model.l2_mount(env, endpoint)
    remote_url = l2.remote_url
    servers = [c for c in pod.spec.containers if any(m.mount_path == MODEL_MOUNT for m in (c.volume_mounts or []))]
    problems = [] if servers else [f"no container mounts the model at {MODEL_MOUNT}"]
    if not any(
        v.name == L2_VOLUME and v.persistent_volume_claim and v.persistent_volume_claim.claim_name == l2.claim_name
        for v in (pod.spec.volumes or [])
    ):
        problems.append(f"no volume {L2_VOLUME} from claim {l2.claim_name}")
    for c in servers:
        if not any(
            m.name == L2_VOLUME and m.mount_path == l2.mount_path and m.sub_path == l2.sub_path for m in c.volume_mounts
        ):
            problems.append(f"{c.name}: {L2_VOLUME} directory {l2.sub_path} not mounted at {l2.mount_path}")
        urls = [e.value for e in (c.env or []) if e.name == "LMCACHE_REMOTE_URL"]
        if not urls or any(u != remote_url for u in urls):
            problems.append(f"{c.name}: LMCACHE_REMOTE_URL is {urls or 'unset'}, not {remote_url}")
    return problems


def check_operator_l2(core: CoreV1Api, env: Environment, endpoint: Endpoint) -> CheckResult:
    """Every pod of an operator endpoint carries the Curvine L2 (the policy mutated it at admission)."""
    from kvtiers.k8s_charts.hyperpod_operator import policy_name

    area, name = f"endpoint:{endpoint.name}", "Curvine L2 attached by policy"
    pods = engine_pods(core, env, endpoint)
    bad = {p.metadata.name: problems for p in pods if (problems := missing_l2(p, env, endpoint))}
    if not pods:
        return failed(
            area,
            name,
            f"no pods with {engine_selector(env, endpoint)}",
            f"kubectl -n {env.serving.namespace} get inferenceendpointconfig; operator logs",
        )
    if bad:
        detail = "; ".join(f"{pod}: {', '.join(problems)}" for pod, problems in sorted(bad.items()))
        return failed(
            area,
            name,
            detail,
            f"kubectl -n {env.serving.namespace} get policy {policy_name(model.operator_endpoint(env, endpoint.name))} "
            "-o yaml (Ready?); "
            "pods created before the policy was ready escape it: delete them to re-admit",
        )
    return passed(area, name, f"{len(pods)} pod(s) mount the L2 and point LMCache at it")


POLICY_READY_NAME = "L2 policy Ready"


def check_operator_policy_ready(api: ApiClient, env: Environment, endpoint: Endpoint) -> CheckResult:
    """The endpoint's Kyverno Policy has the condition type ``Ready`` with status ``True`` (Kyverno v1.15.2
    ``IsReady``). The deploy's readiness wait accepts any True condition: kubectl's JSONPath cannot match a type
    and a status together."""
    from kubernetes.client import CustomObjectsApi

    from kvtiers.k8s_charts.hyperpod_operator import policy_name

    area, ns = f"endpoint:{endpoint.name}", env.serving.namespace
    name = policy_name(model.operator_endpoint(env, endpoint.name))
    obj = CustomObjectsApi(api).get_namespaced_custom_object("kyverno.io", "v1", ns, "policies", name)
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    if any(c.get("status") == "True" for c in ready):
        return passed(area, POLICY_READY_NAME, f"{name} Ready")
    state = (
        ", ".join(f"{c.get('status')} ({c.get('reason')}: {c.get('message')})" for c in ready) or "no Ready condition"
    )
    return failed(
        area,
        POLICY_READY_NAME,
        f"{name}: {state}",
        f"kubectl -n {ns} get policies.kyverno.io {name} -o yaml; kyverno admission controller logs "
        "(kubectl -n kyverno logs deployment/kyverno-admission-controller); pods admitted before it was Ready escape it",
    )
