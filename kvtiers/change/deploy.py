"""What deploying synth B after synth A does to the Kubernetes objects of the manifest resources.

CloudFormation (per stack) creates resources whose logical ID is new, updates those whose properties changed and
leaves the others alone; after the update it deletes the resources whose logical ID disappeared (the cleanup
phase). For each manifest resource the kubectl handler then runs what :mod:`kvtiers.change.kubectl` models. The
outcome names every object left on the cluster that synth B does not declare: an orphan keeps running (and keeps
its GPUs) while CloudFormation reports success.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kvtiers.change.kubectl import Cluster
from kvtiers.change.manifests import ManifestResource, ObjectRef, Templates, manifest_resources


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


@dataclass(frozen=True)
class DeployOutcome:
    """The result of one deploy.

    :param changes: each manifest resource CloudFormation touches, in the order it does (creates and updates, then
        the cleanup deletes).
    :param cluster: the objects on the cluster afterwards.
    :param orphans: objects on the cluster that the new synth does not declare.
    :param lost: objects the new synth declares that are not on the cluster afterwards (deleted by a cleanup
        delete of an old manifest that named them too).
    """

    changes: tuple[ResourceChange, ...]
    cluster: Cluster
    orphans: tuple[ObjectRef, ...]
    lost: tuple[ObjectRef, ...]

    def change(self, logical_id: str) -> ResourceChange:
        return next(c for c in self.changes if c.logical_id == logical_id)


def first_deploy(templates: Templates) -> DeployOutcome:
    """Deploying ``templates`` onto a cluster that has none of their objects."""
    return deploy({}, templates, Cluster())


def deploy(before: Templates, after: Templates, cluster: Cluster | None = None) -> DeployOutcome:
    """Deploy ``after`` over a deployment of ``before`` (``cluster``: its objects; by default what deploying
    ``before`` onto an empty cluster leaves)."""
    live = (first_deploy(before).cluster if cluster is None else cluster).copy()
    old = manifest_resources(before)
    new = manifest_resources(after)
    changes: list[ResourceChange] = []
    for key, resource in new.items():
        previous = old.get(key)
        if previous is None:
            live.apply(resource)
            changes.append(_change(resource, Action.CREATE, ()))
        elif previous.properties != resource.properties:
            live.apply(resource)
            changes.append(_change(resource, Action.UPDATE, live.prune(resource)))
    for key in reversed(list(old)):
        if key not in new:
            gone = old[key]
            changes.append(_change(gone, Action.DELETE, live.delete(gone.refs), applied=False))
    declared = {ref for resource in new.values() for ref in resource.refs}
    return DeployOutcome(
        changes=tuple(changes),
        cluster=live,
        orphans=tuple(sorted(set(live.objects) - declared)),
        lost=tuple(sorted(declared - set(live.objects))),
    )


def _change(
    resource: ManifestResource, action: Action, deleted: tuple[ObjectRef, ...], *, applied: bool = True
) -> ResourceChange:
    return ResourceChange(
        stack=resource.stack,
        logical_id=resource.logical_id,
        action=action,
        applied=resource.refs if applied else (),
        deleted=deleted,
    )
