"""Typed, frozen inputs of :class:`~kvtiers.k8s_charts.serving.ServingChart`: the engine, the router and the
tolerations of the engine pods. Each checks its own fields when built; the rules that join them (and the LMCache
settings) are checked by the chart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from kvtiers.k8s_charts.checks import at_least, one_of
from kvtiers.k8s_charts.vllm import DTYPES, ROUTINGS, Dtype, Routing, S3Weights, Weights

MODELS_DIR = "/models"
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_EFFECTS: tuple[str, ...] = get_args(TaintEffect)


@dataclass(frozen=True, kw_only=True)
class Toleration:
    """Tolerates a node taint: ``key=value:effect``, or any value of ``key`` when ``value`` is None."""

    key: str
    effect: TaintEffect
    value: str | None = None
    """@default None (tolerate the key with any value: operator ``Exists``)"""

    def __post_init__(self) -> None:
        one_of("Toleration", "effect", self.effect, TAINT_EFFECTS)
        if not self.key:
            raise ValueError("Toleration: key is empty")

    @property
    def operator(self) -> Literal["Equal", "Exists"]:
        return "Equal" if self.value else "Exists"


@dataclass(frozen=True, kw_only=True)
class Engine:
    """One endpoint's vLLM + LMCache pods. One pod template, so every replica shares model name, TP and dtype."""

    model: str
    """Model id; passed as ``--served-model-name`` (the name clients and the router see)."""
    weights: Weights
    image: str
    """vLLM with LMCache in one image (they must be ABI-matched)."""
    instance_group: str
    """The HyperPod instance group the pods run on."""
    replicas: int
    tensor_parallel_size: int
    """GPUs per pod."""
    dtype: Dtype
    max_model_len: int
    gpu_memory_utilization: float
    cpu: int
    """CPU request = limit."""
    memory_gib: int
    """Memory request = limit: LMCache's L1 of every GPU worker, vLLM itself and the memory-backed /dev/shm."""
    shm_gib: int
    """Size of the memory-backed /dev/shm (NCCL needs more than the 64 MiB default once TP > 1)."""
    startup_timeout_seconds: int
    """Startup-probe budget: weight download plus load plus CUDA-graph capture."""
    model_sync_image: str | None = None
    """The ``aws s3 sync`` init container's image; required with :class:`S3Weights`. @default None"""
    tolerations: tuple[Toleration, ...] = ()
    """Taints of the instance group to tolerate (the GPU taint is always tolerated). @default () (none)"""
    model_role_arn: str | None = None
    """IAM role that reads the S3 weights, recorded on the ServiceAccount. @default None (no annotation)"""
    model_disk_gib: int | None = None
    """Size limit of the model emptyDir. @default None (no limit)"""

    def __post_init__(self) -> None:
        for field in ("model", "image", "instance_group"):
            if not getattr(self, field):
                raise ValueError(f"Engine: {field} is empty")
        one_of("Engine", "dtype", self.dtype, DTYPES)
        for field, minimum in (
            ("replicas", 1),
            ("tensor_parallel_size", 1),
            ("max_model_len", 1),
            ("cpu", 1),
            ("memory_gib", 1),
            ("shm_gib", 1),
            ("startup_timeout_seconds", 1),
        ):
            at_least("Engine", field, getattr(self, field), minimum)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"Engine: gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if isinstance(self.weights, S3Weights) and not self.model_sync_image:
            raise ValueError("Engine: model_sync_image is required when weights are S3Weights (it copies them)")
        if self.model_disk_gib is not None:
            at_least("Engine", "model_disk_gib", self.model_disk_gib, 1)

    @property
    def model_path(self) -> str:
        """What vLLM serves: the local copy for S3 weights, the model id for Hugging Face."""
        # LMCache's key holds this path: it is the model id on every endpoint, so endpoints of one model in one L2
        # namespace share their KV (a path per endpoint would never share).
        if isinstance(self.weights, S3Weights):
            return f"{MODELS_DIR}/{self.model}"
        return self.model

    @property
    def vllm_binary(self) -> str:
        # The lmcache/vllm-openai images install vLLM in /opt/venv (production-stack switches to it for them).
        return "/opt/venv/bin/vllm" if self.image.startswith("lmcache/vllm-openai") else "vllm"


@dataclass(frozen=True, kw_only=True)
class Router:
    """The production-stack router of one endpoint."""

    image: str
    routing: Routing
    replicas: int
    session_key: str | None = None
    """Header or JSON field with the session id; required for ``session`` routing. @default None"""
    internal_load_balancer: bool = False
    """Also expose the router through an internal NLB. @default False (ClusterIP Service only)"""
    hf_token_secret: str | None = None
    """kvaware tokenizes prompts with the model's Hugging Face tokenizer: gated models need the token (Secret key
    ``token``). @default None"""
    kv_aware_threshold: int | None = None
    """kvaware only: the router routes by load instead of by cache when more than this many of a prompt's tokens are
    not cached (``--kv-aware-threshold``; production-stack vllm-stack-0.1.12 ``routing_logic.py``: it falls back when
    ``matched < len(prompt) - threshold``). At the whole prompt length any match wins, and LMCache 0.3.11 names the
    first-registered holder of a shared prefix, so one engine would take every request: keep it below the typical
    prompt length by the shortest match worth routing for. @default None (the router's own default, 2,000 tokens)"""

    def __post_init__(self) -> None:
        if not self.image:
            raise ValueError("Router: image is empty")
        one_of("Router", "routing", self.routing, ROUTINGS)
        at_least("Router", "replicas", self.replicas, 1)
        if self.routing == "session" and not self.session_key:
            raise ValueError("Router: session_key is required when routing is 'session'")
        if self.kv_aware_threshold is not None:
            if self.routing != "kvaware":
                raise ValueError(f"Router: kv_aware_threshold applies to routing 'kvaware' only, not {self.routing!r}")
            at_least("Router", "kv_aware_threshold", self.kv_aware_threshold, 1)
        if self.routing == "kvaware" and self.replicas != 1:
            raise ValueError(
                f"Router: replicas must be 1 when routing is 'kvaware', got {self.replicas} (each engine reports its "
                "cache to one router's controller; a second router would see no engine and route blind)"
            )
