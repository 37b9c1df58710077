"""What CloudFormation does to each resource when synth B is deployed over synth A.

Each resource is created (new logical ID), deleted (logical ID gone, in the cleanup phase), left alone, updated in
place or replaced, from the resource provider schemas cfn-lint ships: a change under a ``createOnlyProperties``
pointer replaces the resource, one under ``conditionalCreateOnlyProperties`` may replace it, any other change is an
update (the meta-schema, ``provider.definition.schema.v1.json``: "any property *not* in this list can be applied to
an Update request"). The schemas are read from cfn-lint's bundled data directory, never from the user's
``cfn-lint --update-specs`` cache, so the same cfn-lint gives the same answer on every machine.

Rules beyond the schemas (docs/change-contract.md has their sources):

- ``Custom::*``: a ``ServiceToken`` change fails the update ("Modifying service token is not allowed."); any
  other change is an update (the CDK provider framework keeps the physical ID).
- A replacement of a resource with a custom name (a create-only ``...Name`` property set in the template) fails:
  CloudFormation creates the new resource before it deletes the old one, and the name is taken.
- A replacement cascades: a property that holds ``Ref``, ``Fn::GetAtt`` or ``Fn::Sub`` of a replaced resource gets
  a new value at deploy time, which replaces the referencing resource too when that property is create-only.
- It cascades across stacks: the stacks deploy one after the other in dependency order
  (:func:`kvtiers.change.manifests.deploy_order`), and an output whose value a stack's deploy changes (removed, a
  new expression, or naming a replaced resource, except an attribute fixed by an unchanged property:
  :data:`ECHOED_ATTRIBUTES`) gives a new value to every property of a later stack that reads it with
  ``Fn::GetStackOutput`` (what kvtiers synthesizes: CDK's weak cross-stack references). An exported output that
  another stack imports (``Fn::ImportValue``) cannot change: the update fails.
- A stack only the base has is left deployed, not deleted: ``cdk deploy`` deploys the stacks of the cloud assembly
  and deletes none (only ``cdk destroy`` does), so its resources stay, and a resource a later deploy creates with a
  custom name one of them holds fails (:func:`_name_clashes`).
- Replacing or deleting a resource that holds data (:data:`DATA_TYPES`) loses it: an error.
- An EKS cluster's ``ResourcesVpcConfig`` ``SubnetIds`` or ``SecurityGroupIds`` that change to subnets or groups of
  a VPC the deploy replaces fail the update (:func:`_cluster_vpc_move`): the schema lets them update, but EKS accepts
  only subnets of the cluster's own VPC.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

from kvtiers.change.manifests import Templates, deploy_order

REGION = "us-east-1"
"""The schema region. Update behaviour does not differ by region for the types kvtiers uses; cfn-lint falls back to
this region's file for any other."""

DATA_TYPES: Mapping[str, str] = {
    "AWS::EC2::Volume": "EBS volume (the Curvine journal and metadata)",
    "AWS::S3::Bucket": "bucket",
    "AWS::APS::Workspace": "metrics workspace",
    "AWS::KMS::Key": "KMS key (what it encrypted cannot be read without it)",
}
"""Resource types whose replacement or deletion loses data the running system needs."""

CUSTOM_PREFIX = "Custom::"
SERVICE_TOKEN = "ServiceToken"


class CfnAction(Enum):
    CREATE = "created"
    UPDATE = "updated in place"
    MAY_REPLACE = "may be replaced"
    REPLACE = "replaced"
    DELETE = "deleted"
    FAIL = "update fails"
    LEFT_DEPLOYED = "left deployed"


@dataclass(frozen=True)
class CfnChange:
    """One resource CloudFormation touches.

    :param paths: the changed properties (JSON pointers below ``/properties``), deploy-time changes included.
    :param because: why it is replaced (the create-only pointers hit, a cascade) or why the update fails.
    :param error: set when the change must not be deployed (a failing update, a custom-named replacement, lost data).
    """

    stack: str
    logical_id: str
    type: str
    action: CfnAction
    paths: tuple[str, ...] = ()
    because: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class UpdateRules:
    """The update behaviour of one resource type, from its provider schema."""

    create_only: tuple[str, ...]
    conditional: tuple[str, ...]
    names: tuple[str, ...]
    """Create-only top-level properties that name the resource: those in the schema's ``primaryIdentifier``, and
    ``Name`` or ``<Type>Name`` (``ClusterName`` of ``AWS::SageMaker::Cluster``)."""
    delete_first: bool
    """``replacementStrategy: delete_then_create``: a custom name does not block the replacement."""


def schema_dirs() -> tuple[Path, Path]:
    """cfn-lint's bundled providers and resources directories (the data of the installed cfn-lint)."""
    import cfnlint

    data = Path(cfnlint.__file__).parent / "data" / "schemas"
    return data / "providers", data / "resources"


@cache
def _manager() -> Any:
    from cfnlint.schema.manager import ProviderSchemaManager

    providers, resources = schema_dirs()
    return ProviderSchemaManager(providers_dir=providers, resources_dir=resources)


@cache
def update_rules(resource_type: str) -> UpdateRules | None:
    """The type's update rules, or None when cfn-lint has no schema for it."""
    from cfnlint.schema import ResourceNotFoundError

    try:
        schema = _manager().get_resource_schema(REGION, resource_type).schema
    except ResourceNotFoundError:
        return None
    create_only = tuple(schema.get("createOnlyProperties", ()))
    own_names = {"/properties/Name", f"/properties/{resource_type.rpartition('::')[2]}Name"}
    identifier = set(schema.get("primaryIdentifier", ())) | own_names
    names = tuple(p.removeprefix("/properties/") for p in create_only if p in identifier)
    return UpdateRules(
        create_only=create_only,
        conditional=tuple(schema.get("conditionalCreateOnlyProperties", ())),
        names=names,
        delete_first=schema.get("replacementStrategy") == "delete_then_create",
    )


def changed_paths(before: Any, after: Any, path: str = "/properties") -> Iterator[str]:
    """JSON pointers of every leaf that differs. A block that appears or disappears (one side absent) differs at its
    leaves, and a list of another length element by element, so that a create-only pointer below it matches only
    when one of its own values changes; an empty block that appears or disappears differs as a whole."""
    for kind in (dict, list):
        if _containers(before, after, kind):
            found = False
            for key, old, new in _children(before, after, kind):
                for changed in changed_paths(old, new, f"{path}/{key}"):
                    found = True
                    yield changed
            if not found and before != after:
                yield path
            return
    if before != after:
        yield path


def _containers(before: Any, after: Any, kind: type) -> bool:
    """Both values are ``kind``, or one is and the other is absent."""
    return (isinstance(before, kind) or before is None) and (isinstance(after, kind) or after is None)


def _children(before: Any, after: Any, kind: type) -> Iterator[tuple[Any, Any, Any]]:
    """(key or index, old value, new value) of two containers of ``kind``, an absent one standing for an empty
    one."""
    if kind is dict:
        old, new = before or {}, after or {}
        for key in sorted(set(old) | set(new)):
            yield key, old.get(key), new.get(key)
    else:
        old, new = before or [], after or []
        for index in range(max(len(old), len(new))):
            yield index, old[index] if index < len(old) else None, new[index] if index < len(new) else None


def _matches(pointer: str, path: str) -> bool:
    """The schema pointer covers the changed path, or lies inside it (``*`` matches any list index)."""
    p, c = pointer.split("/"), path.split("/")
    return all(a == b or a == "*" for a, b in zip(p, c, strict=False))


_SUB_REF = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[^}]*)?\}")

OutputKey = tuple[str, str]
"""(stack, output name): a value one stack publishes and later stacks read."""
Target = str | OutputKey
"""What a property reads: a logical ID of its own stack, or another stack's output."""


def _references(value: Any, path: str = "/properties") -> Iterator[tuple[str, Target]]:
    """(path, target) of every Ref, Fn::GetAtt and Fn::Sub variable in a property value, and of every other stack's
    output it reads with ``Fn::GetStackOutput`` (an ``Fn::ImportValue`` never sees a new value: an export in use
    cannot change, :func:`_importers`)."""
    if isinstance(value, dict):
        if isinstance(value.get("Ref"), str):
            yield path, value["Ref"]
        attr = value.get("Fn::GetAtt")
        if isinstance(attr, list) and attr and isinstance(attr[0], str):
            yield path, attr[0]
        sub = value.get("Fn::Sub")
        text = sub if isinstance(sub, str) else sub[0] if isinstance(sub, list) and sub else None
        if isinstance(text, str):
            yield from ((path, name) for name in _SUB_REF.findall(text))
        output = value.get("Fn::GetStackOutput")
        if isinstance(output, dict) and isinstance(output.get("StackName"), str):
            yield path, (output["StackName"], str(output.get("OutputName")))
        for key, item in value.items():
            yield from _references(item, f"{path}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _references(item, f"{path}/{index}")


def stack_reads(template: Mapping[str, Any]) -> Iterator[tuple[str, OutputKey]]:
    """(logical ID, output) of every other stack's output the template's resources read."""
    for logical_id, resource in (template.get("Resources") or {}).items():
        for _, target in _references(resource.get("Properties") or {}):
            if isinstance(target, tuple):
                yield logical_id, target


def _classify(
    stack: str,
    logical_id: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    replaced: Mapping[Target, str],
) -> CfnChange | None:
    """``replaced``: what gets a new value at deploy time (this stack's replaced logical IDs, other stacks' outputs
    that change), with why."""
    kind = str(new["Type"])
    if old["Type"] != kind:
        lost = DATA_TYPES.get(str(old["Type"]))
        error = None if lost is None else f"replacement loses the {lost}"
        return CfnChange(
            stack, logical_id, kind, CfnAction.REPLACE, because=(f"type {old['Type']} -> {kind}",), error=error
        )
    props = new.get("Properties") or {}
    paths = set(changed_paths(old.get("Properties") or {}, props))
    cascaded = {path: target for path, target in _references(props) if target in replaced}
    paths |= set(cascaded)
    if not paths:
        return None
    ordered = tuple(sorted(paths))
    if kind.startswith(CUSTOM_PREFIX):
        token = f"/properties/{SERVICE_TOKEN}"
        if any(_matches(token, p) for p in ordered):
            failure = "Modifying service token is not allowed: CloudFormation fails the update"
            return CfnChange(stack, logical_id, kind, CfnAction.FAIL, ordered, (f"{SERVICE_TOKEN} changes",), failure)
        return CfnChange(stack, logical_id, kind, CfnAction.UPDATE, ordered)
    rules = update_rules(kind)
    if rules is None:
        return CfnChange(stack, logical_id, kind, CfnAction.MAY_REPLACE, ordered, ("no provider schema",))

    def reason(path: str) -> str:
        return f"{path} (new value of {replaced[cascaded[path]]})" if path in cascaded else path

    hits = tuple(reason(p) for p in ordered if any(_matches(c, p) for c in rules.create_only))
    if hits:
        # The new resource is created before the old one is deleted: with the same name it cannot be.
        named = [n for n in rules.names if n in props]
        renamed = any(_matches(f"/properties/{n}", p) for n in named for p in ordered)
        error = None
        if named and not renamed and not rules.delete_first:
            error = f"replacing a custom-named resource ({', '.join(named)} unchanged) fails: the name is taken"
        if kind in DATA_TYPES:
            error = f"replacement loses the {DATA_TYPES[kind]}"
        return CfnChange(stack, logical_id, kind, CfnAction.REPLACE, ordered, hits, error)
    maybe = tuple(reason(p) for p in ordered if any(_matches(c, p) for c in rules.conditional))
    if maybe:
        return CfnChange(stack, logical_id, kind, CfnAction.MAY_REPLACE, ordered, maybe)
    return CfnChange(stack, logical_id, kind, CfnAction.UPDATE, ordered)


@dataclass(frozen=True)
class OutputChange:
    """An output whose value its stack's deploy changes (``Fn::GetStackOutput`` is a weak reference: a stack that
    reads it gets the new value only when it deploys itself).

    :param because: why the value changes (the output is removed, its expression changes, a resource it names is
        replaced).
    :param old_targets: the logical IDs the old value names: what the stacks that read it use until they deploy.
    """

    stack: str
    name: str
    because: str
    old_targets: tuple[str, ...]

    @property
    def key(self) -> OutputKey:
        return (self.stack, self.name)

    def __str__(self) -> str:
        return f"output {self.name} of {self.stack}: {self.because}"


ECHOED_ATTRIBUTES: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("AWS::EC2::Subnet", "AvailabilityZone"): ("AvailabilityZone", "AvailabilityZoneId"),
}
"""Attributes whose value the named properties fix (an Availability Zone ID names the same zone for the account's
whole life), beside those that echo a property of their own name."""


def _new_values(value: Any, old: Mapping[str, Any], new: Mapping[str, Any], replaced: set[str]) -> set[str]:
    """The replaced resources (logical IDs) whose new physical resource gives ``value`` a new value: a ``Ref``,
    ``Fn::GetAtt`` or ``Fn::Sub`` of one, except an attribute that echoes a property of the same value in ``old`` and
    ``new`` (``Fn::GetAtt [Subnet, AvailabilityZone]`` of a subnet replaced in the same zone)."""
    if isinstance(value, list):
        return set().union(*(_new_values(v, old, new, replaced) for v in value))
    if not isinstance(value, dict):
        return set()
    attr = value.get("Fn::GetAtt")
    if isinstance(attr, list) and len(attr) == 2 and isinstance(attr[0], str):
        resource = old.get(attr[0]) or {}
        props = [(r.get(attr[0]) or {}).get("Properties") or {} for r in (old, new)]
        names = ECHOED_ATTRIBUTES.get((str(resource.get("Type")), attr[1]), (attr[1],))
        echoed = any(n in props[0] and props[0].get(n) == props[1].get(n) for n in names)
        return set() if echoed or attr[0] not in replaced else {attr[0]}
    direct = {t for key, item in value.items() if key in ("Ref", "Fn::Sub") for _, t in _references({key: item})}
    nested = (_new_values(item, old, new, replaced) for key, item in value.items() if key not in ("Ref", "Fn::Sub"))
    return {t for t in direct if isinstance(t, str) and t in replaced}.union(*nested)


def _output_changes(
    stack: str, old: Mapping[str, Any], new: Mapping[str, Any], replaced: set[str]
) -> list[OutputChange]:
    """The outputs of ``old`` whose value the stack's deploy changes (``replaced``: its replaced logical IDs, whose
    echoed properties are unchanged: a changed one replaces the resource through a create-only property)."""
    found = []
    for name, output in (old.get("Outputs") or {}).items():
        value = output.get("Value")
        now = (new.get("Outputs") or {}).get(name)
        hits = _new_values(value, old.get("Resources") or {}, new.get("Resources") or {}, replaced)
        because = (
            "removed"
            if now is None
            else "its value changes"
            if now.get("Value") != value
            else f"{', '.join(sorted(hits))} replaced"
            if hits
            else None
        )
        if because is not None:
            targets = tuple(t for _, t in _references(value) if isinstance(t, str))
            found.append(OutputChange(stack, name, because, targets))
    return found


def stack_changes(before: Templates, after: Templates) -> tuple[tuple[CfnChange, ...], tuple[OutputChange, ...]]:
    """Every resource CloudFormation creates, updates, replaces or deletes, and every output whose value changes,
    stack by stack in deploy order (a new stack is all creates; a stack only ``before`` has is left deployed). A stack
    reads the outputs of the stacks deployed before it as they are after their deploy, so a replacement cascades
    into the later stacks that read it."""
    found: list[CfnChange] = []
    outputs: list[OutputChange] = []
    for stack in deploy_order(before, after):
        if stack not in after:
            kept = (
                f"cdk deploy does not delete stacks; its resources and the Kubernetes objects of its manifests stay "
                f"until you run cdk destroy {stack}"
            )
            found.append(CfnChange(stack, stack, STACK_TYPE, CfnAction.LEFT_DEPLOYED, because=(kept,)))
            continue
        old_template, new_template = before.get(stack) or {}, after.get(stack) or {}
        old: Mapping[str, Any] = old_template.get("Resources") or {}
        new: Mapping[str, Any] = new_template.get("Resources") or {}
        earlier: dict[Target, str] = {o.key: str(o) for o in outputs}
        replaced: dict[Target, str] = dict(earlier)
        changes: dict[str, CfnChange] = {}
        while True:  # until no replacement cascades further
            for logical_id in sorted(set(old) & set(new)):
                change = _classify(stack, logical_id, old[logical_id], new[logical_id], replaced)
                if change is not None:
                    changes[logical_id] = change
            now: dict[Target, str] = {i: f"{i}, replaced" for i, c in changes.items() if c.action is CfnAction.REPLACE}
            if now.keys() == replaced.keys() - earlier.keys():
                break
            replaced = {**earlier, **now}
        found.extend(CfnChange(stack, i, str(new[i]["Type"]), CfnAction.CREATE) for i in sorted(set(new) - set(old)))
        vpcs = {
            (c.stack, c.logical_id)
            for c in [*found, *changes.values()]
            if c.type == VPC_TYPE and c.action is CfnAction.REPLACE
        }
        found.extend(_cluster_vpc_move(changes[i], after, vpcs) if vpcs else changes[i] for i in sorted(changes))
        for logical_id in sorted(set(old) - set(new)):
            kind = str(old[logical_id]["Type"])
            policy = old[logical_id].get("DeletionPolicy", "Delete")
            error = f"deletion loses the {DATA_TYPES[kind]}" if kind in DATA_TYPES and policy == "Delete" else None
            because = (f"DeletionPolicy {policy}",) if policy != "Delete" else ()
            found.append(CfnChange(stack, logical_id, kind, CfnAction.DELETE, because=because, error=error))
        order = deploy_order(before, after)
        current = {s: (after if order.index(s) < order.index(stack) else before).get(s) or {} for s in order}
        for output in _output_changes(stack, old_template, new_template, {str(i) for i in now}):
            importers = _importers(old_template, output.name, current, stack)
            if importers:
                # CloudFormation refuses the update, and the stack rolls back: nothing cascades.
                error = f"an export in use cannot change ({', '.join(importers)} import it): the update fails"
                found.append(CfnChange(stack, output.name, OUTPUT_TYPE, CfnAction.FAIL, (), (output.because,), error))
            else:
                outputs.append(output)
    left = {stack: before[stack] for stack in before if stack not in after}
    return tuple(_name_clashes(c, after, left) for c in found), tuple(outputs)


STACK_TYPE = "AWS::CloudFormation::Stack"
"""The type the model gives a stack left deployed (one entry for the whole stack)."""


def _name_clashes(change: CfnChange, after: Templates, left: Templates) -> CfnChange:
    """A create whose custom name (a create-only name property, :func:`update_rules`) a resource of a stack left
    deployed holds: CloudFormation's create fails, the name is taken."""
    if change.action is not CfnAction.CREATE or not left:
        return change
    rules = update_rules(change.type)
    props = after[change.stack]["Resources"][change.logical_id].get("Properties") or {}
    for name in rules.names if rules else ():
        value = _fixed_name(props.get(name))
        holders = [
            (stack, logical_id)
            for stack, template in left.items()
            for logical_id, other in (template.get("Resources") or {}).items()
            if other.get("Type") == change.type and _fixed_name((other.get("Properties") or {}).get(name)) == value
        ]
        if value is not None and holders:
            stack, logical_id = holders[0]
            error = (
                f"its {name} {value} is held by {change.type} {stack}/{logical_id}, of a stack left deployed (cdk "
                f"deploy does not delete stacks): the create fails, the name is taken; give it another {name}, or run "
                f"cdk destroy {stack} first"
            )
            return CfnChange(
                change.stack, change.logical_id, change.type, CfnAction.FAIL, (), (f"{name} taken",), error
            )
    return change


def _fixed_name(value: Any) -> str | None:
    """A name that is the same in every stack of the environment: a literal, or one built from literals and
    account-wide pseudo parameters (``AWS::Region``, ``AWS::AccountId``, ...), as JSON; None otherwise."""
    if value is None:
        return None
    text = json.dumps(value, sort_keys=True)
    own = any(not (isinstance(t, str) and t.startswith("AWS::")) for _, t in _references(value))
    return None if own or "AWS::StackName" in text or "AWS::StackId" in text else text


VPC_TYPE = "AWS::EC2::VPC"
EKS_CLUSTER_TYPE = "AWS::EKS::Cluster"
CLUSTER_NETWORK = ("/properties/ResourcesVpcConfig/SubnetIds", "/properties/ResourcesVpcConfig/SecurityGroupIds")


def _cluster_vpc_move(change: CfnChange, after: Templates, replaced_vpcs: set[tuple[str, str]]) -> CfnChange:
    """An EKS cluster update whose subnets or security groups change to ones of a VPC the deploy replaces: a failing
    update. EKS lets a cluster's subnets change only to subnets "in the same VPC as the original subnets" (AWS EKS
    User Guide, "View Amazon EKS networking requirements for VPC and subnets", network-reqs), and the cluster's VPC is
    fixed at creation, so the new VPC cannot be the cluster's. The subnets and groups are followed to their ``VpcId``
    (:func:`_resolve`); those of another VPC, or of none the templates name, do not fail."""
    moved = [p for p in change.paths if p.startswith(CLUSTER_NETWORK)]
    if change.type != EKS_CLUSTER_TYPE or change.action is not CfnAction.UPDATE or not moved:
        return change
    config = (after[change.stack]["Resources"][change.logical_id].get("Properties") or {}).get("ResourcesVpcConfig")
    members = [m for key in ("SubnetIds", "SecurityGroupIds") for m in (config or {}).get(key) or []]
    located = [_resolve(m, change.stack, after) for m in members]
    vpcs = {
        _resolve(((after[r[0]]["Resources"][r[1]]).get("Properties") or {}).get("VpcId"), r[0], after)
        for r in located
        if r is not None
    }
    if not vpcs & replaced_vpcs:
        return change
    error = (
        "its subnets or security groups move to a new VPC, which EKS refuses (UpdateClusterConfig takes only subnets "
        "of the cluster's own VPC): the update fails; deploy a new environment in the new network instead"
    )
    because = tuple(f"{p} (resources of a replaced VPC)" for p in moved)
    return CfnChange(change.stack, change.logical_id, change.type, CfnAction.FAIL, change.paths, because, error)


def _resolve(value: Any, stack: str, templates: Templates) -> tuple[str, str] | None:
    """The resource (stack, logical ID) a ``Ref`` or ``Fn::GetAtt`` names, through other stacks' outputs
    (``Fn::GetStackOutput``) to the stack that publishes it; None for a literal or anything else."""
    if not isinstance(value, dict):
        return None
    output = value.get("Fn::GetStackOutput")
    if isinstance(output, dict):
        producer = str(output.get("StackName"))
        published = ((templates.get(producer) or {}).get("Outputs") or {}).get(str(output.get("OutputName"))) or {}
        return _resolve(published.get("Value"), producer, templates)
    attr = value.get("Fn::GetAtt")
    target = value.get("Ref") or (attr[0] if isinstance(attr, list) and attr else None)
    resources = (templates.get(stack) or {}).get("Resources") or {}
    return (stack, target) if isinstance(target, str) and target in resources else None


OUTPUT_TYPE = "Output"
"""The type the model gives an output whose change fails (outputs are not resources)."""


def _importers(template: Mapping[str, Any], name: str, current: Templates, stack: str) -> list[str]:
    """The other stacks whose template at that point of the deploy imports the output's export."""
    export = ((template.get("Outputs") or {}).get(name) or {}).get("Export") or {}
    if not isinstance(export.get("Name"), str):
        return []
    needle = json.dumps({"Fn::ImportValue": export["Name"]})
    return sorted(s for s, t in current.items() if s != stack and needle in json.dumps(t))


def resource_changes(before: Templates, after: Templates) -> tuple[CfnChange, ...]:
    """Every resource CloudFormation creates, updates, replaces or deletes (:func:`stack_changes`)."""
    return stack_changes(before, after)[0]
