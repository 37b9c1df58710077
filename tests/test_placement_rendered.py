"""An independent reading of what the shipped environments render: every pod-creating object kvtiers renders is
read from the manifests (requests parsed by the Kubernetes client's own ``parse_quantity``, groups from the node
selectors and affinity as the scheduler reads them), held equal to what the placement model registered, and summed
per node by brute force against the node's allocatable."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
from kubernetes.utils import parse_quantity

from kvtiers.placement import NodePlacement

INSTANCE_GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
COMPUTE_TYPE_LABEL = "sagemaker.amazonaws.com/compute-type"
POD_CREATORS = ("DaemonSet", "Deployment", "StatefulSet", "InferenceEndpointConfig")


@dataclass(frozen=True)
class Pods:
    name: str
    kind: str
    groups: frozenset[str]
    replicas: int
    cpu_millis: int
    memory_mib: int
    gpus: int
    disk_gib: int
    one_per_node: bool
    spread_evenly: bool = False


def _requests(containers: list[dict]) -> list[tuple[float, float, int]]:
    out = []
    for c in containers:
        requests = c.get("resources", {}).get("requests", {})
        out.append(
            (
                float(parse_quantity(requests.get("cpu", 0))),
                float(parse_quantity(requests.get("memory", 0))),
                int(parse_quantity(requests.get("nvidia.com/gpu", 0))),
            )
        )
    return out


def _pod_requests(spec: dict) -> tuple[int, int, int]:
    """What the scheduler counts: the larger of the containers' sum and each init container, per resource."""
    containers = _requests(spec["containers"])
    inits = _requests(spec.get("initContainers", []))
    total = [sum(c[i] for c in containers) for i in range(3)]
    for init in inits:
        total = [max(total[i], init[i]) for i in range(3)]
    return round(total[0] * 1000), round(total[1] / 2**20), int(total[2])


def _disk_gib(spec: dict) -> int:
    limits = [
        float(parse_quantity(v["emptyDir"]["sizeLimit"]))
        for v in spec.get("volumes", [])
        if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory" and "sizeLimit" in v["emptyDir"]
    ]
    return math.ceil(sum(limits) / 2**30)


def _groups(spec: dict, groups: dict[str, str]) -> frozenset[str]:
    """The HyperPod groups a pod may land on, from its node selector and required node affinity."""
    allowed = set(groups)
    selector = spec.get("nodeSelector", {})
    if INSTANCE_GROUP_LABEL in selector:
        allowed &= {selector[INSTANCE_GROUP_LABEL]}
    required = spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    for term in (required or {}).get("nodeSelectorTerms", []):
        for expression in term.get("matchExpressions", []):
            if expression["key"] == INSTANCE_GROUP_LABEL and expression["operator"] == "In":
                allowed &= set(expression["values"])
            off_hyperpod = expression["operator"] == "NotIn" and "hyperpod" in expression["values"]
            if expression["key"] == COMPUTE_TYPE_LABEL and off_hyperpod:
                allowed = set()
    return frozenset(allowed)


def rendered_pods(objects: list[dict], groups: dict[str, str]) -> list[Pods]:
    """Every kvtiers pod that may land on a HyperPod node, read from the rendered objects."""
    pods = []
    for obj in objects:
        if obj["kind"] not in POD_CREATORS:
            continue
        meta = obj["metadata"]
        name = f"{obj['kind']} {meta['namespace']}/{meta['name']}"
        if obj["kind"] == "InferenceEndpointConfig":
            worker = obj["spec"]["worker"]
            cpu, memory, gpus = _pod_requests({"containers": [worker]})
            pods.append(
                Pods(
                    name=name,
                    kind="gpu",
                    groups=frozenset(g for g, t in groups.items() if t == obj["spec"]["instanceType"]),
                    replicas=obj["spec"]["replicas"],
                    cpu_millis=cpu,
                    memory_mib=memory,
                    gpus=gpus,
                    disk_gib=0,
                    one_per_node=False,
                )
            )
            continue
        spec = obj["spec"]["template"]["spec"]
        allowed = _groups(spec, groups)
        if not allowed:
            continue
        cpu, memory, gpus = _pod_requests(spec)
        anti = spec.get("affinity", {}).get("podAntiAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        spread = any(
            c["topologyKey"] == "kubernetes.io/hostname"
            and c["whenUnsatisfiable"] == "DoNotSchedule"
            and c["maxSkew"] == 1
            for c in spec.get("topologySpreadConstraints", [])
        )
        pods.append(
            Pods(
                name=name,
                kind="daemon" if obj["kind"] == "DaemonSet" else ("gpu" if gpus else "any"),
                groups=allowed,
                replicas=obj["spec"].get("replicas", 1),
                cpu_millis=cpu,
                memory_mib=memory,
                gpus=gpus,
                disk_gib=_disk_gib(spec),
                one_per_node=bool(anti and anti[0]["topologyKey"] == "kubernetes.io/hostname"),
                spread_evenly=spread,
            )
        )
    return pods


def _placement_and_pods(synthesized) -> tuple[NodePlacement, list[Pods]]:
    placement = synthesized.graph.placement
    groups = {o.group: o.instance_type for o in placement.offers}
    objects = [o for objs in synthesized.graph.workloads.chart_objects.values() for o in objs]
    return placement, rendered_pods(objects, groups)


@pytest.mark.parametrize("synthesized", ["dev_synth", "prod_synth"])
def test_every_rendered_pod_on_hyperpod_nodes_is_registered_with_its_requests(synthesized, request):
    placement, pods = _placement_and_pods(request.getfixturevalue(synthesized))
    registered = {w.name: w for w in placement.workloads if w.source == "kvtiers" or w.name.startswith("Inference")}
    assert {p.name for p in pods} == set(registered)
    for p in pods:
        w = registered[p.name]
        assert (w.pod.cpu_millis, w.pod.memory_mib, w.pod.gpus, w.pod.disk_gib) == (
            p.cpu_millis,
            p.memory_mib,
            p.gpus,
            p.disk_gib,
        ), p.name
        assert set(w.groups) == set(p.groups), p.name
        spreads = {"daemon": "every_node", "gpu": "gpu_bound"}
        expected = "one_per_node" if p.one_per_node else spreads.get(p.kind, "any_node")
        assert w.spread == expected, p.name
        if w.spread != "every_node":
            assert w.replicas == p.replicas, p.name
        assert w.spread_evenly == p.spread_evenly, p.name


@pytest.mark.parametrize("synthesized", ["dev_synth", "prod_synth"])
def test_every_node_holds_its_pods_summed_by_brute_force(synthesized, request):
    placement, pods = _placement_and_pods(request.getfixturevalue(synthesized))
    agents = [w for w in placement.workloads if w.source != "kvtiers" and not w.name.startswith("Inference")]
    for offer in placement.offers:
        here = [p for p in pods if offer.group in p.groups]
        fixed = [p for p in here if p.kind != "gpu"]
        gpu = [p for p in here if p.kind == "gpu"]
        for p in fixed:
            if p.one_per_node:
                assert p.replicas <= sum(o.count for o in placement.offers if o.group in p.groups), p.name
        # Every mix of GPU pods one node's GPUs admit, each endpoint at most its replicas.
        ranges = [range(min(p.replicas, offer.capacity.gpus // p.gpus) + 1) for p in gpu]
        for counts in itertools.product(*ranges):
            if sum(n * p.gpus for n, p in zip(counts, gpu)) > offer.capacity.gpus:
                continue
            on_node = [(p, 1 if p.kind == "daemon" or p.one_per_node else p.replicas) for p in fixed]
            on_node += [(p, n) for n, p in zip(counts, gpu)]
            cpu = sum(p.cpu_millis * n for p, n in on_node) + sum(
                a.pod.cpu_millis for a in agents if offer.group in a.groups
            )
            memory = sum(p.memory_mib * n for p, n in on_node) + sum(
                a.pod.memory_mib for a in agents if offer.group in a.groups
            )
            disk = sum(p.disk_gib * n for p, n in on_node)
            allocatable = offer.allocatable
            assert cpu <= allocatable.cpu_millis, (offer.group, counts, cpu)
            assert memory <= allocatable.memory_mib, (offer.group, counts, memory)
            assert disk <= allocatable.disk_gib, (offer.group, counts, disk)
