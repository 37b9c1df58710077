"""The pod the HyperPod Inference Operator is expected to create for an ``InferenceEndpointConfig``, as it reaches the
admission webhooks: one model, in one place, shared by the policy tests and `kvtiers verify`'s fake cluster.

Built from public facts; every line that is not one is marked ASSUMED (only a live cluster can confirm it, see
docs/operator-contract.md). The operator itself is closed source.

- labels ``app: <object name>``: sagemaker-hyperpod SDK 3.12.0 ``hp_endpoint.py`` ``list_pods`` selects by it.
- the model container runs ``spec.worker.image`` with ``args``, ``environmentVariables``, ``modelInvocationPort``,
  ``resources`` and mounts ``modelVolumeMount`` (CRD ``worker`` field descriptions, chart 2.0.0 to 2.2.2).
- a metrics sidecar exists: the CRD's ``metricsScrapeIntervalSeconds`` scrapes "from sidecar and model container".
- volumes ``model-weights``, ``shm``, ``lmcache-config``: reference notes from AWS's HyperPod inference pages
  (ASSUMED: their exact sources and the mount paths of ``shm``/``lmcache-config``).
- ``kube-api-access-*``: the ServiceAccount admission plugin adds the token volume and its mounts before mutating
  webhooks run (Kubernetes' built-in plugins come before ``MutatingAdmissionWebhook``).
"""

from __future__ import annotations

import copy

from kvtiers.k8s_charts.hyperpod_operator import OperatorEndpoint

TOKEN_VOLUME = "kube-api-access-7xk2p"
TOKEN_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
SHM_MOUNT = "/dev/shm"
LMCACHE_CONFIG_MOUNT = "/lmcache"  # ASSUMED
OPERATOR_ENV = [{"name": "LMCACHE_CONFIG_FILE", "value": f"{LMCACHE_CONFIG_MOUNT}/config.yaml"}]  # ASSUMED
SIDECAR_IMAGE = "hyperpod-inference-sidecar:v3.0"  # ASSUMED name and image; only its existence is documented
OPERATOR_KV_TRANSFER_CONFIG = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
"""ASSUMED: the connector the operator would pass with ``enableL1Cache`` (AWS's samples set no
``--kv-transfer-config`` yet get LMCache; LMCache's own vLLM examples use this value). Where and how the operator adds
it is not public: the tests add it in every form vLLM's parser accepts, before and after kvtiers' own."""


def model_container_name(props: OperatorEndpoint) -> str:
    """ASSUMED: a third-party guide names the worker container after the endpoint; no public source confirms it.
    The policy does not depend on it."""
    return props.name


def operator_pod(
    props: OperatorEndpoint,
    *,
    index: int = 0,
    container_name: str | None = None,
    image: str | None = None,
    extra_volumes: tuple[dict, ...] = (),
    model_mount: str | None = None,
    sidecar: bool = True,
) -> dict:
    """The pod for replica ``index``. Keyword arguments vary what the operator might do differently: rename the model
    container, run a mirrored image, add volumes, or mount the weights elsewhere."""
    spec = props.spec()
    worker = spec["worker"]
    mount = worker["modelVolumeMount"]
    model_path = model_mount or mount["mountPath"]
    token_mount = {"name": TOKEN_VOLUME, "mountPath": TOKEN_MOUNT, "readOnly": True}
    model = {
        "name": container_name or model_container_name(props),
        "image": image or worker["image"],
        "args": list(worker["args"]),
        "env": copy.deepcopy(worker["environmentVariables"]) + copy.deepcopy(OPERATOR_ENV),
        "ports": [
            {
                "name": worker["modelInvocationPort"]["name"],
                "containerPort": worker["modelInvocationPort"]["containerPort"],
                "protocol": "TCP",
            }
        ],
        "resources": copy.deepcopy(worker["resources"]),
        "volumeMounts": [
            {"name": mount["name"], "mountPath": model_path},
            {"name": "shm", "mountPath": SHM_MOUNT},
            {"name": "lmcache-config", "mountPath": LMCACHE_CONFIG_MOUNT},
            token_mount,
        ],
    }
    containers = [model]
    if sidecar:
        containers.append(
            {
                "name": "sidecar",  # ASSUMED
                "image": SIDECAR_IMAGE,
                "ports": [{"name": "metrics", "containerPort": 9113, "protocol": "TCP"}],  # ASSUMED
                "volumeMounts": [token_mount],
            }
        )
    weights = (
        {"name": mount["name"], "persistentVolumeClaim": {"claimName": f"{props.object_name}-s3"}}  # ASSUMED kind
        if spec["modelSourceConfig"]["modelSourceType"] == "s3"
        else {"name": mount["name"], "emptyDir": {}}  # ASSUMED: huggingface downloads into a local volume
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{props.object_name}-6d9f7c5b8-{index:05d}",  # Deployment-style name: ASSUMED
            "namespace": props.namespace,
            "labels": {**props.pod_labels, "pod-template-hash": "6d9f7c5b8"},
        },
        "spec": {
            "serviceAccountName": "default",
            "containers": containers,
            "volumes": [
                weights,
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "lmcache-config", "configMap": {"name": f"{props.object_name}-lmcache"}},  # ASSUMED kind
                {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                *extra_volumes,
            ],
        },
    }
