"""Which chunks should the L2 janitor evict? A seeded simulation of the L2 under a serving trace, run with the
janitor's own ``victims()``, comparing eviction orders by the share of prompt tokens the L2 serves.

The trace (every draw from one seeded generator, so the figures repeat exactly):
- shared system prompts, few and hot (Zipf popularity), each several chunks long;
- documents (retrieval context) after the system prompt, many, with a long-tailed Zipf popularity;
- a user tail unique to each request.
LMCache keys a chunk by its whole prefix, so a document's chunks differ under each system prompt. Engine pods sit in
front, each with its L1 (LRU, per pod); requests go to the pod their system prompt hashes to (as prefix-aware and
session routing keep them), so hot system prompts mostly stay in L1. A request's lookup walks its chunks in order
through L1 then L2 and stops at the first chunk in neither (LMCache's lookup); the rest is recomputed and stored in
L1 and the L2. An L2 read counts as a use: the engines' guard stamps the file's access time at most once per
``stamp_seconds``. Every ``janitor_seconds`` the janitor evicts from the high to the low watermark; between its runs
the L2 takes writes up to its capacity and drops the rest (a full L2 refuses writes).

Orders compared, each through ``l2_janitor.victims``:
- ``last-written``: oldest written first (the janitor before it read access times);
- ``last-used``: least recently used first, by the stamped access time (the janitor now);
- ``last-used, exact``: the same with a stamp on every read (what a per-read stamp would buy).

    python tools/eviction_sim.py [--requests N] [--seed S]
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import itertools
import random
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvtiers.k8s_charts.curvine_l2.l2_janitor import ChunkFile

JANITOR = Path(__file__).resolve().parent.parent / "kvtiers" / "k8s_charts" / "curvine_l2" / "l2_janitor.py"


def _load_janitor() -> Any:
    """The janitor's file as the pod runs it (standard library only), without importing the charts package (and with
    it cdk8s)."""
    spec = importlib.util.spec_from_file_location("l2_janitor", JANITOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


janitor = _load_janitor()
last_use, victims = janitor.last_use, janitor.victims

CHUNK_TOKENS = 256
"""LMCache's chunk size in kvtiers (the sizing's assumption)."""


@dataclass(frozen=True)
class Trace:
    requests: int = 60_000
    seed: int = 23
    requests_per_second: float = 4.0
    system_prompts: int = 40
    system_prompt_chunks: int = 6
    system_prompt_skew: float = 1.1
    documents: int = 8_000
    document_chunks: tuple[int, int] = (1, 8)
    document_skew: float = 0.9
    document_share: float = 0.7
    """Share of requests that carry a document."""
    tail_chunks: tuple[int, int] = (1, 4)


@dataclass(frozen=True)
class Cache:
    pods: int = 4
    l1_chunks: int = 600
    """Per pod: LMCache's L1 in chunks (small against the L2, as host DRAM is against the NVMe pool)."""
    l2_chunks: int = 24_000
    high: float = 0.85
    low: float = 0.70
    janitor_seconds: float = 600.0
    stamp_seconds: float = 300.0


@dataclass
class Result:
    policy: str
    prompt_chunks: int = 0
    l1_hits: int = 0
    l2_hits: int = 0
    l2_lookups: int = 0
    """Chunks the lookup asked the L2 for (L1 misses up to the first chunk found nowhere)."""
    dropped_writes: int = 0

    @property
    def l2_token_share(self) -> float:
        return self.l2_hits / self.prompt_chunks

    @property
    def l2_hit_rate(self) -> float:
        return self.l2_hits / self.l2_lookups if self.l2_lookups else 0.0

    @property
    def recomputed_share(self) -> float:
        return 1 - (self.l1_hits + self.l2_hits) / self.prompt_chunks


def _zipf_sampler(rng: random.Random, n: int, skew: float) -> Callable[[], int]:
    cumulative = list(itertools.accumulate(1 / (rank + 1) ** skew for rank in range(n)))
    total = cumulative[-1]
    return lambda: bisect.bisect_left(cumulative, rng.random() * total)


def requests(trace: Trace) -> list[tuple[int, list[tuple]]]:
    """(system prompt, chunk keys) per request; a key names the chunk with everything before it."""
    rng = random.Random(trace.seed)
    system = _zipf_sampler(rng, trace.system_prompts, trace.system_prompt_skew)
    document = _zipf_sampler(rng, trace.documents, trace.document_skew)
    doc_length = [rng.randint(*trace.document_chunks) for _ in range(trace.documents)]
    out = []
    for request in range(trace.requests):
        s = system()
        keys: list[tuple] = [("s", s, i) for i in range(trace.system_prompt_chunks)]
        if rng.random() < trace.document_share:
            d = document()
            keys += [("d", s, d, i) for i in range(doc_length[d])]
        keys += [("t", request, i) for i in range(rng.randint(*trace.tail_chunks))]
        out.append((s, keys))
    return out


def simulate(
    trace: Trace, cache: Cache, policy: str, key: Callable[[ChunkFile], float], stamp: float, trace_requests=None
) -> Result:
    result = Result(policy)
    l1 = [OrderedDict[tuple, None]() for _ in range(cache.pods)]
    written: dict[tuple, float] = {}
    used: dict[tuple, float] = {}
    next_janitor = cache.janitor_seconds
    for index, (system, keys) in enumerate(trace_requests or requests(trace)):
        now = index / trace.requests_per_second
        if now >= next_janitor:
            files = [janitor.ChunkFile(str(i), written[k], used[k], 1) for i, k in enumerate(written)]
            by_name = list(written)
            for victim in victims(files, cache.l2_chunks, cache.high, cache.low, key):
                chunk = by_name[int(victim.path)]
                del written[chunk], used[chunk]
            next_janitor += cache.janitor_seconds
        pod = l1[system % cache.pods]
        result.prompt_chunks += len(keys)
        found = 0
        for chunk in keys:
            if chunk in pod:
                pod.move_to_end(chunk)
                result.l1_hits += 1
            elif chunk in written:
                result.l2_lookups += 1
                result.l2_hits += 1
                if now - used[chunk] >= stamp:
                    used[chunk] = now
                pod[chunk] = None
            else:
                result.l2_lookups += 1
                break
            found += 1
        for chunk in keys[found:]:
            pod[chunk] = None
            if chunk not in written:
                if len(written) >= cache.l2_chunks:
                    result.dropped_writes += 1
                else:
                    written[chunk] = used[chunk] = now
        while len(pod) > cache.l1_chunks:
            pod.popitem(last=False)
    return result


POLICIES: dict[str, tuple[Callable[[ChunkFile], float], bool]] = {
    "last-written": (lambda f: f.mtime, False),
    "last-used": (last_use, False),
    "last-used, exact": (last_use, True),
}
"""Name -> (eviction order, stamp on every read instead of once per ``stamp_seconds``)."""


def compare(trace: Trace, cache: Cache) -> dict[str, Result]:
    drawn = requests(trace)
    return {
        name: simulate(trace, cache, name, key, 0.0 if exact else cache.stamp_seconds, drawn)
        for name, (key, exact) in POLICIES.items()
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=Trace.requests)
    parser.add_argument("--seed", type=int, default=Trace.seed)
    args = parser.parse_args(argv)
    trace, cache = Trace(requests=args.requests, seed=args.seed), Cache()
    for l2_chunks in (cache.l2_chunks, 2 * cache.l2_chunks):
        report(trace, replace(cache, l2_chunks=l2_chunks))
    return 0


def report(trace: Trace, cache: Cache) -> None:
    print(
        f"trace: {trace.requests} requests (seed {trace.seed}), {trace.system_prompts} system prompts x "
        f"{trace.system_prompt_chunks} chunks (Zipf {trace.system_prompt_skew}), {trace.documents} documents "
        f"(Zipf {trace.document_skew}, {trace.document_share:.0%} of requests), unique tails; {cache.pods} pods with "
        f"{cache.l1_chunks} L1 chunks each; L2 {cache.l2_chunks} chunks, watermarks {cache.high}/{cache.low}, "
        f"janitor every {cache.janitor_seconds:g} s, use stamped at most every {cache.stamp_seconds:g} s"
    )
    print(f"{'policy':<18} {'L2 share of prompt tokens':>26} {'L2 hit rate':>12} {'recomputed':>11}")
    for name, r in compare(trace, cache).items():
        print(f"{name:<18} {r.l2_token_share:>26.1%} {r.l2_hit_rate:>12.1%} {r.recomputed_share:>11.1%}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
