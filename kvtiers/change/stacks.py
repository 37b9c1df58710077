"""What one stack's deploy does to the stacks ``cdk deploy --all`` deploys after it.

The CLI deploys the stacks one at a time in dependency order, each update (its cleanup included) complete before the
next starts, and skips a stack whose template is unchanged (aws-cdk 2.1148.1 ``canSkipDeploy``). kvtiers passes
values between stacks as weak references (``@aws-cdk/core:defaultCrossStackReferences: weak``): a stack reads
another's output with ``Fn::GetStackOutput`` when it is created or updated, and nothing ties the two afterwards.
Two findings follow:

- **stale reads** (an error): a stack reads an output whose value an earlier stack's deploy changes, but its own
  template is unchanged, so it is not deployed and its resources keep the old value; the changes the model lists for
  it happen at its next deploy.
- **in use** (a warning): an earlier stack's deploy takes away something that the running objects of a later stack,
  not yet deployed, use, and that the later stack's own deploy stops using (so only the order makes it a problem).
  What is followed (:func:`_provided`, :func:`_uses`): a resource deleted or replaced (its old physical resource goes
  in the cleanup) that a later stack reads through an output; a CSI driver (an EKS add-on that installs it, or a
  ``CSIDriver`` object) that old pods mount volumes or persistent volumes from; a port that security-group ingress
  rules open between two groups (or from a CIDR) and that old pods declare as a ``containerPort``. A security group
  is not matched to the nodes of the pods: a port is in use when any old pod declares it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kvtiers.change.cloudformation import CfnAction, OutputChange, OutputKey, stack_changes, stack_reads
from kvtiers.change.deploy import DeployOutcome
from kvtiers.change.manifests import ObjectRef, Templates, deploy_order, manifest_resources

ADDON_CSI_DRIVERS: Mapping[str, tuple[str, ...]] = {
    "aws-secrets-store-csi-driver-provider": ("secrets-store.csi.k8s.io",),
    "aws-ebs-csi-driver": ("ebs.csi.aws.com",),
}
"""The CSI drivers an EKS add-on installs (its chart's ``CSIDriver``: secrets-store-csi-driver
``charts/secrets-store-csi-driver/templates/csidriver.yaml`` v1.6.0, which the ASCP add-on bundles;
aws-ebs-csi-driver ``charts/aws-ebs-csi-driver/templates/csidriver.yaml``)."""
INGRESS_TYPE = "AWS::EC2::SecurityGroupIngress"
ADDON_TYPE = "AWS::EKS::Addon"

Use = tuple[str, ...]
"""What an object uses or a deploy takes away: ``("csi", driver)``, ``("port", protocol, number)`` or
``("resource", stack, logical ID)``; what the rules of a deploy provide carries the pair of group and source too
(``("port", protocol, number, pair)``)."""


@dataclass(frozen=True)
class StackFinding:
    """A consequence of the stack order: ``stack`` is the stack whose deploy causes it."""

    stack: str
    message: str
    error: bool


def stack_findings(before: Templates, after: Templates, outcome: DeployOutcome) -> tuple[StackFinding, ...]:
    """Stale reads and in-use deletions of deploying ``after`` over ``before`` stack by stack."""
    order = deploy_order(before, after)
    changes, outputs = stack_changes(before, after)
    changed = {o.key: o for o in outputs}
    found: list[StackFinding] = []
    for stack in order:
        reads = [(rid, changed[key]) for rid, key in stack_reads(before.get(stack) or {}) if key in changed]
        if reads and before[stack] == after.get(stack):
            found.append(
                StackFinding(
                    stack,
                    f"{stack} is not deployed: its template is unchanged, so cdk deploy skips it, yet "
                    f"{', '.join(sorted({rid for rid, _ in reads}))} read outputs that an earlier stack's deploy "
                    f"changes ({'; '.join(sorted({str(o) for _, o in reads}))}). They keep the old values until "
                    "its next deploy, which makes the changes listed for it",
                    error=True,
                )
            )
    gone = {
        (c.stack, c.logical_id)
        for c in changes
        if c.action in (CfnAction.DELETE, CfnAction.REPLACE) and not _retained(before, c.stack, c.logical_id, c.action)
    }
    live = dict(outcome.stages)
    declared = [o for r in manifest_resources(before).values() for o in r.objects]
    ports = {use[1:] for o in declared for use in _uses(o) if use[0] == "port"}
    state = dict(before)
    previous = _provided(state, {ObjectRef.of(o) for o in declared}, ports)
    for index, stack in enumerate(order):
        if stack in after:  # a stack only ``before`` has is left deployed, as it was
            state[stack] = after[stack]
        provided = _provided(state, live.get(stack, frozenset()), ports)
        lost = {use[:3] for use in previous - provided} | {("resource", *key) for key in gone if key[0] == stack}
        for later in order[index + 1 :]:
            found += _in_use(stack, later, lost, before, after, live.get(stack, frozenset()), changed)
        previous = provided
    return tuple(found)


def _retained(before: Templates, stack: str, logical_id: str, action: CfnAction) -> bool:
    resource = ((before.get(stack) or {}).get("Resources") or {}).get(logical_id) or {}
    policy = "DeletionPolicy" if action is CfnAction.DELETE else "UpdateReplacePolicy"
    return resource.get(policy) == "Retain"


def _in_use(
    stack: str,
    later: str,
    lost: set[Use],
    before: Templates,
    after: Templates,
    live: frozenset[ObjectRef],
    changed: Mapping[OutputKey, OutputChange],
) -> Iterator[StackFinding]:
    """What ``stack``'s deploy takes away (``lost``) that the old objects of ``later`` use and its new ones do not,
    or that ``later`` reads through an output the deploy changes."""
    old = {ref: o for r in manifest_resources(before).values() if r.stack == later for ref, o in zip(r.refs, r.objects)}
    new = {ref: o for r in manifest_resources(after).values() if r.stack == later for ref, o in zip(r.refs, r.objects)}
    users: dict[Use, set[str]] = {}
    for ref, obj in old.items():
        if ref in live:
            for use in _uses(obj) - (_uses(new[ref]) if ref in new else set()):
                users.setdefault(use, set()).add(str(ref))
    for logical_id, key in stack_reads(before.get(later) or {}):
        for target in changed[key].old_targets if key in changed and key[0] == stack else ():
            users.setdefault(("resource", stack, target), set()).add(f"{logical_id} (output {key[1]})")
    grouped: dict[tuple[str, frozenset[str]], list[Use]] = {}
    for use in sorted(set(users) & lost):
        grouped.setdefault((use[0], frozenset(users[use])), []).append(use)
    for (kind, names), uses in grouped.items():
        yield StackFinding(
            stack,
            f"{stack} takes away {_describe(uses)} while {later}, deployed after it, still uses it: "
            f"{', '.join(sorted(names))}. {CONSEQUENCES[kind].format(later=later, stack=stack)}",
            error=False,
        )


def _describe(uses: list[Use]) -> str:
    kind = uses[0][0]
    if kind == "csi":
        return f"the CSI driver {', '.join(u[1] for u in uses)}"
    if kind == "port":
        ports = sorted({(u[1], int(u[2])) for u in uses})
        return f"the security-group ingress for {', '.join(f'{p} {n}' for p, n in ports)}"
    return f"the old {', '.join(u[2] for u in uses)} (replaced or deleted: its cleanup deletes it)"


CONSEQUENCES = {
    "csi": "The kubelet cannot unmount those pods' volumes without the driver, so they can stay Terminating (and "
    "hold their GPUs) when {later} rolls them; when {later} reads nothing new from {stack}, deploy it first "
    "(cdk deploy {later} --exclusively), then all",
    "port": "Their traffic on those ports is dropped until {later} rolls them; when {later} reads nothing new from "
    "{stack}, deploy it first (cdk deploy {later} --exclusively), then all",
    "resource": "CloudFormation gives up a delete that fails (the old resource stays, outside any stack); the later "
    "stack moves to the new one only when it deploys",
}
"""What each kind of in-use deletion does to the later stack until it deploys."""


def _provided(state: Templates, live: Iterable[ObjectRef], ports: set[tuple[str, ...]]) -> set[Use]:
    """What the templates of ``state`` and the objects ``live`` on the cluster provide: CSI drivers (add-ons and
    ``CSIDriver`` objects) and, of ``ports`` ((protocol, number) that pods declare), those ingress rules open, per
    group and source (``("port", protocol, number, pair)``), so that another pair's rule does not stand in."""
    found: set[Use] = {("csi", r.name) for r in live if (r.group, r.kind) == ("storage.k8s.io", "CSIDriver")}
    for stack, template in state.items():
        for resource in (template.get("Resources") or {}).values():
            props = resource.get("Properties") or {}
            if resource.get("Type") == ADDON_TYPE:
                found |= {("csi", d) for d in ADDON_CSI_DRIVERS.get(str(props.get("AddonName")), ())}
            if resource.get("Type") == INGRESS_TYPE:
                found |= set(_ports(props, stack, state, ports))
    return found


def _ports(props: Mapping[str, Any], stack: str, state: Templates, ports: set[tuple[str, ...]]) -> Iterator[Use]:
    source = next((props[k] for k in ("SourceSecurityGroupId", "CidrIp", "SourcePrefixListId") if k in props), None)
    pair = f"{_canonical(props.get('GroupId'), stack, state)} from {_canonical(source, stack, state)}"
    protocol = str(props.get("IpProtocol", "")).upper()
    low, high = int(props.get("FromPort", 0)), int(props.get("ToPort", 65535))
    for name, number in ports:
        if protocol in ("-1", name) and (protocol == "-1" or low <= int(number) <= high):
            yield ("port", name, number, pair)


def _canonical(value: Any, stack: str, state: Templates) -> str:
    """A value as the same physical thing in every stack: another stack's output is replaced by the value it
    publishes, a logical ID is prefixed with its stack."""
    if isinstance(value, dict):
        output = value.get("Fn::GetStackOutput")
        if isinstance(output, dict):
            producer = str(output.get("StackName"))
            published = ((state.get(producer) or {}).get("Outputs") or {}).get(str(output.get("OutputName")), {})
            return _canonical(published.get("Value"), producer, state)
        if isinstance(value.get("Ref"), str):
            return f"{stack}:{value['Ref']}"
        attr = value.get("Fn::GetAtt")
        if isinstance(attr, list):
            return f"{stack}:{'.'.join(map(str, attr))}"
    return json.dumps(value, sort_keys=True)


def _uses(obj: Mapping[str, Any]) -> set[Use]:
    """The CSI drivers and container ports an object's pods use (a persistent volume: its driver)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PersistentVolume":
        driver = (spec.get("csi") or {}).get("driver")
        return {("csi", str(driver))} if driver else set()
    pod = (spec.get("template") or {}).get("spec") or (spec if obj.get("kind") == "Pod" else {})
    found: set[Use] = {("csi", str(v["csi"]["driver"])) for v in pod.get("volumes") or [] if "csi" in v}
    for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        for port in container.get("ports") or []:
            found.add(("port", str(port.get("protocol", "TCP")), str(port["containerPort"])))
    return found
