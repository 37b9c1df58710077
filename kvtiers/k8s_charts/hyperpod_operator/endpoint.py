"""The ``InferenceEndpointConfig`` of an operator-managed endpoint, and the props both operator charts read."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import cdk8s
from constructs import Construct

from kvtiers.config.schema import Environment, S3ModelSource
from kvtiers.config.sizing import GIB
from kvtiers.k8s_charts.curvine_l2.charts import api_object
from kvtiers.k8s_charts.hyperpod_operator import contract
from kvtiers.k8s_charts.l2 import L2Namespace, L2Settings

API_VERSION = "inference.sagemaker.aws.amazon.com/v1"
PORT = 8000
"""vLLM's invocation port; the metrics port too (vLLM serves ``/metrics`` on it)."""
MODEL_MOUNT = "/opt/ml/model"
"""Where the worker mounts the weights: the path the engine's first argument loads the model from. The admission
policy identifies the model-server container(s) by this mount (see policy.py)."""
INVOCATION_ENDPOINTS = {"completions": "v1/completions", "chat": "v1/chat/completions"}
"""The endpoint's declared ``api``; AWS: kvaware needs ``/v1/completions`` (the schema rejects kvaware with chat)."""
L2_VOLUME = "curvine-l2"


@dataclass(frozen=True)
class OperatorEndpointProps:
    name: str
    namespace: str
    model: str
    instance_type: str
    replicas: int
    image: str
    tensor_parallel_size: int
    cpu: int
    memory_gib: int
    max_model_len: int
    gpu_memory_utilization: float
    routing: str
    l1_gib: int
    l1_worker_gib: float
    """LMCache ``max_local_cpu_size`` per worker process (GiB): the endpoint's L1 over its GPUs, as in the
    self-managed path. The pod memory limit is sized for it."""
    s3_bucket: str | None
    s3_prefix: str | None
    region: str
    l2: L2Settings
    l2_enabled: bool
    l2_backend: str
    """``curvine`` (policy-attached shared L2) or ``tieredstorage`` (the operator's node-local backend)."""
    l2_namespace: L2Namespace
    """The endpoint's L2 directory, computed as for self-managed endpoints."""
    api: str = "chat"
    addon_version: str = "v1.0.0-eksbuild.1"
    """The pinned operator add-on: decides which spec fields its CRD accepts (contract.ADDON_SPEC_FIELDS)."""

    @classmethod
    def from_environment(cls, env: Environment, endpoint_name: str) -> OperatorEndpointProps:
        e = next(x for x in env.serving.endpoints if x.name == endpoint_name)
        if e.serving != "operator":
            raise ValueError(f"serving.endpoints {endpoint_name}: serving is {e.serving!r}, not 'operator'")
        sizing = env.sizing.endpoint(endpoint_name)
        s3 = e.source if isinstance(e.source, S3ModelSource) else None
        return cls(
            name=e.name,
            namespace=env.serving.namespace,
            model=e.model,
            instance_type=env.hyperpod.group(e.instance_group).instance_type,
            replicas=e.replicas,
            image=env.serving.images.vllm_image,
            tensor_parallel_size=e.tensor_parallel_size,
            cpu=e.cpu,
            memory_gib=sizing.pod_memory_gib,
            max_model_len=e.max_model_len,
            gpu_memory_utilization=e.gpu_memory_utilization,
            routing=e.routing,
            l1_gib=e.l1_gib,
            l1_worker_gib=sizing.l1_bytes / sizing.gpus_per_replica / GIB,
            s3_bucket=s3.bucket if s3 else None,
            s3_prefix=s3.prefix if s3 else None,
            region=env.region,
            l2=L2Settings.from_environment(env),
            l2_enabled=sizing.l2_enabled,
            l2_backend=env.inference_operator.l2_backend,
            l2_namespace=L2Namespace.for_endpoint(env, e),
            api=e.api,
            addon_version=env.inference_operator.addons.inference_operator,
        )

    @property
    def l2_remote_url(self) -> str:
        """LMCache's ``remote_url``: the endpoint's fingerprinted namespace, as on the self-managed path."""
        return self.l2.remote_url(self.l2_namespace)

    @property
    def curvine_l2(self) -> bool:
        """The Curvine L2 is attached by the admission policy (else: no L2, or the operator's own backend)."""
        return self.l2_enabled and self.l2_backend == "curvine"

    @property
    def worker_env(self) -> list[dict]:
        """Everything LMCache needs that the CRD can carry: the L1 size and chunk size the sizing assumes, the hash
        seed every engine on the L2 shares and, with the Curvine L2, its URL and serde (from the one L2Settings).
        Only the mount itself, which the CRD cannot express, comes from the admission policy."""
        l2 = self.l2
        env = [
            {"name": "PYTHONHASHSEED", "value": l2.hash_seed},
            {"name": "LMCACHE_CHUNK_SIZE", "value": str(l2.chunk_size)},
            {"name": "LMCACHE_LOCAL_CPU", "value": "True"},
            {"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": f"{self.l1_worker_gib:g}"},
        ]
        if self.curvine_l2:
            env += [
                {"name": "LMCACHE_REMOTE_URL", "value": self.l2_remote_url},
                {"name": "LMCACHE_REMOTE_SERDE", "value": l2.serde},
            ]
        return env

    def immutable_fields(self) -> dict:
        return {"intelligentRoutingSpec.enabled": True, "worker.environmentVariables": self.worker_env}

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.immutable_fields(), sort_keys=True).encode()).hexdigest()[:8]

    @property
    def object_name(self) -> str:
        return f"{self.name}-{self.fingerprint}"

    @property
    def pod_labels(self) -> dict[str, str]:
        """The label the operator puts on this endpoint's pods (contract.POD_ENDPOINT_LABEL)."""
        return {contract.POD_ENDPOINT_LABEL: self.object_name}

    def spec(self) -> dict:
        tp = str(self.tensor_parallel_size)
        operator_l2 = self.l2_enabled and self.l2_backend == "tieredstorage"
        source: dict = (
            {
                "modelSourceType": "s3",
                "s3Storage": {"bucketName": self.s3_bucket, "region": self.region},
                "modelLocation": self.s3_prefix,
            }
            if self.s3_bucket
            else {"modelSourceType": "huggingface", "huggingFaceModel": {"modelId": self.model}}
        )
        return {
            "modelName": self.name,
            "endpointName": "",
            "instanceType": self.instance_type,
            "replicas": self.replicas,
            "invocationEndpoint": INVOCATION_ENDPOINTS[self.api],
            "modelSourceConfig": source,
            "kvCacheSpec": {
                "enableL1Cache": True,
                # With the Curvine backend the operator's own L2 stays off, so it injects no other remote URL.
                "enableL2Cache": operator_l2,
                **({"l2CacheSpec": {"l2CacheBackend": "tieredstorage"}} if operator_l2 else {}),
            },
            "intelligentRoutingSpec": {"enabled": True, "routingStrategy": self.routing},
            # The CRD's default metrics port is 8080; vLLM serves /metrics on its invocation port.
            "metrics": {"enabled": True, "modelMetrics": {"port": PORT, "path": "/metrics"}},
            "worker": {
                "image": self.image,
                "args": [
                    MODEL_MOUNT,
                    "--served-model-name",
                    self.model,
                    "--tensor-parallel-size",
                    tp,
                    "--max-model-len",
                    str(self.max_model_len),
                    "--gpu-memory-utilization",
                    str(self.gpu_memory_utilization),
                    "--enable-prefix-caching",
                    "--kv-transfer-config",
                    json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}),
                ],
                "environmentVariables": self.worker_env,
                "modelInvocationPort": {"containerPort": PORT, "name": "http"},
                "modelVolumeMount": {"name": contract.MODEL_VOLUME, "mountPath": MODEL_MOUNT},
                "resources": {
                    "requests": {"cpu": str(self.cpu), "memory": f"{self.memory_gib}Gi", "nvidia.com/gpu": tp},
                    "limits": {"memory": f"{self.memory_gib}Gi", "nvidia.com/gpu": tp},
                },
            },
        }


def unsupported_spec_fields(spec: dict, addon_version: str) -> list[str]:
    """Top-level spec fields the add-on version's CRD does not have (empty for a version not in the table)."""
    known = contract.ADDON_SPEC_FIELDS.get(addon_version)
    return [] if known is None else sorted(set(spec) - known)


class InferenceEndpointConfigChart(cdk8s.Chart):
    """The endpoint's ``InferenceEndpointConfig``. Its pods run as the namespace's default service account: the
    policy finds them by the operator's own pod label, not by an account of theirs."""

    def __init__(self, scope: Construct, id: str, *, props: OperatorEndpointProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        spec = props.spec()
        unsupported = unsupported_spec_fields(spec, props.addon_version)
        if unsupported:
            raise ValueError(
                f"{props.name}: the operator add-on {props.addon_version} has no spec field(s) {unsupported}"
            )
        api_object(
            self,
            "iec",
            API_VERSION,
            "InferenceEndpointConfig",
            {
                "name": props.object_name,
                "namespace": props.namespace,
                "annotations": {"kvtiers.io/immutable-fingerprint": props.fingerprint},
            },
            {"spec": spec},
        )
