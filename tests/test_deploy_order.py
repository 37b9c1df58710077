"""Every manifest with objects in the serving namespace deploys after the namespace and its default-deny policies,
whether or not its endpoint mounts the L2 (whose claim comes after both): on a first deploy an endpoint's
``kubectl apply`` must never run into a namespace that does not exist yet, nor start pods before default deny."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from tests.synth import ROOT, synth

MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
POD_MAKERS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "InferenceEndpointConfig"}


def depends_on_transitively(resources: dict, start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(resources[start].get("DependsOn", []))
    while todo:
        current = todo.pop()
        if current not in seen and current in resources:
            seen.add(current)
            todo.extend(resources[current].get("DependsOn", []))
    return seen


def namespaced_objects(resource: dict) -> list[dict]:
    """The manifest's objects; a manifest with deploy-time values (``Fn::Join`` of strings and tokens: a role ARN)
    with each token read as a placeholder string."""
    manifest = resource["Properties"]["Manifest"]
    if isinstance(manifest, dict) and "Fn::Join" in manifest:
        separator, parts = manifest["Fn::Join"]
        manifest = separator.join(p if isinstance(p, str) else "TOKEN" for p in parts)
    return json.loads(manifest)


@pytest.mark.parametrize(("config", "l2"), [("dev", "off"), ("prod", "off"), ("prod", None)])
def test_every_serving_manifest_comes_after_the_namespace_and_its_default_deny(config, l2, tmp_path):
    raw = yaml.safe_load((ROOT / "config" / f"{config}.yaml").read_text())
    raw = copy.deepcopy(raw)
    for endpoint in raw["serving"]["endpoints"]:
        if l2 is not None:
            endpoint["l2"] = l2
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    synthesized = synth(path, tmp_path / "cdk.out")
    graph = synthesized.graph
    resources = synthesized.template_json(graph.workloads)["Resources"]
    serving = graph.environment.serving.namespace
    first = {
        next(k for k in resources if k.startswith(name) and resources[k]["Type"] == MANIFEST)
        for name in ("ServingNamespace", "ServingNetworkPolicies")
    }
    namespace_manifest = next(i for i in first if i.startswith("ServingNamespace"))
    checked = 0
    seen: set[str] = set()
    for logical_id, resource in resources.items():
        if resource["Type"] != MANIFEST or logical_id in first:
            continue
        objects = [o for o in namespaced_objects(resource) if o.get("metadata", {}).get("namespace") == serving]
        if not objects:
            continue
        # Pods (or what makes them) wait for default deny too; other objects (RBAC) for the namespace.
        wanted = first if {o["kind"] for o in objects} & POD_MAKERS else {namespace_manifest}
        checked += 1
        seen.add(logical_id)
        missing = wanted - depends_on_transitively(resources, logical_id)
        assert not missing, f"{logical_id} deploys without waiting for {sorted(missing)}"
    engines = {i for i in resources if i.startswith("Endpoint") and resources[i]["Type"] == MANIFEST}
    assert checked >= 2 and engines <= seen, f"not checked: {sorted(engines - seen)}"
