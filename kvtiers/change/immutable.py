"""Kubernetes fields the API server refuses to change: a manifest update that changes one makes the handler's
``kubectl apply`` fail, CloudFormation roll the stack back, and a deploy stop half way.

:data:`RULES` is the table, one rule per object kind, each with the source that makes the field immutable
(docs/change-contract.md lists them with tags and lines). The check compares the object as synth A declares it with
the object synth B declares under the same name; fields the server defaults are compared as the manifests state
them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kvtiers.change.manifests import ObjectRef

_MISSING = object()


@dataclass(frozen=True)
class Rule:
    """Immutable fields of one kind.

    :param fields: dotted paths that must not change.
    :param all_of: a dotted path whose every key but ``except_keys`` must not change (``spec`` of a StatefulSet).
    :param when: a dotted path that must be true on the old object for the rule to apply (``immutable``).
    :param source: the validation function or API documentation that makes them immutable.
    """

    group: str
    kind: str
    source: str
    fields: tuple[str, ...] = ()
    all_of: str | None = None
    except_keys: frozenset[str] = frozenset()
    when: str | None = None


RULES: tuple[Rule, ...] = (
    *(
        Rule(
            "apps",
            kind,
            "pkg/registry/apps/<kind>/strategy.go ValidateUpdate (ValidateImmutableField on the selector, apps/v1); "
            "k8s.io/api apps/v1/types.go",
            fields=("spec.selector",),
        )
        for kind in ("Deployment", "ReplicaSet", "DaemonSet")
    ),
    Rule(
        "apps",
        "StatefulSet",
        "pkg/apis/apps/validation/validation.go ValidateStatefulSetUpdate: 'updates to statefulset spec for fields "
        "other than ... are forbidden'",
        all_of="spec",
        except_keys=frozenset(
            {
                "replicas",
                "template",
                "updateStrategy",
                "minReadySeconds",
                "ordinals",
                "persistentVolumeClaimRetentionPolicy",
            }
        ),
    ),
    Rule(
        "batch",
        "Job",
        "pkg/apis/batch/validation/validation.go ValidateJobSpecUpdate; k8s.io/api batch/v1/types.go",
        fields=("spec.selector", "spec.template"),
    ),
    Rule(
        "",
        "PersistentVolumeClaim",
        "pkg/apis/core/validation/validation.go ValidatePersistentVolumeClaimUpdate: 'spec is immutable after creation "
        "except resources.requests and volumeAttributesClassName for bound claims'",
        all_of="spec",
        except_keys=frozenset({"resources", "volumeAttributesClassName"}),
    ),
    Rule(
        "",
        "PersistentVolume",
        "pkg/apis/core/validation/validation.go ValidatePersistentVolumeUpdate: 'spec.persistentvolumesource is "
        "immutable after creation', volumeMode and nodeAffinity immutable",
        all_of="spec",
        except_keys=frozenset(
            {"capacity", "accessModes", "storageClassName", "persistentVolumeReclaimPolicy", "mountOptions", "claimRef"}
        ),
    ),
    Rule(
        "storage.k8s.io",
        "StorageClass",
        "pkg/apis/storage/validation/validation.go ValidateStorageClassUpdate: 'updates to parameters are forbidden.', "
        "provisioner, reclaimPolicy, volumeBindingMode",
        fields=("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode"),
    ),
    Rule(
        "storage.k8s.io",
        "CSIDriver",
        "pkg/apis/storage/validation/validation.go ValidateCSIDriverUpdate; k8s.io/api storage/v1/types.go "
        "(attachRequired, volumeLifecycleModes: 'This field is immutable.')",
        fields=("spec.attachRequired", "spec.volumeLifecycleModes"),
    ),
    Rule(
        "",
        "Service",
        "k8s.io/api core/v1/types.go ServiceSpec.clusterIP / clusterIPs: 'may not be changed through updates unless "
        "the type field is also being changed to ExternalName'; ValidateServiceUpdate",
        fields=("spec.clusterIP", "spec.clusterIPs"),
    ),
    Rule(
        "",
        "Service",
        "k8s.io/api core/v1/types.go ServiceSpec.loadBalancerClass ('may not change once set'), "
        "healthCheckNodePort, ipFamilies (the first family may not change); ValidateServiceUpdate "
        "(validateLoadBalancerClassField, the healthCheckNodePort and primary-family checks)",
        fields=("spec.loadBalancerClass", "spec.healthCheckNodePort", "spec.ipFamilies.0"),
    ),
    *(
        Rule(
            "rbac.authorization.k8s.io",
            kind,
            f"pkg/apis/rbac/validation/validation.go Validate{kind}Update: 'cannot change roleRef'",
            fields=("roleRef",),
        )
        for kind in ("RoleBinding", "ClusterRoleBinding")
    ),
    Rule(
        "scheduling.k8s.io",
        "PriorityClass",
        "pkg/apis/scheduling/validation/validation.go ValidatePriorityClassUpdate (value: 'field is immutable')",
        fields=("value",),
    ),
    Rule(
        "",
        "ConfigMap",
        "k8s.io/api core/v1/types.go ConfigMap.immutable; ValidateConfigMapUpdate: 'field is immutable when "
        "`immutable` is set'",
        fields=("data", "binaryData", "immutable"),
        when="immutable",
    ),
    Rule("", "Secret", "k8s.io/api core/v1/types.go Secret.type; ValidateSecretUpdate", fields=("type",)),
    Rule(
        "",
        "Secret",
        "k8s.io/api core/v1/types.go Secret.immutable; ValidateSecretUpdate",
        fields=("data", "stringData", "immutable"),
        when="immutable",
    ),
)


@dataclass(frozen=True)
class ImmutableChange:
    """An in-place update the API server rejects."""

    ref: ObjectRef
    field: str
    source: str

    def __str__(self) -> str:
        return f"{self.ref}: {self.field} is immutable ({self.source})"


def _get(obj: Any, path: str) -> Any:
    """The value at a dotted path (a number indexes a list), or ``_MISSING``."""
    for key in path.split("."):
        if isinstance(obj, list) and key.isdigit() and int(key) < len(obj):
            obj = obj[int(key)]
        elif isinstance(obj, Mapping) and key in obj:
            obj = obj[key]
        else:
            return _MISSING
    return obj


def _service_exempt(old: Mapping[str, Any], new: Mapping[str, Any], value: Any) -> bool:
    """A Service's cluster IP may change with a change to or from ExternalName, and may be left out (the server
    keeps the allocated one)."""
    types = {_get(old, "spec.type"), _get(new, "spec.type")}
    return value is _MISSING or ("ExternalName" in types and len(types) > 1)


def _violations(rule: Rule, old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[str]:
    if rule.when is not None and _get(old, rule.when) is not True:
        return
    paths = list(rule.fields)
    if rule.all_of is not None:
        before, after = _get(old, rule.all_of), _get(new, rule.all_of)
        keys = set(before if isinstance(before, Mapping) else ()) | set(after if isinstance(after, Mapping) else ())
        paths += [f"{rule.all_of}.{k}" for k in sorted(keys - rule.except_keys)]
    for path in paths:
        value = _get(new, path)
        if rule.kind == "Service" and _service_exempt(old, new, value):
            continue
        if _get(old, path) != value:
            yield path
    if rule.kind == "PersistentVolumeClaim":
        yield from _shrunk(old, new)


def _shrunk(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[str]:
    """A claim's storage request can grow, never shrink ('field can not be less than previous value')."""
    path = "spec.resources.requests.storage"
    before, after = _get(old, path), _get(new, path)
    if isinstance(before, str) and isinstance(after, str) and _quantity(after) < _quantity(before):
        yield path


_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}


def _quantity(text: str) -> float:
    for suffix, factor in sorted(_SUFFIXES.items(), key=lambda item: -len(item[0])):
        if text.endswith(suffix):
            return float(text.removesuffix(suffix)) * factor
    return float(text)


def immutable_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[ImmutableChange, ...]:
    """Every immutable field that applying ``new`` over ``old`` (the same object) would change."""
    ref = ObjectRef.of(new)
    return tuple(
        ImmutableChange(ref, path, rule.source)
        for rule in RULES
        if (rule.group, rule.kind) == (ref.group, ref.kind)
        for path in _violations(rule, old, new)
    )
