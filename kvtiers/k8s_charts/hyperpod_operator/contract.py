"""What the kvtiers operator path relies on from the HyperPod Inference Operator and Kyverno, as data.

Each constant names its source; docs/operator-contract.md lists them with the tests that guard them and what only a
live cluster can confirm. The operator itself is closed source: its public surface is the Helm chart and CRDs in
aws/sagemaker-hyperpod-cli (``helm_chart/HyperPodHelmChart/charts/inference-operator``), the sagemaker-hyperpod SDK
and AWS's documentation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# ----------------------------------------------------------------------------------------------- operator
# The operator's pod label (``app: <object name>``) lives with the labels kvtiers selects by: names.OPERATOR_POD_LABEL.
# Which add-on versions kvtiers has read the CRD of, and which of them drop the LMCACHE_* worker environment: in
# kvtiers/k8s_charts/operator_addons.py (no cdk8s import, so that the environment schema can check them).

KV_CACHE_SPEC_FIELDS = frozenset({"cacheConfigFile", "enableL1Cache", "enableL2Cache", "l2CacheSpec"})
"""``spec.kvCacheSpec`` in every chart from 2.0.0 to 2.2.2: no L1 size or chunk size field. The LMCache settings the
sizing assumes travel as ``LMCACHE_*`` worker environment variables instead (LMCache 0.3.7 applies them over its
config file)."""

IMMUTABLE_FIELDS = ("intelligentRoutingSpec.enabled", "worker.environmentVariables")
"""CRD descriptions: ``environmentVariables`` "Cannot be updated."; ``intelligentRoutingSpec`` "not supported for
existing deployments" (chart 2.0.0 to 2.2.2; enforced by the operator's webhook, which is not public)."""

METRICS_DEFAULT_PORT = 8080
"""CRD default of ``spec.metrics.modelMetrics.port``; AWS: it must be the port the model server listens on."""

PROMETHEUS_MULTIPROC_DIR_WITHOUT_POLICY = "/dev/shm"
"""prometheus_client's multiprocess directory in the pods of an operator endpoint without the Curvine L2, which have
no admission policy to add a volume (the CRD has none). vLLM 0.12.0 reads a multiprocess registry only when
``PROMETHEUS_MULTIPROC_DIR`` is set (``v1/metrics/prometheus.py``; ``entrypoints/cli/serve.py`` sets it only for
several API servers), and LMCache's metrics are written by the worker processes into that directory: without it no
``lmcache:*`` series reach ``/metrics``. The directory must exist (``MultiProcessCollector`` refuses another):
``/dev/shm`` is in every container (the operator's ``shm`` emptyDir, else the runtime's tmpfs). Its files outlive a
container restart (vLLM never wipes a directory the user sets), so such an endpoint's LMCache series can carry a
dead process's values until the pod is replaced. With the Curvine L2, the policy mounts a directory of its own
(``serving.endpoint.PROMETHEUS_MULTIPROC_DIR``) and points the variable there."""

CRD_DEFAULT_HEALTH_CHECK_PATH = "/ping"
"""``spec.loadBalancer.healthCheckPath`` default (CRD of chart 2.0.0, aws/sagemaker-hyperpod-cli 51b8dd2, lines
718-719; unchanged at 011ca92): the SageMaker container contract's ping, which vLLM serves
(``vllm/entrypoints/sagemaker/routes.py`` @ v0.12.0) but production-stack's router does not."""

ALB_HEALTH_CHECK_PATH = "/health"
"""The path the operator's ALB checks on its targets, set explicitly. kvtiers always enables intelligent routing, and
the ALB's target is then the operator's router, production-stack's (``src/vllm_router/routers/main_router.py`` @
vllm-stack-0.1.12: ``GET /health``, no ``/ping``); AWS's intelligent-routing samples set the same
(``config/samples/v1_llama31_8b_intelligent_routing.yaml`` lines 44-45, added with routing in 3d2049b, #290;
aws-samples/sagemaker-genai-hosting-examples ``Hyperpod_Inference_KV_Cache_Admin_Notebook_S3.ipynb`` @ 67c1f00).
vLLM serves it as well (``vllm/entrypoints/openai/api_server.py`` @ v0.12.0), should the ALB target the model pods'
proxy instead. Which of the two the ALB targets with routing is not public (only AWS can say)."""

MODEL_VOLUME = "model-weights"
"""``spec.worker.modelVolumeMount.name`` as the CRD samples set it; the operator mounts the weights under it."""

# ----------------------------------------------------------------------------------------------- Kyverno v1.15.2

AUTOGEN_ANNOTATION = "pod-policies.kyverno.io/autogen-controllers"
"""``api/kyverno/constants.go``; ``none`` turns off the rules Kyverno generates for Deployments, StatefulSets, ...
(``pkg/autogen/v1/autogen.go``)."""

POLICY_RESOURCE = "policies.kyverno.io"
READY_JSONPATH = '.status.conditions[?(@.status=="True")].type'
"""Non-empty only once a condition is True. Kyverno v1.15.2 sets one condition type, ``Ready``
(``api/kyverno/v1/policy_status.go``), True once the policy is in the webhook configuration
(``pkg/controllers/webhook/controller.go``, ``updatePolicyStatuses``). CDK's object-value handler waits for a
non-empty value, so ``[?(@.type=="Ready")].status`` (``False`` while pending) would not wait."""

KYVERNO_ADMISSION_REPLICAS = 3
KYVERNO_ADMISSION_MIN_AVAILABLE = 2
"""Kyverno chart 3.5.2 ``values.yaml``: ``admissionController.replicas: ~`` (one pod) and
``admissionController.podDisruptionBudget`` (``enabled: false``, ``minAvailable: 1``); ``_pdb.tpl`` fails when both
``minAvailable`` and ``maxUnavailable`` are set, so only ``minAvailable`` is overridden."""


def kyverno_values(node_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Helm values for the Kyverno chart: the admission controller highly available and, with ``node_labels``, every
    Kyverno pod on the nodes carrying them. Chart 3.5.2 gives each controller, hook job and test pod
    ``<component>.nodeSelector | default .Values.global.nodeSelector`` (``templates/*/deployment.yaml``,
    ``templates/hooks/*.yaml``), so ``global.nodeSelector`` places them all (rendered with the kubectl layer's Helm
    while developing). Kyverno's admission is fail-closed for the operator endpoints' pods: its replicas must not
    sit on HyperPod nodes, which HyperPod reboots and replaces on its own."""
    values: dict[str, Any] = {
        "admissionController": {
            "replicas": KYVERNO_ADMISSION_REPLICAS,
            "podDisruptionBudget": {"enabled": True, "minAvailable": KYVERNO_ADMISSION_MIN_AVAILABLE},
        }
    }
    if node_labels:
        values["global"] = {"nodeSelector": dict(node_labels)}
    return values
