"""Operator-managed endpoints: a HyperPod ``InferenceEndpointConfig`` per endpoint, and the Kyverno policy that
attaches the Curvine L2 to exactly that endpoint's pods at admission.

Why a policy: the operator has no field for a Curvine path (its L2 backends are ``redis`` and ``tieredstorage``)
and reverts patches to the Deployments it owns. A mutation at pod admission survives every reconcile and restart.
The endpoint's pods run as a service account of their own (set through the spec's ``kubernetes`` field); the policy
matches that account only, so it touches no other pod. ``failurePolicy: Fail``: if Kyverno is down, the pods are
not admitted at all rather than started without their L2.

Immutable fields: the operator does not let ``intelligentRoutingSpec.enabled`` or the worker environment change
on an existing endpoint. Their fingerprint is part of the object's name, so a change shows in ``cdk diff`` as a
new object replacing the old one (and is printed at synth), never as an in-place edit the operator would refuse.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import cdk8s
from constructs import Construct

from kvtiers.config.schema import Environment, S3ModelSource
from kvtiers.config.sizing import l2_decision
from kvtiers.k8s_charts.curvine_l2.charts import api_object
from kvtiers.k8s_charts.l2 import L2Namespace, L2Settings

API_VERSION = "inference.sagemaker.aws.amazon.com/v1"
PORT = 8000
MODEL_MOUNT = "/opt/ml/model"
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

    @classmethod
    def from_environment(cls, env: Environment, endpoint_name: str) -> OperatorEndpointProps:
        e = next(x for x in env.serving.endpoints if x.name == endpoint_name)
        if e.serving != "operator":
            raise ValueError(f"serving.endpoints {endpoint_name}: serving is {e.serving!r}, not 'operator'")
        sizing = env.sizing.endpoint(endpoint_name)
        enabled, _ = l2_decision(e, env.serving.l2_threshold_tokens)
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
            s3_bucket=s3.bucket if s3 else None,
            s3_prefix=s3.prefix if s3 else None,
            region=env.region,
            l2=L2Settings.from_environment(env),
            l2_enabled=enabled,
            l2_backend=env.inference_operator.l2_backend,
            l2_namespace=L2Namespace.for_endpoint(env, e),
            api=e.api,
        )

    @property
    def service_account(self) -> str:
        return f"{self.name}-operator-worker"

    @property
    def worker_env(self) -> list[dict]:
        # PYTHONHASHSEED is in the spec (same seed as every engine on the L2); the Curvine URL is added by the policy.
        return [{"name": "PYTHONHASHSEED", "value": self.l2.hash_seed}]

    def immutable_fields(self) -> dict:
        return {"intelligentRoutingSpec.enabled": True, "worker.environmentVariables": self.worker_env}

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.immutable_fields(), sort_keys=True).encode()).hexdigest()[:8]

    @property
    def object_name(self) -> str:
        return f"{self.name}-{self.fingerprint}"

    def spec(self) -> dict:
        tp = str(self.tensor_parallel_size)
        operator_l2 = self.l2_enabled and self.l2_backend == "tieredstorage"
        source: dict = {"modelSourceType": "s3", "s3Storage": {"bucketName": self.s3_bucket, "region": self.region},
                        "modelLocation": self.s3_prefix} if self.s3_bucket else {
            "modelSourceType": "huggingface", "huggingFaceModel": {"modelId": self.model}}
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
            "metrics": {"enabled": True},
            "kubernetes": {"serviceAccountName": self.service_account},
            "worker": {
                "image": self.image,
                "args": [
                    MODEL_MOUNT, "--served-model-name", self.model, "--tensor-parallel-size", tp,
                    "--max-model-len", str(self.max_model_len),
                    "--gpu-memory-utilization", str(self.gpu_memory_utilization),
                    "--enable-prefix-caching",
                    "--kv-transfer-config", json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}),
                ],
                "environmentVariables": self.worker_env,
                "modelInvocationPort": {"containerPort": PORT, "name": "http"},
                "modelVolumeMount": {"name": "model-weights", "mountPath": MODEL_MOUNT},
                "resources": {
                    "requests": {"cpu": str(self.cpu), "memory": f"{self.memory_gib}Gi", "nvidia.com/gpu": tp},
                    "limits": {"memory": f"{self.memory_gib}Gi", "nvidia.com/gpu": tp},
                },
            },
        }


class InferenceEndpointConfigChart(cdk8s.Chart):
    """The endpoint's ServiceAccount and its ``InferenceEndpointConfig``."""

    def __init__(self, scope: Construct, id: str, *, props: OperatorEndpointProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        api_object(self, "sa", "v1", "ServiceAccount", {"name": props.service_account, "namespace": props.namespace}, {})
        api_object(
            self, "iec", API_VERSION, "InferenceEndpointConfig",
            {"name": props.object_name, "namespace": props.namespace,
             "annotations": {"kvtiers.io/immutable-fingerprint": props.fingerprint}},
            {"spec": props.spec()},
        )


class CurvineL2PolicyChart(cdk8s.Chart):
    """Kyverno policy: mount the Curvine L2 into the endpoint's worker and point LMCache at it."""

    def __init__(self, scope: Construct, id: str, *, props: OperatorEndpointProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        l2 = props.l2
        match = {"any": [{"resources": {"kinds": ["Pod"], "operations": ["CREATE"], "namespaces": [props.namespace]}}]}
        only_this_endpoint = {
            "all": [{"key": "{{ request.object.spec.serviceAccountName || '' }}", "operator": "Equals", "value": props.service_account}]
        }
        env = [
            {"name": "LMCACHE_REMOTE_URL", "value": l2.remote_url(props.l2_namespace)},
            {"name": "LMCACHE_REMOTE_SERDE", "value": l2.serde},
            {"name": "PYTHONHASHSEED", "value": l2.hash_seed},
        ]
        api_object(
            self, "policy", "kyverno.io/v1", "Policy", {"name": f"{props.name}-curvine-l2", "namespace": props.namespace},
            {
                "spec": {
                    "failurePolicy": "Fail",
                    "background": False,
                    "rules": [
                        {
                            "name": "mount-curvine-l2",
                            "match": match,
                            "preconditions": only_this_endpoint,
                            "mutate": {
                                "patchStrategicMerge": {
                                    "spec": {
                                        "volumes": [{"name": L2_VOLUME, "persistentVolumeClaim": {"claimName": l2.claim_name}}],
                                        "containers": [
                                            {
                                                "(image)": props.image,
                                                "env": env,
                                                "volumeMounts": [{"name": L2_VOLUME, "mountPath": l2.mount_path}],
                                            }
                                        ],
                                    }
                                }
                            },
                        },
                        {
                            "name": "require-curvine-l2",
                            "match": match,
                            "preconditions": only_this_endpoint,
                            "validate": {
                                "failureAction": "Enforce",
                                "message": "operator endpoint pods must mount the Curvine L2 claim",
                                "pattern": {"spec": {"volumes": [{"name": L2_VOLUME, "persistentVolumeClaim": {"claimName": l2.claim_name}}]}},
                            },
                        },
                    ],
                }
            },
        )
