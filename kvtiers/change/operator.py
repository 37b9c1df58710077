"""What replacing an operator endpoint's ``InferenceEndpointConfig`` does to its clients and its GPUs.

kvtiers names an operator endpoint's config by a fingerprint of the settings the operator cannot change in place
(``kvtiers/k8s_charts/hyperpod_operator/endpoint.py``), and the config's ``endpointName`` (the SageMaker endpoint
clients call) is that same name. A settings change therefore creates a new config under a new name and the
cleanup phase deletes the old one: clients must follow the new SageMaker endpoint name, and every old pod stops at
once when the old config goes, whether or not the new pods are ready (CloudFormation waits for neither). The new
pods need their GPUs while the old pods still hold theirs: when the group has too few free GPUs (its nodes' GPUs
less what every pod on it asks, from the placement record), they stay Pending until the old config is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtiers.change.manifests import ObjectRef
from kvtiers.change.record import GroupRecord
from kvtiers.change.rollout import OPERATOR_KIND, Workload, pod_gpus

Objects = Mapping[ObjectRef, Mapping[str, Any]]


def _group_of(ref: ObjectRef, groups: Mapping[str, GroupRecord] | None) -> tuple[str, GroupRecord] | None:
    entry = f"{ref.kind} {ref.namespace}/{ref.name}"
    return next(((name, g) for name, g in (groups or {}).items() if entry in g.workloads), None)


def _gpus_per_node(group: GroupRecord) -> int | None:
    offered = group.fullest.get("gpus", "").rpartition(" of ")[2]
    return int(offered) if offered.isdigit() else None


def _gpus_used(group: GroupRecord, objects: Objects) -> int:
    """GPUs every pod registered on the group asks (a DaemonSet: one pod per node)."""
    by_name = {f"{ref.kind} {ref.namespace}/{ref.name}": obj for ref, obj in objects.items()}
    used = 0
    for entry in group.workloads:
        obj = by_name.get(entry)
        if obj is None:
            continue
        spec = obj.get("spec") or {}
        pods = group.count if obj["kind"] == "DaemonSet" else int(spec.get("replicas", 1))
        used += pods * pod_gpus(obj)
    return used


def _capacity(
    new: Workload, before: Objects, groups: tuple[Mapping[str, GroupRecord] | None, Mapping[str, GroupRecord] | None]
) -> str:
    """Whether the new config's pods can start beside the old ones, in words."""
    placed = _group_of(new.ref, groups[1])
    per_node = _gpus_per_node(placed[1]) if placed else None
    if placed is None or per_node is None:
        return "the group's free GPUs are unknown (no placement record): its pods may stay Pending until then"
    name, group = placed
    previous = (groups[0] or {}).get(name, group)
    total = group.count * per_node
    free = max(total - _gpus_used(previous, before), 0)
    pods = new.replicas_after or 0
    need = pods * new.gpus_per_new_pod
    can_start = min(free // new.gpus_per_new_pod, pods) if new.gpus_per_new_pod else pods
    if can_start == 0:
        return (
            f"group {name} has {free} of {total} GPUs free and each new pod needs {new.gpus_per_new_pod}: the new "
            "pods stay Pending until the old config is deleted, a full outage until they have loaded the model"
        )
    if can_start < pods:
        return (
            f"group {name} has {free} of {total} GPUs free: {can_start} of {pods} new pod(s) can start beside the "
            "old ones, the rest wait for the old config's deletion"
        )
    return f"group {name} has {free} of {total} GPUs free, enough for the {pods} new pod(s) ({need} GPUs)"


def operator_replacements(
    rolled: tuple[Workload, ...],
    before: Objects,
    after: Objects,
    groups: tuple[Mapping[str, GroupRecord] | None, Mapping[str, GroupRecord] | None] = (None, None),
    renamed: Mapping[str, str] | None = None,
) -> tuple[str, ...]:
    """One line per operator endpoint whose config the deploy replaces (a settings change, or a rename: ``renamed``
    maps a new endpoint name to the old one): the outage and the new endpoint name."""
    configs = [w for w in rolled if (w.ref.group, w.ref.kind) == OPERATOR_KIND]
    found = []
    for new in (w for w in configs if w.change == "create"):
        was = (renamed or {}).get(new.endpoint or "", new.endpoint)
        old = next((w for w in configs if w.change == "delete" and w.endpoint == was), None)
        if old is None:
            continue
        old_name = (before[old.ref].get("spec") or {}).get("endpointName", old.ref.name)
        new_name = (after[new.ref].get("spec") or {}).get("endpointName", new.ref.name)
        found.append(
            f"operator endpoint {new.endpoint}{'' if was == new.endpoint else f' (renamed from {was})'}: "
            f"InferenceEndpointConfig {old.ref.name} is replaced by "
            f"{new.ref.name}. Clients must switch SageMaker endpoint name {old_name} -> {new_name}. All "
            f"{old.replicas_before} old pod(s) ({old.gpus_per_pod} GPU(s) each) stop at once when the cleanup "
            f"deletes {old.ref.name}, ready new pods or not; {_capacity(new, before, groups)}"
        )
    return tuple(found)
