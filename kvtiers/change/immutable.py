"""Kubernetes fields the API server refuses to change: a manifest update that changes one makes the handler's
``kubectl apply`` fail, CloudFormation roll the stack back, and a deploy stop half way.

:data:`RULES` holds the rules of every kind kvtiers renders with immutable fields, each with the source that makes
the field immutable, and :data:`WITHOUT_IMMUTABLE_FIELDS` the other kinds it renders; docs/change-model.md
("Immutable fields") is the same table with the upstream file and line at the pinned Kubernetes version. The check
compares the object as synth A declares it with the object synth B declares under the same name; fields the server
defaults are compared as the manifests state them.
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
            "pkg/registry/apps/<kind>/strategy.go ValidateUpdate (ValidateImmutableField on the selector, apps/v1)",
            fields=("spec.selector",),
        )
        for kind in ("Deployment", "DaemonSet")
    ),
    Rule(
        "apps",
        "StatefulSet",
        "pkg/apis/apps/validation/validation.go ValidateStatefulSetUpdate: 'updates to statefulset spec for fields "
        "other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', "
        "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden'",
        all_of="spec",
        except_keys=frozenset(
            {
                "replicas",
                "template",
                "updateStrategy",
                "minReadySeconds",
                "ordinals",
                "persistentVolumeClaimRetentionPolicy",
                "revisionHistoryLimit",
            }
        ),
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
            {
                "capacity",
                "accessModes",
                "storageClassName",
                "persistentVolumeReclaimPolicy",
                "mountOptions",
                "claimRef",
            }
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
        "k8s.io/api core/v1/types.go ServiceSpec.loadBalancerClass ('Once set, it can not be changed'), "
        "healthCheckNodePort ('cannot be updated once set'), ipFamilies (the first family may not change); "
        "ValidateServiceUpdate",
        fields=("spec.loadBalancerClass", "spec.healthCheckNodePort", "spec.ipFamilies.0"),
    ),
    *(
        Rule(
            "rbac.authorization.k8s.io",
            kind,
            f"k8s.io/api rbac/v1/types.go {kind}.roleRef: 'This field is immutable.'; "
            f"pkg/apis/rbac/validation/validation.go Validate{kind}Update",
            fields=("roleRef",),
        )
        for kind in ("RoleBinding", "ClusterRoleBinding")
    ),
    Rule(
        "",
        "ConfigMap",
        "k8s.io/api core/v1/types.go ConfigMap.immutable; ValidateConfigMapUpdate: 'field is immutable when "
        "`immutable` is set'",
        fields=("data", "binaryData", "immutable"),
        when="immutable",
    ),
)
"""One or more rules for each kind kvtiers renders that has immutable fields (the table in docs/change-model.md,
"Immutable fields")."""

WITHOUT_IMMUTABLE_FIELDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "Namespace"),
        ("", "ServiceAccount"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("policy", "PodDisruptionBudget"),
        ("rbac.authorization.k8s.io", "Role"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("inference.sagemaker.aws.amazon.com", "InferenceEndpointConfig"),
        ("secrets-store.csi.x-k8s.io", "SecretProviderClass"),
        ("kyverno.io", "Policy"),
    }
)
"""The other kinds kvtiers renders: the API server (or the custom resource's CRD) lets every spec field they set
change in place (the table says why per kind)."""


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
    if isinstance(before, str) and isinstance(after, str) and quantity(after) < quantity(before):
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


def quantity(text: str) -> float:
    """A Kubernetes quantity (``100Gi``, ``1.5T``) in bytes."""
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
