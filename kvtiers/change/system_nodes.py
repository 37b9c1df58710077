"""What a deploy does to the EKS managed node group of the cluster's controllers (``EksCluster``'s system node group)
and the pods on it, and what a new Kubernetes version does to the nodes.

A node group whose create-only property changes (``AWS::EKS::Nodegroup`` in cfn-lint 1.58.0's bundled schema:
``InstanceTypes``, ``AmiType``, ``CapacityType``, ``DiskSize``, ``NodeRole``, ``Subnets``, ``RemoteAccess``,
``ClusterName``, ``NodegroupName``; labels, sizes and ``Version`` are updated in place) is replaced: created anew,
then the old one is deleted in the stack's cleanup phase: EKS scales its Auto Scaling group to zero and drains
every node, forcing the termination of a node not drained after 5 minutes (AWS docs "Delete a managed node group").
Every pod there stops and starts again on the new group's nodes: the routers (a router's in-memory state goes with
it: kvaware's KV index, prefixaware's prefix trie; a router with one replica leaves its endpoint without one until the
new pod is ready), the controllers required off the HyperPod nodes and the add-ons pinned to the group. The pods
are synth A's: the node group is in the platform stack, which CloudFormation updates before the workloads stack.

A Kubernetes version change updates ``AWS::EKS::Cluster`` ``Version`` in place: the control plane only. A managed
node group whose template has no ``Version`` is not updated (``UpdateNodegroupVersion`` is what moves it), and
HyperPod's nodes move only with ``UpdateClusterSoftware``: no node is replaced and no pod restarts for the version
(the add-ons whose versions change with it roll their own pods, as their own resource updates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtiers.change.cloudformation import CfnAction, CfnChange
from kvtiers.change.groups import GroupChange
from kvtiers.change.manifests import ObjectRef, Templates, manifest_resources
from kvtiers.change.rollout import COMPONENT_LABEL, WORKLOAD_KINDS
from kvtiers.k8s_charts.names import CURVINE_WORKER, HYPERPOD_NODE_SELECTOR

NODEGROUP_TYPE = "AWS::EKS::Nodegroup"
CLUSTER_TYPE = "AWS::EKS::Cluster"
ADDON_TYPE = "AWS::EKS::Addon"
ROUTER_COMPONENT = "router"
ROUTER_STATE = {
    "kvaware": "its KV index (which engine holds which prefix) is lost",
    "prefixaware": "its prefix trie is lost",
}
"""What a router of each routing logic keeps in memory only (production-stack ``routing_logic.py``)."""


@dataclass(frozen=True)
class SystemPods:
    """One workload whose pods run on the system node group's nodes."""

    ref: ObjectRef
    replicas: int | None
    """None for a DaemonSet (one pod a node)."""
    required: bool
    """Required off the HyperPod nodes (else preferred: it lands on a HyperPod node only when the system nodes are
    full)."""
    routing: str | None
    """The routing logic of a router."""

    def line(self) -> str:
        count = "one pod a node" if self.replicas is None else f"{self.replicas} pod(s)"
        where = "" if self.required else ", preferred there"
        text = f"{self.ref} ({count}{where}) restarts"
        if self.routing is not None:
            text += f": router ({self.routing})"
            if self.routing in ROUTER_STATE:
                text += f", {ROUTER_STATE[self.routing]}"
            if self.replicas == 1:
                text += "; with one replica the endpoint has no router until the new pod is ready"
        return text


@dataclass(frozen=True)
class NodegroupReplacement:
    stack: str
    logical_id: str
    because: tuple[str, ...]
    pods: tuple[SystemPods, ...]
    addons: tuple[str, ...]

    def lines(self) -> tuple[str, ...]:
        head = (
            f"{self.logical_id} ({NODEGROUP_TYPE}) is replaced ({', '.join(self.because)}): a new group is created, "
            "then EKS drains and terminates every node of the old one in the cleanup phase of "
            f"{self.stack} (a node not drained after 5 minutes is terminated anyway); every pod there restarts: "
            "those below, and any the templates do not pin there (controllers of Helm charts, which may run on any "
            "node)"
        )
        addons = [f"add-on {a} (pinned to the group) restarts" for a in self.addons]
        return (head, *(p.line() for p in self.pods), *addons)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The routers whose every pod stops with the old group: one replica, so its endpoint has no router (an
        outage of the endpoint) until the new pod is ready."""
        return tuple(
            f"{self.logical_id} is replaced: {p.ref} has one pod, which stops with the old group's nodes: its "
            "endpoint has no router (an outage) until the new pod is ready"
            for p in self.pods
            if p.routing is not None and p.replicas == 1
        )


def nodegroup_replacements(changes: Sequence[CfnChange], before: Templates) -> tuple[NodegroupReplacement, ...]:
    """Each replaced managed node group, with the pods of synth A that run on it."""
    replaced = [c for c in changes if c.type == NODEGROUP_TYPE and c.action is CfnAction.REPLACE]
    if not replaced:
        return ()
    pods = tuple(p for o in _workload_objects(before) if (p := _on_system_nodes(o)) is not None)
    addons = _pinned_addons(before)
    return tuple(NodegroupReplacement(c.stack, c.logical_id, c.because, pods, addons) for c in replaced)


def version_changes(before: Templates, after: Templates) -> tuple[str, ...]:
    """What a Kubernetes version change of an EKS cluster does to the nodes, one line per cluster."""
    found = []
    for stack, template in after.items():
        for logical_id, resource in (template.get("Resources") or {}).items():
            if resource.get("Type") != CLUSTER_TYPE:
                continue
            old = ((before.get(stack) or {}).get("Resources") or {}).get(logical_id) or {}
            was, now = (old.get("Properties") or {}).get("Version"), (resource.get("Properties") or {}).get("Version")
            if old.get("Type") != CLUSTER_TYPE or was == now:
                continue
            groups = [
                lid
                for lid, r in (template.get("Resources") or {}).items()
                if r.get("Type") == NODEGROUP_TYPE and "Version" not in (r.get("Properties") or {})
            ]
            kept = (
                f"node group(s) {', '.join(groups)} have no Version, so CloudFormation leaves them: " if groups else ""
            )
            found.append(
                f"{logical_id}: Kubernetes {was} -> {now} upgrades the control plane in place; {kept}their nodes keep "
                f"kubelet {was} until UpdateNodegroupVersion, and the HyperPod nodes keep theirs until "
                "UpdateClusterSoftware: no node is replaced and no pod restarts for the version (add-on versions "
                "that change with it roll their own pods: their updates are listed with the resources)"
            )
    return tuple(found)


def _workload_objects(templates: Templates) -> list[Mapping[str, Any]]:
    return [
        o
        for resource in manifest_resources(templates).values()
        for o in resource.objects
        if (ObjectRef.of(o).group, ObjectRef.of(o).kind) in WORKLOAD_KINDS
    ]


def _on_system_nodes(obj: Mapping[str, Any]) -> SystemPods | None:
    """The workload's pods when its pod template keeps them off the HyperPod nodes (required or preferred)."""
    template = (obj.get("spec") or {}).get("template") or {}
    affinity = ((template.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    preferred = [
        p.get("preference") or {} for p in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    ]
    if any(_off_hyperpod(t) for t in required):
        is_required = True
    elif preferred and all(_off_hyperpod(t) for t in preferred):
        is_required = False
    else:
        return None
    labels = template.get("metadata", {}).get("labels") or {}
    routing = _routing(template) if labels.get(COMPONENT_LABEL) == ROUTER_COMPONENT else None
    replicas = None if obj["kind"] == "DaemonSet" else int((obj.get("spec") or {}).get("replicas", 1))
    return SystemPods(ObjectRef.of(obj), replicas, is_required, routing)


def _off_hyperpod(term: Mapping[str, Any]) -> bool:
    ((key, value),) = HYPERPOD_NODE_SELECTOR.items()
    return any(
        e.get("key") == key and e.get("operator") == "NotIn" and value in (e.get("values") or [])
        for e in term.get("matchExpressions") or []
    )


def _routing(template: Mapping[str, Any]) -> str | None:
    for container in (template.get("spec") or {}).get("containers") or []:
        args = [str(a) for a in (container.get("args") or [])]
        if "--routing-logic" in args[:-1]:
            return args[args.index("--routing-logic") + 1]
    return None


def _pinned_addons(templates: Templates) -> tuple[str, ...]:
    """EKS add-ons whose configuration pins them to the system nodes (CoreDNS's affinity)."""
    found = []
    for template in templates.values():
        for resource in (template.get("Resources") or {}).values():
            properties = resource.get("Properties") or {}
            if resource.get("Type") == ADDON_TYPE and "kvtiers.io/role" in str(properties.get("ConfigurationValues")):
                found.append(str(properties.get("AddonName")))
    return tuple(sorted(found))


def node_summary(groups: Sequence[GroupChange], replaced: Sequence[NodegroupReplacement]) -> tuple[str, ...]:
    """The summary line's parts for nodes that go: HyperPod nodes terminated or replaced and the engine pods and
    Curvine workers on them (at most), each replaced node group and the workloads on it."""
    parts = []
    nodes = sum(g.nodes_lost for g in groups)
    if nodes:
        workers = sum(s.pods for g in groups for s in g.stopped if s.workload.endswith(f"/{CURVINE_WORKER}"))
        parts.append(
            f"{nodes} HyperPod node(s) terminate or are replaced: up to {sum(g.engine_pods_lost for g in groups)} "
            f"engine pod(s) and {workers} Curvine worker(s) (their L2 blocks) stop with them"
        )
    parts += [f"node group {r.logical_id} replaced: {len(r.pods)} workload(s) restart on it" for r in replaced]
    return tuple(parts)
