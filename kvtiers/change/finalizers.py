"""Which Kubernetes objects a ``kubectl delete`` can leave behind: those that carry a finalizer, because the object
declares one or a controller is known to add one. Each row names its source; a kind without a row is deleted at once.

Every custom kind kvtiers renders has a row here or in :data:`FINALIZER_FREE` (a test checks the shipped
environments), so that a new kind is looked up at its source rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtiers.change.manifests import ObjectRef

FINALIZED: Mapping[tuple[str, str], str] = {
    ("", "Namespace"): (
        "finalizer `kubernetes`, which the API server sets on every namespace and the namespace controller removes "
        "once everything in it is deleted (kubernetes pkg/registry/core/namespace/strategy.go PrepareForCreate, read at 04a4626)"
    ),
    ("", "PersistentVolumeClaim"): (
        "finalizer `kubernetes.io/pvc-protection`, added on create by the default StorageObjectInUseProtection "
        "admission plugin and removed only when no pod uses the claim (kubernetes "
        "plugin/pkg/admission/storage/storageobjectinuseprotection/admission.go, read at 004e500)"
    ),
    ("", "PersistentVolume"): (
        "finalizer `kubernetes.io/pv-protection`, added by the same plugin and removed only when the volume is not "
        "bound (the same file)"
    ),
    ("inference.sagemaker.aws.amazon.com", "InferenceEndpointConfig"): (
        "the HyperPod Inference Operator may update `inferenceendpointconfigs/finalizers` (its ClusterRole, "
        "aws/sagemaker-hyperpod-cli helm_chart/HyperPodHelmChart/charts/inference-operator/config/rbac/role.yaml "
        "@ 51b8dd2 and 011ca92), and the SDK deletes an endpoint by deleting only this object (hp_endpoint.py "
        "`HPEndpoint.delete` @ 011ca92), so the operator tears the SageMaker endpoint down before it goes; the "
        "operator's source is not public: whether the finalizer is set is for a cluster to show"
    ),
}
"""Kinds whose objects a controller finalizes whatever the manifest says."""

LOAD_BALANCER_FINALIZERS = (
    "a Service of type LoadBalancer: the cloud provider's service controller adds "
    "`service.kubernetes.io/load-balancer-cleanup` before it creates the load balancer and removes it after "
    "EnsureLoadBalancerDeleted (kubernetes/cloud-provider controllers/service/controller.go and service/helpers/"
    "helper.go @ v0.34.0, the module cloud-provider-aws v1.34.3 builds on); a Service the AWS Load Balancer "
    "Controller takes (its mutating webhook, on by default, sets `loadBalancerClass: service.k8s.aws/nlb` on new "
    "LoadBalancer Services) gets `service.k8s.aws/resources` instead (aws-load-balancer-controller v2.13.4 "
    "webhooks/core/service_mutator.go, pkg/shared_constants/finalizers.go, controllers/service/service_controller.go)"
)

FINALIZER_FREE: Mapping[tuple[str, str], str] = {
    ("secrets-store.csi.x-k8s.io", "SecretProviderClass"): (
        "no source of the Secrets Store CSI driver v1.6.0 outside vendor/ mentions a finalizer, and its ClusterRole "
        "may only get, list and watch secretproviderclasses (charts/secrets-store-csi-driver/templates/role.yaml, "
        "controllers/secretproviderclasspodstatus_controller.go kubebuilder markers @ v1.6.0), so nothing can add one"
    ),
    ("kyverno.io", "Policy"): (
        "Kyverno v1.15.2 adds finalizers only to its own ClusterRoles, Roles, RoleBindings, Deployment and "
        "ServiceAccount, to clean its webhooks up (pkg/controllers/webhook/cleanup.go, cmd/kyverno/main.go); no "
        "source under pkg/, cmd/ or api/ finalizes a policy"
    ),
}
"""Custom kinds kvtiers renders whose objects no controller finalizes (read at the versions kvtiers pins)."""


def finalizer(ref: ObjectRef, declared: Mapping[str, Any]) -> str | None:
    """Why deleting ``ref`` (as ``declared``) can wait for a controller, or None when it goes at once."""
    metadata = declared.get("metadata") or {}
    if metadata.get("finalizers"):
        return f"it declares the finalizers {', '.join(map(str, metadata['finalizers']))}"
    if (ref.group, ref.kind) == ("", "Service") and (declared.get("spec") or {}).get("type") == "LoadBalancer":
        return LOAD_BALANCER_FINALIZERS
    return FINALIZED.get((ref.group, ref.kind))
