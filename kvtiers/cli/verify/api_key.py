"""An authenticated endpoint refuses a caller without its key, at the router and at each engine, and every one of its
pods takes each key of the secret: its secret holds a key; a completion sent to the router without one is answered
401 (the router's ``kvtiers_api_auth`` check); and so is one sent straight to each Ready engine pod (the engines' own
``kvtiers_api_auth.KeyCheckMiddleware``), which proves that a pod that can reach an engine past the router still
needs the key. Then each key goes to each Ready router and engine pod by port-forward, on a route that needs one
(the router's ``/v1/models``, the engine's ``/version``), with no key (401), and with each key the secret's previous
version held that its current one does not (401): a pod that answers otherwise holds an older file than the secret
(the CSI driver keeps the old file when a refresh fails and reports no event, and each pod refreshes on its own
schedule), or does not load the check at all.

Both requests go through the Kubernetes API server's proxy (service, then pod), which removes every ``Authorization``
header (the caller's credentials for the API server; k8s.io/apiserver ``pkg/endpoints/filters/authentication.go`` at
kubernetes-1.34.0), so they carry no key whatever the caller sends. The cross-pod check sends the key to the engines
through a port-forward (:mod:`kvtiers.cli.verify.portforward`); ``kvtiers bench -c <env> --endpoint <name> --url
<router>`` sends it to the router from inside the VPC.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient, CoreV1Api

from kvtiers.cli.api_key import ApiKeyError, read_api_keys, read_retired_api_keys
from kvtiers.cli.verify import portforward, proxy
from kvtiers.cli.verify.crosspod import engine_port
from kvtiers.cli.verify.k8s import engine_pods, pod_ready
from kvtiers.cli.verify.result import CheckResult, failed, passed
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.k8s_charts import names

NAME = "API key required"
ROUTER_KEYED_PATH = "/v1/models"
"""A router route that needs the key and runs no model (production-stack answers it from its discovery)."""
ENGINE_KEYED_PATH = "/version"
"""An engine route that needs the key and runs no model (vLLM 0.12.0's version string)."""
PORT_FORWARD_HINT = (
    "kubectl port-forward to the pod works for your identity (pods/portforward get and create in the serving "
    "namespace), and the pod listens on its port"
)


def check_api_key(secrets_manager: Any, api: ApiClient, env: Environment, endpoint: Endpoint) -> CheckResult:
    area, ns = f"endpoint:{endpoint.name}", env.serving.namespace
    router = names.router_name(endpoint.name)
    secret = env.api_key_secret_name(endpoint.name)
    if secrets_manager is None:
        return failed(area, NAME, "no secretsmanager client", "AWS credentials and region")
    try:
        keys = read_api_keys(secrets_manager, secret)
    except ApiKeyError as exc:
        return failed(area, NAME, str(exc), f"aws secretsmanager describe-secret --secret-id {secret}")
    body = {"model": endpoint.model, "prompt": "kvtiers verify", "max_tokens": 1}
    path = "v1/completions" if endpoint.api == "completions" else "v1/chat/completions"
    if endpoint.api == "chat":
        body = {"model": endpoint.model, "messages": [{"role": "user", "content": "kvtiers verify"}], "max_tokens": 1}
    hint = (
        f"kubectl -n {ns} get deployment/{router} -o yaml: its --callbacks must name kvtiers_api_auth.callbacks and "
        "KVTIERS_API_KEY_FILE the mounted key file; the router's log says why it did not load"
    )
    try:
        answer = proxy.request(api, "services", ns, router, names.ROUTER_SERVICE_PORT, path, "POST", body)
    except proxy.ProxyError as exc:
        return failed(area, NAME, str(exc), hint)
    if answer.status != 401:
        return failed(
            area, NAME, f"without a key the router answered HTTP {answer.status}, not 401: {answer.text[:200]}", hint
        )
    engine_hint = (
        f"kubectl -n {ns} get pod <engine> -o yaml: the engine's args must name --middleware "
        "kvtiers_api_auth.KeyCheckMiddleware and KVTIERS_API_KEY_FILE the mounted key file; the engine's log says why "
        "it did not load"
    )
    ready = [p.metadata.name for p in engine_pods(CoreV1Api(api), env, endpoint) if pod_ready(p)]
    if not ready:
        return failed(
            area, NAME, "the router answers 401 without a key; no Ready engine pod to ask the same", engine_hint
        )
    served = []
    for pod in ready:
        try:
            direct = proxy.request(api, "pods", ns, pod, engine_port(endpoint), path, "POST", body)
        except proxy.ProxyError as exc:
            return failed(area, NAME, f"the router answers 401 without a key; engine pod {pod}: {exc}", engine_hint)
        if direct.status != 401:
            served.append(f"{pod} HTTP {direct.status}: {direct.text[:120]}")
    if served:
        return failed(
            area,
            NAME,
            f"the router answers 401 without a key, but through the pod proxy (no key) {len(served)} of "
            f"{len(ready)} engine pod(s) did not: " + "; ".join(served),
            engine_hint,
        )
    try:
        retired = read_retired_api_keys(secrets_manager, secret, keys)
    except ApiKeyError as exc:
        return failed(area, NAME, str(exc), f"aws secretsmanager describe-secret --secret-id {secret}")
    core = CoreV1Api(api)
    routers = core.list_namespaced_pod(ns, label_selector=names.label_selector(names.router_selector(endpoint.name)))
    targets = [(p.metadata.name, names.ROUTER_PORT, ROUTER_KEYED_PATH) for p in routers.items if pod_ready(p)]
    targets += [(pod, engine_port(endpoint), ENGINE_KEYED_PATH) for pod in ready]
    # Per pod, on a route that needs a key: nothing without one, each current key, no retired key.
    expected: list[tuple[str | None, int, str]] = [(None, 401, "without a key")]
    expected += [(key, 200, f"key {n} of {len(keys)}") for n, key in enumerate(keys, start=1)]
    expected += [(key, 401, f"retired key {n} of {len(retired)}") for n, key in enumerate(retired, start=1)]
    wrong = []
    for pod, port, keyed_path in targets:
        for key, want, what in expected:
            headers: dict[str, str] = {"Authorization": f"Bearer {key}"} if key is not None else {}
            try:
                answer = portforward.request(api, ns, pod, port, keyed_path, "GET", headers=headers, timeout=15)
            except portforward.PortForwardError as exc:
                return failed(area, NAME, f"{what}: {exc}", PORT_FORWARD_HINT)
            if answer.status != want:
                wrong.append(f"{pod} {keyed_path} {what}: HTTP {answer.status}, not {want}")
    if wrong:
        return failed(
            area,
            NAME,
            "some pods do not hold the secret's current keys: " + "; ".join(wrong),
            "a pod's key file follows the secret within about five minutes; run verify again. A pod that stays "
            "behind kept an old file (the CSI driver reports no event for a failed refresh): delete it, and its "
            f"replacement mounts the current value (kubectl -n {ns} delete pod <pod>). A pod that answers without a "
            "key does not load the key check: its args and KVTIERS_API_KEY_FILE, as above",
        )
    return passed(
        area,
        NAME,
        f"without a key the router and its {len(ready)} Ready engine pod(s) ({', '.join(ready)}, through the pod "
        f"proxy, /{path}) answer 401; by port-forward, each of {len(targets)} pod(s) refuses no key, takes each of "
        f"the {len(keys)} key(s) in Secrets Manager ({secret})"
        + (f" and refuses the {len(retired)} retired one(s)" if retired else ""),
    )
