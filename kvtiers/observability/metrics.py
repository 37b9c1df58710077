"""Every upstream metric the rules, dashboard and ``kvtiers top`` read, with the file at the pinned version that
registers it. A test checks that each name used by a rule is listed here (and, where the source is installed, that it
is registered there).

Where the metrics are served:
- vLLM 0.12.0 serves ``/metrics`` on its API port (the engine port; ``vllm/entrypoints/openai/api_server.py``
  ``mount_metrics``). With ``PROMETHEUS_MULTIPROC_DIR`` set it reads a multiprocess registry
  (``vllm/v1/metrics/prometheus.py``), which is how metrics of the engine-core and worker processes reach it.
- LMCache 0.3.11 registers its metrics with ``prometheus_client`` in the process that runs it (the vLLM worker and
  scheduler), in the multiprocess directory (``lmcache/observability.py`` ``PrometheusLogger``; it defaults the
  variable to ``/tmp/lmcache_prometheus`` only in its own process). vLLM 0.12.0 sets ``PROMETHEUS_MULTIPROC_DIR``
  itself only with several API servers (``vllm/entrypoints/cli/serve.py``), so the engine pods set it (one
  directory for every process of the pod) and LMCache's metrics appear on vLLM's ``/metrics``. LMCache's own
  internal API server (``internal_api_server_enabled``, default off, port 6999 + offset) is not used.
- The production-stack router (vllm-stack-0.1.12) serves ``/metrics`` on its port
  (``src/vllm_router/routers/metrics_router.py``); some of its gauges reuse vLLM's names (``vllm:num_requests_waiting``
  with a ``server`` label), so rules select engines by the ``component`` label the scrape configuration sets.
- Curvine v0.4.1 masters and workers serve ``/metrics`` on their web ports (``curvine-master/src/master/
  router_handler.rs``; the worker's web server); names carry no prefix and counters no ``_total`` (the Rust
  ``prometheus`` crate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

VLLM_SOURCE = "vllm-project/vllm@v0.12.0:vllm/v1/metrics/loggers.py"
LMCACHE_SOURCE = "LMCache/LMCache@v0.3.11:lmcache/observability.py"
ROUTER_SOURCE = "vllm-project/production-stack@vllm-stack-0.1.12:src/vllm_router/services/metrics_service/__init__.py"
CURVINE_MASTER_SOURCE = "CurvineIO/curvine@v0.4.1:curvine-master/src/master/master_metrics.rs"
CURVINE_WORKER_SOURCE = "CurvineIO/curvine@v0.4.1:curvine-worker/src/worker/worker_metrics.rs"
PROMETHEUS_SOURCE = "Prometheus: the synthetic per-target series every scrape writes"
LMCACHE_CONTROLLER_SOURCE = "LMCache/LMCache@v0.3.11:lmcache/v1/cache_controller/observability.py"
"""The LMCache controller the kvaware router hosts (production-stack's ``KvawareRouter`` builds
``LMCacheControllerManager``, which creates LMCache's ``PrometheusLogger`` with ``role="controller"`` in the router's
default registry, served by the router's ``/metrics``)."""
L2_JANITOR_SOURCE = "kvtiers:kvtiers/k8s_charts/curvine_l2/l2_janitor.py"
"""kvtiers' L2 janitor, which serves its own ``/metrics`` (tests/test_curvine_l2_janitor.py scrapes a run of it)."""
L2_GUARD_SOURCE = "kvtiers:kvtiers/k8s_charts/kvtiers_l2_guard.py"
"""kvtiers' own L2 guard, which the engines with an L2 load (its counters land in the engine's multiprocess registry,
so vLLM's ``/metrics`` serves them; tests/test_l2_faults.py reads them from a run of the guard)."""


@dataclass(frozen=True)
class Metric:
    registered: str
    """The name the upstream code registers (what the test looks for in the source)."""
    kind: Literal["counter", "gauge", "histogram"]
    source: str
    exposed_suffix: str = ""
    """``_total`` for Python ``prometheus_client`` counters; empty for Rust counters and for gauges."""

    @property
    def name(self) -> str:
        return self.registered + self.exposed_suffix

    def series(self, suffix: str) -> str:
        """A histogram's ``_bucket``/``_sum``/``_count`` series."""
        assert self.kind == "histogram"
        return self.registered + suffix


def _py_counter(name: str, source: str) -> Metric:
    return Metric(name, "counter", source, "_total")


# vLLM (engine): prefix-cache counters count tokens; queries = the prompt tokens of each scheduled request, hits = the
# tokens found in the GPU prefix cache (L0); external hits = the tokens the KV connector (LMCache: L1 + L2) loaded.
PREFIX_CACHE_QUERIES = _py_counter("vllm:prefix_cache_queries", VLLM_SOURCE)
PREFIX_CACHE_HITS = _py_counter("vllm:prefix_cache_hits", VLLM_SOURCE)
EXTERNAL_PREFIX_CACHE_HITS = _py_counter("vllm:external_prefix_cache_hits", VLLM_SOURCE)
TTFT = Metric("vllm:time_to_first_token_seconds", "histogram", VLLM_SOURCE)
REQUESTS_WAITING = Metric("vllm:num_requests_waiting", "gauge", VLLM_SOURCE)
REQUESTS_RUNNING = Metric("vllm:num_requests_running", "gauge", VLLM_SOURCE)

# LMCache (in the engine): no per-backend hit counter; bytes read from the remote backend (the Curvine L2) are.
LMCACHE_HIT_TOKENS = _py_counter("lmcache:num_hit_tokens", LMCACHE_SOURCE)
LMCACHE_REMOTE_READ_BYTES = _py_counter("lmcache:num_remote_read_bytes", LMCACHE_SOURCE)
LMCACHE_REMOTE_READ_REQUESTS = _py_counter("lmcache:num_remote_read_requests", LMCACHE_SOURCE)

# The L2 guard (in the engine): what happened to chunks the lookup found but the load could not read.
L2_LOAD_FAILURES = _py_counter("kvtiers_l2_load_failures", L2_GUARD_SOURCE)
"""Label ``reason``: ``unreadable`` (an I/O error), ``truncated``, ``corrupt`` (the file was deleted), ``missing``
(gone before the read), ``unavailable`` (another read error, e.g. a dead mount), ``intact`` (the file reads back
whole; it stays), ``timeout``."""
L2_QUARANTINED_FILES = _py_counter("kvtiers_l2_quarantined_files", L2_GUARD_SOURCE)
L2_CORRECTED_TOKENS = _py_counter("kvtiers_l2_corrected_tokens", L2_GUARD_SOURCE)
L2_BREAKER_TRIPS = _py_counter("kvtiers_l2_breaker_trips", L2_GUARD_SOURCE)
L2_USE_STAMP_FAILURES = _py_counter("kvtiers_l2_use_stamp_failures", L2_GUARD_SOURCE)
L2_WRONG_MOUNTS = _py_counter("kvtiers_l2_wrong_mounts", L2_GUARD_SOURCE)
"""Label ``errno``: use stamps the mount refused (EPERM: the pod's user may not set times on Curvine's FUSE)."""

# The router
ROUTER_HEALTHY_PODS = Metric("vllm:healthy_pods_total", "gauge", ROUTER_SOURCE)
KVAWARE_REGISTERED_WORKERS = Metric(
    "lmcache:cache_controller_registered_workers_count", "gauge", LMCACHE_CONTROLLER_SOURCE
)
"""(instance, worker) pairs registered with the kvaware router's controller: one per engine pod and tensor-parallel
rank (each rank's LMCache engine runs one ``LMCacheWorker``, ``lmcache/v1/cache_engine.py``)."""

# Curvine: the master reports the whole cluster's capacity and use. Not its eviction counters: at v0.4.1 they count
# files the TTL executor never deleted (docs/curvine-contract.md); the janitor counts what it deleted.
CURVINE_CAPACITY = Metric("capacity", "gauge", CURVINE_MASTER_SOURCE)
CURVINE_FS_USED = Metric("fs_used", "gauge", CURVINE_MASTER_SOURCE)
CURVINE_WORKER_CAPACITY = Metric("capacity", "gauge", CURVINE_WORKER_SOURCE)
CURVINE_WORKER_NUM = Metric("worker_num", "gauge", CURVINE_MASTER_SOURCE)
"""Label ``tag``: live, blacklist, decommission, lost; counted from the master's own worker map (a standby: 0)."""

# The L2 janitor
JANITOR_FREED_BYTES = Metric("kvtiers_l2_janitor_freed_bytes_total", "counter", L2_JANITOR_SOURCE)
"""Label ``reason``: ``watermark`` (eviction) or ``lost`` (no live worker held a block)."""
JANITOR_LAST_SUCCESS = Metric("kvtiers_l2_janitor_last_success_timestamp_seconds", "gauge", L2_JANITOR_SOURCE)
JANITOR_LOST_SCANS = Metric("kvtiers_l2_janitor_lost_scans_total", "counter", L2_JANITOR_SOURCE)
"""Label ``outcome``: done, not_needed (the check ran), no_leader, workers_missing (it was skipped)."""
JANITOR_DELETE_FAILURES = Metric("kvtiers_l2_janitor_delete_failures_total", "counter", L2_JANITOR_SOURCE)

UP = Metric("up", "gauge", PROMETHEUS_SOURCE)

CATALOGUE: tuple[Metric, ...] = (
    PREFIX_CACHE_QUERIES,
    PREFIX_CACHE_HITS,
    EXTERNAL_PREFIX_CACHE_HITS,
    TTFT,
    REQUESTS_WAITING,
    REQUESTS_RUNNING,
    LMCACHE_HIT_TOKENS,
    LMCACHE_REMOTE_READ_BYTES,
    LMCACHE_REMOTE_READ_REQUESTS,
    L2_LOAD_FAILURES,
    L2_QUARANTINED_FILES,
    L2_CORRECTED_TOKENS,
    L2_BREAKER_TRIPS,
    L2_USE_STAMP_FAILURES,
    L2_WRONG_MOUNTS,
    ROUTER_HEALTHY_PODS,
    KVAWARE_REGISTERED_WORKERS,
    CURVINE_CAPACITY,
    CURVINE_FS_USED,
    CURVINE_WORKER_CAPACITY,
    CURVINE_WORKER_NUM,
    JANITOR_FREED_BYTES,
    JANITOR_LAST_SUCCESS,
    JANITOR_LOST_SCANS,
    JANITOR_DELETE_FAILURES,
    UP,
)


def exposed_names() -> dict[str, list[Metric]]:
    """Series name as scraped -> the catalogue entries that expose it (``capacity``: master and worker)."""
    names: dict[str, list[Metric]] = {}
    for metric in CATALOGUE:
        for name in (
            [metric.series(s) for s in ("_bucket", "_sum", "_count")] if metric.kind == "histogram" else [metric.name]
        ):
            names.setdefault(name, []).append(metric)
    return names
