"""Kyverno policy: mount the Curvine L2 and the kvtiers L2 guard into every model-server container of one operator
endpoint's pods, and refuse those pods when a mount or LMCache's L2 URL is missing.

Why a policy: the operator has no field for a Curvine volume (its L2 backends are ``redis`` and ``tieredstorage``)
and reverts patches to the Deployments it owns; a mutation at pod admission survives every reconcile. Everything
else LMCache needs is in the endpoint's worker environment (endpoint.py); the policy adds only the volumes and mounts:
the L2 claim, and the ConfigMap with the L2 guard (``kvtiers_l2_guard.py``, rendered by this chart) that vLLM loads
as its KV connector (the worker's ``--kv-transfer-config`` and ``PYTHONPATH`` name it).

How it avoids depending on anything unconfirmed about the operator's pods:
- Which pods: those with the operator's endpoint label (``app: <object name>``, names.OPERATOR_POD_LABEL), in
  the serving namespace, at CREATE. Restricted to Pods: no rules are generated for Deployments (autogen off).
- Which containers: every container that mounts the model at ``MODEL_MOUNT``, the path the engine's own arguments
  load the weights from. Not the container name, not the image (a mirror or a digest would miss it).
- The mutation is a Kyverno ``foreach`` over the containers whose strategic-merge patch is keyed by the merge key
  (the container's ``name``) without anchors, so kustomize's merge (the one Kyverno runs) applies it verbatim. It
  adds the L2 mount and writes the endpoint's ``LMCACHE_*`` variables (merged by name), so that an operator that
  strips or overrides them (aws/sagemaker-hyperpod-cli#431, operator v3.2.0) changes nothing. Then it appends
  kvtiers' ``--kv-transfer-config`` as each model server's last argument, after the connector the operator adds
  (engine_args.py): vLLM takes the last.
- The check is CEL: at least one model-server container, each with the L2 mount of the endpoint's own directory
  (``subPath``) and every ``LMCACHE_*`` variable equal to the endpoint's (the L2's URL among them), no container
  mounting the claim any other way, and the pod's L2 volume from the claim. A pod the mutation missed is refused, not started without
  its L2. Each model server's effective ``--kv-transfer-config`` must be kvtiers' (the L2 guard), and nothing the
  append cannot override may remain (engine_args.py). Kyverno serves mutate rules from its mutating webhook and
  validate rules from its validating one, and the API server runs every mutating webhook before any validating one.
- Fail-closed for these pods only: ``webhookConfiguration`` with match conditions gives the policy a webhook of its
  own (Kyverno v1.15.2 ``newWebhookPerPolicy``), so a Kyverno outage blocks this endpoint's pods and nothing else.
"""

from __future__ import annotations

import json
from typing import Any

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.hyperpod_operator import contract
from kvtiers.k8s_charts.hyperpod_operator.endpoint import (
    L2_GUARD_DIR,
    L2_GUARD_VOLUME,
    L2_VOLUME,
    MODEL_MOUNT,
    OperatorEndpoint,
)
from kvtiers.k8s_charts.hyperpod_operator.engine_args import kv_connector_expressions, kv_connector_mutations
from kvtiers.k8s_charts.l2 import L2Mount
from kvtiers.k8s_charts.serving.endpoint import (
    PROMETHEUS_MULTIPROC_DIR,
    PROMETHEUS_MULTIPROC_ENV,
    PROMETHEUS_MULTIPROC_SIZE,
)
from kvtiers.k8s_charts.serving.lmcache import POD_NAME_ENV, per_pod_env
from kvtiers.k8s_charts.vllm import L2_GUARD_MODULE, l2_guard_source

CONTAINERS = "request.object.spec.containers"
METRICS_VOLUME = "kvtiers-prometheus-multiproc"
"""The model servers' prometheus multiprocess directory (a memory-backed emptyDir the policy adds, as the
self-managed pods have): not ``/dev/shm``, which is NCCL's and torch's, and whose ``.db`` files the operator's pod-scoped
``shm`` volume would keep across container restarts beside theirs."""
IS_MODEL_SERVER = {
    "key": "{{ contains(element.volumeMounts[].mountPath || `[]`, '" + MODEL_MOUNT + "') }}",
    "operator": "Equals",
    "value": True,
}
"""Kyverno foreach precondition (JMESPath): the container mounts the model weights."""


def _cel(value: str) -> str:
    """A CEL string literal (JSON's escaping is valid CEL for these values)."""
    return json.dumps(value)


def guard_config_map_name(endpoint: OperatorEndpoint) -> str:
    """The ConfigMap with the L2 guard the endpoint's engines load (named like the policy: one per endpoint object)."""
    return names.operator_guard_config_map_name(endpoint.object_name)


def policy_name(endpoint: OperatorEndpoint) -> str:
    """Named after the endpoint object (with its fingerprint): a replaced endpoint gets a new policy, and the
    readiness wait, which names the policy, runs again before the new endpoint's pods exist."""
    return names.operator_policy_name(endpoint.object_name)


def match_condition(endpoint: OperatorEndpoint) -> str:
    """Webhook match condition (CEL, evaluated by the API server): only this endpoint's pods reach the policy's
    fail-closed webhook. CREATE first: ``object`` is null on DELETE, and CEL's ``&&`` is false when either side
    is false, even if the other errs."""
    key, value = next(iter(endpoint.pod_labels.items()))
    return (
        f"request.operation == 'CREATE' && request.namespace == {_cel(endpoint.namespace)} && has(object.metadata.labels) && "
        f"{_cel(key)} in object.metadata.labels && object.metadata.labels[{_cel(key)}] == {_cel(value)}"
    )


def _only_own_directory(containers: str, l2: L2Mount) -> str:
    return (
        f"{containers}.all(c, !has(c.volumeMounts) || c.volumeMounts.all(m, m.name != {_cel(L2_VOLUME)} || "
        f"(has(m.subPath) && m.subPath == {_cel(l2.sub_path)})))"
    )


def cel_variables() -> list[dict[str, Any]]:
    return [
        {
            "name": "modelServers",
            "expression": "object.spec.containers.filter(c, has(c.volumeMounts) && "
            f"c.volumeMounts.exists(m, m.mountPath == {_cel(MODEL_MOUNT)}))",
        }
    ]


def cel_expressions(l2: L2Mount, lmcache_env: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "expression": "variables.modelServers.all(c, c.volumeMounts.exists(m, "
            f"m.name == {_cel(METRICS_VOLUME)} && m.mountPath == {_cel(PROMETHEUS_MULTIPROC_DIR)}))",
            "message": f"a model-server container does not mount {METRICS_VOLUME} at {PROMETHEUS_MULTIPROC_DIR}: "
            "LMCache's metrics would not reach /metrics",
        },
        {
            "expression": "variables.modelServers.all(c, c.volumeMounts.exists(m, "
            f"m.name == {_cel(L2_GUARD_VOLUME)} && m.mountPath == {_cel(L2_GUARD_DIR)}))",
            "message": f"a model-server container does not mount the L2 guard at {L2_GUARD_DIR}: vLLM cannot load "
            "its KV connector",
        },
        {
            "expression": "size(variables.modelServers) > 0",
            "message": f"no container mounts the model at {MODEL_MOUNT}: the Curvine L2 mutation matched nothing",
        },
        {
            "expression": f"has(object.spec.volumes) && object.spec.volumes.exists(v, v.name == {_cel(L2_VOLUME)} && "
            f"has(v.persistentVolumeClaim) && v.persistentVolumeClaim.claimName == {_cel(l2.claim_name)})",
            "message": f"the pod has no volume {L2_VOLUME} from the claim {l2.claim_name}",
        },
        {
            "expression": "variables.modelServers.all(c, c.volumeMounts.exists(m, "
            f"m.name == {_cel(L2_VOLUME)} && m.mountPath == {_cel(l2.mount_path)} && has(m.subPath) && "
            f"m.subPath == {_cel(l2.sub_path)}))",
            "message": f"a model-server container does not mount the endpoint's directory {l2.sub_path} of "
            f"{L2_VOLUME} at {l2.mount_path}",
        },
        {
            # Only the endpoint's own directory: no container of the pod mounts the claim any other way.
            "expression": f"{_only_own_directory('object.spec.containers', l2)} && (!has(object.spec.initContainers) "
            f"|| {_only_own_directory('object.spec.initContainers', l2)})",
            "message": f"a container mounts {L2_VOLUME} beyond the endpoint's directory {l2.sub_path}",
        },
        {
            "expression": "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.persistentVolumeClaim) || "
            f"v.persistentVolumeClaim.claimName != {_cel(l2.claim_name)} || v.name == {_cel(L2_VOLUME)})",
            "message": f"a volume other than {L2_VOLUME} is from the claim {l2.claim_name}",
        },
    ] + [
        {
            "expression": "variables.modelServers.all(c, has(c.env) && "
            f"c.env.exists(e, e.name == {_cel(name)}) && "
            f"c.env.all(e, e.name != {_cel(name)} || (has(e.value) && e.value == {_cel(value)})))",
            "message": f"a model-server container does not set {name}={value}",
        }
        for name, value in lmcache_env.items()
    ]


def lmcache_env(endpoint: OperatorEndpoint) -> dict[str, str]:
    """The endpoint's ``LMCACHE_*`` worker environment and the ``PYTHONPATH`` of the L2 guard, which the policy also
    writes at admission: an operator that strips or overrides ``LMCACHE_*`` worker variables (reported for operator
    v3.2.0, aws/sagemaker-hyperpod-cli#431) cannot leave the pods without the L2, without the guard, or with another
    L1 size, chunk size or URL."""
    return {
        **{
            e["name"]: e["value"]
            for e in endpoint.worker_env
            if e["name"].startswith("LMCACHE_") or e["name"] == "PYTHONPATH"
        },
        # The metrics directory the policy mounts (METRICS_VOLUME).
        PROMETHEUS_MULTIPROC_ENV: PROMETHEUS_MULTIPROC_DIR,
    }


def pod_env(endpoint: OperatorEndpoint, env: dict[str, str]) -> list[dict[str, Any]]:
    """The variables the mutation writes: the endpoint's ``LMCACHE_*`` and guard settings, then the pod's own
    temporary directory for the fs connector (``tmp-$(POD_NAME)``, after ``POD_NAME``, so that Kubernetes expands it):
    without it every pod writes a chunk through the same temporary name, and two pods storing one chunk can leave a
    file of the right length with another pod's bytes (serving/lmcache.py says why)."""
    per_pod = per_pod_env(endpoint.lmcache)
    field_ref = {"fieldRef": {"fieldPath": "metadata.name"}}
    return [
        *({"name": name, "value": value} for name, value in env.items()),
        *([{"name": POD_NAME_ENV, "valueFrom": field_ref}] if per_pod else []),
        *({"name": name, "value": value} for name, value in per_pod.items()),
    ]


def mutation(endpoint: OperatorEndpoint, l2: L2Mount, env: dict[str, str]) -> dict[str, Any]:
    return {
        "foreach": [
            {
                "list": CONTAINERS,
                "preconditions": {"all": [IS_MODEL_SERVER]},
                "patchStrategicMerge": {
                    "spec": {
                        "volumes": [
                            {"name": L2_VOLUME, "persistentVolumeClaim": {"claimName": l2.claim_name}},
                            {"name": L2_GUARD_VOLUME, "configMap": {"name": guard_config_map_name(endpoint)}},
                            {
                                "name": METRICS_VOLUME,
                                "emptyDir": {"medium": "Memory", "sizeLimit": PROMETHEUS_MULTIPROC_SIZE},
                            },
                        ],
                        "containers": [
                            {
                                "name": "{{ element.name }}",
                                # env is merged by name: our values replace the operator's, missing ones are added.
                                "env": pod_env(endpoint, env),
                                "volumeMounts": [
                                    {"name": L2_VOLUME, "mountPath": l2.mount_path, "subPath": l2.sub_path},
                                    {"name": L2_GUARD_VOLUME, "mountPath": L2_GUARD_DIR, "readOnly": True},
                                    {"name": METRICS_VOLUME, "mountPath": PROMETHEUS_MULTIPROC_DIR},
                                ],
                            }
                        ],
                    }
                },
            },
            # After the merge, which keeps the containers' order: the JSON patches address them by index.
            *kv_connector_mutations(endpoint.lmcache.kv_transfer_config, is_model_server=IS_MODEL_SERVER),
        ]
    }


def policy(endpoint: OperatorEndpoint) -> dict[str, Any]:
    """The Kyverno ``Policy`` that attaches the endpoint's Curvine L2 (``endpoint.l2_backend`` must be ``curvine``)."""
    if endpoint.l2 is None or endpoint.lmcache.remote_url is None:
        raise ValueError(
            f"CurvineL2PolicyChart: endpoint.l2_backend must be 'curvine' (with l2), got {endpoint.l2_backend!r}"
        )
    env = lmcache_env(endpoint)
    # No namespace filter: a namespaced Policy applies in its own namespace only, and Kyverno refuses one that
    # filters namespaces (api/kyverno/v1/resource_description_types.go, v1.15.2).
    match = {
        "any": [
            {
                "resources": {
                    "kinds": ["Pod"],
                    "operations": ["CREATE"],
                    "selector": {"matchLabels": endpoint.pod_labels},
                }
            }
        ]
    }
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "Policy",
        "metadata": {
            "name": policy_name(endpoint),
            "namespace": endpoint.namespace,
            "annotations": {contract.AUTOGEN_ANNOTATION: "none"},
        },
        "spec": {
            "background": False,
            "webhookConfiguration": {
                "failurePolicy": "Fail",
                "matchConditions": [{"name": "operator-endpoint-pods", "expression": match_condition(endpoint)}],
            },
            "rules": [
                {"name": "mount-curvine-l2", "match": match, "mutate": mutation(endpoint, endpoint.l2, env)},
                {
                    "name": "require-curvine-l2",
                    "match": match,
                    "validate": {
                        "failureAction": "Enforce",
                        "cel": {
                            "variables": cel_variables(),
                            "expressions": [
                                *cel_expressions(endpoint.l2, env),
                                *kv_connector_expressions(endpoint.lmcache.kv_transfer_config),
                            ],
                        },
                    },
                },
            ],
        },
    }


class CurvineL2PolicyChart(cdk8s.Chart):
    """The endpoint's Kyverno ``Policy`` (see the module docstring; a custom resource: a raw ``ApiObject``).

    :param endpoint: an endpoint with ``l2_backend='curvine'``.
    """

    def __init__(self, scope: Construct, id: str, *, endpoint: OperatorEndpoint) -> None:
        body = policy(endpoint)
        super().__init__(scope, id, disable_resource_name_hashes=True)
        metadata = body["metadata"]
        self.policy = cdk8s.ApiObject(
            self,
            "policy",
            api_version=body["apiVersion"],
            kind=body["kind"],
            metadata=cdk8s.ApiObjectMetadata(
                name=metadata["name"], namespace=metadata["namespace"], annotations=metadata["annotations"]
            ),
        )
        self.policy.add_json_patch(cdk8s.JsonPatch.add("/spec", body["spec"]))
        # Before the policy in the manifest: a pod admitted by the policy finds the ConfigMap it mounts.
        self.guard = k8s.KubeConfigMap(
            self,
            "l2-guard",
            metadata=k8s.ObjectMeta(name=guard_config_map_name(endpoint), namespace=endpoint.namespace),
            data={f"{L2_GUARD_MODULE}.py": l2_guard_source()},
        )
        self.policy.node.add_dependency(self.guard)
