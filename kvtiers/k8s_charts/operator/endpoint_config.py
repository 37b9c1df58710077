"""One ``inference.sagemaker.aws.amazon.com/v1`` InferenceEndpointConfig per ``serving: operator`` endpoint.

L2 decision: ``enableL2Cache`` follows the same :func:`kvtiers.config.sizing.l2_decision` as the self-managed path
(via ``env.sizing.endpoint(name).l2_enabled``). With ``inference_operator.l2_backend: tieredstorage`` the operator's
own L2 is on (``l2CacheBackend: tieredstorage``). With ``curvine`` the operator's L2 stays OFF (so it injects no
``sagemaker-hyperpod://`` remote URL) and the Curvine L2 is attached at pod admission by
:class:`~kvtiers.k8s_charts.operator.curvine_policy.CurvineL2PolicyChart`.

Immutable fields: the operator rejects or ignores changes to ``intelligentRoutingSpec.enabled`` (and the routing
strategy) and to the worker's environment on an existing endpoint. :func:`immutable_fingerprint` hashes them; the
hash goes into the annotation ``kvtiers.io/immutable-fingerprint``. The app compares it with the committed lock file
``config/<env>.operator-lock.json`` (``{endpoint: fingerprint}``) and reports a mismatch at synth as a REPLACEMENT.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

import cdk8s
from constructs import Construct

from kvtiers.config.schema import Endpoint, Environment, HuggingFaceModelSource, S3ModelSource

API_VERSION = "inference.sagemaker.aws.amazon.com/v1"
KIND = "InferenceEndpointConfig"
MODEL_PORT = 8000
MODEL_MOUNT = "/opt/ml/model"
ENDPOINT_LABEL = "kvtiers.io/endpoint"
FINGERPRINT_ANNOTATION = "kvtiers.io/immutable-fingerprint"
KV_TRANSFER_CONFIG = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}, separators=(",", ":"))
IMMUTABLE_FIELDS: tuple[str, ...] = (
    "intelligentRoutingSpec.enabled",
    "intelligentRoutingSpec.routingStrategy",
    "worker.environmentVariables",
)
"""Spec paths the operator treats as immutable on an existing endpoint (change => delete and recreate)."""


@dataclass(frozen=True)
class FsxSource:
    file_system_id: str
    dns_name: str | None = None
    mount_name: str | None = None
    model_location: str = ""


@dataclass(frozen=True)
class InferenceEndpointConfigProps:
    name: str
    namespace: str
    model: str
    instance_type: str
    """The endpoint's HyperPod instance group type (``ml.g6e.*``)."""
    image: str
    replicas: int
    tensor_parallel_size: int
    cpu: int
    memory_gib: int
    max_model_len: int
    gpu_memory_utilization: float
    dtype: str
    routing: Literal["prefixaware", "kvaware", "session", "roundrobin"]
    l2_enabled: bool
    l2_backend: Literal["curvine", "tieredstorage"]
    region: str
    source: S3ModelSource | HuggingFaceModelSource | FsxSource
    tls_output_s3_uri: str | None = None
    """Default None: the operator's TLS bucket (add-on ``tlsCertificateS3Bucket``)."""
    invocation_endpoint: str = "v1/chat/completions"
    endpoint_name: str | None = None
    """Default: ``name`` (a SageMaker endpoint is registered)."""
    env: tuple[tuple[str, str], ...] = ()
    startup_timeout_seconds: int = 1800
    min_replicas: int | None = None
    """Default None: no autoScalingSpec (fixed ``replicas``)."""
    max_replicas: int | None = None

    @classmethod
    def from_environment(cls, env: Environment, endpoint: Endpoint, tls_output_s3_uri: str | None = None):
        sized = env.sizing.endpoint(endpoint.name)
        group = {g.name: g for g in env.hyperpod.instance_groups}[endpoint.instance_group]
        return cls(
            name=endpoint.name,
            namespace=env.serving.namespace,
            model=endpoint.model,
            instance_type=group.instance_type,
            image=env.serving.images.vllm_image,
            replicas=endpoint.replicas,
            tensor_parallel_size=endpoint.tensor_parallel_size,
            cpu=endpoint.cpu,
            memory_gib=sized.pod_memory_gib,
            max_model_len=endpoint.max_model_len,
            gpu_memory_utilization=endpoint.gpu_memory_utilization,
            dtype=endpoint.dtype,
            routing=endpoint.routing,
            l2_enabled=sized.l2_enabled,
            l2_backend=env.inference_operator.l2_backend,
            region=env.region,
            source=endpoint.source,
            tls_output_s3_uri=tls_output_s3_uri,
            env=(
                ("LMCACHE_CHUNK_SIZE", "256"),
                ("LMCACHE_LOCAL_CPU", "True"),
                ("LMCACHE_MAX_LOCAL_CPU_SIZE", str(endpoint.l1_gib)),
                ("PYTHONHASHSEED", env.serving.hash_seed),
            ),
            startup_timeout_seconds=endpoint.startup_timeout_seconds,
        )


def _model_source(p: InferenceEndpointConfigProps) -> dict[str, Any]:
    s = p.source
    if isinstance(s, S3ModelSource):
        return {
            "modelSourceType": "s3",
            "s3Storage": {"bucketName": s.bucket, "region": p.region},
            "modelLocation": s.prefix,
            "prefetchEnabled": False,
        }
    if isinstance(s, FsxSource):
        fsx: dict[str, Any] = {"fileSystemId": s.file_system_id}
        if s.dns_name:
            fsx["dnsName"] = s.dns_name
        if s.mount_name:
            fsx["mountName"] = s.mount_name
        return {"modelSourceType": "fsx", "fsxStorage": fsx, "modelLocation": s.model_location}
    hf: dict[str, Any] = {"modelId": p.model}
    if s.revision:
        hf["commitSHA"] = s.revision
    if s.token_secret:
        hf["tokenSecretRef"] = {"name": s.token_secret, "key": "token"}
    return {"modelSourceType": "huggingface", "huggingFaceModel": hf}


def _k8s_name(model: str) -> str:
    return model.split("/")[-1].lower().replace(".", "-").replace("_", "-")[:63].strip("-")


def build_spec(p: InferenceEndpointConfigProps) -> dict[str, Any]:
    if not p.instance_type.startswith("ml.g6e."):
        raise ValueError(f"{p.name}: instance type {p.instance_type} is not ml.g6e.*")
    gpus = str(p.tensor_parallel_size)
    probe_http = {"httpGet": {"path": "/health", "port": MODEL_PORT}}
    kv: dict[str, Any] = {"enableL1Cache": True, "enableL2Cache": False}
    if p.l2_enabled and p.l2_backend == "tieredstorage":
        kv = {"enableL1Cache": True, "enableL2Cache": True, "l2CacheSpec": {"l2CacheBackend": "tieredstorage"}}
    spec: dict[str, Any] = {
        "modelName": p.name,
        "endpointName": p.endpoint_name if p.endpoint_name is not None else p.name,
        "instanceType": p.instance_type,
        "replicas": p.replicas,
        "invocationEndpoint": p.invocation_endpoint,
        "modelSourceConfig": _model_source(p),
        "worker": {
            "image": p.image,
            "args": [
                MODEL_MOUNT if not isinstance(p.source, HuggingFaceModelSource) else p.model,
                "--served-model-name", p.model,
                "--port", str(MODEL_PORT),
                "--tensor-parallel-size", gpus,
                "--max-model-len", str(p.max_model_len),
                "--gpu-memory-utilization", str(p.gpu_memory_utilization),
                "--dtype", p.dtype,
                "--kv-transfer-config", KV_TRANSFER_CONFIG,
            ],
            "environmentVariables": [{"name": k, "value": v} for k, v in p.env],
            "modelInvocationPort": {"containerPort": MODEL_PORT, "name": "http"},
            "modelVolumeMount": {"name": "model-weights", "mountPath": MODEL_MOUNT},
            "resources": {
                "requests": {"cpu": str(p.cpu), "memory": f"{p.memory_gib}Gi", "nvidia.com/gpu": gpus},
                "limits": {"memory": f"{p.memory_gib}Gi", "nvidia.com/gpu": gpus},
            },
            "probes": {
                "startupProbe": {**probe_http, "periodSeconds": 10,
                                 "failureThreshold": max(1, p.startup_timeout_seconds // 10)},
                "readinessProbe": {**probe_http, "periodSeconds": 10},
                "livenessProbe": {**probe_http, "periodSeconds": 10, "failureThreshold": 6},
            },
        },
        "kvCacheSpec": kv,
        "intelligentRoutingSpec": {"enabled": True, "routingStrategy": p.routing},
        "loadBalancer": {"healthCheckPath": "/health"},
        "metrics": {"enabled": True, "modelMetrics": {"path": "/metrics", "port": MODEL_PORT}},
    }
    if p.tls_output_s3_uri:
        spec["tlsConfig"] = {"tlsCertificateOutputS3Uri": p.tls_output_s3_uri}
    if p.min_replicas is not None or p.max_replicas is not None:
        spec["autoScalingSpec"] = {
            "minReplicaCount": p.min_replicas if p.min_replicas is not None else p.replicas,
            "maxReplicaCount": p.max_replicas if p.max_replicas is not None else p.replicas,
        }
    return spec


def immutable_fingerprint(spec: dict[str, Any]) -> str:
    """sha256 (16 hex) of the spec's immutable fields (:data:`IMMUTABLE_FIELDS`), order-stable."""
    picked: dict[str, Any] = {}
    for path in IMMUTABLE_FIELDS:
        node: Any = spec
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        picked[path] = node
    return hashlib.sha256(json.dumps(picked, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def replacements(current: dict[str, str], lock: dict[str, str]) -> tuple[str, ...]:
    """Endpoints whose fingerprint differs from the lock file's (new endpoints are not replacements)."""
    return tuple(sorted(n for n, fp in current.items() if n in lock and lock[n] != fp))


class InferenceEndpointConfigChart(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, props: InferenceEndpointConfigProps) -> None:
        super().__init__(scope, id, namespace=props.namespace, disable_resource_name_hashes=True)
        self.spec = build_spec(props)
        self.fingerprint = immutable_fingerprint(self.spec)
        obj = cdk8s.ApiObject(
            self,
            "iec",
            api_version=API_VERSION,
            kind=KIND,
            metadata=cdk8s.ApiObjectMetadata(
                name=props.name,
                namespace=props.namespace,
                labels={ENDPOINT_LABEL: props.name, "app.kubernetes.io/managed-by": "kvtiers"},
                annotations={FINGERPRINT_ANNOTATION: self.fingerprint},
            ),
        )
        obj.add_json_patch(cdk8s.JsonPatch.add("/spec", self.spec))
