"""An operator-managed endpoint (:class:`OperatorEndpoint`) and its ``InferenceEndpointConfig`` chart."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal, get_args

import cdk8s
from constructs import Construct

from kvtiers import checks
from kvtiers.catalog.versions import OPERATOR_ADDON_MODEL_SOURCES
from kvtiers.k8s_charts import names, operator_addons
from kvtiers.k8s_charts.hyperpod_operator import contract
from kvtiers.k8s_charts.l2 import L2Mount, L2Volume, l2_owner
from kvtiers.k8s_charts.serving.props import Engine
from kvtiers.k8s_charts.serving.releases import check_l2_guard
from kvtiers.k8s_charts.vllm import ROUTINGS, LMCache, Routing, S3Weights, Weights, vllm_args

API_VERSION = "inference.sagemaker.aws.amazon.com/v1"
MODEL_MOUNT = "/opt/ml/model"
"""Where the worker mounts the weights: the path the engine's first argument loads the model from. The admission
policy identifies the model-server container(s) by this mount (see policy.py)."""
Api = Literal["completions", "chat"]
APIS: tuple[str, ...] = get_args(Api)
INVOCATION_ENDPOINTS: dict[str, str] = {"completions": "v1/completions", "chat": "v1/chat/completions"}
"""The endpoint's declared ``api``; AWS: kvaware needs ``/v1/completions``."""
L2Backend = Literal["curvine", "tieredstorage"]
L2_BACKENDS: tuple[str, ...] = get_args(L2Backend)
L2_VOLUME = "curvine-l2"
L2_GUARD_VOLUME = "kvtiers-l2-guard"
ENGINE_FIELDS_NOT_CARRIED = (
    "tolerations",
    "model_role_arn",
    "model_sync_image",
    "startup_timeout_seconds",
    "extra_args",
    "extra_env",
)
""":class:`Engine` fields the ``InferenceEndpointConfig`` has no place for: the operator creates the pods, their
probes and their model volume (S3 weights through its S3 CSI driver), and its CRD has no tolerations, extra
arguments or extra environment beyond the worker environment kvtiers fingerprints."""
L2_GUARD_DIR = "/etc/kvtiers"
"""Where the admission policy mounts the L2 guard in the model-server containers (on ``PYTHONPATH``): a path of its
own, apart from the operator's volumes."""


@dataclass(frozen=True, kw_only=True)
class OperatorEndpoint:
    """One endpoint the HyperPod Inference Operator runs. The ``InferenceEndpointConfig`` chart renders it; the
    Curvine L2 policy, the NetworkPolicies and the scrape configuration find its pods by :attr:`object_name`."""

    name: str
    namespace: str
    model: str
    """Model id; passed as ``--served-model-name``."""
    weights: Weights
    region: str
    """Region of the S3 weights' bucket."""
    instance_type: str
    """The HyperPod instance type the operator places the endpoint on (``ml.g6e.2xlarge``...)."""
    image: str
    replicas: int
    tensor_parallel_size: int
    cpu: int
    memory_gib: int
    """Memory request = limit: LMCache's L1 of every GPU worker plus vLLM itself."""
    max_model_len: int
    gpu_memory_utilization: float
    routing: Routing
    """The operator's ``routingStrategy``."""
    api: Api
    """The OpenAI API the clients call (``invocationEndpoint``)."""
    lmcache: LMCache
    """LMCache's settings, passed as ``LMCACHE_*`` worker variables (the CRD has no field for them)."""
    hash_seed: str
    """``PYTHONHASHSEED`` of the workers (the same on every engine that shares the L2)."""
    addon_version: str
    """The pinned operator add-on: decides which spec fields its CRD accepts (``operator_addons.ADDON_SPEC_FIELDS``)."""
    l2_backend: L2Backend | None = None
    """``curvine``: the shared L2 that :class:`CurvineL2PolicyChart` attaches (needs ``l2`` and
    ``lmcache.remote_url``); ``tieredstorage``: the operator's node-local backend. @default None (no L2)"""
    l2: L2Mount | None = None
    """The endpoint's directory of the Curvine L2 claim, the only part its pods mount; required with
    ``l2_backend='curvine'``. @default None"""
    pipeline_parallel_size: int = 1
    """Pipeline stages, each on ``tensor_parallel_size`` GPUs of the worker pod. @default 1"""

    def __post_init__(self) -> None:
        where = f"OperatorEndpoint {self.name!r}"
        # The Kyverno Policy name (the longest derived name) stays within 63 characters.
        checks.dns_label(where, "name", self.name, names.longest_endpoint_name("operator")[0])
        checks.dns_label(where, "namespace", self.namespace)
        checks.hash_seed(where, self.hash_seed)
        checks.one_of(where, "routing", self.routing, ROUTINGS)
        checks.one_of(where, "api", self.api, APIS)
        checks.one_of(where, "addon_version", self.addon_version, tuple(operator_addons.ADDON_SPEC_FIELDS))
        if self.l2_backend is not None:
            checks.one_of(where, "l2_backend", self.l2_backend, L2_BACKENDS)
        if self.l2_backend == "tieredstorage":
            raise ValueError(
                f"{where}: l2_backend 'tieredstorage' is refused: the operator configures that L2 itself, kvtiers "
                "cannot attach the L2 guard to it, and LMCache 0.3.11 turns a chunk that backend fails to return "
                "into wrong output (docs/serving-contract.md, L2 read failures); use 'curvine'"
            )
        for field in (
            "replicas",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "cpu",
            "memory_gib",
            "max_model_len",
        ):
            checks.in_range(where, field, getattr(self, field), 1)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"{where}: gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.routing == "kvaware" and self.api != "completions":
            raise ValueError(
                f"{where}: api must be 'completions' when routing is 'kvaware', got {self.api!r} (the operator needs "
                "invocationEndpoint /v1/completions for kvaware)"
            )
        if self.lmcache.controller is not None:
            raise ValueError(f"{where}: lmcache.controller must be None (the operator runs kvaware routing itself)")
        sources = OPERATOR_ADDON_MODEL_SOURCES.get(self.addon_version)
        if sources is None:
            raise ValueError(
                f"{where}: addon_version {self.addon_version} is not one whose CRD kvtiers has read (one of "
                f"{', '.join(sorted(set(operator_addons.ADDON_SPEC_FIELDS) & set(OPERATOR_ADDON_MODEL_SOURCES)))}; "
                "docs/operator-contract.md)"
            )
        if self.model_source_type not in sources:
            raise ValueError(
                f"{where}: {self.model_source_type} weights are not a model source the Inference Operator add-on "
                f"{self.addon_version} accepts (its CRD allows {', '.join(sources)}); copy the weights to S3"
            )
        curvine = self.l2_backend == "curvine"
        if not curvine and self.addon_version in operator_addons.ADDONS_STRIPPING_LMCACHE_ENV:
            raise ValueError(
                f"{where}: addon_version {self.addon_version} is refused without l2_backend 'curvine': its operator "
                "drops the worker's LMCACHE_* variables (aws/sagemaker-hyperpod-cli#431), which only the Curvine L2 "
                f"policy restores; allowed: {sorted(set(operator_addons.ADDON_SPEC_FIELDS) - operator_addons.ADDONS_STRIPPING_LMCACHE_ENV)}"
            )
        if curvine and (self.l2 is None or self.lmcache.remote_url is None):
            raise ValueError(f"{where}: l2_backend 'curvine' needs l2 and lmcache.remote_url")
        if not curvine and (self.l2 is not None or self.lmcache.remote_url is not None):
            raise ValueError(
                f"{where}: l2 and lmcache.remote_url are for l2_backend 'curvine', but l2_backend is {self.l2_backend!r}"
            )
        if (
            self.l2 is not None
            and self.lmcache.remote_url is not None
            and self.lmcache.remote_url != self.l2.remote_url
        ):
            raise ValueError(
                f"{where}: lmcache.remote_url {self.lmcache.remote_url!r} is not the endpoint's L2 directory "
                f"{self.l2.remote_url!r} (l2.mount_path)"
            )
        l1_gib = self.lmcache.max_local_cpu_size_gib * self.gpus
        if self.memory_gib < l1_gib:
            raise ValueError(
                f"{where}: memory_gib {self.memory_gib} is less than the LMCache L1 of its {self.gpus} "
                f"GPU worker(s) ({l1_gib:g} GiB)"
            )

    @classmethod
    def from_engine(
        cls,
        *,
        name: str,
        namespace: str,
        engine: Engine,
        instance_type: str,
        region: str,
        routing: Routing,
        api: Api,
        hash_seed: str,
        addon_version: str,
        l2: L2Volume | None = None,
        l2_share_group: str | None = None,
    ) -> OperatorEndpoint:
        """The operator endpoint of ``engine``, sized and named as the self-managed engines are: pod memory from
        :attr:`Engine.sizing`, LMCache's L1 per GPU worker ``engine.l1_gib``, and with ``l2`` the Curvine L2 backend
        on the endpoint's directory of the claim (or its share group's) in the engine's L2 namespace.

        :param l2: the Curvine L2 claim. @default None (no L2)
        :param l2_share_group: the L2 directory shared with the other endpoints of this group. @default None: a
            directory of the endpoint's own
        """
        unsupported = [
            f.name
            for f in dataclasses.fields(Engine)
            if f.name in ENGINE_FIELDS_NOT_CARRIED and getattr(engine, f.name) != _default(f)
        ]
        if unsupported:
            raise ValueError(
                f"OperatorEndpoint {name!r}: engine field(s) {unsupported} have no place in the operator's "
                f"InferenceEndpointConfig (it creates the pods itself); leave them unset (allowed to set: every "
                f"other Engine field)"
            )
        if l2 is not None:
            check_l2_guard(f"OperatorEndpoint {name!r}", image=engine.image, lmcache_version=engine.lmcache)
        mount = (
            l2.mount(engine.l2_namespace(hash_seed), owner=l2_owner(endpoint=name, share_group=l2_share_group))
            if l2 is not None
            else None
        )
        return cls(
            name=name,
            namespace=namespace,
            model=engine.model,
            weights=engine.weights,
            region=region,
            instance_type=instance_type,
            image=engine.image,
            replicas=engine.replicas,
            tensor_parallel_size=engine.tensor_parallel_size,
            pipeline_parallel_size=engine.pipeline_parallel_size,
            cpu=engine.cpu,
            memory_gib=engine.sizing.memory_gib,
            max_model_len=engine.max_model_len,
            gpu_memory_utilization=engine.gpu_memory_utilization,
            routing=routing,
            api=api,
            lmcache=LMCache(
                max_local_cpu_size_gib=engine.l1_gib, remote_url=mount.remote_url if mount is not None else None
            ),
            hash_seed=hash_seed,
            addon_version=addon_version,
            l2_backend="curvine" if mount is not None else None,
            l2=mount,
        )

    @property
    def gpus(self) -> int:
        """GPUs of one worker pod: tensor x pipeline parallel size."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def curvine_l2(self) -> bool:
        """The Curvine L2 is attached by the admission policy (else: no L2, or the operator's own backend)."""
        return self.l2_backend == "curvine"

    @property
    def worker_env(self) -> list[dict[str, str]]:
        """Everything LMCache needs that the CRD can carry: the L1 size and chunk size the sizing assumes, the hash
        seed every engine on the L2 shares, the metrics directory and, with the Curvine L2, its URL and serde. Only the mount itself, which
        the CRD cannot express, comes from the admission policy."""
        lmcache = self.lmcache
        env = [
            {"name": "PYTHONHASHSEED", "value": self.hash_seed},
            {"name": "LMCACHE_CHUNK_SIZE", "value": str(lmcache.chunk_size)},
            {"name": "LMCACHE_LOCAL_CPU", "value": "True"},
            {"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": f"{lmcache.max_local_cpu_size_gib:g}"},
        ]
        if not self.curvine_l2:
            # LMCache's metrics on the engine port; with the Curvine L2 the policy mounts a directory of its own.
            env.insert(
                1, {"name": "PROMETHEUS_MULTIPROC_DIR", "value": contract.PROMETHEUS_MULTIPROC_DIR_WITHOUT_POLICY}
            )
        if lmcache.remote_url is not None:
            # (Only here: the worker environment names the endpoint object, and an endpoint with the L2 is renamed by
            # the L2 guard anyway.) LMCache's usage reporting (lmcache/usage_context.py): egress the policies deny.
            env += [
                {"name": "LMCACHE_TRACK_USAGE", "value": "false"},
                {"name": "LMCACHE_REMOTE_URL", "value": lmcache.remote_url},
                {"name": "LMCACHE_REMOTE_SERDE", "value": lmcache.remote_serde},
                {"name": "LMCACHE_BLOCKING_TIMEOUT_SECS", "value": str(lmcache.l2_timeout_seconds)},
                # vLLM imports the L2 guard (the KV connector of --kv-transfer-config) from the directory the
                # admission policy mounts.
                {"name": "PYTHONPATH", "value": L2_GUARD_DIR},
            ]
        return env

    def immutable_fields(self) -> dict[str, Any]:
        return {"intelligentRoutingSpec.enabled": True, "worker.environmentVariables": self.worker_env}

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.immutable_fields(), sort_keys=True).encode()).hexdigest()[
            : names.FINGERPRINT_LENGTH
        ]

    @property
    def object_name(self) -> str:
        return names.operator_object_name(self.name, self.fingerprint)

    @property
    def pod_labels(self) -> dict[str, str]:
        """The label the operator puts on this endpoint's pods."""
        return names.operator_pod_labels(self.object_name)

    @property
    def model_source_type(self) -> str:
        """The CRD's ``modelSourceType`` of the weights."""
        return "s3" if isinstance(self.weights, S3Weights) else "huggingface"

    def spec(self) -> dict[str, Any]:
        gpus = str(self.gpus)
        operator_l2 = self.l2_backend == "tieredstorage"
        source: dict[str, Any] = (
            {
                "modelSourceType": self.model_source_type,
                "s3Storage": {"bucketName": self.weights.bucket, "region": self.region},
                "modelLocation": self.weights.prefix,
            }
            if isinstance(self.weights, S3Weights)
            else {"modelSourceType": self.model_source_type, "huggingFaceModel": {"modelId": self.model}}
        )
        return {
            "modelName": self.name,
            # A SageMaker endpoint per object: clients invoke it (sagemaker-runtime InvokeEndpoint), which reaches
            # the pods through the operator's ALB and intelligent router; named after the object, so a replaced
            # endpoint never collides with the one it replaces.
            "endpointName": self.object_name,
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
            # The ALB's target with routing is the router, which serves no /ping (the CRD's default).
            "loadBalancer": {"healthCheckPath": contract.ALB_HEALTH_CHECK_PATH},
            # The CRD's default metrics port is 8080; vLLM serves /metrics on its invocation port.
            "metrics": {"enabled": True, "modelMetrics": {"port": names.OPERATOR_PORT, "path": "/metrics"}},
            "worker": {
                "image": self.image,
                "args": vllm_args(
                    model_path=MODEL_MOUNT,
                    lmcache=self.lmcache,
                    served_model_name=self.model,
                    tensor_parallel_size=self.tensor_parallel_size,
                    pipeline_parallel_size=self.pipeline_parallel_size,
                    max_model_len=self.max_model_len,
                    gpu_memory_utilization=self.gpu_memory_utilization,
                    # One argument: the admission policy compares the last one the model server gets with it.
                    inline_kv_transfer_config=True,
                ),
                "environmentVariables": self.worker_env,
                "modelInvocationPort": {"containerPort": names.OPERATOR_PORT, "name": "http"},
                "modelVolumeMount": {"name": contract.MODEL_VOLUME, "mountPath": MODEL_MOUNT},
                "resources": {
                    "requests": {"cpu": str(self.cpu), "memory": f"{self.memory_gib}Gi", names.GPU_RESOURCE: gpus},
                    "limits": {"memory": f"{self.memory_gib}Gi", names.GPU_RESOURCE: gpus},
                },
            },
        }


def _default(f: dataclasses.Field[Any]) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def unsupported_spec_fields(spec: dict[str, Any], addon_version: str) -> list[str]:
    """Top-level spec fields the add-on version's CRD does not have (``addon_version`` must be in the table)."""
    return sorted(set(spec) - operator_addons.ADDON_SPEC_FIELDS[addon_version])


class InferenceEndpointConfigChart(cdk8s.Chart):
    """The endpoint's ``InferenceEndpointConfig`` (a custom resource: a raw ``ApiObject``). Its pods run as the
    namespace's default service account: the policy finds them by the operator's own pod label.

    :param endpoint: the endpoint to render.
    """

    def __init__(self, scope: Construct, id: str, *, endpoint: OperatorEndpoint) -> None:
        spec = endpoint.spec()
        unsupported = unsupported_spec_fields(spec, endpoint.addon_version)
        if unsupported:
            raise ValueError(
                f"InferenceEndpointConfigChart: the operator add-on {endpoint.addon_version} (endpoint.addon_version) "
                f"has no spec field(s) {unsupported}"
            )
        super().__init__(scope, id, disable_resource_name_hashes=True)
        self.endpoint = endpoint
        self.config = cdk8s.ApiObject(
            self,
            "iec",
            api_version=API_VERSION,
            kind="InferenceEndpointConfig",
            metadata=cdk8s.ApiObjectMetadata(
                name=endpoint.object_name,
                namespace=endpoint.namespace,
                annotations={"kvtiers.io/immutable-fingerprint": endpoint.fingerprint},
            ),
        )
        self.config.add_json_patch(cdk8s.JsonPatch.add("/spec", spec))
