"""With ``observability.enabled``: each endpoint's engines expose the counters the per-tier rules read (vLLM's prefix
cache and KV-connector hits, LMCache's remote reads, required on every endpoint with the L2), and what they have
counted so far, by tier."""

from __future__ import annotations

from kubernetes.client import ApiClient, CoreV1Api

from kvtiers.cli.verify import k8s, metrics
from kvtiers.cli.verify.crosspod import _Pod, engine_port
from kvtiers.cli.verify.result import CheckResult, failed, passed
from kvtiers.config import model
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.observability import metrics as m

NAME = "per-tier counters"
REQUIRED = (m.PREFIX_CACHE_QUERIES, m.PREFIX_CACHE_HITS, m.EXTERNAL_PREFIX_CACHE_HITS)
REQUIRED_WITH_L2 = (m.LMCACHE_HIT_TOKENS, m.LMCACHE_REMOTE_READ_BYTES)
"""With the L2 on, LMCache's series must be there too: without them the L2 rows and the L2 alerts see nothing (an
engine without ``PROMETHEUS_MULTIPROC_DIR`` serves vLLM's series only)."""


def check_tier_counters(core: CoreV1Api, api: ApiClient, env: Environment, endpoint: Endpoint) -> CheckResult:
    area = f"tiers:{endpoint.name}"
    pods = [p.metadata.name for p in k8s.engine_pods(core, env, endpoint) if k8s.pod_ready(p)]
    if not pods:
        return failed(area, NAME, "no Ready engine pod", "kvtiers verify's engine checks above")
    required = (*REQUIRED, *REQUIRED_WITH_L2) if model.sizing(env).endpoint(endpoint.name).l2_enabled else REQUIRED
    totals: dict[str, float] = {}
    missing: list[str] = []
    for pod in pods:
        try:
            samples = _Pod(api, env.serving.namespace, pod, engine_port(endpoint)).counters()
        except Exception as exc:  # noqa: BLE001 - a proxy or HTTP failure is this check's failure
            return failed(area, NAME, f"{pod}: {exc}", "the engine's /metrics through the API server's pod proxy")
        for metric in (*REQUIRED, *REQUIRED_WITH_L2):
            value = metrics.counter(samples, metric.registered)
            if value is None and metric in required:
                missing.append(f"{pod}: {metric.name}")
            totals[metric.registered] = totals.get(metric.registered, 0.0) + (value or 0.0)
    if missing:
        return failed(
            area,
            NAME,
            f"missing {', '.join(missing)}",
            "the recording rules read these: engine image (vLLM 0.12.0 metrics), kv-transfer-config set; LMCache's "
            "lmcache:* series need PROMETHEUS_MULTIPROC_DIR in the engine pod",
        )
    queries = totals[m.PREFIX_CACHE_QUERIES.registered]
    l0, lmcache = totals[m.PREFIX_CACHE_HITS.registered], totals[m.EXTERNAL_PREFIX_CACHE_HITS.registered]
    recomputed = max(queries - l0 - lmcache, 0.0)
    share = (lambda v: f"{v:.0f} ({v / queries:.0%})") if queries else (lambda v: f"{v:.0f}")
    return passed(
        area,
        NAME,
        f"{queries:.0f} prompt tokens: L0 {share(l0)}, LMCache (L1+L2) {share(lmcache)}, "
        f"recomputed {share(recomputed)}; "
        f"{totals[m.LMCACHE_REMOTE_READ_BYTES.registered]:.0f} bytes read from the L2",
    )
