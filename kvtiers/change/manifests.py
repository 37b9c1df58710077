"""The Kubernetes manifests of a synthesized cloud assembly: every ``Custom::AWSCDK-EKS-KubernetesResource`` (what
``aws_eks_v2.KubernetesManifest`` synthesizes) with its objects, prune label and create mode.

Deploy-time values inside a manifest (CloudFormation ``Fn::Join`` parts such as a volume ID) are kept as a marker
string naming the expression, so that two synths compare equal exactly when CloudFormation would pass equal
properties to the handler.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_RESOURCE_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"
"""``KubernetesManifest.RESOURCE_TYPE`` in aws-cdk-lib 2.275.0 (``aws-eks-v2/lib/k8s-manifest.js``)."""

Templates = Mapping[str, Mapping[str, Any]]
"""CloudFormation templates by stack name."""


@dataclass(frozen=True, order=True)
class ObjectRef:
    """One Kubernetes object as kubectl addresses it: API group, kind, namespace (empty when cluster-scoped) and
    name. The version is left out: the API server stores one object whatever version it was applied as."""

    group: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        api_version = str(obj.get("apiVersion", ""))
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        metadata = obj.get("metadata") or {}
        return cls(group, str(obj["kind"]), str(metadata.get("namespace") or ""), str(metadata["name"]))

    def __str__(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{kind} {self.namespace}/{self.name}" if self.namespace else f"{kind} {self.name}"


@dataclass(frozen=True)
class ManifestResource:
    """One manifest resource of a template.

    :param stack: the stack's name.
    :param logical_id: the resource's logical ID: CloudFormation's identity of it across deploys.
    :param objects: the manifest's objects, in order.
    :param properties: every property the handler receives, as compared by CloudFormation (an update runs only when
        they differ).
    :param prune_label: the label ``kubectl apply --prune -l`` selects on update (``None``: no pruning).
    :param overwrite: creates run ``kubectl apply`` (else ``kubectl create --save-config``).
    :param retained: ``DeletionPolicy: Retain``: when the resource leaves the template CloudFormation drops it from
        the stack without a Delete request, so the handler's ``kubectl delete`` never runs.
    """

    stack: str
    logical_id: str
    objects: tuple[Mapping[str, Any], ...]
    properties: str
    prune_label: str | None
    overwrite: bool
    retained: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.stack, self.logical_id)

    @property
    def refs(self) -> tuple[ObjectRef, ...]:
        return tuple(ObjectRef.of(o) for o in self.objects)


def _text(value: Any) -> str:
    """A template string value, deploy-time parts replaced by a marker naming the CloudFormation expression."""
    if isinstance(value, str):
        return value
    join = value.get("Fn::Join") if isinstance(value, dict) else None
    if isinstance(join, list) and len(join) == 2:
        separator, parts = join
        return str(separator).join(_text(part) for part in parts)
    return json.dumps(f"<cfn {json.dumps(value, sort_keys=True)}>")[1:-1]


def manifest_resources(templates: Templates) -> dict[tuple[str, str], ManifestResource]:
    """Every manifest resource of ``templates``, by (stack, logical ID)."""
    found: dict[tuple[str, str], ManifestResource] = {}
    for stack, template in templates.items():
        for logical_id, resource in (template.get("Resources") or {}).items():
            if resource.get("Type") != MANIFEST_RESOURCE_TYPE:
                continue
            props = resource.get("Properties") or {}
            objects = tuple(o for o in json.loads(_text(props["Manifest"])) if isinstance(o, dict) and o.get("kind"))
            label = props.get("PruneLabel")
            found[(stack, logical_id)] = ManifestResource(
                stack=stack,
                logical_id=logical_id,
                objects=objects,
                properties=json.dumps({k: _text(v) for k, v in props.items() if k != "ServiceToken"}, sort_keys=True),
                prune_label=None if label is None else _text(label),
                overwrite=str(props.get("Overwrite", "false")).lower() == "true",
                retained=resource.get("DeletionPolicy") == "Retain",
            )
    return found


class AssemblyError(ValueError):
    """A cloud assembly the change model cannot read as one environment's stacks."""


def stack_order(assembly_dir: Path) -> list[tuple[str, str]]:
    """Each stack's CloudFormation name and template file, in the order ``cdk deploy --all`` deploys them: each stack
    after every stack its ``manifest.json`` artifact depends on (the CDK CLI's ``StackCollection`` runs them so), the
    artifacts' order otherwise. The name is the artifact's ``stackName`` (what ``Fn::GetStackOutput`` and
    ``Fn::ImportValue`` name), which a construct user may set apart from the construct id that names the file. An
    assembly without a ``manifest.json`` (a hand-made one) is taken in file-name order, each stack named by its file."""
    manifest = assembly_dir / "manifest.json"
    if not manifest.is_file():
        return [(p.name.removesuffix(".template.json"), p.name) for p in sorted(assembly_dir.glob("*.template.json"))]
    artifacts = json.loads(manifest.read_text()).get("artifacts") or {}
    nested = sorted(
        str((a.get("properties") or {}).get("directoryName", name))
        for name, a in artifacts.items()
        if a.get("type") == "cdk:cloud-assembly"
    )
    if nested:
        raise AssemblyError(
            f"{assembly_dir}: its stacks are in nested assemblies ({', '.join(nested)}: a cdk.Stage); compare each "
            f"as its own: --before <before>/{nested[0]} --after <after>/{nested[0]}"
        )
    stacks = {
        name: (
            str(properties.get("stackName", name)),
            str(properties.get("templateFile", f"{name}.template.json")),
            a.get("dependencies") or [],
        )
        for name, a in artifacts.items()
        if a.get("type") == "aws:cloudformation:stack"
        for properties in [a.get("properties") or {}]
    }
    names = [name for name, *_ in stacks.values()]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise AssemblyError(
            f"{manifest}: stacks {twice} share a CloudFormation name (in other accounts or regions): kvtiers diff "
            "compares one environment's stacks by name; synthesize each account and region as its own assembly"
        )
    ordered: list[str] = []
    while len(ordered) < len(stacks):
        ready = [
            n for n, (*_, deps) in stacks.items() if n not in ordered and all(d in ordered for d in deps if d in stacks)
        ]
        if not ready:
            raise AssemblyError(f"{manifest}: the stacks' dependencies form a cycle")
        ordered.append(ready[0])
    return [(stacks[n][0], stacks[n][1]) for n in ordered]


def load_templates(assembly_dir: Path) -> dict[str, dict[str, Any]]:
    """The templates of a synthesized cloud assembly (``cdk.out``), by CloudFormation stack name, in deploy order
    (:func:`stack_order`): the change model deploys them in the order of this mapping."""
    return {name: json.loads((assembly_dir / file).read_text()) for name, file in stack_order(assembly_dir)}


def deploy_order(before: Templates, after: Templates) -> list[str]:
    """The stacks in the order ``cdk deploy --all`` deploys them: the order of ``after`` (:func:`load_templates`
    reads it from ``manifest.json``), then the stacks only ``before`` has."""
    return [*after, *(stack for stack in before if stack not in after)]
