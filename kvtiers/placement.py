"""Whether every pod fits the node it must run on: one model of each HyperPod node, what it offers and what lands
on it, for CPU, memory, GPUs, pods and the two local disks.

What a node offers (:func:`node_offer`): the instance's vCPUs at the group's threads per core; its memory less
HyperPod's tiered-storage share, the kubelet's reserve and hard-eviction threshold (the EKS-optimized AMI's
formulas, :mod:`kvtiers.node_agents`) and a system reserve; its GPUs; its pod limit; its instance-store NVMe (the
Curvine cache); and the kubelet's disk (emptyDirs: the engines' model copies).

What lands on it (:class:`Workload`): every construct that creates pods on HyperPod nodes registers them in the
HyperPod cluster's :class:`NodePlacement`, with the requests its charts render, the groups its node selectors allow
and how its rules spread it:

- ``every_node``: a DaemonSet, one pod on each node of its groups;
- ``one_per_node``: replicas with a required anti-affinity on the node name (Curvine masters): at most one on a node,
  so there must be as many nodes as replicas;
- ``gpu_bound``: GPU pods (engines, operator workers). Their spread keeps a node within one pod of the others only
  while every node is there: when nodes are lost or tainted for repair, the rest take their pods as far as GPUs
  allow. The fullest node is the mix, within the node's GPUs and each endpoint's replicas, that asks the most of a
  resource; all GPU pods must also be placeable at once as their spread places them (:mod:`kvtiers.gpu_packing`);
- ``any_node``: replicas the scheduler may put on any node of their groups (the L2 janitor): all of them on the
  fullest.

The fullest node of a group asks, for each resource, the most that any placement the scheduler may choose puts on one
node; a group fits when that is within what the node offers. Computed once per group and read by the constructs'
synth check, ``kvtiers plan`` and the change record alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Literal

from kvtiers.catalog.instance_types import InstanceType
from kvtiers.gpu_packing import GpuPods, SearchTooLarge, order_safe, pack

MIB_PER_GIB = 1024
Spread = Literal["every_node", "one_per_node", "gpu_bound", "any_node"]
SPREADS: tuple[Spread, ...] = ("every_node", "one_per_node", "gpu_bound", "any_node")


@dataclass(frozen=True)
class NodeResources:
    """An amount of each resource a node has and its pods ask for.

    :param cpu_millis: CPU in millicores (requests).
    :param memory_mib: memory in MiB (requests).
    :param gpus: ``nvidia.com/gpu``.
    :param pods: pods (the node's ``maxPods``).
    :param nvme_gb: instance-store NVMe in GB (the Curvine worker's cache and reserve).
    :param disk_gib: the kubelet's disk in GiB (emptyDir size limits: model copies, scratch).
    """

    cpu_millis: int = 0
    memory_mib: int = 0
    gpus: int = 0
    pods: int = 0
    nvme_gb: int = 0
    disk_gib: int = 0

    def __add__(self, other: NodeResources) -> NodeResources:
        return NodeResources(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __sub__(self, other: NodeResources) -> NodeResources:
        return NodeResources(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True)
class Resource:
    """One column of :class:`NodeResources`, as the checks and ``kvtiers plan`` name and print it."""

    field: str
    label: str

    def amount(self, resources: NodeResources) -> int:
        return int(getattr(resources, self.field))

    def format(self, value: int) -> str:
        if self.field == "cpu_millis":
            return f"{value / 1000:g} CPU"
        if self.field == "memory_mib":
            return f"{value / MIB_PER_GIB:.1f} GiB"
        if self.field == "nvme_gb":
            return f"{value} GB"
        if self.field == "disk_gib":
            return f"{value} GiB"
        return str(value)


RESOURCES = (
    Resource("cpu_millis", "cpu"),
    Resource("memory_mib", "memory"),
    Resource("gpus", "gpus"),
    Resource("pods", "pods"),
    Resource("nvme_gb", "instance-store NVMe"),
    Resource("disk_gib", "kubelet disk"),
)


_BINARY_SUFFIXES = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}


def mebibytes(quantity: str) -> float:
    """A Kubernetes memory or storage quantity with a binary suffix (``64Mi``, ``10Gi``) in MiB."""
    number, suffix = quantity[:-2], quantity[-2:]
    if suffix not in _BINARY_SUFFIXES or not number.replace(".", "", 1).isdigit():
        raise ValueError(f"{quantity!r} is not a quantity with a binary suffix ({', '.join(_BINARY_SUFFIXES)})")
    return float(number) * _BINARY_SUFFIXES[suffix]


def millicores(quantity: str) -> int:
    """A Kubernetes CPU quantity (``2``, ``0.5``, ``500m``) in millicores."""
    if quantity.endswith("m"):
        return int(quantity[:-1])
    return round(float(quantity) * 1000)


def pod(
    *, cpu_millis: int = 0, memory_mib: int = 0, gpus: int = 0, nvme_gb: int = 0, disk_gib: int = 0
) -> NodeResources:
    """What one pod asks of its node (it takes one of the node's pods)."""
    return NodeResources(cpu_millis, memory_mib, gpus, 1, nvme_gb, disk_gib)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """Pods one object (a DaemonSet, StatefulSet, Deployment or operator endpoint) puts on HyperPod nodes.

    :param name: what it is, as a person finds it: ``<kind> <namespace>/<name>``.
    :param groups: the instance groups its pods may run on (its node selector or affinity).
    :param spread: how its rules spread it (the module's docstring).
    :param pod: what one of its pods asks (requests; the largest of its init containers and the sum of its
        containers, as the scheduler counts them).
    :param replicas: its pods (``every_node``: ignored). @default 1
    :param spread_evenly: ``gpu_bound`` only: a topology spread on the node name (maxSkew 1, ``DoNotSchedule``, every
        revision counted) puts ``floor(replicas / nodes)`` of its pods on every node and the rest at most one to a
        node, so all of them must fit that way (:mod:`kvtiers.gpu_packing`). @default False (the scheduler may put them
        anywhere their GPUs fit)
    :param source: where the requests come from (a chart and version for components of others). @default kvtiers'
        own objects
    :param engines_of: the serving endpoint whose engines these pods are: each holds its L0 and L1 caches, lost with
        the pod (what ``kvtiers diff`` reports when a node goes). @default None (not an engine)
    """

    name: str
    groups: tuple[str, ...]
    spread: Spread
    pod: NodeResources
    replicas: int = 1
    spread_evenly: bool = False
    source: str = "kvtiers"
    engines_of: str | None = None

    def __post_init__(self) -> None:
        if self.spread not in SPREADS:
            raise ValueError(f"Workload {self.name!r}: spread must be one of {', '.join(SPREADS)}, got {self.spread!r}")
        if not self.groups:
            raise ValueError(f"Workload {self.name!r}: groups must not be empty")
        if self.replicas < 0:
            raise ValueError(f"Workload {self.name!r}: replicas must be at least 0, got {self.replicas}")
        if self.spread == "gpu_bound" and self.pod.gpus < 1:
            raise ValueError(f"Workload {self.name!r}: a gpu_bound pod asks for at least one GPU")


@dataclass(frozen=True, kw_only=True)
class NodeOffer:
    """What one node of an instance group offers its pods.

    :param group: the instance group.
    :param instance_type: the instance type.
    :param count: nodes in the group.
    :param threads_per_core: the group's threads per core (1 halves the instance's vCPUs).
    :param capacity: the node's resources as the kubelet sees them, before reserves.
    :param reserved: what no pod may use, by reason (kubelet reserve, eviction threshold, system reserve, tiered
        storage).
    :param kubelet_disk_on_nvme: see the attribute.
    """

    group: str
    instance_type: str
    count: int
    threads_per_core: int
    capacity: NodeResources
    reserved: Mapping[str, NodeResources]
    kubelet_disk_on_nvme: bool = False
    """The kubelet's disk is the instance-store NVMe: what pods write to emptyDirs there leaves Curvine less, and the
    NVMe check counts both. @default False (an EBS volume of its own)"""

    @property
    def allocatable(self) -> NodeResources:
        total = self.capacity
        for amount in self.reserved.values():
            total = total - amount
        return total

    def describe(self, resource: Resource) -> str:
        """How the allocatable amount of ``resource`` is derived, for a problem line."""
        parts = [f"{resource.format(resource.amount(self.capacity))} on the node"]
        parts += [
            f"less {reason} {resource.format(resource.amount(amount))}"
            for reason, amount in self.reserved.items()
            if resource.amount(amount)
        ]
        return ", ".join(parts)


@dataclass(frozen=True)
class Share:
    """One workload's part of the fullest node: ``pods`` of its pods asking ``amount`` together."""

    workload: str
    pods: int
    amount: int


@dataclass(frozen=True)
class Fullest:
    """The most one node of a group is asked for one resource, and by whom."""

    resource: Resource
    asked: int
    offered: int
    shares: tuple[Share, ...]

    @property
    def left(self) -> int:
        return self.offered - self.asked

    def shares_text(self, most: int = 4) -> str:
        """The largest ``most`` shares by name, the rest summed."""
        ranked = sorted(self.shares, key=lambda s: -s.amount)
        text = [
            f"{s.workload}{f' x{s.pods}' if s.pods > 1 else ''} {self.resource.format(s.amount)}" for s in ranked[:most]
        ]
        rest = ranked[most:]
        if rest:
            text.append(f"{len(rest)} more {self.resource.format(sum(s.amount for s in rest))}")
        return ", ".join(text)


@dataclass(frozen=True)
class GroupUse:
    """A group's fullest node for every resource, and the GPUs its GPU pods leave idle."""

    offer: NodeOffer
    fullest: tuple[Fullest, ...]
    gpus_used: int
    """GPUs the group's GPU pods take across all its nodes."""

    @property
    def gpus_idle(self) -> int:
        return max(self.offer.count * self.offer.capacity.gpus - self.gpus_used, 0)


class NodePlacement:
    """The HyperPod groups' node offers and every workload registered on them. Groups of an instance type kvtiers
    has no figures for are ``unchecked_groups``: workloads may name them, nothing is checked there.

    The constructs that create pods on HyperPod nodes call :meth:`add`; the HyperPod cluster refuses synth with
    :meth:`problems`. A workload added twice under one name (an add-on two constructs rely on) counts once; added
    with different pods, it is refused.
    """

    def __init__(self, offers: Iterable[NodeOffer], *, unchecked_groups: Iterable[str] = ()) -> None:
        self._offers = {o.group: o for o in offers}
        self._unchecked = tuple(unchecked_groups)
        self._workloads: dict[str, Workload] = {}
        self._assignment: tuple[dict[str, int], list[str], list[str]] | None = None

    @property
    def offers(self) -> tuple[NodeOffer, ...]:
        return tuple(self._offers.values())

    @property
    def workloads(self) -> tuple[Workload, ...]:
        return tuple(self._workloads.values())

    def add(self, workload: Workload) -> None:
        """Register ``workload``; its groups must be groups of this placement."""
        groups = (*self._offers, *self._unchecked)
        unknown = sorted(set(workload.groups) - set(groups))
        if unknown:
            raise ValueError(
                f"{workload.name}: instance group(s) {', '.join(unknown)} are not HyperPod groups "
                f"(one of {', '.join(groups)})"
            )
        known = self._workloads.get(workload.name)
        if known is not None and known != workload:
            raise ValueError(f"{workload.name}: registered twice with different pods ({known} and {workload})")
        self._workloads[workload.name] = workload
        self._assignment = None

    def on_group(self, group: str) -> tuple[Workload, ...]:
        return tuple(w for w in self._workloads.values() if group in w.groups)

    def use(self, group: str) -> GroupUse:
        """The fullest node of ``group`` for every resource."""
        offer = self._offers[group]
        workloads = self.on_group(group)
        if offer.kubelet_disk_on_nvme:
            workloads = tuple(_disk_on_nvme(w) for w in workloads)
        fixed = [(w, _fixed_pods(w)) for w in workloads if w.spread != "gpu_bound"]
        gpu_pods = [w for w in workloads if w.spread == "gpu_bound"]
        fixed_gpus = sum(w.pod.gpus * n for w, n in fixed)
        fullest = []
        for resource in RESOURCES:
            shares = [Share(w.name, n, resource.amount(w.pod) * n) for w, n in fixed if n]
            mix = _richest_mix(gpu_pods, max(offer.capacity.gpus - fixed_gpus, 0), resource)
            shares += [Share(w.name, n, resource.amount(w.pod) * n) for w, n in mix if n]
            fullest.append(
                Fullest(
                    resource=resource,
                    asked=sum(s.amount for s in shares),
                    offered=resource.amount(offer.allocatable),
                    shares=tuple(s for s in shares if s.amount),
                )
            )
        return GroupUse(offer=offer, fullest=tuple(fullest), gpus_used=self.gpu_assignment()[0][group])

    def problems(self) -> list[str]:
        """One line per problem: the group, the resource, what is asked and what is offered."""
        lines: list[str] = []
        for workload in self._workloads.values():
            lines += self._spread_problems(workload)
        for group, offer in self._offers.items():
            head = (
                f"instance group {group!r} ({offer.count} x {offer.instance_type}, "
                f"threads_per_core {offer.threads_per_core})"
            )
            if offer.count == 0:
                placed = [w.name for w in self.on_group(group) if w.spread in ("gpu_bound", "one_per_node")]
                if placed:
                    lines.append(f"{head}: has no nodes, but {', '.join(placed)} must run there")
                continue
            use = self.use(group)
            for item in use.fullest:
                if item.asked > item.offered:
                    lines.append(
                        f"{head}: {item.resource.label}: the fullest node asks "
                        f"{item.resource.format(item.asked)} ({item.shares_text()}) but offers "
                        f"{item.resource.format(item.offered)} ({offer.describe(item.resource)})"
                    )
        lines += self.gpu_assignment()[1]
        return lines

    def warnings(self) -> list[str]:
        """What may go wrong though everything fits: GPU pods whose placement depends on the scheduler's order."""
        return self.gpu_assignment()[2]

    def _spread_problems(self, workload: Workload) -> list[str]:
        if any(g in self._unchecked for g in workload.groups):
            return []
        nodes = sum(self._offers[g].count for g in workload.groups)
        if workload.spread == "one_per_node" and workload.replicas > nodes:
            message = (
                f"{workload.name}: {workload.replicas} replicas need {workload.replicas} nodes (at most one on a node: "
                f"required anti-affinity on kubernetes.io/hostname), but instance group(s) "
                f"{', '.join(workload.groups)} have {nodes}"
            )
            return [message]
        return []

    def gpu_assignment(self) -> tuple[dict[str, int], list[str], list[str]]:
        """Every GPU pod placed at once (:mod:`kvtiers.gpu_packing`), per set of groups that GPU workloads join (an
        operator endpoint may use every group of its instance type). Returns the GPUs used per group, one problem
        line per set of groups whose GPU pods cannot all be placed, and one warning per set whose placement depends
        on the order the scheduler takes the pods in. Computed once per set of workloads."""
        if self._assignment is None:
            self._assignment = self._assign_gpus()
        return self._assignment

    def _assign_gpus(self) -> tuple[dict[str, int], list[str], list[str]]:
        gpu_workloads = [w for w in self._workloads.values() if w.spread == "gpu_bound"]
        used = dict.fromkeys(self._offers, 0)
        problems: list[str] = []
        warnings: list[str] = []
        for groups in _components(self._offers, gpu_workloads):
            offers = [self._offers[g] for g in groups]
            nodes = [(o.group, i) for o in offers for i in range(o.count)]
            free = [
                self._offers[g].capacity.gpus
                - sum(w.pod.gpus * _fixed_pods(w) for w in self.on_group(g) if w.spread != "gpu_bound")
                for g, _ in nodes
            ]
            here = [w for w in gpu_workloads if set(w.groups) & set(groups)]
            pods = [
                GpuPods(
                    name=w.name,
                    nodes=tuple(n for n, (g, _) in enumerate(nodes) if g in w.groups),
                    replicas=w.replicas,
                    gpus=w.pod.gpus,
                    spread_evenly=w.spread_evenly,
                )
                for w in here
            ]
            where = ", ".join(f"{o.group!r} ({o.count} x {o.instance_type})" for o in offers)
            asked = ", ".join(
                f"{w.name} {w.replicas} x {w.pod.gpus}" + (" spread evenly" if w.spread_evenly else "") for w in here
            )
            head = f"instance group(s) {where}: gpus: the GPU pods ({asked})"
            too_big = [
                w for w in here if all(w.pod.gpus > self._offers[g].capacity.gpus for g in groups if g in w.groups)
            ]
            if too_big:
                problems += [
                    f"{head}: {w.name} asks {w.pod.gpus} GPUs a pod, a node has "
                    f"{max(self._offers[g].capacity.gpus for g in groups if g in w.groups)}"
                    for w in too_big
                ]
                continue
            try:
                placed = pack(free, pods)
            except SearchTooLarge:
                warnings.append(f"{head}: too many to check that they can all be placed at once")
                continue
            if placed is None:
                problems.append(
                    f"{head} ask {sum(w.replicas * w.pod.gpus for w in here)} GPUs of "
                    f"{sum(o.count * o.capacity.gpus for o in offers)} and cannot all be placed: a spread endpoint "
                    "has floor(replicas / nodes) pods on every node and the rest at most one to a node"
                )
                continue
            for (group, _), counts in zip(nodes, placed):
                used[group] += sum(n * self._workloads[name].pod.gpus for name, n in counts.items())
            if not order_safe(free, pods):
                warnings.append(
                    f"{head} can all be placed, but not in every order the scheduler may take them: a first deploy or "
                    "a node's replacement may leave a larger pod Pending beside smaller ones spread over every node; "
                    "give the endpoints groups of their own, or pods of one size"
                )
        return used, problems, warnings


def _components(offers: Mapping[str, NodeOffer], workloads: Sequence[Workload]) -> list[tuple[str, ...]]:
    """The groups with offers, joined where one GPU workload may run on several of them."""
    parent = {g: g for g in offers}

    def root(g: str) -> str:
        while parent[g] != g:
            g = parent[g]
        return g

    for w in workloads:
        known = [g for g in w.groups if g in offers]
        for g in known[1:]:
            parent[root(g)] = root(known[0])
    joined: dict[str, list[str]] = {}
    for g in offers:
        joined.setdefault(root(g), []).append(g)
    return [tuple(groups) for groups in joined.values()]


def _disk_on_nvme(workload: Workload) -> Workload:
    """``workload`` with its emptyDirs counted on the NVMe (in GB, as Curvine's share is)."""
    disk_gb = math.ceil(workload.pod.disk_gib * 1024**3 / 1000**3)
    return replace(workload, pod=workload.pod + NodeResources(nvme_gb=disk_gb, disk_gib=-workload.pod.disk_gib))


def _fixed_pods(workload: Workload) -> int:
    """Pods of a workload that is not GPU-bound on its group's fullest node."""
    if workload.spread in ("every_node", "one_per_node"):
        return 1 if workload.replicas or workload.spread == "every_node" else 0
    return workload.replicas


def _richest_mix(workloads: Sequence[Workload], gpus: int, resource: Resource) -> list[tuple[Workload, int]]:
    """How many pods of each GPU workload one node may hold (within ``gpus`` and each one's replicas) so that they
    ask the most of ``resource``: a bounded knapsack over the node's GPUs (at most 8 on G6e)."""
    # best[g] = (amount, counts) using at most g GPUs.
    best: list[tuple[int, tuple[int, ...]]] = [(0, (0,) * len(workloads))] * (gpus + 1)
    for index, workload in enumerate(workloads):
        amount = resource.amount(workload.pod)
        limit = min(workload.replicas, gpus // workload.pod.gpus)
        for _ in range(limit):
            nxt = list(best)
            for g in range(workload.pod.gpus, gpus + 1):
                value, counts = best[g - workload.pod.gpus]
                if counts[index] < limit and value + amount > nxt[g][0]:
                    nxt[g] = (value + amount, counts[:index] + (counts[index] + 1,) + counts[index + 1 :])
            best = nxt
    _, counts = max(best, key=lambda b: b[0])
    return list(zip(workloads, counts))


# --------------------------------------------------------------------------------------------------- node offers


@dataclass(frozen=True, kw_only=True)
class KubeletReserve:
    """What the kubelet keeps from pods on a node: its reserve and the hard-eviction threshold."""

    max_pods: int
    cpu_millis: int
    memory_mib: int
    memory_overhead_fraction: float
    """The share of the instance's memory the kernel and firmware keep (below the nominal size, the kubelet's
    capacity is the kernel's ``MemTotal``)."""
    eviction_memory_mib: int
    eviction_disk_fraction: float
    """The share of the kubelet's disk it evicts pods to keep free (``nodefs.available``)."""
    disk_gib: int
    """The kubelet's own reserve of its disk (``kube-reserved`` ephemeral storage)."""


def node_offer(
    *,
    group: str,
    instance: InstanceType,
    count: int,
    threads_per_core: int,
    tiered_storage_percentage: int,
    system_reserved_gib: int,
    kubelet_disk_gb: int,
    reserve: KubeletReserve,
) -> NodeOffer:
    """One node of ``group``: ``instance`` at ``threads_per_core`` (the instance table lists the vCPUs at two threads
    per core), less ``tiered_storage_percentage`` of its memory (0 when tiered storage is off), the kernel's share and
    the kubelet's ``reserve``, and ``system_reserved_gib``. The kubelet's disk is the group's EBS volume at /opt/sagemaker
    (``kubelet_disk_gb``); without one (0) HyperPod puts /opt/sagemaker on the instance stores, so the emptyDirs
    share the NVMe with Curvine (:attr:`NodeOffer.kubelet_disk_on_nvme`)."""
    vcpus = instance.vcpus * threads_per_core // 2
    memory_mib = instance.memory_gib * MIB_PER_GIB
    on_nvme = kubelet_disk_gb == 0
    disk_gib = 0 if on_nvme else _gib(kubelet_disk_gb)
    if on_nvme:
        # The kubelet's reserve and eviction threshold of its disk come out of the NVMe, in GB.
        kubelet_disk = NodeResources(nvme_gb=math.ceil(reserve.disk_gib * 1024**3 / 1000**3))
        eviction_disk = NodeResources(nvme_gb=math.ceil(instance.nvme_gb * reserve.eviction_disk_fraction))
    else:
        kubelet_disk = NodeResources(disk_gib=reserve.disk_gib)
        eviction_disk = NodeResources(disk_gib=math.ceil(disk_gib * reserve.eviction_disk_fraction))
    reserved = {
        "kernel share": NodeResources(memory_mib=math.ceil(memory_mib * reserve.memory_overhead_fraction)),
        "kubelet reserve": NodeResources(cpu_millis=reserve.cpu_millis, memory_mib=reserve.memory_mib) + kubelet_disk,
        "eviction threshold": NodeResources(memory_mib=reserve.eviction_memory_mib) + eviction_disk,
        "system reserve": NodeResources(memory_mib=system_reserved_gib * MIB_PER_GIB),
        "tiered storage": NodeResources(memory_mib=memory_mib * tiered_storage_percentage // 100),
    }
    return NodeOffer(
        group=group,
        instance_type=instance.name,
        count=count,
        threads_per_core=threads_per_core,
        capacity=NodeResources(
            cpu_millis=vcpus * 1000,
            memory_mib=memory_mib,
            gpus=instance.gpus,
            pods=reserve.max_pods,
            nvme_gb=instance.nvme_gb,
            disk_gib=disk_gib,
        ),
        reserved={k: v for k, v in reserved.items() if v != NodeResources()},
        kubelet_disk_on_nvme=on_nvme,
    )


def _gib(gb: int) -> int:
    return math.floor(gb * 1000**3 / 1024**3)
