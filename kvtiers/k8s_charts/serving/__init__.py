"""Self-managed serving: vLLM + LMCache engines and the production-stack router, as typed cdk8s constructs."""

from kvtiers.k8s_charts.serving.chart import ServingChart
from kvtiers.k8s_charts.serving.lmcache import lmcache_config, render_lmcache_config
from kvtiers.k8s_charts.serving.props import Engine, Router
from kvtiers.k8s_charts.tolerations import Toleration
from kvtiers.k8s_charts.vllm import HuggingFaceWeights, LMCache, LMCacheController, S3Weights

__all__ = [
    "Engine",
    "HuggingFaceWeights",
    "LMCache",
    "LMCacheController",
    "Router",
    "S3Weights",
    "ServingChart",
    "Toleration",
    "lmcache_config",
    "render_lmcache_config",
]
