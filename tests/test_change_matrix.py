"""Deploying B after A leaves exactly B: the change model (kvtiers.change) over realistic changes of both example
environments, each synthesized once (several changes share a variant where their effects stay apart).

For every change: no orphaned or lost Kubernetes object, no in-place change of an immutable field, no failing or
data-losing CloudFormation change except the one a variant is about, and the restarts and cache effects expected.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtiers.change.cloudformation import CfnAction, resource_changes
from kvtiers.change.deploy import deploy
from kvtiers.change.manifests import load_templates
from kvtiers.change.report import EnvironmentChange, assembly_change

REVISION = "0123456789abcdef0123456789abcdef01234567"
DEV_REVISION = "f2826a00ceef68f0f2b946d945ecc0477ce4450c"
"""The commit config/dev.yaml pins."""


def _endpoint(raw: dict, name: str | None = None) -> dict:
    endpoints = raw["serving"]["endpoints"]
    return endpoints[0] if name is None else next(e for e in endpoints if e["name"] == name)


def _engine_change(raw: dict) -> None:
    """A new L1 size, a pinned model revision, an L2 share group (the pods mount the group's directory), one replica
    and one node more."""
    e = _endpoint(raw)
    e.update(l1_gib=e.get("l1_gib", 40) + 4, replicas=e["replicas"] + 1, l2_share_group="qwen-shared")
    e["source"]["revision"] = REVISION
    raw["hyperpod"]["instance_groups"][0]["count"] += 1


def _rename(raw: dict) -> None:
    """The endpoint renamed: the old one removed, a new one added."""
    _endpoint(raw)["name"] = "qwen2-7b-next"


def _routing_and_observability(raw: dict) -> None:
    _endpoint(raw).update(routing="kvaware", api="completions")
    raw["observability"] = {"enabled": True}


def _operator_settings(raw: dict) -> None:
    """The operator endpoint's L1 (its worker environment: a new InferenceEndpointConfig name), another Curvine
    worker count (one node more in the worker group)."""
    _endpoint(raw, "qwen2-7b-chat")["l1_gib"] += 4
    next(g for g in raw["hyperpod"]["instance_groups"] if g["name"] == raw["curvine"]["worker_group"])["count"] += 1


def _fewer_and_no_observability(raw: dict) -> None:
    _endpoint(raw, "qwen2-7b-chat")["replicas"] -= 1
    raw["serving"]["endpoints"] = [e for e in raw["serving"]["endpoints"] if e["name"] != "qwen25-32b"]
    raw["observability"] = {"enabled": False}


VARIANTS: dict[str, dict[str, Callable[[dict], None]]] = {
    "dev": {"engine": _engine_change, "rename": _rename, "routing": _routing_and_observability},
    "prod": {"operator": _operator_settings, "shrink": _fewer_and_no_observability},
}


@pytest.fixture(scope="module")
def shipped(environment_assemblies) -> dict[str, Path]:
    """Each environment as shipped."""
    return {env: environment_assemblies.shipped(env) for env in VARIANTS}


def variant_changes(
    environment_assemblies, variants: dict[tuple[str, str], Callable[[dict], None]]
) -> dict[tuple[str, str], EnvironmentChange]:
    """Each ``(environment, name)``'s edit as deployed over the shipped environment."""
    return {
        (env, name): assembly_change(
            f"{env} {name}", environment_assemblies.shipped(env), environment_assemblies.edited(env, edit)
        )
        for (env, name), edit in variants.items()
    }


@pytest.fixture(scope="module")
def changes(environment_assemblies) -> dict[tuple[str, str], EnvironmentChange]:
    return variant_changes(
        environment_assemblies, {(env, name): edit for env, named in VARIANTS.items() for name, edit in named.items()}
    )


ALL = [(env, name) for env, variants in VARIANTS.items() for name in variants]


@pytest.mark.parametrize("key", ALL, ids=[f"{e}-{n}" for e, n in ALL])
def test_no_orphan_no_lost_object_no_immutable_change(changes, key):
    change = changes[key]
    assert change.outcome.orphans == ()
    assert change.outcome.lost == ()
    assert change.outcome.immutable == ()


def _workload(change: EnvironmentChange, name: str):
    return next(w for w in change.workloads if w.ref.name == name)


def _endpoint_effect(change: EnvironmentChange, name: str):
    return next(e for e in change.endpoints if e.name == name)


def test_an_engine_change_restarts_the_engines_one_at_a_time_and_another_revision_starts_a_new_l2(changes):
    change = changes["dev", "engine"]
    assert change.errors == ()
    engine = _workload(change, "qwen2-7b-engine")
    assert (engine.change, engine.replicas_before, engine.replicas_after) == ("restart", 2, 3)
    assert (engine.at_once, engine.surge, engine.gpus_idle) == (1, 0, 1)
    assert engine.drain and "maxUnavailable 1" in engine.drain
    effect = _endpoint_effect(change, "qwen2-7b")
    assert effect.l0_l1_lost == 2
    assert effect.l2 and effect.l2.startswith("new L2 namespace")
    assert effect.l2_reasons[0] == f"revision {DEV_REVISION} -> {REVISION}"
    (location,) = effect.l2_reasons[1:]
    assert location.startswith("L2 location ") and "/endpoint-qwen2-7b/" in location
    assert "/shared-qwen-shared/" in location
    hyperpod = next(c for c in change.resources if c.type == "AWS::SageMaker::Cluster")
    assert hyperpod.action is CfnAction.UPDATE


def test_a_renamed_endpoint_removes_the_old_one_and_adds_the_new_one(changes):
    change = changes["dev", "rename"]
    # The old endpoint's API key and router Service (the name clients call) go with it (kvtiers.change.deletions).
    key, router = sorted(change.errors)
    assert key.startswith("deleted: AWS::SecretsManager::Secret kvtiers-dev-workloads/EndpointQwen27b")
    assert router.startswith("deleted: Service serving/qwen2-7b-router ")
    assert (_endpoint_effect(change, "qwen2-7b").status, _endpoint_effect(change, "qwen2-7b-next").status) == (
        "removed",
        "added",
    )
    assert _endpoint_effect(change, "qwen2-7b").l0_l1_lost == 2
    assert _workload(change, "qwen2-7b-engine").change == "delete"


def test_another_routing_strategy_restarts_the_router_and_the_engines_but_keeps_the_l2(changes):
    change = changes["dev", "routing"]
    assert change.errors == ()
    assert _workload(change, "qwen2-7b-router").change == "restart"
    effect = _endpoint_effect(change, "qwen2-7b")
    assert effect.l2 is None
    created = {c.type for c in change.resources if c.action is CfnAction.CREATE}
    assert "AWS::APS::Workspace" in created


def test_an_operator_endpoint_rename_replaces_it_and_its_old_config_may_remain(changes):
    change = changes["prod", "operator"]
    # Its old SageMaker endpoint goes: clients must invoke the new name (kvtiers.change.deletions).
    (error,) = change.errors
    assert "InferenceEndpointConfig" in error and "SageMaker endpoint qwen2-7b-chat-" in error
    effect = _endpoint_effect(change, "qwen2-7b-chat")
    assert effect.l0_l1_lost == 2 and effect.l2 is None
    assert {w.change for w in effect.workloads} == {"create", "delete"}
    assert {r.kind for r in change.outcome.may_remain} >= {"InferenceEndpointConfig"}
    assert _workload(change, "curvine-l2-janitor").change == "restart"


def test_switching_observability_off_is_an_error_it_deletes_the_metrics_workspace(changes):
    change = changes["prod", "shrink"]
    assert [e for e in change.errors if "AWS::APS::Workspace" in e and "metrics workspace" in e]
    # Removing qwen25-32b deletes its NLB and router Services and its API key too (kvtiers.change.deletions).
    assert len(change.errors) == 4
    assert [e for e in change.errors if e.startswith("deleted: Service serving/qwen25-32b-router ")]
    assert [e for e in change.errors if e.startswith("deleted: Service serving/qwen25-32b-router-nlb ")]
    key = "deleted: AWS::SecretsManager::Secret kvtiers-prod-workloads/EndpointQwen2532b"
    assert [e for e in change.errors if e.startswith(key)]
    operator = next(w for w in change.workloads if w.endpoint == "qwen2-7b-chat")
    assert (operator.change, operator.replicas_before, operator.replicas_after) == ("scale", 2, 1)
    assert _endpoint_effect(change, "qwen2-7b-chat").l0_l1_lost == 1
    assert _endpoint_effect(change, "qwen25-32b").status == "removed"


def test_the_model_sees_immutable_changes_and_a_data_losing_replacement_in_a_real_synth(shipped):
    """The shipped dev templates with the Curvine CSIDriver's attachRequired flipped and the L2 StorageClass's
    parameters changed (both immutable), and a journal volume's replacement forced through a cascade."""
    templates = load_templates(shipped["dev"])
    edited = copy.deepcopy(templates)
    for template in edited.values():
        for resource in template["Resources"].values():
            manifest = (resource.get("Properties") or {}).get("Manifest")
            if not isinstance(manifest, str):
                continue
            objects = json.loads(manifest)
            for o in objects:
                if o.get("kind") == "CSIDriver":
                    o["spec"]["attachRequired"] = not o["spec"].get("attachRequired", False)
                if o.get("kind") == "StorageClass":
                    o["parameters"] = {**(o.get("parameters") or {}), "extra": "1"}
            resource["Properties"]["Manifest"] = json.dumps(objects)
    outcome = deploy(templates, edited)
    assert {(c.ref.kind, c.field) for c in outcome.immutable} == {
        ("CSIDriver", "spec.attachRequired"),
        ("StorageClass", "parameters"),
    }
    platform = next(t for name, t in edited.items() if name.endswith("-platform"))
    volume = next(r for r in platform["Resources"].values() if r["Type"] == "AWS::EC2::Volume")
    volume["Type"] = "AWS::EC2::Volume::Other"  # a type change replaces it
    errors = [c.error for c in resource_changes(templates, edited) if c.error]
    assert errors == ["replacement loses the EBS volume (the Curvine journal and metadata)"]
