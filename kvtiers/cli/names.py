"""Names of the deployed objects ``kvtiers verify`` looks for: the contract with the charts, in one place."""

from __future__ import annotations

from kvtiers.k8s_charts import names

# Serving (namespace: ``env.serving.namespace``)
ENDPOINT_LABEL = names.ENDPOINT
COMPONENT_LABEL = names.COMPONENT
ENGINE_COMPONENT = "engine"
ROUTER_COMPONENT = "router"
ENGINE_PORT = 8000
ROUTER_SERVICE_PORT = 80
ROUTER_ENGINES_PATH = "engines"
ROUTER_HEALTH_PATH = "health"

# HyperPod node labels
HYPERPOD_NODE_SELECTOR = names.HYPERPOD_NODE_SELECTOR
HYPERPOD_INSTANCE_GROUP_LABEL = names.HYPERPOD_INSTANCE_GROUP

# LMCache metrics on the vLLM /metrics endpoint (LMCache lmcache/observability.py). Counters are exposed with a
# ``_total`` suffix by prometheus_client; both spellings are read.
LMCACHE_STORED_TOKENS = "lmcache:num_stored_tokens"
LMCACHE_HIT_TOKENS = "lmcache:num_hit_tokens"
LMCACHE_RETRIEVE_REQUESTS = "lmcache:num_retrieve_requests"

CROSS_POD_MIN_TOKENS = 1925
"""The source design's cross-pod check: a 1,925-token prompt stored by pod A, read in full by pod B."""


def router_name(endpoint: str) -> str:
    return f"{endpoint}-router"


def engine_selector(endpoint: str) -> str:
    return f"{ENDPOINT_LABEL}={endpoint},{COMPONENT_LABEL}={ENGINE_COMPONENT}"


def operator_pod_selector(object_name: str) -> str:
    """An operator endpoint's pods: the label the HyperPod Inference Operator sets (``app: <object name>``)."""
    from kvtiers.k8s_charts.hyperpod_operator.contract import POD_ENDPOINT_LABEL

    return f"{POD_ENDPOINT_LABEL}={object_name}"


def router_selector(endpoint: str) -> str:
    return f"{ENDPOINT_LABEL}={endpoint},{COMPONENT_LABEL}={ROUTER_COMPONENT}"


def hyperpod_node_selector() -> str:
    return ",".join(f"{k}={v}" for k, v in HYPERPOD_NODE_SELECTOR.items())
