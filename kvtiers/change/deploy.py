"""What deploying synth B after synth A does to the Kubernetes objects of the manifest resources.

``cdk deploy --all`` deploys the stacks one after the other in dependency order
(:func:`kvtiers.change.manifests.deploy_order`), each stack's update complete before the next starts. CloudFormation
(per stack) creates resources whose logical ID is new, updates those whose properties changed and leaves the others
alone; after the update it deletes the resources whose logical ID disappeared (the cleanup phase; a resource with
``DeletionPolicy: Retain`` is dropped from the stack without a Delete request, so its objects stay). So an earlier
stack's cleanup deletes run before a later stack's applies. For each manifest resource the kubectl handler then runs
what :mod:`kvtiers.change.kubectl` models. The outcome names every object left on the cluster that synth B does not
declare: an orphan keeps running (and keeps its GPUs) while CloudFormation reports success. Cleanup deletes go in
reverse dependency order. A stack only synth A has is left deployed (``cdk deploy`` deletes no stack; ``cdk destroy``
does), so the objects of its manifests stay, reported as left deployed rather than as orphans. The handler swallows ``kubectl delete`` errors (``apply/__init__.py``:
``logger.info("delete error: ...")``, then success), so an object whose deletion waits for a controller is reported
as one that may remain, not as gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kvtiers.change.finalizers import finalizer
from kvtiers.change.immutable import ImmutableChange, immutable_changes
from kvtiers.change.kubectl import Cluster, prunable
from kvtiers.change.manifests import ManifestResource, ObjectRef, Templates, deploy_order, manifest_resources


class Action(Enum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True)
class ResourceChange:
    """What happened to one manifest resource, and to which objects."""

    stack: str
    logical_id: str
    action: Action
    applied: tuple[ObjectRef, ...]
    deleted: tuple[ObjectRef, ...]
    """Pruned (update) or deleted with the old manifest (delete)."""
    may_remain: tuple[ObjectRef, ...] = ()
    """Deleted by a cleanup delete whose success nothing checks: the handler logs ``kubectl delete`` errors and
    reports success, so an object whose deletion waits for a controller (a finalizer) can stay behind."""


@dataclass(frozen=True)
class DeployOutcome:
    """The result of one deploy.

    :param changes: each manifest resource CloudFormation touches, in the order it does (creates and updates, then
        the cleanup deletes).
    :param cluster: the objects on the cluster afterwards.
    :param orphans: objects on the cluster that the new synth does not declare.
    :param lost: objects the new synth declares that are not on the cluster afterwards (deleted by a cleanup
        delete of an old manifest that named them too).
    :param immutable: fields an apply would change that the API server refuses to change.
    :param may_remain: objects a cleanup delete removes only if their finalizers complete; CloudFormation reports
        success either way (they are not in ``cluster``).
    """

    changes: tuple[ResourceChange, ...]
    resources: Mapping[tuple[str, str], ManifestResource]
    """The manifest resources of ``after``, by (stack, logical ID)."""
    cluster: Cluster
    orphans: tuple[ObjectRef, ...]
    lost: tuple[ObjectRef, ...]
    may_remain: tuple[ObjectRef, ...] = ()
    immutable: tuple[ImmutableChange, ...] = ()
    """In-place updates the API server rejects: the handler's apply fails and the stack rolls back."""
    stages: tuple[tuple[str, frozenset[ObjectRef]], ...] = ()
    """Each stack in deploy order with the objects on the cluster once its update (cleanup included) is done."""
    left_deployed: tuple[ObjectRef, ...] = ()
    """Objects the new synth does not declare whose manifest's stack is left deployed (not in the new synth)."""
    destroy_deletes: tuple[tuple[str, ObjectRef], ...] = ()
    """(stack left deployed, object) for each object the new synth declares that a manifest of that stack declares
    too: ``cdk destroy`` of the stack deletes it (the handler's delete of each manifest runs ``kubectl delete``)."""

    def change(self, logical_id: str) -> ResourceChange:
        return next(c for c in self.changes if c.logical_id == logical_id)


def first_deploy(templates: Templates) -> DeployOutcome:
    """Deploying ``templates`` onto a cluster that has none of their objects."""
    return deploy({}, templates, Cluster())


def deploy(before: Templates, after: Templates, cluster: Cluster | None = None) -> DeployOutcome:
    """Deploy ``after`` over a deployment of ``before`` (``cluster``: its objects; by default what deploying
    ``before`` onto an empty cluster leaves)."""
    live = (first_deploy(before).cluster if cluster is None else cluster).copy()
    live.terminating.clear()  # namespaces an earlier deploy deleted are gone by now
    old = manifest_resources(before)
    new = manifest_resources(after)
    declared_before = {ObjectRef.of(o): o for resource in old.values() for o in resource.objects}
    changes: list[ResourceChange] = []
    rejected: list[ImmutableChange] = []
    stages: list[tuple[str, frozenset[ObjectRef]]] = []
    for stack in deploy_order(before, after):
        for key, resource in new.items():
            previous = old.get(key)
            if key[0] != stack or (previous is not None and previous.properties == resource.properties):
                continue
            # An apply (an update, or a create with Overwrite) changes any object of the same name in place.
            rejected += [
                change
                for o in resource.objects
                if (previous is not None or resource.overwrite)
                and ObjectRef.of(o) in declared_before
                and ObjectRef.of(o) in live.objects
                for change in immutable_changes(declared_before[ObjectRef.of(o)], o)
            ]
            live.apply(resource)
            if previous is None:
                changes.append(_change(resource, Action.CREATE, ()))
            else:
                changes.append(_change(resource, Action.UPDATE, live.prune(resource)))
        gone_keys = [k for k in old if k not in new and k[0] == stack and stack in after]
        for key in cleanup_order(before, gone_keys):
            gone = old[key]
            deleted = () if gone.retained else live.delete(gone.refs)
            uncertain = tuple(ref for ref in deleted if waits_for_a_controller(ref, gone.objects))
            changes.append(_change(gone, Action.DELETE, deleted, applied=False, may_remain=uncertain))
        stages.append((stack, frozenset(live.objects)))
    declared = {ref for resource in new.values() for ref in resource.refs}
    undeclared = set(live.objects) - declared
    left = {ref for ref in undeclared if live.objects[ref].writer[0] not in after}
    return DeployOutcome(
        changes=tuple(changes),
        resources=new,
        cluster=live,
        orphans=tuple(sorted(undeclared - left)),
        left_deployed=tuple(sorted(left)),
        destroy_deletes=tuple(
            sorted(
                {
                    (key[0], ref)
                    for key, gone in old.items()
                    if key[0] not in after and not gone.retained
                    for ref in gone.refs
                    if ref in declared
                }
            )
        ),
        lost=tuple(sorted(declared - set(live.objects))),
        may_remain=tuple(sorted({ref for c in changes for ref in c.may_remain} - declared)),
        immutable=tuple(rejected),
        stages=tuple(stages),
    )


def orphan_reason(ref: ObjectRef, outcome: DeployOutcome) -> str:
    """Why an object no manifest of ``after`` declares is still on the cluster after the deploy."""
    live = outcome.cluster.objects[ref]
    writer = outcome.resources.get(live.writer)
    name = live.writer[1]
    if writer is None or writer.prune_label is None:
        return f"its manifest {name} has no prune label, so kubectl apply never prunes"
    if not prunable(ref):
        return f"kubectl's default prune list does not cover {ref.kind}"
    if ref.namespace and ref.namespace not in {r.namespace for r in writer.refs}:
        return (
            f"its manifest {name} no longer applies anything in namespace {ref.namespace}, so its prune does not "
            "look there"
        )
    return f"it does not carry the prune label of its manifest {name}"


def waits_for_a_controller(ref: ObjectRef, objects: Iterable[Mapping[str, Any]]) -> bool:
    """Whether ``kubectl delete`` of this object can end with the object still there: it declares a finalizer, or a
    controller is known to add one (:mod:`kvtiers.change.finalizers`, each with its source)."""
    declared = next((o for o in objects if ObjectRef.of(o) == ref), {})
    return finalizer(ref, declared) is not None


def cleanup_order(templates: Templates, keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The cleanup deletes in CloudFormation's order: a resource after every resource that depends on it
    (``DependsOn``), template order otherwise."""
    depends = {
        (stack, logical_id): {(stack, d) for d in _depends_on(resource)}
        for stack, template in templates.items()
        for logical_id, resource in (template.get("Resources") or {}).items()
    }
    remaining, ordered = list(keys), []
    while remaining:
        # Delete first what nothing still to be deleted depends on.
        free = [k for k in remaining if not any(k in depends.get(other, set()) for other in remaining)]
        step = free[-1] if free else remaining[-1]
        ordered.append(step)
        remaining.remove(step)
    return ordered


def _depends_on(resource: Mapping[str, Any]) -> list[str]:
    value = resource.get("DependsOn") or []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _change(
    resource: ManifestResource,
    action: Action,
    deleted: tuple[ObjectRef, ...],
    *,
    applied: bool = True,
    may_remain: tuple[ObjectRef, ...] = (),
) -> ResourceChange:
    return ResourceChange(
        stack=resource.stack,
        logical_id=resource.logical_id,
        action=action,
        applied=resource.refs if applied else (),
        deleted=deleted,
        may_remain=may_remain,
    )
