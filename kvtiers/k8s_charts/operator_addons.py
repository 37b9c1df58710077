"""HyperPod Inference Operator add-on versions kvtiers has reviewed, as data without cdk8s: the environment schema
checks them at load time (``kvtiers plan`` never starts the cdk8s runtime), the operator charts when they render
(``hyperpod_operator/contract.py``; sources in docs/operator-contract.md)."""

from __future__ import annotations

from collections.abc import Iterable

# Add-on v1.0.0-eksbuild.1 is the version AWS's migration script pins (charts/inference-operator/migration/
# helm_to_addon.sh, added 2026-02-17, unchanged since). It ships operator 3.0, whose CRD is the one of chart 2.0.0
# (appVersion "3.0", commit 51b8dd2, 2026-02-16: "Inference Operator AddOn ... Version Update 3.0"). Top-level fields
# of spec in that CRD (v1). ``kubernetes`` (and so ``kubernetes.serviceAccountName``) is not among them: it arrived
# with chart 2.1.0 / 2.1.1 (commits d5e7256, 4b76719).
_OPERATOR_3_0_SPEC_FIELDS = frozenset(
    {
        "InitialReplicaCount",
        "autoScalingSpec",
        "endpointName",
        "instanceType",
        "instanceTypes",
        "intelligentRoutingSpec",
        "invocationEndpoint",
        "kvCacheSpec",
        "loadBalancer",
        "maxDeployTimeInSeconds",
        "metrics",
        "modelName",
        "modelSourceConfig",
        "modelVersion",
        "nodeAffinity",
        "replicas",
        "tags",
        "tlsConfig",
        "worker",
    }
)

ADDON_SPEC_FIELDS: dict[str, frozenset[str]] = {
    "v1.0.0-eksbuild.1": _OPERATOR_3_0_SPEC_FIELDS,
    # Add-on v1.3.0-eksbuild.1 runs operator image v3.2.0 (aws/sagemaker-hyperpod-cli#431 names both), the operator
    # of chart 2.2.2 (appVersion "3.2", commit a00b22d). Its CRD adds kubernetes, dnsConfig, dataCapture, pdSpec.
    "v1.3.0-eksbuild.1": _OPERATOR_3_0_SPEC_FIELDS | {"kubernetes", "dnsConfig", "dataCapture", "pdSpec"},
}
"""Top-level ``InferenceEndpointConfig.spec`` fields each known add-on version's CRD accepts. The CRD's schema has
no ``x-kubernetes-preserve-unknown-fields``: kubectl's strict field validation refuses any other field."""

ADDONS_STRIPPING_LMCACHE_ENV = frozenset({"v1.3.0-eksbuild.1"})
"""Add-on versions whose operator is reported to drop the worker's ``LMCACHE_*`` environment and force its own
``LMCACHE_REMOTE_URL`` (aws/sagemaker-hyperpod-cli#431, operator v3.2.0; closed source, not verifiable offline). Only
the Curvine L2's Kyverno policy writes those variables back at admission: an endpoint without it would run with the
operator's L1 and chunk sizes instead of the sizing's, so these versions are refused for it."""


REPELLING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def check_group_schedulable(where: str, group: str, taints: Iterable[tuple[str, str]]) -> None:
    """An operator endpoint's pods carry no tolerations: the InferenceEndpointConfig of every reviewed add-on has no
    tolerations field (its CRD mentions them only as a future field), so a group whose taints (``(key, effect)``)
    repel pods would leave the endpoint Pending for ever. Refused where it is built."""
    repelling = sorted(f"{key}:{effect}" for key, effect in taints if effect in REPELLING_TAINT_EFFECTS)
    if repelling:
        raise ValueError(
            f"{where}: serving 'operator' cannot run on instance group {group!r}, tainted {', '.join(repelling)}: "
            "the InferenceEndpointConfig has no tolerations field; use an untainted group or serving 'self_managed'"
        )
