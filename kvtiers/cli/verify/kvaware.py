"""kvaware: every engine is registered with the LMCache controller the router hosts. The controller counts one worker
per engine pod and tensor-parallel rank (``lmcache:cache_controller_registered_workers_count`` on the router's
``/metrics``, LMCache 0.3.11 ``lmcache/v1/cache_controller/observability.py``); an engine it does not know is never
chosen for its cached prefixes."""

from __future__ import annotations

from kubernetes.client import ApiClient, CoreV1Api

from kvtiers.cli.verify import k8s, metrics, proxy
from kvtiers.cli.verify.result import CheckResult, failed, passed
from kvtiers.config import model
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.k8s_charts import names
from kvtiers.observability import metrics as m

NAME = "kvaware workers registered"


def check_kvaware_registration(core: CoreV1Api, api: ApiClient, env: Environment, endpoint: Endpoint) -> CheckResult:
    ns, area, router = env.serving.namespace, f"endpoint:{endpoint.name}", names.router_name(endpoint.name)
    ready = [p for p in k8s.engine_pods(core, env, endpoint) if k8s.pod_ready(p)]
    ranks = model.sizing(env).endpoint(endpoint.name).gpus_per_replica
    expected = len(ready) * ranks
    hint = (
        f"kubectl -n {ns} logs deployment/{router} (LMCache controller); the engines' LMCache controller settings "
        "(enable_controller, the router's pull and reply ports) and their logs"
    )
    try:
        response = proxy.request(api, "services", ns, router, names.ROUTER_SERVICE_PORT, "/metrics")
    except proxy.ProxyError as exc:
        return failed(area, NAME, str(exc), hint)
    registered = metrics.parse(response.text).get(m.KVAWARE_REGISTERED_WORKERS.name) if response.ok else None
    if registered is None:
        return failed(
            area,
            NAME,
            f"the router's /metrics (HTTP {response.status}) has no {m.KVAWARE_REGISTERED_WORKERS.name}",
            hint,
        )
    detail = (
        f"{registered:.0f} LMCache worker(s) registered, {len(ready)} Ready engine pod(s) x "
        f"{ranks} rank(s) = {expected}"
    )
    if registered < expected:
        return failed(area, NAME, detail, hint)
    return passed(area, NAME, detail)
