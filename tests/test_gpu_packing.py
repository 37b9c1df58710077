"""The GPU packing against an independent model of the kube-scheduler: every order in which it may take the pods, and
every node it may choose for each (a spread pod only where its endpoint has the fewest, maxSkew 1; any pod only where
its GPUs are free). Over random groups of G6e nodes and endpoints, the check refuses exactly what no order places,
and warns exactly where some order strands a pod."""

from __future__ import annotations

import functools
import random

import pytest

from kvtiers.gpu_packing import GpuPods, order_safe, pack

Endpoint = tuple[int, int, bool]
"""(replicas, GPUs a pod, spread evenly)."""


def scheduler(gpus: int, nodes: int, endpoints: tuple[Endpoint, ...]) -> tuple[bool, bool]:
    """(some order places every pod, every order does)."""

    @functools.cache
    def run(state: tuple[tuple[int, tuple[int, ...]], ...], left: tuple[int, ...]) -> tuple[bool, bool]:
        if not any(left):
            return True, True
        some, every, moved = False, True, False
        for k, (_, size, spread) in enumerate(endpoints):
            if not left[k]:
                continue
            fewest = min(counts[k] for _, counts in state)
            for n, (free, counts) in enumerate(state):
                if free < size or (spread and counts[k] > fewest):
                    continue
                moved = True
                after = list(state)
                after[n] = (free - size, counts[:k] + (counts[k] + 1,) + counts[k + 1 :])
                s, e = run(tuple(after), left[:k] + (left[k] - 1,) + left[k + 1 :])
                some, every = some or s, every and e
        return (some, every) if moved else (False, False)

    return run(tuple((gpus, (0,) * len(endpoints)) for _ in range(nodes)), tuple(r for r, _, _ in endpoints))


def cases(count: int) -> list[tuple[int, int, tuple[Endpoint, ...]]]:
    rng = random.Random(31)
    found = []
    while len(found) < count:
        gpus, nodes = rng.choice((4, 8)), rng.randint(1, 4)
        endpoints = tuple(
            (rng.randint(1, 5), rng.choice([g for g in (1, 2, 4, 8) if g <= gpus]), rng.random() < 0.8)
            for _ in range(rng.randint(1, 3))
        )
        if sum(r * g for r, g, _ in endpoints) <= gpus * nodes:
            found.append((gpus, nodes, endpoints))
    return found


@pytest.mark.parametrize(("gpus", "nodes", "endpoints"), cases(400))
def test_the_packing_refuses_and_warns_exactly_where_the_scheduler_strands_a_pod(gpus, nodes, endpoints):
    pods = [GpuPods(f"e{k}", tuple(range(nodes)), r, g, s) for k, (r, g, s) in enumerate(endpoints)]
    some, every = scheduler(gpus, nodes, endpoints)
    placed = pack([gpus] * nodes, pods)
    assert (placed is not None) == some
    if placed is not None:
        assert order_safe([gpus] * nodes, pods) == every
