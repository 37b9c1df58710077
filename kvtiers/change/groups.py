"""What a deploy does to the HyperPod groups and the pods on them, from two synths' placement records: nodes added
or removed, an instance type changed (every node replaced) or threads per core changed (new nodes only), the pods
that stop with the nodes that go and the caches they hold, the pods that cannot be placed meanwhile, and each
resource of the fullest node before and after.

Which nodes go is HyperPod's choice: on a scale-down "SageMaker AI handles node termination to reach the new target
count" (AWS docs "Scaling down a SageMaker HyperPod cluster", ``smcluster-scale-down``), so every figure here is for
the worst choice: the nodes that hold the most of each workload (:func:`stopped`). The pods that stop are the ones
running before the deploy (the synth A record): the HyperPod cluster is in the platform stack, which CloudFormation
updates before the workloads stack, so the nodes change while synth A's pods still run, and until the workloads
stack is deployed those pods must fit synth B's nodes (:func:`unplaceable`). A change whose own pods no longer fit
never gets here: its synth is refused (the HyperPod cluster's placement check, the Curvine master count), and
``kvtiers diff`` reports that synth's error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kvtiers.change.record import GroupRecord, PlacedRecord
from kvtiers.gpu_packing import GpuPods, SearchTooLarge, pack
from kvtiers.k8s_charts.names import CURVINE_MASTER, CURVINE_WORKER


@dataclass(frozen=True)
class Stopped:
    """Pods of one workload that stop with the nodes that go (at most: HyperPod picks the nodes)."""

    workload: str
    pods: int
    of: int
    """Its pods on the group's nodes before (DaemonSet: one a node) or its replicas."""
    engines_of: str | None
    """The endpoint whose engines (L0 and L1 caches) the pods are, if any."""
    spread: str
    """How the placement model spreads the workload (:mod:`kvtiers.placement`)."""


@dataclass(frozen=True)
class GroupChange:
    name: str
    before: GroupRecord | None
    after: GroupRecord | None
    l2_endpoints: tuple[str, ...] = ()
    """The endpoints whose engines read and write the L2 before the deploy."""
    curvine_workers: int = 0
    """Curvine workers before the deploy, on every worker group."""
    unplaceable: tuple[str, ...] = ()
    """Synth A's pods that synth B's nodes cannot hold until the workloads stack is deployed (:func:`unplaceable`)."""

    @property
    def nodes_lost(self) -> int:
        """Nodes terminated (a scale-down, the group removed) or replaced (another instance type)."""
        before, after = self.before, self.after
        if before is None:
            return 0
        if after is None or before.instance_type != after.instance_type:
            return before.count
        return max(before.count - after.count, 0)

    @property
    def stopped(self) -> tuple[Stopped, ...]:
        """Each workload's pods on the nodes that go, at most (:func:`stopped`)."""
        if self.before is None or not self.nodes_lost:
            return ()
        found = (stopped(w, self.before, self.nodes_lost) for w in self.before.placed)
        return tuple(s for s in found if s.pods)

    @property
    def engine_pods_lost(self) -> int:
        """Engine pods (their L0 and L1 caches) that stop with the nodes, at most."""
        return sum(s.pods for s in self.stopped if s.engines_of)

    @property
    def changes(self) -> tuple[str, ...]:
        """What happens to the group's nodes, one line each."""
        before, after = self.before, self.after
        if before is None:
            return ("new group",)
        if after is None:
            return (f"group removed: its {before.count} node(s) terminate with every pod on them",)
        found = []
        if before.instance_type != after.instance_type:
            found.append(
                f"instance type {before.instance_type} -> {after.instance_type}: every node is replaced and its pods "
                "restart (UpdateCluster lets an instance group's type change; how HyperPod replaces the running "
                "nodes, all at once or in batches, is not documented: the worst case, all at once, is shown)"
            )
        if before.threads_per_core != after.threads_per_core:
            found.append(
                f"threads per core {before.threads_per_core} -> {after.threads_per_core}: EC2 fixes CPU options when "
                "an instance launches, so running nodes keep theirs until HyperPod replaces them (whether it accepts "
                "the change for a running group is AWS's to confirm), and the placement check assumes the new value"
            )
        if after.count < before.count:
            found.append(
                f"{before.count} -> {after.count} nodes: {before.count - after.count} node(s) terminate; their pods "
                "reschedule on the others (HyperPod picks which nodes go: the pods below are the worst pick)"
            )
        elif after.count > before.count:
            found.append(f"{before.count} -> {after.count} nodes")
        return tuple(found)

    @property
    def pods(self) -> tuple[str, ...]:
        """The pods that stop with the nodes and what they take with them: the engines, the Curvine workers and
        masters, then in one line the other pods that may be there (not the DaemonSets: they come back with the
        nodes), then what cannot be placed meanwhile."""
        lines = [_engine_line(s) for s in self.stopped if s.engines_of]
        lines += [self._worker_line(s) for s in self.stopped if s.workload.endswith(f"/{CURVINE_WORKER}")]
        lines += [_master_line(s) for s in self.stopped if s.workload.endswith(f"/{CURVINE_MASTER}")]
        others = [
            f"{s.workload} ({s.pods})"
            for s in self.stopped
            if not s.engines_of and s.spread != "every_node" and not s.workload.endswith(f"/{CURVINE_MASTER}")
        ]
        if others:
            lines.append(f"may run there and restart on another node: {', '.join(others)}")
        return (*lines, *self.unplaceable)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The outages among :attr:`pods`: the Curvine masters losing their Raft quorum (the only master stopping
        included), and an endpoint whose every engine pod stops with the nodes."""
        found = [
            f"{self.name}: up to {s.pods} of {s.of} Curvine master(s) stop with the nodes that go: "
            + ("the only master" if s.of == 1 else "no Raft quorum")
            + ", so the L2 is down for every endpoint (engines fall back to prefill) until they are back"
            for s in self.stopped
            if s.workload.endswith(f"/{CURVINE_MASTER}") and s.of - s.pods < s.of // 2 + 1
        ]
        found += [
            f"{self.name}: all {s.pods} engine pod(s) of {s.engines_of} stop at once with the nodes that go (at worst): "
            f"an outage of {s.engines_of} until they are scheduled again and have loaded the model"
            for s in self.stopped
            if s.engines_of and s.pods >= s.of
        ]
        return tuple(found)

    def _worker_line(self, s: Stopped) -> str:
        of = max(self.curvine_workers, s.of)
        endpoints = ", ".join(self.l2_endpoints) or "no endpoint"
        cold = "goes cold (every block)" if s.pods >= of else f"goes partly cold (up to {s.pods}/{of} of its blocks)"
        return (
            f"{s.pods} of {of} Curvine worker(s) stop: the L2 blocks on their NVMe are lost (one replica a block, "
            f"docs/curvine-contract.md), so the L2 of {endpoints} {cold}"
        )

    @property
    def fullest(self) -> tuple[str, ...]:
        """Each resource of the fullest node whose figure changed, ``before -> after``."""
        if self.before is None or self.after is None:
            return ()
        return tuple(
            f"{label} {self.before.fullest.get(label, '-')} -> {figure}"
            for label, figure in self.after.fullest.items()
            if self.before.fullest.get(label) != figure
        )


def _engine_line(s: Stopped) -> str:
    return f"up to {s.pods} of {s.of} engine pod(s) of {s.engines_of} ({s.workload}) stop: their L0/L1 caches are lost"


def _master_line(s: Stopped) -> str:
    quorum = s.of // 2 + 1
    if s.of - s.pods >= quorum:
        effect = f"the other {s.of - s.pods} keep the Raft quorum"
    else:
        effect = "the Raft group has no quorum, so the L2 is down (engines fall back to prefill) until they are back"
    return f"up to {s.pods} of {s.of} Curvine master(s) stop: {effect}"


def stopped(workload: PlacedRecord, group: GroupRecord, nodes: int) -> Stopped:
    """The most pods of ``workload`` that ``nodes`` of ``group``'s nodes can hold, as its spread places them
    (:mod:`kvtiers.placement`): one a node for a DaemonSet (``every_node``) and for pods with a required anti-affinity
    on the node name (``one_per_node``); for engines spread on the node name, ``floor(replicas / nodes)`` on every
    node and the remainder one to a node; other GPU pods as many as a node's GPUs take; the rest all on one node."""
    spread, replicas = workload.spread, workload.replicas
    if spread == "every_node":
        return Stopped(workload.name, nodes, group.count, workload.engines_of, spread)
    if spread == "one_per_node":
        most = min(nodes, replicas)
    elif spread == "gpu_bound" and workload.spread_evenly and len(workload.groups) == 1 and group.count:
        floor, remainder = divmod(replicas, group.count)
        most = nodes * floor + min(nodes, remainder)
    elif spread == "gpu_bound" and workload.gpus and group.gpus_per_node:
        most = min(replicas, nodes * (group.gpus_per_node // workload.gpus))
    else:
        most = replicas
    return Stopped(workload.name, most, replicas, workload.engines_of, spread)


def unplaceable(before: Mapping[str, GroupRecord], after: Mapping[str, GroupRecord], group: str) -> tuple[str, ...]:
    """Synth A's pods on ``group`` that synth B's nodes cannot all hold: a workload with one pod a node and more
    replicas than nodes, or GPU pods that :func:`kvtiers.gpu_packing.pack` cannot place. They stay Pending from the
    platform stack's update (the nodes) until the workloads stack's (synth B's pods)."""
    old, new = before.get(group), after.get(group)
    if old is None or new is None:
        return ()
    found = []
    for w in old.placed:
        nodes = sum(after[g].count for g in w.groups if g in after)
        if w.spread == "one_per_node" and w.replicas > nodes and all(g in after for g in w.groups):
            found.append(
                f"{w.name}: {w.replicas - nodes} of {w.replicas} pod(s) stay Pending (at most one to a node: required "
                f"anti-affinity on kubernetes.io/hostname) on {nodes} node(s) until the workloads stack is deployed"
            )
    gpu = [w for w in old.placed if w.spread == "gpu_bound" and w.groups == [group]]
    if not gpu or not new.gpus_per_node:
        return tuple(found)
    pods = [GpuPods(w.name, tuple(range(new.count)), w.replicas, w.gpus, w.spread_evenly) for w in gpu]
    try:
        placed = pack([new.gpus_per_node] * new.count, pods)
    except SearchTooLarge:
        return tuple(found)
    if placed is None:
        asked = ", ".join(f"{w.name} {w.replicas} x {w.gpus}" for w in gpu)
        found.append(
            f"the GPU pods running now ({asked}) cannot all be placed on {new.count} x {new.instance_type} "
            f"({new.gpus_per_node} GPUs each): some stay Pending until the workloads stack is deployed"
        )
    return tuple(found)


def group_changes(
    before: dict[str, GroupRecord] | None,
    after: dict[str, GroupRecord] | None,
    *,
    l2_endpoints: Iterable[str] = (),
) -> tuple[GroupChange, ...]:
    """The groups whose nodes or fullest node change (none when either synth has no placement record)."""
    if before is None or after is None:
        return ()
    workers = sum(g.count for g in before.values() if any(w.name.endswith(f"/{CURVINE_WORKER}") for w in g.placed))
    found = [
        GroupChange(
            name,
            before.get(name),
            after.get(name),
            l2_endpoints=tuple(sorted(l2_endpoints)),
            curvine_workers=workers,
            unplaceable=unplaceable(before, after, name),
        )
        for name in sorted({*before, *after})
    ]
    return tuple(g for g in found if g.changes or g.fullest or g.unplaceable)
