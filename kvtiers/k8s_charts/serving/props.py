"""Typed, frozen inputs of :class:`~kvtiers.k8s_charts.serving.ServingChart`: the engine, the router and the
tolerations of the engine pods. Each checks its own fields when built; the rules that join them (and the LMCache
settings) are checked by the chart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvtiers.catalog import serving_defaults
from kvtiers.catalog.instance_types import GPU_MEMORY_GIB
from kvtiers.catalog.models import KNOWN_MODELS, ModelShape
from kvtiers.catalog.serving_defaults import EnginePodSizing, engine_pod_sizing, gpu_cache_tokens
from kvtiers.catalog.versions import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE, ENGINE_IMAGES, engine_release
from kvtiers.checks import in_range, ipv4_network, one_of, pinned_image
from kvtiers.k8s_charts.l2 import L2Namespace, l2_namespace
from kvtiers.k8s_charts.tolerations import Toleration
from kvtiers.k8s_charts.vllm import DTYPES, ROUTINGS, Dtype, Routing, S3Weights, Weights, weights_location

MODELS_DIR = "/models"


@dataclass(frozen=True, kw_only=True)
class Engine:
    """One endpoint's vLLM + LMCache pods. One pod template, so every replica shares model name, TP and dtype.

    The pod's memory (the LMCache L1 of every GPU worker, vLLM itself and /dev/shm) and its model disk are computed
    from these fields by :func:`kvtiers.catalog.serving_defaults.engine_pod_sizing` (:attr:`sizing`), the same function
    the app's environment sizing uses; the LMCache version (part of the L2 namespace) comes from the version matrix row
    of ``image``.
    """

    model: str
    """Model id; passed as ``--served-model-name`` (the name clients and the router see)."""
    weights: Weights
    instance_group: str
    """The HyperPod instance group the pods run on."""
    image: str = DEFAULT_ENGINE_IMAGE
    """vLLM with LMCache in one image (they must be ABI-matched), a row of the version matrix
    (``kvtiers.catalog.versions``) unless ``lmcache_version`` is given. @default the newest engine image whose LMCache
    matches the default router's"""
    replicas: int = serving_defaults.REPLICAS
    """@default 2, so that a rollout or a node's loss leaves one serving"""
    tensor_parallel_size: int = serving_defaults.TENSOR_PARALLEL_SIZE
    """GPUs of each pipeline stage (all-reduced every layer). @default 1"""
    pipeline_parallel_size: int = serving_defaults.PIPELINE_PARALLEL_SIZE
    """Pipeline stages, each on ``tensor_parallel_size`` GPUs of the pod: the pod has ``tensor_parallel_size x
    pipeline_parallel_size`` GPUs (:attr:`gpus`). On GPUs without NVLink (G6e) vLLM recommends stages over a large
    tensor-parallel size (:mod:`kvtiers.parallelism`). @default 1"""
    dtype: Dtype = serving_defaults.DTYPE
    """@default ``bfloat16``"""
    max_model_len: int = serving_defaults.MAX_MODEL_LEN
    """@default 16384"""
    gpu_memory_utilization: float = serving_defaults.GPU_MEMORY_UTILIZATION
    """@default 0.9"""
    cpu: int = serving_defaults.CPU
    """CPU request = limit. @default 8"""
    l1_gib: int = serving_defaults.L1_GIB
    """LMCache L1 (pinned host DRAM) per GPU worker. @default 40"""
    shm_gib: int = serving_defaults.SHM_GIB
    """Size of the memory-backed /dev/shm (NCCL needs more than the 64 MiB default once TP > 1). @default 8"""
    vllm_overhead_gib: int = serving_defaults.VLLM_OVERHEAD_GIB
    """Host memory vLLM itself needs (Python, CUDA context, weight staging). @default 16"""
    startup_timeout_seconds: int = serving_defaults.STARTUP_TIMEOUT_SECONDS
    """Startup-probe budget: weight download plus load plus CUDA-graph capture. @default 1800"""
    model_shape: ModelShape | None = None
    """The model's layers, KV heads, head dim and parameters (its weight size sizes the model disk). @default the
    entry of ``kvtiers.catalog.models.KNOWN_MODELS`` for ``model``; required for other models"""
    lmcache_version: str | None = None
    """The LMCache in ``image`` (part of the L2 namespace). @default the version matrix's for ``image``"""
    model_sync_image: str = serving_defaults.MODEL_SYNC_IMAGE
    """The ``aws s3 sync`` init container's image (used with :class:`S3Weights`). @default
    ``serving_defaults.MODEL_SYNC_IMAGE``"""
    tolerations: tuple[Toleration, ...] = ()
    """Taints of the instance group to tolerate (the GPU taint is always tolerated). @default () (none)"""
    model_role_arn: str | None = None
    """IAM role that reads the S3 weights, recorded on the ServiceAccount. @default None (no annotation)"""
    extra_args: tuple[str, ...] = ()
    """More ``vllm serve`` arguments, appended to kvtiers' own (as production-stack's ``extraArgs``); a flag kvtiers
    already sets is refused. @default () (none)"""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """More environment variables of the vLLM container (as production-stack's ``env``); a variable kvtiers already
    sets is refused. @default none"""

    def __post_init__(self) -> None:
        for name in ("model", "image", "instance_group", "model_sync_image"):
            if not getattr(self, name):
                raise ValueError(f"Engine: {name} is empty")
        one_of("Engine", "dtype", self.dtype, DTYPES)
        pinned_image("Engine", "image", self.image)
        pinned_image("Engine", "model_sync_image", self.model_sync_image)
        bounds: tuple[tuple[str, int, int | None], ...] = (
            ("replicas", 1, serving_defaults.MAX_REPLICAS),
            ("tensor_parallel_size", 1, serving_defaults.MAX_PARALLEL_SIZE),
            ("pipeline_parallel_size", 1, serving_defaults.MAX_PARALLEL_SIZE),
            ("max_model_len", serving_defaults.MIN_MAX_MODEL_LEN, None),
            ("cpu", 1, None),
            ("l1_gib", 1, None),
            ("shm_gib", 1, None),
            ("vllm_overhead_gib", serving_defaults.MIN_VLLM_OVERHEAD_GIB, None),
            ("startup_timeout_seconds", serving_defaults.MIN_STARTUP_TIMEOUT_SECONDS, None),
        )
        for name, minimum, maximum in bounds:
            in_range("Engine", name, getattr(self, name), minimum, maximum)
        above, at_most = serving_defaults.GPU_MEMORY_UTILIZATION_RANGE
        if not above < self.gpu_memory_utilization <= at_most:
            raise ValueError(
                f"Engine: gpu_memory_utilization must be above {above:g} and at most {at_most:g}, got "
                f"{self.gpu_memory_utilization:g}"
            )
        if self.model_shape is None and self.model not in KNOWN_MODELS:
            raise ValueError(
                f"Engine: model_shape is required for {self.model!r}, which is not one of the known models "
                f"({', '.join(KNOWN_MODELS)})"
            )
        try:
            _ = self.l0_tokens
        except ValueError as error:
            raise ValueError(f"Engine: {error}") from None
        if self.lmcache_version is None and engine_release(self.image) is None:
            raise ValueError(
                f"Engine: image {self.image!r} is not in the version matrix ({', '.join(ENGINE_IMAGES)}); give "
                "lmcache_version, the LMCache it carries"
            )

    @property
    def shape(self) -> ModelShape:
        return self.model_shape if self.model_shape is not None else KNOWN_MODELS[self.model]

    @property
    def l0_tokens(self) -> int:
        """GPU prefix-cache (L0) capacity of one pod after its weights, on G6e's L40S GPUs."""
        return gpu_cache_tokens(
            model=self.model,
            weight_bytes=self.shape.weight_bytes(self.dtype),
            kv_bytes_per_token=self.shape.kv_bytes_per_token(self.dtype),
            gpus=self.gpus,
            gpu_memory_gib=GPU_MEMORY_GIB,
            gpu_memory_utilization=self.gpu_memory_utilization,
        )

    @property
    def lmcache(self) -> str:
        """The LMCache version the image carries."""
        if self.lmcache_version is not None:
            return self.lmcache_version
        release = engine_release(self.image)
        assert release is not None, "checked when built"
        return release.lmcache

    @property
    def gpus(self) -> int:
        """GPUs of one pod, one vLLM worker (and one LMCache worker) each: tensor x pipeline parallel size."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def sizing(self) -> EnginePodSizing:
        return engine_pod_sizing(
            weight_bytes=self.shape.weight_bytes(self.dtype),
            gpu_workers=self.gpus,
            l1_gib=self.l1_gib,
            shm_gib=self.shm_gib,
            vllm_overhead_gib=self.vllm_overhead_gib,
        )

    def l2_namespace(self, hash_seed: str) -> L2Namespace:
        """The L2 namespace of this engine's KV cache with ``hash_seed`` (both serving paths read it here)."""
        return l2_namespace(
            model=self.model,
            weights_location=self.weights_location,
            revision=self.revision,
            dtype=self.dtype,
            tensor_parallel_size=self.tensor_parallel_size,
            pipeline_parallel_size=self.pipeline_parallel_size,
            lmcache_version=self.lmcache,
            hash_seed=hash_seed,
        )

    @property
    def revision(self) -> str | None:
        """The weights' pinned revision, if any (part of the L2 namespace)."""
        return self.weights.revision

    @property
    def weights_location(self) -> str:
        """Where the weights come from (part of the L2 namespace)."""
        if isinstance(self.weights, S3Weights):
            return weights_location(self.model, bucket=self.weights.bucket, prefix=self.weights.prefix)
        return weights_location(self.model)

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

    routing: Routing
    image: str = DEFAULT_ROUTER_IMAGE
    """The production-stack router image, a row of the version matrix. @default the newest whose LMCache matches
    the default engine image's"""
    replicas: int | None = None
    """@default 2, so that a router's rollout or its node's loss leaves one serving; 1 for ``kvaware`` (its LMCache
    controller lives in the router process: one router only)"""
    session_key: str | None = None
    """Header or JSON field with the session id; required for ``session`` routing. @default None"""
    internal_load_balancer: bool = False
    """Also expose the router through an internal NLB (the AWS cloud provider's, instance targets). @default False
    (ClusterIP Service only)"""
    system_nodes: bool = False
    """The cluster has nodes of its own for routers and controllers: the routers must run there, off the HyperPod
    nodes, whose CPU and memory the engines need (:class:`~kvtiers.constructs.ServingEndpoint` sets it for an
    ``EksCluster`` with a system node group). @default False: off the HyperPod nodes only preferred (required
    behind the NLB), so a router may land on one when no other node has room, and the placement check counts it"""
    client_cidrs: tuple[str, ...] = ()
    """Who may call the router through the load balancer (IPv4 CIDRs): its ``loadBalancerSourceRanges``, which the
    AWS cloud provider writes into the nodes' security groups; required with ``internal_load_balancer`` (without
    them it admits ``0.0.0.0/0``). The router's NetworkPolicy is the serving NetworkPolicy chart's. @default ()"""
    kv_aware_threshold: int | None = None
    """kvaware only: the router routes by load instead of by cache when more than this many of a prompt's tokens are
    not cached (``--kv-aware-threshold``; production-stack vllm-stack-0.1.12 ``routing_logic.py``: it falls back when
    ``matched < len(prompt) - threshold``). At the whole prompt length any match wins, and LMCache 0.3.11 names the
    first-registered holder of a shared prefix, so one engine would take every request: keep it below the typical
    prompt length by the shortest match worth routing for. @default None (the router's own default, 2,000 tokens)"""

    extra_args: tuple[str, ...] = ()
    """More router arguments, appended to kvtiers' own (as production-stack's ``routerSpec.extraArgs``); a flag
    kvtiers already sets is refused. @default () (none)"""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """More environment variables of the router container; a variable kvtiers already sets is refused. @default
    none"""

    @property
    def off_hyperpod_required(self) -> bool:
        """Whether the routers must run off the HyperPod nodes (behind the NLB, or on the cluster's system nodes)."""
        return self.internal_load_balancer or self.system_nodes

    def __post_init__(self) -> None:
        if not self.image:
            raise ValueError("Router: image is empty")
        one_of("Router", "routing", self.routing, ROUTINGS)
        if self.replicas is None:
            object.__setattr__(self, "replicas", 1 if self.routing == "kvaware" else serving_defaults.ROUTER_REPLICAS)
        pinned_image("Router", "image", self.image)
        in_range("Router", "replicas", self.replica_count, 1, serving_defaults.MAX_ROUTER_REPLICAS)
        if self.routing == "session" and not self.session_key:
            raise ValueError("Router: session_key is required when routing is 'session'")
        for cidr in self.client_cidrs:
            ipv4_network("Router", "client_cidrs", cidr)
        if self.internal_load_balancer and not self.client_cidrs:
            raise ValueError(
                "Router: internal_load_balancer needs client_cidrs (the clients' IPv4 CIDRs, for example the VPC's): "
                "without loadBalancerSourceRanges the AWS cloud provider admits 0.0.0.0/0 to the nodes"
            )
        if self.kv_aware_threshold is not None:
            if self.routing != "kvaware":
                raise ValueError(f"Router: kv_aware_threshold applies to routing 'kvaware' only, not {self.routing!r}")
            in_range("Router", "kv_aware_threshold", self.kv_aware_threshold, 1)
        if self.routing == "kvaware" and self.replica_count != 1:
            raise ValueError(
                f"Router: replicas must be 1 when routing is 'kvaware', got {self.replica_count} (each engine reports its "
                "cache to one router's controller; a second router would see no engine and route blind)"
            )

    @property
    def replica_count(self) -> int:
        """``replicas`` with its default applied."""
        assert self.replicas is not None, "set when built"
        return self.replicas
