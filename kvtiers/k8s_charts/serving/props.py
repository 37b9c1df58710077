"""Typed, frozen inputs of the self-managed serving chart, built once from a validated environment.

The constructs only read these objects: they never open files or read environment variables. Every number comes
from the schema or from :mod:`kvtiers.config.sizing`; nothing here recomputes a size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtiers.config.sizing import GIB, EndpointSizing
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.l2 import L2Namespace, L2Settings

if TYPE_CHECKING:
    from kvtiers.config.schema import Environment

ENGINE_PORT = 8000
"""vLLM's OpenAI server port (``--port``), also the port the router's discovery calls (``--k8s-port``)."""
ROUTER_PORT = 8000
"""Router container port."""
ROUTER_SERVICE_PORT = 80
LMCACHE_CONTROLLER_PULL_PORT = 9000
"""kvaware: the router's embedded LMCache controller PULL socket (``--lmcache-controller-port``)."""
LMCACHE_CONTROLLER_REPLY_PORT = 9001
"""kvaware: the controller's reply socket (``--lmcache-controller-reply-port``); LMCache 0.5 requires it."""
LMCACHE_WORKER_PORT_BASE = 8001
"""kvaware: LMCache worker port of TP rank 0 on each engine; rank i uses base + i."""
LMCACHE_HEARTBEAT_SECONDS = 10
"""kvaware: ``lmcache_worker_heartbeat_time``. Unset (LMCache's default), a worker never sends a heartbeat and the
router's controller deregisters it, with its whole cache index, ``--lmcache-worker-timeout`` after it registers."""
LMCACHE_HEARTBEAT_DELAY_SECONDS = 10
"""kvaware: ``lmcache_worker_heartbeat_delay_time`` (LMCache's default, set explicitly because the timeout below
depends on it): the first heartbeat follows registration after this delay."""
LMCACHE_MISSED_HEARTBEATS = 3
"""kvaware: heartbeats a worker may miss (a GC pause, a busy engine) before the controller drops it."""
LMCACHE_CONFIG_DIR = "/etc/lmcache"
LMCACHE_CONFIG_KEY = "lmcache.yaml"
MODELS_DIR = "/models"
PROMETHEUS_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PROMETHEUS_MULTIPROC_DIR = "/var/run/prometheus-multiproc"
"""prometheus_client's multiprocess directory, shared by every process of an engine pod (a memory-backed emptyDir,
wiped with the pod, as vLLM asks)."""
CONFIG_CHECKSUM_ANNOTATION = "kvtiers.io/lmcache-config-sha256"
MODEL_ROLE_ANNOTATION = "kvtiers.io/model-role-arn"
ENGINE_COMPONENT = "engine"
ROUTER_COMPONENT = "router"


def engine_service_account_name(endpoint: str) -> str:
    """ServiceAccount of an endpoint's vLLM pods: the subject of its EKS Pod Identity association (S3 weights)."""
    return f"{endpoint}-engine"


def router_service_account_name(endpoint: str) -> str:
    return f"{endpoint}-router"


def router_service_name(endpoint: str) -> str:
    """The router's ClusterIP Service: clients, and kvaware engines reaching the controller, use this name."""
    return f"{endpoint}-router"


def engine_pod_labels(endpoint: str) -> dict[str, str]:
    """Labels of an endpoint's engine pods; the router discovers them by :func:`engine_selector`."""
    return {**names.component_labels(endpoint, ENGINE_COMPONENT), names.ENDPOINT: endpoint}


def router_pod_labels(endpoint: str) -> dict[str, str]:
    return {**names.component_labels(endpoint, ROUTER_COMPONENT), names.ENDPOINT: endpoint}


def engine_selector(endpoint: str) -> dict[str, str]:
    """The router's discovery selector: endpoint *and* component, so it never matches the router's own pods."""
    return {names.ENDPOINT: endpoint, names.COMPONENT: ENGINE_COMPONENT}


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str
    effect: str
    value: str | None = None


@dataclass(frozen=True)
class S3Weights:
    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class HuggingFaceWeights:
    token_secret: str | None
    revision: str | None


@dataclass(frozen=True)
class EngineProps:
    """One endpoint's vLLM + LMCache Deployment. One pod template, so every replica shares model name, TP, dtype."""

    name: str
    namespace: str
    model: str
    """Model id; passed as ``--served-model-name`` (the name clients and the router see)."""
    weights: S3Weights | HuggingFaceWeights
    image: str
    model_sync_image: str
    replicas: int
    tensor_parallel_size: int
    dtype: str
    gpu_memory_utilization: float
    max_model_len: int
    cpu: int
    memory_gib: int
    """Request = limit, from :attr:`EndpointSizing.pod_memory_gib`."""
    shm_gib: int
    instance_group: str
    tolerations: tuple[Toleration, ...]
    startup_timeout_seconds: int
    model_role_arn: str | None = None
    model_disk_gib: int | None = None
    """Size limit of the model emptyDir (:attr:`EndpointSizing.model_disk_gib`). ``None``: no limit."""

    @property
    def service_account_name(self) -> str:
        return engine_service_account_name(self.name)

    @property
    def pod_labels(self) -> dict[str, str]:
        return engine_pod_labels(self.name)

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


@dataclass(frozen=True)
class LMCacheProps:
    """The inputs of the LMCache YAML file (see :mod:`kvtiers.k8s_charts.serving.lmcache`)."""

    chunk_size: int
    max_local_cpu_size_gib: float
    """Per GPU worker: :attr:`EndpointSizing.l1_bytes` / GPUs per replica."""
    remote_url: str | None
    """``L2Settings.remote_url(namespace)`` when sizing turned the L2 on, else ``None`` (no remote backend)."""
    remote_serde: str
    controller: ControllerProps | None = None


@dataclass(frozen=True)
class ControllerProps:
    """kvaware only: the engines report their cache to the LMCache controller embedded in the router."""

    pull_url: str
    reply_url: str
    worker_ports: tuple[int, ...]
    heartbeat_seconds: int = LMCACHE_HEARTBEAT_SECONDS
    heartbeat_delay_seconds: int = LMCACHE_HEARTBEAT_DELAY_SECONDS

    @property
    def worker_timeout_seconds(self) -> int:
        """The router's ``--lmcache-worker-timeout``: the first heartbeat's delay plus a few missed heartbeats, so a
        live engine is never dropped and a dead one leaves the index within a minute."""
        return self.heartbeat_delay_seconds + LMCACHE_MISSED_HEARTBEATS * self.heartbeat_seconds


@dataclass(frozen=True)
class RouterProps:
    name: str
    namespace: str
    image: str
    replicas: int
    routing: str
    session_key: str | None
    internal_load_balancer: bool
    hf_token_secret: str | None
    """kvaware tokenizes prompts with the model's Hugging Face tokenizer: gated models need the token."""
    controller: ControllerProps | None = None
    """kvaware: the LMCache controller the router hosts (the same object the engines' LMCache file is built from)."""

    @property
    def deployment_name(self) -> str:
        return f"{self.name}-router"

    @property
    def service_name(self) -> str:
        return router_service_name(self.name)

    @property
    def service_account_name(self) -> str:
        return router_service_account_name(self.name)

    @property
    def pod_labels(self) -> dict[str, str]:
        return router_pod_labels(self.name)

    @property
    def engine_selector(self) -> dict[str, str]:
        """What the router discovers: exactly its endpoint's engine pods."""
        return engine_selector(self.name)

    @property
    def label_selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.engine_selector.items())


@dataclass(frozen=True)
class ServingProps:
    """Everything :class:`ServingChart` needs for one self-managed endpoint."""

    engine: EngineProps
    router: RouterProps
    lmcache: LMCacheProps
    l2: L2Settings
    l2_enabled: bool
    l2_reason: str

    @property
    def namespace(self) -> str:
        return self.engine.namespace

    @classmethod
    def from_environment(cls, env: Environment, endpoint_name: str, model_role_arn: str | None = None) -> ServingProps:
        endpoint = next((e for e in env.serving.endpoints if e.name == endpoint_name), None)
        if endpoint is None:
            known = ", ".join(e.name for e in env.serving.endpoints) or "none"
            raise ValueError(f"serving.endpoints: no endpoint named {endpoint_name!r} (known: {known})")
        if endpoint.serving != "self_managed":
            raise ValueError(
                f"serving.endpoints {endpoint_name}: serving is {endpoint.serving!r}; ServingChart builds only "
                "'self_managed' endpoints"
            )
        sizing: EndpointSizing = env.sizing.endpoint(endpoint_name)
        l2 = L2Settings.from_environment(env)
        namespace = L2Namespace.for_endpoint(env, endpoint)
        group = env.hyperpod.group(endpoint.instance_group)
        images = env.serving.images
        source = endpoint.source
        if source.type == "s3":
            weights: S3Weights | HuggingFaceWeights = S3Weights(bucket=source.bucket, prefix=source.prefix)
        else:
            weights = HuggingFaceWeights(token_secret=source.token_secret, revision=source.revision)
        tolerations = tuple(
            Toleration(key=t.key, operator="Equal" if t.value else "Exists", effect=t.effect, value=t.value or None)
            for t in group.taints
        ) + (Toleration(key=names.GPU_RESOURCE, operator="Exists", effect="NoSchedule"),)
        engine = EngineProps(
            name=endpoint.name,
            namespace=env.serving.namespace,
            model=endpoint.model,
            weights=weights,
            image=images.vllm_image,
            model_sync_image=images.model_sync_image,
            replicas=endpoint.replicas,
            tensor_parallel_size=sizing.gpus_per_replica,
            dtype=endpoint.dtype,
            gpu_memory_utilization=endpoint.gpu_memory_utilization,
            max_model_len=endpoint.max_model_len,
            cpu=endpoint.cpu,
            memory_gib=sizing.pod_memory_gib,
            shm_gib=endpoint.shm_gib,
            instance_group=group.name,
            tolerations=tolerations,
            startup_timeout_seconds=endpoint.startup_timeout_seconds,
            model_role_arn=model_role_arn,
            model_disk_gib=sizing.model_disk_gib,
        )
        controller = None
        if endpoint.routing == "kvaware":
            host = f"{router_service_name(endpoint.name)}.{env.serving.namespace}.svc"
            controller = ControllerProps(
                pull_url=f"{host}:{LMCACHE_CONTROLLER_PULL_PORT}",
                reply_url=f"{host}:{LMCACHE_CONTROLLER_REPLY_PORT}",
                worker_ports=tuple(LMCACHE_WORKER_PORT_BASE + i for i in range(sizing.gpus_per_replica)),
            )
        router = RouterProps(
            name=endpoint.name,
            namespace=env.serving.namespace,
            image=images.router_image,
            replicas=endpoint.router_replicas,
            routing=endpoint.routing,
            session_key=endpoint.session_key,
            internal_load_balancer=endpoint.internal_load_balancer,
            hf_token_secret=source.token_secret if source.type == "huggingface" else source.hf_token_secret,
            controller=controller,
        )
        lmcache = LMCacheProps(
            chunk_size=l2.chunk_size,
            max_local_cpu_size_gib=sizing.l1_bytes / sizing.gpus_per_replica / GIB,
            remote_url=l2.remote_url(namespace) if sizing.l2_enabled else None,
            remote_serde=l2.serde,
            controller=controller,
        )
        return cls(
            engine=engine,
            router=router,
            lmcache=lmcache,
            l2=l2,
            l2_enabled=sizing.l2_enabled,
            l2_reason=sizing.l2_reason,
        )
