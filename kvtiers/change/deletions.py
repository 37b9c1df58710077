"""Every Kubernetes object and CloudFormation resource a deploy deletes, what goes with those that hold data or a
client-facing name, and the environment file's acknowledgments of those losses.

A deletion loses something when the object is (sources in docs/change-contract.md):

- a Service of type LoadBalancer: the cloud provider deletes its load balancer (cloud-provider-aws v1.34.3
  ``EnsureLoadBalancerDeleted``; the AWS Load Balancer Controller v2.13.4 likewise), and a load balancer's name
  derives from the Service's UID (kubernetes/cloud-provider v0.34.0 ``DefaultLoadBalancerName``; the controller's
  ``buildLoadBalancerName`` hashes the UID in), so a Service created again gets another DNS name;
- an endpoint's router Service (``app.kubernetes.io/component: router``): its in-cluster DNS name
  (``<name>.<namespace>.svc``), the address in-cluster clients call; an engine Service is the router's own business
  (its discovery), not a client's, and loses nothing;
- a PersistentVolumeClaim or PersistentVolume: the claim's volume is released (kept unbound with ``Retain``, deleted
  with ``Delete``), and a new claim binds a new, empty volume;
- a Secret: its keys;
- an Inference Operator ``InferenceEndpointConfig``: its SageMaker endpoint, the name clients invoke;
- a CloudFormation resource of :data:`LOSSES`: a Secrets Manager secret (an endpoint's API keys: clients' keys
  change) or a resource of :data:`kvtiers.change.cloudformation.DATA_TYPES`.

Such a deletion is an error unless the change acknowledges it: the environment file's ``intended_deletions`` names
it exactly as the report does, with a reason, and the synth writes them into the cloud assembly
(:data:`INTENDED_DELETIONS_FILE`), so ``kvtiers diff`` reads them from the assembly it deploys. Only an entry new in
this change (the base's assembly has no entry of the same target and reason) acknowledges a deletion: one the base
carries too was reviewed with an earlier change, for an earlier loss of the object, so a deletion it matches is still
an error (rewrite the reason to acknowledge it again). An acknowledgment new in this change that matches nothing it
deletes is an error too (stale: a wrong name, or nothing to acknowledge); one the base carries too that matches
nothing is a warning to remove it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvtiers.change.cloudformation import DATA_TYPES, CfnAction, CfnChange
from kvtiers.change.deploy import Action, DeployOutcome
from kvtiers.change.manifests import ObjectRef, Templates, manifest_resources
from kvtiers.change.rollout import COMPONENT_LABEL, ROUTER_COMPONENT

INTENDED_DELETIONS_FILE = "kvtiers-intended-deletions.json"

LOSSES: Mapping[str, str] = {
    "AWS::SecretsManager::Secret": "the secret's value (an endpoint's API keys: every client needs the new key)",
    **{kind: f"the {what}" for kind, what in DATA_TYPES.items()},
}
"""CloudFormation resource types whose deletion loses what the running system or its clients hold."""


@dataclass(frozen=True)
class IntendedDeletion:
    """One entry of the environment file's ``intended_deletions``: the deletion as the report names it, and why."""

    target: str
    reason: str


@dataclass(frozen=True)
class Deletion:
    """One object or resource the deploy deletes.

    :param target: ``<Kind>[.<group>] [<namespace>/]<name>`` for a Kubernetes object, ``<type> <stack>/<logical ID>``
        for a CloudFormation resource: what ``intended_deletions`` must name.
    :param how: what deletes it.
    :param loses: what goes with it, when it holds data or a client-facing name.
    :param intended: the acknowledgment's reason, when the change names it in an entry new in this change.
    :param carried_over: the reason of an entry the base carries too (an earlier change's, acknowledging another
        deletion of the object): it acknowledges nothing here.
    """

    target: str
    how: str
    loses: str | None = None
    intended: str | None = None
    carried_over: str | None = None


@dataclass(frozen=True)
class Deletions:
    deleted: tuple[Deletion, ...] = ()
    stale: tuple[IntendedDeletion, ...] = ()
    """Acknowledgments new in this change that match none of its deletions."""
    carried: tuple[IntendedDeletion, ...] = ()
    """Acknowledgments the base carries too (same target and reason: an earlier change's) that match none of this
    change's deletions."""

    @property
    def errors(self) -> tuple[str, ...]:
        found = [
            f"deleted: {d.target} ({d.how}) loses {d.loses}; "
            + (
                "it is acknowledged only by an entry carried over from an earlier change (the base carries the same "
                "intended_deletions entry); acknowledge it again in this change: give the entry a reason that "
                "names this change (docs/change-model.md)"
                if d.carried_over is not None
                else "if the loss is intended, name it in the environment file's intended_deletions with the reason "
                "(docs/change-model.md)"
            )
            for d in self.deleted
            if d.loses and d.intended is None
        ]
        found += [
            f"stale acknowledgment: intended_deletions names {i.target}, which this change adds but which matches no "
            "deletion between the base and this change; fix the name or remove the entry, else it would hide a later "
            "loss of that object"
            for i in self.stale
        ]
        return tuple(found)

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(
            f"acknowledgment left over: intended_deletions names {i.target}, acknowledged in an earlier change (the "
            "base carries it too) and deleted by none of this one; remove it, else it would hide a later loss of "
            "that object"
            for i in self.carried
        )

    def covers(self, change: CfnChange) -> bool:
        """Whether the deletion section reports ``change``'s loss (so its own error would say it twice)."""
        return change.action is CfnAction.DELETE and change.type in LOSSES


def cfn_target(change: CfnChange) -> str:
    return f"{change.type} {change.stack}/{change.logical_id}"


def deletions(
    outcome: DeployOutcome,
    resources: Iterable[CfnChange],
    before: Templates,
    intended: Iterable[IntendedDeletion] = (),
    intended_before: Iterable[IntendedDeletion] = (),
) -> Deletions:
    """Every Kubernetes object ``outcome`` deletes and every CloudFormation resource ``resources`` deletes when
    ``before`` was deployed, in the order they go, with the acknowledgments of ``intended`` (the change's;
    ``intended_before``: the base's, to tell an earlier change's leftover from a new one). Only an entry new in this
    change acknowledges a deletion: one the base carries unchanged (same target and reason) was reviewed for an
    earlier deletion of the object, not for this one."""
    declared_before = {ObjectRef.of(o): o for r in manifest_resources(before).values() for o in r.objects}
    intended = tuple(intended)
    earlier = set(intended_before)
    reasons = {i.target: i.reason for i in intended if i not in earlier}
    carried = {i.target: i.reason for i in intended if i in earlier}

    def deletion(target: str, how: str, lost: str | None) -> Deletion:
        return Deletion(target, how, lost, reasons.get(target), carried.get(target))

    found: list[Deletion] = []
    for change in outcome.changes:
        manifest = f"{change.stack} {change.logical_id}"
        how = f"pruned by {manifest}" if change.action is Action.UPDATE else f"deleted with {manifest}"
        namespaces = {r.name for r in change.deleted if not r.namespace and (r.group, r.kind) == ("", "Namespace")}
        for ref in change.deleted:
            why = f"{how}, with its namespace" if ref.namespace in namespaces else how
            lost = object_loss(ref, declared_before)
            found.append(deletion(str(ref), why, lost))
    for resource in resources:
        if resource.action is not CfnAction.DELETE:
            continue
        policy = ((before.get(resource.stack) or {}).get("Resources") or {})[resource.logical_id].get("DeletionPolicy")
        kept = policy == "Retain"
        how = "removed from the stack, kept (DeletionPolicy Retain)" if kept else "deleted by CloudFormation"
        if policy == "Snapshot":
            how += ", a snapshot kept"
        lost = None if kept else LOSSES.get(resource.type)
        found.append(deletion(cfn_target(resource), how, lost))
    targets = {d.target for d in found}
    unmatched = [i for i in intended if i.target not in targets]
    return Deletions(
        deleted=tuple(found),
        stale=tuple(i for i in unmatched if i not in earlier),
        carried=tuple(i for i in unmatched if i in earlier),
    )


def object_loss(ref: ObjectRef, declared_before: Mapping[ObjectRef, Mapping[str, Any]]) -> str | None:
    """What deleting ``ref`` (declared as in ``declared_before``) takes with it, or None."""
    declared = declared_before.get(ref) or {}
    spec = declared.get("spec") or {}
    kind = (ref.group, ref.kind)
    if kind == ("", "Service") and spec.get("type") == "LoadBalancer":
        return (
            "its load balancer and DNS name: the cloud provider deletes the load balancer, and one created again is "
            "named after the new Service's UID, so clients must switch to another DNS name"
        )
    labels = (declared.get("metadata") or {}).get("labels") or {}
    if kind == ("", "Service") and labels.get(COMPONENT_LABEL) == ROUTER_COMPONENT:
        return (
            f"its in-cluster name {ref.name}.{ref.namespace}.svc, the address in-cluster clients call the endpoint "
            "at: they must switch to another name"
        )
    if kind == ("", "PersistentVolumeClaim"):
        return f"its volume: {_claim_volume(spec, declared_before)}; a new claim binds a new, empty volume"
    if kind == ("", "PersistentVolume"):
        policy = spec.get("persistentVolumeReclaimPolicy", "Retain")
        return f"the volume object (reclaimPolicy {policy}: {_reclaim(policy)})"
    if kind == ("", "Secret"):
        return "its keys, for everything that mounts or reads them"
    if kind == ("inference.sagemaker.aws.amazon.com", "InferenceEndpointConfig"):
        name = spec.get("endpointName") or ref.name
        return f"its SageMaker endpoint {name}: the operator deletes it, and clients must invoke another endpoint name"
    return None


def _claim_volume(spec: Mapping[str, Any], declared_before: Mapping[ObjectRef, Mapping[str, Any]]) -> str:
    name = spec.get("storageClassName")
    storage_class = declared_before.get(ObjectRef("storage.k8s.io", "StorageClass", "", str(name))) if name else None
    if storage_class is None:
        return "released (its StorageClass's reclaimPolicy decides whether its data is deleted)"
    policy = str(storage_class.get("reclaimPolicy", "Delete"))
    return f"released under StorageClass {name}'s reclaimPolicy {policy} ({_reclaim(policy)})"


def _reclaim(policy: str) -> str:
    if policy == "Retain":
        return "the data stays, reachable through no claim until someone binds it by hand"
    return "the provisioner deletes the data"


def write_intended_deletions(outdir: Path, intended: Iterable[IntendedDeletion]) -> Path:
    path = Path(outdir) / INTENDED_DELETIONS_FILE
    path.write_text(json.dumps([asdict(i) for i in intended], indent=1) + "\n")
    return path


def read_intended_deletions(outdir: Path) -> tuple[IntendedDeletion, ...]:
    """The acknowledgments a synth wrote into its cloud assembly (none for an assembly without the file)."""
    path = Path(outdir) / INTENDED_DELETIONS_FILE
    if not path.is_file():
        return ()
    return tuple(IntendedDeletion(**entry) for entry in json.loads(path.read_text()))
