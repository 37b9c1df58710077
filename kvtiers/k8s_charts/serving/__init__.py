"""Self-managed serving: vLLM + LMCache engines and the production-stack router, as typed cdk8s constructs."""

from kvtiers.k8s_charts.serving.chart import ServingChart
from kvtiers.k8s_charts.serving.endpoint import EngineDeployment
from kvtiers.k8s_charts.serving.lmcache import lmcache_config, render_lmcache_config
from kvtiers.k8s_charts.serving.props import (
    EngineProps,
    LMCacheProps,
    RouterProps,
    ServingProps,
    engine_pod_labels,
    engine_selector,
    engine_service_account_name,
    router_pod_labels,
    router_service_account_name,
)
from kvtiers.k8s_charts.serving.report import l2_report
from kvtiers.k8s_charts.serving.router import Router

__all__ = [
    "EngineDeployment",
    "EngineProps",
    "LMCacheProps",
    "Router",
    "RouterProps",
    "ServingChart",
    "ServingProps",
    "engine_pod_labels",
    "engine_selector",
    "engine_service_account_name",
    "l2_report",
    "lmcache_config",
    "render_lmcache_config",
    "router_pod_labels",
    "router_service_account_name",
]
