"""Claim growth the API server's ``PersistentVolumeClaimResize`` admission plugin refuses.

A larger ``spec.resources.requests.storage`` passes validation (a claim may grow), but the plugin, on by default,
then forbids it unless the claim is dynamically provisioned (it names a StorageClass, the same before and after) and
that class sets ``allowVolumeExpansion: true`` ("only dynamically provisioned pvc can be resized and the
storageclass that provisions the pvc must support resize"). The handler's ``kubectl apply`` fails and CloudFormation
rolls the stack back. The class is the one synth B declares (kvtiers renders the claim and its class in one
manifest); a class the synth does not declare is not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvtiers.change.immutable import quantity
from kvtiers.change.manifests import ObjectRef

STORAGE_REQUEST = ("spec", "resources", "requests", "storage")
SOURCE = "kubernetes v1.34 plugin/pkg/admission/storage/persistentvolume/resize/admission.go Validate, allowResize"


@dataclass(frozen=True)
class RefusedResize:
    """A claim growth the admission plugin refuses."""

    ref: ObjectRef
    before: str
    after: str
    reason: str

    def __str__(self) -> str:
        return (
            f"{self.ref}: spec.resources.requests.storage {self.before} -> {self.after} is refused: {self.reason} "
            f"(the PersistentVolumeClaimResize admission plugin, {SOURCE})"
        )


def _storage(claim: Mapping[str, Any]) -> str | None:
    value: Any = claim
    for key in STORAGE_REQUEST:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value if isinstance(value, str) else None


BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"


def _class_name(claim: Mapping[str, Any]) -> str:
    """The claim's class as the plugin reads it (``GetPersistentVolumeClaimClass``: the beta annotation first)."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    if BETA_CLASS_ANNOTATION in annotations:
        return str(annotations[BETA_CLASS_ANNOTATION])
    return str((claim.get("spec") or {}).get("storageClassName") or "")


def refused_resizes(
    before: Mapping[ObjectRef, Mapping[str, Any]], after: Mapping[ObjectRef, Mapping[str, Any]]
) -> tuple[RefusedResize, ...]:
    """Every claim both synths declare whose storage request grows where the admission plugin forbids it
    (``before``/``after``: the declared objects by reference)."""
    classes = {
        ref.name: obj for ref, obj in after.items() if (ref.group, ref.kind) == ("storage.k8s.io", "StorageClass")
    }
    refused = []
    for ref, new in after.items():
        old = before.get(ref)
        if ref.kind != "PersistentVolumeClaim" or ref.group or old is None:
            continue
        grown_from, grown_to = _storage(old), _storage(new)
        if grown_from is None or grown_to is None or quantity(grown_to) <= quantity(grown_from):
            continue
        name = _class_name(new)
        storage_class = classes.get(name)
        if not name or name != _class_name(old):
            reason = "only a dynamically provisioned claim (one StorageClass, unchanged) can be resized"
        elif storage_class is not None and storage_class.get("allowVolumeExpansion") is not True:
            reason = f"StorageClass {name} does not allow volume expansion (allowVolumeExpansion unset or false)"
        else:
            continue
        refused.append(RefusedResize(ref, grown_from, grown_to, reason))
    return tuple(refused)
