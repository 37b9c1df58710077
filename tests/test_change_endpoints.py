"""Endpoint effects of a deploy: a new or renamed endpoint's L2 is empty and an abandoned L2 directory is listed
with how to reclaim it; replacing an operator endpoint's config is an outage with a new client-facing name; idle
GPUs are the stopping pod's; OnDelete DaemonSets do not restart; outages and lost routing state are noted."""

from __future__ import annotations

import copy

from kvtiers.change.manifests import ObjectRef
from kvtiers.change.operator import operator_replacements
from kvtiers.change.record import EndpointRecord, GroupRecord, Record
from kvtiers.change.report import EnvironmentChange, environment_change
from kvtiers.change.rollout import endpoint_effects, workloads
from tests.test_change_model import manifest, obj, stack

NAMESPACE = {"model": "Qwen/Qwen2-7B-Instruct", "revision": "abc", "hash_seed": "0", "chunk_size": 256}


def _record(name: str, *, l2: bool = True, owner: str | None = None, serving: str = "self_managed") -> EndpointRecord:
    return EndpointRecord(
        serving=serving,
        engine_image="lmcache/vllm-openai:v0.3.11",
        l2=l2,
        l2_directory="qwen-abc",
        l2_namespace=dict(NAMESPACE),
        l2_location=f"curvine-l2/{owner or f'endpoint-{name}'}/qwen-abc",
    )


def _effects(before: dict[str, EndpointRecord], after: dict[str, EndpointRecord]):
    effects = endpoint_effects((), Record("dev", before), Record("dev", after))
    return {e.name: e for e in effects}


def test_an_added_endpoint_has_a_new_empty_l2_and_counts_as_cold():
    effects = _effects({"a": _record("a")}, {"a": _record("a"), "b": _record("b")})
    assert effects["b"].status == "added"
    assert effects["b"].l2 == "new, empty L2: curvine-l2/endpoint-b/qwen-abc"
    assert effects["b"].cold_l2 and not effects["a"].cold_l2
    assert effects["a"].abandoned is None


def test_a_renamed_endpoint_starts_an_empty_l2_and_abandons_the_old_directory_with_how_to_reclaim_it():
    effects = _effects({"qwen2-7b": _record("qwen2-7b")}, {"qwen2-7b-v2": _record("qwen2-7b-v2")})
    new, old = effects["qwen2-7b-v2"], effects["qwen2-7b"]
    assert new.l2 == "new, empty L2: curvine-l2/endpoint-qwen2-7b-v2/qwen-abc"
    assert new.l2_reasons == ("renamed from qwen2-7b (the same L2 namespace, under another owner directory)",)
    assert old.status == "removed" and old.abandoned == "curvine-l2/endpoint-qwen2-7b/qwen-abc"
    assert old.l2 == "old L2 directory abandoned (see Effects)" and not old.cold_l2
    assert old.reclaim is not None
    assert "curvine-l2-janitor" in old.reclaim and "rm -r /l2/endpoint-qwen2-7b/qwen-abc" in old.reclaim


def test_a_shared_directory_another_endpoint_still_reads_is_not_abandoned():
    shared = "shared-qwen"
    effects = _effects(
        {"a": _record("a", owner=shared), "b": _record("b", owner=shared)}, {"a": _record("a", owner=shared)}
    )
    assert effects["b"].status == "removed" and effects["b"].abandoned is None


def test_a_moved_l2_namespace_abandons_the_old_directory():
    moved = EndpointRecord(**{**_record("a").__dict__, "l2_location": "curvine-l2/endpoint-a/qwen-def"})
    effects = _effects({"a": _record("a")}, {"a": moved})
    assert effects["a"].l2 and effects["a"].l2.startswith("new L2 namespace")
    assert effects["a"].abandoned == "curvine-l2/endpoint-a/qwen-abc"


# ------------------------------------------------------------------------------------------------------ workloads


def _deployment(name: str, *, gpus: int, replicas: int = 1, image: str = "a", component: str = "engine", **extra):
    container = {"image": image, "resources": {"limits": {"nvidia.com/gpu": gpus}}, **extra}
    template = {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    o = obj("apps/v1", "Deployment", name, replicas=replicas, template=template, strategy=strategy)
    o["metadata"]["labels"] = {"kvtiers.io/endpoint": "chat", "app.kubernetes.io/component": component}
    return o


def _rolled(before: list[dict], after: list[dict]):
    return {w.ref.name: w for w in workloads({ObjectRef.of(o): o for o in before}, {ObjectRef.of(o): o for o in after})}


def test_gpus_idle_are_those_of_the_pod_that_stops_and_surge_gpus_those_of_the_new_pod():
    old = _deployment("chat-engine", gpus=1, replicas=2)
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 2
    new["spec"]["strategy"]["rollingUpdate"] = {"maxUnavailable": 1, "maxSurge": 1}
    engine = _rolled([old], [new])["chat-engine"]
    assert (engine.at_once, engine.gpus_idle, engine.surge_gpus) == (1, 1, 2)


def test_an_on_delete_daemonset_is_not_a_restart():
    def csi_node(image: str) -> dict:
        template = {"spec": {"containers": [{"image": image}]}}
        return obj(
            "apps/v1",
            "DaemonSet",
            "curvine-csi-node",
            "curvine",
            template=template,
            updateStrategy={"type": "OnDelete"},
        )

    before, after = stack(manifest("Csi", [csi_node("a")])), stack(manifest("Csi", [csi_node("b")]))
    change = environment_change("dev", before, after, None, None)
    (node,) = change.workloads
    assert node.change == "on-delete" and node.gpus_idle == 0
    assert "0 workload(s) restart" in change.summary()


def test_a_single_replica_engine_rollout_is_an_outage_and_a_router_restart_loses_its_routing_state():
    engine = _deployment("chat-engine", gpus=1, replicas=1)
    router = _deployment("chat-router", gpus=0, replicas=2, component="router", args=["--routing-logic", "prefixaware"])
    newer = [copy.deepcopy(engine), copy.deepcopy(router)]
    for o in newer:
        o["spec"]["template"]["spec"]["containers"][0]["image"] = "b"
    rolled = _rolled([engine, router], newer)
    (outage,) = rolled["chat-engine"].notes
    assert "all 1 engine pod(s) stop at once" in outage and "outage" in outage
    (trie,) = rolled["chat-router"].notes
    assert "prefix trie" in trie


def test_a_single_curvine_master_restart_is_an_l2_outage():
    def master(image: str) -> dict:
        template = {"spec": {"containers": [{"image": image}]}}
        o = obj("apps/v1", "StatefulSet", "curvine-master", "curvine", replicas=1, template=template)
        o["metadata"]["labels"] = {"app.kubernetes.io/component": "master"}
        return o

    (note,) = _rolled([master("a")], [master("b")])["curvine-master"].notes
    assert "single Curvine master" in note and "L2 outage" in note


# ------------------------------------------------------------------------------------------- operator endpoints


def _config(fingerprint: str, *, gpus: int = 1, replicas: int = 2, endpoint: str = "qwen2-7b-chat") -> dict:
    name = f"{endpoint}-{fingerprint}"
    worker = {"image": "img", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    spec = {"endpointName": name, "modelName": endpoint, "replicas": replicas, "worker": worker}
    return obj("inference.sagemaker.aws.amazon.com/v1", "InferenceEndpointConfig", name, **spec)


def _group(config: dict, *, count: int = 2, gpus_per_node: int = 1) -> dict[str, GroupRecord]:
    entry = f"InferenceEndpointConfig serving/{config['metadata']['name']}"
    return {
        "g6e-small": GroupRecord(
            instance_type="ml.g6e.2xlarge",
            count=count,
            threads_per_core=2,
            fullest={"gpus": f"{gpus_per_node} of {gpus_per_node}"},
            workloads=["Deployment serving/curvine-l2-janitor", entry],
        )
    }


def _replacement(count: int) -> EnvironmentChange:
    old, new = _config("9aa6d08a"), _config("b83e39e0")
    before = stack(manifest("OperatorEndpoint9aa6", [old]))
    after = stack(manifest("OperatorEndpointB83e", [new]))
    return environment_change("prod", before, after, None, None, (_group(old, count=2), _group(new, count=count)))


def test_replacing_an_operator_config_on_a_full_group_is_a_full_outage_with_a_new_endpoint_name():
    change = _replacement(count=2)
    (warning,) = [w for w in change.warnings if w.startswith("operator endpoint")]
    assert "qwen2-7b-chat-9aa6d08a -> qwen2-7b-chat-b83e39e0" in warning
    assert "All 2 old pod(s) (1 GPU(s) each) stop at once" in warning
    assert "0 of 2 GPUs free" in warning and "full outage" in warning


def test_a_group_with_room_for_the_new_pods_still_changes_the_name_but_the_pods_can_start():
    (warning,) = [w for w in _replacement(count=4).warnings if w.startswith("operator endpoint")]
    assert "2 of 4 GPUs free, enough for the 2 new pod(s)" in warning
    assert "Clients must switch SageMaker endpoint name" in warning


def test_without_placement_records_the_free_gpus_are_unknown():
    old, new = _config("9aa6d08a"), _config("b83e39e0")
    rolled = workloads({ObjectRef.of(old): old}, {ObjectRef.of(new): new})
    (line,) = operator_replacements(rolled, {ObjectRef.of(old): old}, {ObjectRef.of(new): new})
    assert "free GPUs are unknown" in line


def test_renaming_an_operator_endpoint_is_a_replacement_too():
    old, new = _config("9aa6d08a"), _config("5e5e5e5e", endpoint="qwen2-7b-chat-v2")
    records = (
        Record("prod", {"qwen2-7b-chat": _record("qwen2-7b-chat", serving="operator")}),
        Record("prod", {"qwen2-7b-chat-v2": _record("qwen2-7b-chat-v2", serving="operator")}),
    )
    change = environment_change(
        "prod",
        stack(manifest("OperatorEndpointOld", [old])),
        stack(manifest("OperatorEndpointNew", [new])),
        *records,
        (_group(old), _group(new)),
    )
    (warning,) = [w for w in change.warnings if w.startswith("operator endpoint")]
    assert warning.startswith("operator endpoint qwen2-7b-chat-v2 (renamed from qwen2-7b-chat)")
    assert "qwen2-7b-chat-9aa6d08a -> qwen2-7b-chat-v2-5e5e5e5e" in warning and "full outage" in warning
    assert "1 endpoint(s) with a cold L2" in change.summary()
