"""Leftovers of an operator endpoint's earlier versions.

A change of an operator endpoint's fingerprinted fields renames its InferenceEndpointConfig, Kyverno Policy, L2
guard ConfigMap and SageMaker endpoint (``<name>-<fingerprint>``). The old objects are deleted by the cleanup
of CloudFormation's update, through CDK's kubectl handler, which reports success even when ``kubectl delete`` failed
(aws-cdk-lib 2.275.0 ``aws-eks-v2/kubectl-handler/apply/__init__.py``): an old endpoint can stay, holding its GPUs
and serving its old settings, while the stack says ``UPDATE_COMPLETE``. This check finds them by name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi

from kvtiers.cli.verify.result import CheckResult, failed, passed
from kvtiers.config import model
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.k8s_charts import names
from kvtiers.k8s_charts.hyperpod_operator import API_VERSION

NAME = "no leftovers of earlier versions"
KYVERNO_GROUP, KYVERNO_VERSION, KYVERNO_POLICIES = "kyverno.io", "v1", "policies"


def versions_of(endpoint: str, suffix: str = "") -> re.Pattern[str]:
    """The names of every version of ``endpoint``'s object with ``suffix``: ``<endpoint>-<fingerprint><suffix>``."""
    fingerprint = "0" * names.FINGERPRINT_LENGTH
    template = re.escape(names.operator_object_name(endpoint, fingerprint) + suffix)
    return re.compile("^" + template.replace(fingerprint, f"[0-9a-f]{{{names.FINGERPRINT_LENGTH}}}") + "$")


def stale(found: Iterable[str], endpoint: str, current: str, suffix: str = "") -> list[str]:
    """The names among ``found`` that are another version of ``endpoint``'s object than ``current``."""
    pattern = versions_of(endpoint, suffix)
    return sorted(n for n in found if pattern.match(n) and n != current)


def sagemaker_endpoints(sagemaker, contains: str) -> list[str]:
    pages = sagemaker.get_paginator("list_endpoints").paginate(NameContains=contains)
    return [e["EndpointName"] for page in pages for e in page["Endpoints"]]


def check_operator_leftovers(api: ApiClient, sagemaker, env: Environment, endpoint: Endpoint) -> CheckResult:
    """Fails naming every InferenceEndpointConfig, Kyverno Policy, L2 guard ConfigMap and SageMaker endpoint of an
    earlier version of ``endpoint``, with the commands that delete them."""
    area, ns = f"endpoint:{endpoint.name}", env.serving.namespace
    if sagemaker is None:
        return failed(area, NAME, "no sagemaker client: cannot list the SageMaker endpoints", "AWS credentials")
    current = model.operator_endpoint(env, endpoint.name).object_name
    group, version = API_VERSION.split("/")
    custom = CustomObjectsApi(api)

    def listed(items: list) -> list[str]:
        return [item["metadata"]["name"] for item in items]

    configs = stale(
        listed(custom.list_namespaced_custom_object(group, version, ns, "inferenceendpointconfigs")["items"]),
        endpoint.name,
        current,
    )
    policies = stale(
        listed(custom.list_namespaced_custom_object(KYVERNO_GROUP, KYVERNO_VERSION, ns, KYVERNO_POLICIES)["items"]),
        endpoint.name,
        names.operator_policy_name(current),
        names.OPERATOR_POLICY_SUFFIX,
    )
    config_maps = stale(
        (cm.metadata.name for cm in CoreV1Api(api).list_namespaced_config_map(ns).items),
        endpoint.name,
        names.operator_guard_config_map_name(current),
        names.OPERATOR_GUARD_SUFFIX,
    )
    # The operator deletes the SageMaker endpoint of an InferenceEndpointConfig that is deleted.
    orphans = [
        n for n in stale(sagemaker_endpoints(sagemaker, endpoint.name), endpoint.name, current) if n not in configs
    ]
    found = {
        "InferenceEndpointConfig": configs,
        "Kyverno Policy": policies,
        "ConfigMap": config_maps,
        "SageMaker endpoint": orphans,
    }
    if not any(found.values()):
        return passed(area, NAME, f"only {current}")
    detail = "; ".join(f"{kind} {', '.join(listed_names)}" for kind, listed_names in found.items() if listed_names)
    kubectl = {"inferenceendpointconfig": configs, "policies.kyverno.io": policies, "configmap": config_maps}
    commands = [f"kubectl -n {ns} delete {kind} {' '.join(n)}" for kind, n in kubectl.items() if n] + [
        f"aws sagemaker delete-endpoint --endpoint-name {name}" for name in orphans
    ]
    return failed(
        area,
        NAME,
        f"earlier versions of {endpoint.name} still exist (current: {current}): {detail}",
        "a rename's cleanup failed (the kubectl handler reports success anyway); delete them: " + "; ".join(commands),
    )
