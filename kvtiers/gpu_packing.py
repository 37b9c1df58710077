"""Whether every GPU pod of a set of nodes can be placed at once, as the kube-scheduler places them.

An endpoint whose engines spread on the node name (maxSkew 1, ``DoNotSchedule``, every revision counted) ends with
``floor(replicas / nodes)`` or ``ceil(replicas / nodes)`` pods on every eligible node: a node takes its next pod only
when no eligible node has fewer, whether or not that node has a GPU free. So ``floor`` pods go on every node, and the
remainder at most one to a node. Other GPU pods (the operator's) go on any node of their groups. :func:`pack` searches
for such a placement (exhaustively, nodes of one state tried once); :func:`order_safe` says whether every order the
scheduler may take reaches one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SEARCH_STEPS = 200_000
"""How many placements :func:`pack` tries before it gives up (G6e groups of tens of nodes take a few hundred)."""


@dataclass(frozen=True)
class GpuPods:
    """One workload's GPU pods.

    :param name: the workload.
    :param nodes: the indices of the nodes its pods may run on.
    :param replicas: its pods.
    :param gpus: GPUs of one pod.
    :param spread_evenly: its pods spread on the node name (see the module).
    """

    name: str
    nodes: tuple[int, ...]
    replicas: int
    gpus: int
    spread_evenly: bool


class SearchTooLarge(Exception):
    """:func:`pack` tried :data:`SEARCH_STEPS` placements without an answer."""


def pack(free: Sequence[int], workloads: Sequence[GpuPods]) -> list[dict[str, int]] | None:
    """Pods of each workload on each node, every pod placed and no node over its ``free`` GPUs; None when there is no
    such placement. Raises :class:`SearchTooLarge` when the search does not end within :data:`SEARCH_STEPS`."""
    left = list(free)
    placed: list[dict[str, int]] = [{} for _ in free]
    pending: list[tuple[GpuPods, bool]] = []
    for w in workloads:
        if not w.nodes:
            if w.replicas:
                return None
            continue
        if w.spread_evenly:
            floor, remainder = divmod(w.replicas, len(w.nodes))
            for n in w.nodes:
                left[n] -= floor * w.gpus
                placed[n][w.name] = floor
            pending += [(w, True)] * remainder
        else:
            pending += [(w, False)] * w.replicas
    if any(f < 0 for f in left):
        return None
    pending.sort(key=lambda p: -p[0].gpus)
    # Two nodes that the same workloads may use, with the same GPUs left and the same pods, are interchangeable.
    eligible = [frozenset(w.name for w in workloads if n in w.nodes) for n in range(len(free))]
    steps = [0]

    def place(i: int) -> bool:
        if i == len(pending):
            return True
        steps[0] += 1
        if steps[0] > SEARCH_STEPS:
            raise SearchTooLarge
        workload, one_more = pending[i]
        tried: set[tuple[frozenset[str], int, frozenset[tuple[str, int]]]] = set()
        for n in workload.nodes:
            if left[n] < workload.gpus:
                continue
            if one_more and placed[n].get(workload.name, 0) > workload.replicas // len(workload.nodes):
                continue
            state = (eligible[n], left[n], frozenset(placed[n].items()))
            if state in tried:
                continue
            tried.add(state)
            left[n] -= workload.gpus
            placed[n][workload.name] = placed[n].get(workload.name, 0) + 1
            if place(i + 1):
                return True
            left[n] += workload.gpus
            placed[n][workload.name] -= 1
        return False

    return placed if place(0) else None


ORDER_STATES = 5_000
"""How many states :func:`order_safe` explores before it falls back to its sufficient condition."""


def order_safe(free: Sequence[int], workloads: Sequence[GpuPods]) -> bool:
    """Whether no order of placing the pods, and no choice among the nodes the scheduler may take for each, leaves a
    pod with no node: a spread pod may go only to a node of its endpoint's fewest (maxSkew 1), any pod only where its
    GPUs are free, and a pod left without such a node stays Pending for good (placing others frees nothing). Searched
    exhaustively up to :data:`ORDER_STATES` states; beyond, true only when each node could hold at once the most it
    may get of every workload."""
    try:
        return _no_stuck_order(free, workloads)
    except SearchTooLarge:
        return _room_for_the_most(free, workloads)


def _no_stuck_order(free: Sequence[int], workloads: Sequence[GpuPods]) -> bool:
    names = [w.name for w in workloads]
    eligible = [frozenset(w.name for w in workloads if n in w.nodes) for n in range(len(free))]
    seen: set[tuple[object, ...]] = set()

    def key(left: list[int], counts: list[list[int]], pending: list[int]) -> tuple[object, ...]:
        return (tuple(sorted((eligible[n], left[n], tuple(counts[n])) for n in range(len(free)))), tuple(pending))

    def safe(left: list[int], counts: list[list[int]], pending: list[int]) -> bool:
        state = key(left, counts, pending)
        if state in seen:
            return True
        if len(seen) >= ORDER_STATES:
            raise SearchTooLarge
        seen.add(state)
        for k, w in enumerate(workloads):
            if not pending[k]:
                continue
            fewest = min((counts[n][k] for n in w.nodes), default=0)
            allowed = [n for n in w.nodes if left[n] >= w.gpus and (not w.spread_evenly or counts[n][k] == fewest)]
            if not allowed:
                return False
            tried: set[tuple[object, ...]] = set()
            for n in allowed:
                alike = (eligible[n], left[n], tuple(counts[n]))
                if alike in tried:
                    continue
                tried.add(alike)
                left[n] -= w.gpus
                counts[n][k] += 1
                pending[k] -= 1
                ok = safe(left, counts, pending)
                left[n] += w.gpus
                counts[n][k] -= 1
                pending[k] += 1
                if not ok:
                    return False
        return True

    return safe(list(free), [[0] * len(names) for _ in free], [w.replicas for w in workloads])


def _room_for_the_most(free: Sequence[int], workloads: Sequence[GpuPods]) -> bool:
    for n, gpus in enumerate(free):
        most = 0
        for w in workloads:
            if n not in w.nodes:
                continue
            if w.spread_evenly:
                most += math.ceil(w.replicas / len(w.nodes)) * w.gpus
            else:
                most += min(w.replicas, gpus // w.gpus) * w.gpus
        if most > gpus:
            return False
    return True
