"""Kyverno policy that attaches the Curvine L2 to exactly one operator endpoint's worker pods at admission.

Pod selection: the operator labels the pods of an InferenceEndpointConfig ``app: <IEC name>`` (the
sagemaker-hyperpod SDK 3.12.0 lists an endpoint's pods by that label, ``hp_endpoint.py``), and the IEC's
``kubernetes`` field has no labels, so we cannot add our own. The rule matches Pods in the serving namespace with
``app: <endpoint>`` on CREATE; endpoint names are unique per environment and the self-managed pods use
``app.kubernetes.io/*`` labels only. Inside the pod only the container running the pinned vLLM image (the worker)
gets the env and mount (conditional anchor on ``image``), so operator sidecars are untouched.

Failure policy: ``failurePolicy: Fail``: if Kyverno's webhook is unavailable, admission of the matched pods fails
(they stay Pending/retry) instead of starting without their L2. A validate rule (Enforce) additionally denies a
matched pod that reaches validation without the claim volume and the env (mutations run before validation).
Because it runs at admission, the L2 survives operator reconciles and pod restarts (every new pod is mutated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cdk8s
from constructs import Construct

from kvtiers.k8s_charts.l2 import L2Settings

POD_APP_LABEL = "app"
L2_VOLUME = "kvtiers-curvine-l2"


@dataclass(frozen=True)
class CurvineL2PolicyProps:
    endpoint: str
    """The operator endpoint (= InferenceEndpointConfig name = the pods' ``app`` label)."""
    worker_image: str
    """The worker container image (env.serving.images.vllm_image): selects the container to mutate."""
    l2: L2Settings
    """The same object the self-managed path uses (namespace, claim, mount path, remote URL, serde, seed)."""


def l2_env(l2: L2Settings) -> list[dict[str, str]]:
    return [
        {"name": "LMCACHE_REMOTE_URL", "value": l2.remote_url},
        {"name": "LMCACHE_REMOTE_SERDE", "value": l2.serde},
        {"name": "PYTHONHASHSEED", "value": l2.hash_seed},
    ]


def build_policy(p: CurvineL2PolicyProps) -> dict[str, Any]:
    match = {
        "any": [
            {
                "resources": {
                    "kinds": ["Pod"],
                    "namespaces": [p.l2.namespace],
                    "operations": ["CREATE"],
                    "selector": {"matchLabels": {POD_APP_LABEL: p.endpoint}},
                }
            }
        ]
    }
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": f"kvtiers-curvine-l2-{p.endpoint}"[:63].rstrip("-")},
        "spec": {
            "background": False,
            "failurePolicy": "Fail",
            "rules": [
                {
                    "name": "attach-curvine-l2",
                    "match": match,
                    "mutate": {
                        "patchStrategicMerge": {
                            "spec": {
                                "volumes": [
                                    {"name": L2_VOLUME, "persistentVolumeClaim": {"claimName": p.l2.claim_name}}
                                ],
                                "containers": [
                                    {
                                        "(image)": p.worker_image,
                                        "env": l2_env(p.l2),
                                        "volumeMounts": [{"name": L2_VOLUME, "mountPath": p.l2.mount_path}],
                                    }
                                ],
                            }
                        }
                    },
                },
                {
                    "name": "require-curvine-l2",
                    "match": match,
                    "validate": {
                        "failureAction": "Enforce",
                        "message": f"pods of endpoint {p.endpoint} must mount the Curvine L2 claim {p.l2.claim_name}",
                        "pattern": {
                            "spec": {
                                "volumes": [{"persistentVolumeClaim": {"claimName": p.l2.claim_name}}],
                            }
                        },
                    },
                },
            ],
        },
    }


class CurvineL2PolicyChart(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, props: CurvineL2PolicyProps) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        self.policy = build_policy(props)
        obj = cdk8s.ApiObject(
            self,
            "policy",
            api_version=self.policy["apiVersion"],
            kind=self.policy["kind"],
            metadata=cdk8s.ApiObjectMetadata(name=self.policy["metadata"]["name"]),
        )
        obj.add_json_patch(cdk8s.JsonPatch.add("/spec", self.policy["spec"]))
