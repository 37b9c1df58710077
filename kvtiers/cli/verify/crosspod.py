"""The cross-pod L2 check: one prompt to replica A, then to a replica on another node, read LMCache counters.

A must store the prompt's tokens (``lmcache:num_stored_tokens``) and B must then hit at least as many
(``lmcache:num_hit_tokens``): B's GPU and DRAM tiers have never seen the prompt, so the hit came from the L2.
LMCache publishes its counters periodically, so both are polled until they move or ``timeout`` passes.

The two completions go to each engine through a port-forward (:mod:`kvtiers.cli.verify.portforward`), with
``Authorization: Bearer <key>`` when the endpoint has an API key (the engines check it themselves): the API server's
pod proxy removes that header. ``/metrics`` and ``/tokenize``, which an engine serves without a key, still go through
the pod proxy. Operator endpoints take the same path, without a key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api

from kvtiers.cli import prompts
from kvtiers.cli.api_key import ApiKeyError, read_api_key
from kvtiers.cli.verify import metrics, portforward, proxy
from kvtiers.cli.verify.k8s import engine_pods, pod_ready
from kvtiers.cli.verify.result import CheckResult, failed, passed
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.k8s_charts import names
from kvtiers.observability.metrics import LMCACHE_HIT_TOKENS as HIT_TOKENS

NAME = "cross-pod L2 hit"
LMCACHE_STORED_TOKENS = "lmcache:num_stored_tokens"
"""LMCache's counter of the tokens an engine stored (LMCache ``lmcache/observability.py``)."""
LMCACHE_HIT_TOKENS = HIT_TOKENS.registered
CROSS_POD_MIN_TOKENS = 1925
"""The source design's cross-pod check: a 1,925-token prompt stored by pod A, read in full by pod B."""


def completions_path(endpoint: Endpoint) -> str:  # noqa: ARG001 (every endpoint's engines serve it)
    """Where the check sends its completion to one engine, through a port-forward: ``v1/completions``."""
    return "v1/completions"


def engine_port(endpoint: Endpoint) -> int:
    """Where an endpoint's engines serve the OpenAI API and /metrics."""
    return names.OPERATOR_PORT if endpoint.serving == "operator" else names.ENGINE_PORT


class _Pod:
    def __init__(self, api: ApiClient, namespace: str, name: str, port: int, key: str | None = None) -> None:
        self.api, self.namespace, self.name, self.port, self.key = api, namespace, name, port, key

    def call(
        self, path: str, method: str = "GET", body: dict | None = None, timeout: float = 120
    ) -> proxy.ProxyResponse:
        """A path the engine serves without a key, through the API server's pod proxy."""
        return proxy.request(self.api, "pods", self.namespace, self.name, self.port, path, method, body, timeout)

    def complete(self, path: str, body: dict, timeout: float = 120) -> proxy.ProxyResponse:
        """A completion, through a port-forward, with the endpoint's key when it has one."""
        headers = {"Authorization": f"Bearer {self.key}"} if self.key is not None else {}
        return portforward.request(self.api, self.namespace, self.name, self.port, path, "POST", body, headers, timeout)

    def counters(self) -> dict[str, float]:
        response = self.call("metrics", timeout=15)
        if not response.ok:
            raise RuntimeError(f"{self.name} /metrics: HTTP {response.status}")
        return metrics.parse(response.text)

    def count_tokens(self, model: str) -> Callable[[str], int | None]:
        def count(prompt: str) -> int | None:
            response = self.call("tokenize", "POST", {"model": model, "prompt": prompt}, timeout=30)
            if not response.ok:
                return None
            body = response.json()
            return int(body["count"]) if "count" in body else len(body.get("tokens", []))

        return count


def ready_by_node(core: CoreV1Api, env: Environment, endpoint: Endpoint) -> tuple[list, dict[str, str]]:
    """Ready engine pods, and the first of them on each node (node name -> pod name, in listing order).

    The first entry is the replica the cross-pod check writes through (A), the second the one that reads (B).
    """
    ready = [p for p in engine_pods(core, env, endpoint) if pod_ready(p)]
    by_node: dict[str, str] = {}
    for pod in ready:
        by_node.setdefault(pod.spec.node_name, pod.metadata.name)
    return ready, by_node


def _wait_for(read: Callable[[], float | None], baseline: float, at_least: float, timeout: float, poll: float) -> float:
    deadline = time.monotonic() + timeout
    delta = 0.0
    while True:
        value = read()
        delta = (value or 0.0) - baseline
        if delta >= at_least or time.monotonic() >= deadline:
            return delta
        time.sleep(poll)


def check_cross_pod(
    core: CoreV1Api,
    api: ApiClient,
    env: Environment,
    endpoint: Endpoint,
    timeout: float = 60.0,
    poll: float = 2.0,
    secrets_manager: Any = None,
) -> CheckResult:
    """``secrets_manager``: a Secrets Manager client, to read the key of an endpoint that has one."""
    area = f"cross-pod:{endpoint.name}"
    ns = env.serving.namespace
    ready, by_node = ready_by_node(core, env, endpoint)
    if len(by_node) < 2:
        return failed(
            area,
            NAME,
            f"need Ready engine pods on two nodes, found {len(ready)} on {len(by_node)} node(s)",
            "replicas >= 2 spread over >= 2 HyperPod nodes (topology spread / anti-affinity of the engine pods)",
        )
    key = None
    if endpoint.authenticated:
        secret = env.api_key_secret_name(endpoint.name)
        if secrets_manager is None:
            return failed(area, NAME, f"no secretsmanager client to read the API key ({secret})", "AWS credentials")
        try:
            key = read_api_key(secrets_manager, secret)
        except ApiKeyError as exc:
            return failed(area, NAME, str(exc), f"aws secretsmanager describe-secret --secret-id {secret}")
    first, second = (_Pod(api, ns, name, engine_port(endpoint), key) for name in list(by_node.values())[:2])
    hint = (
        "engine logs ('Stored X out of total Y tokens', 'LMCache hit tokens'); the same PYTHONHASHSEED, model name, "
        "TP size and chunk size on every replica; the L2 claim mounted at the LMCache remote_url path"
    )
    try:
        tag = prompts.nonce()
        body, _ = prompts.sized_filler(CROSS_POD_MIN_TOKENS + 16, first.count_tokens(endpoint.model), tag)
        prompt = prompts.prefix(tag) + body
        request = {"model": endpoint.model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
        a0, b0 = first.counters(), second.counters()
        if metrics.counter(a0, LMCACHE_STORED_TOKENS) is None and metrics.counter(a0, LMCACHE_HIT_TOKENS) is None:
            return failed(
                area,
                NAME,
                f"{first.name} /metrics has no lmcache:* counters",
                "LMCache not loaded in vLLM (kv-transfer-config LMCacheConnectorV1) or PROMETHEUS_MULTIPROC_DIR unset",
            )
        response = first.complete(completions_path(endpoint), request)
        if not response.ok:
            return _completion_failed(area, first.name, response, hint)
        tokens = int(response.json().get("usage", {}).get("prompt_tokens", 0))
        stored = _wait_for(
            lambda: metrics.counter(first.counters(), LMCACHE_STORED_TOKENS),
            metrics.counter(a0, LMCACHE_STORED_TOKENS) or 0.0,
            1,
            timeout,
            poll,
        )
        if stored <= 0:
            return failed(area, NAME, f"{first.name} stored 0 of {tokens} tokens within {timeout:.0f} s", hint)
        response = second.complete(completions_path(endpoint), request)
        if not response.ok:
            return _completion_failed(area, second.name, response, hint)
        hit = _wait_for(
            lambda: metrics.counter(second.counters(), LMCACHE_HIT_TOKENS),
            metrics.counter(b0, LMCACHE_HIT_TOKENS) or 0.0,
            stored,
            timeout,
            poll,
        )
    except portforward.PortForwardError as exc:
        return failed(
            area,
            NAME,
            str(exc),
            f"kubectl -n {ns} port-forward pod/{exc.pod} {exc.port}: your kubeconfig identity needs get and create "
            f"on pods/portforward in {ns}; the pod Running and its engine listening on localhost:{exc.port}",
        )
    except (proxy.ProxyError, RuntimeError, ValueError, KeyError) as exc:
        return failed(area, NAME, str(exc), hint)
    detail = (
        f"{tokens}-token prompt: {first.name} ({first_node(by_node, first.name)}) stored {stored:.0f}, "
        f"{second.name} ({first_node(by_node, second.name)}) hit {hit:.0f}"
    )
    if tokens < CROSS_POD_MIN_TOKENS:
        return failed(area, NAME, detail + f"; prompt shorter than {CROSS_POD_MIN_TOKENS} tokens", hint)
    if hit >= stored:
        return passed(area, NAME, detail + f" ({hit / max(tokens, 1):.0%} of the prompt)")
    return failed(area, NAME, detail + f" (B read {hit / stored:.0%} of what A stored)", hint)


def _completion_failed(area: str, pod: str, response: proxy.ProxyResponse, hint: str) -> CheckResult:
    if response.status == 401:
        hint = (
            "the engine refused the endpoint's key from Secrets Manager (or was sent none): its mounted key file "
            "(KVTIERS_API_KEY_FILE) must hold it; a rotated secret reaches the pods at the CSI driver's next "
            "rotation poll"
        )
    return failed(area, NAME, f"{pod} completion: HTTP {response.status}: {response.text[:200]}", hint)


def first_node(by_node: dict[str, str], pod: str) -> str:
    return next(node for node, name in by_node.items() if name == pod)
