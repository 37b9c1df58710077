"""The eviction order the janitor uses earns its place on a trace of shared system prompts and long-tailed
documents (tools/eviction_sim.py, run here on a shorter trace with a proportionally smaller L2): least recently used,
from the access times the engines' guard stamps, keeps more of what the L2 serves than oldest-written-first, and the
stamp interval loses little against a stamp on every read. The full figures: ``python
tools/eviction_sim.py`` (docs/runbooks.md, "L2 capacity and eviction")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tools import eviction_sim as sim

TRACE = sim.Trace(requests=20_000)
CACHE = replace(sim.Cache(), l2_chunks=8_000)


def test_least_recently_used_serves_more_from_the_l2_than_last_written():
    results = sim.compare(TRACE, CACHE)
    written, used, exact = (results[name] for name in ("last-written", "last-used", "last-used, exact"))
    assert used.l2_hits > 1.1 * written.l2_hits, (used, written)
    assert used.l2_hit_rate > written.l2_hit_rate + 0.02
    assert used.recomputed_share < written.recomputed_share
    assert abs(exact.l2_hits - used.l2_hits) < 0.05 * used.l2_hits, "the stamp interval costs little"


def test_the_figures_repeat_with_the_seed_and_change_without_it():
    first = sim.simulate(TRACE, CACHE, "last-used", sim.last_use, CACHE.stamp_seconds)
    again = sim.simulate(TRACE, CACHE, "last-used", sim.last_use, CACHE.stamp_seconds)
    other = sim.simulate(replace(TRACE, seed=TRACE.seed + 1), CACHE, "last-used", sim.last_use, CACHE.stamp_seconds)
    assert first == again and first != other


def test_the_simulation_runs_the_janitors_own_file():
    from kvtiers.k8s_charts.curvine_l2 import l2_janitor

    assert sim.JANITOR.resolve() == Path(l2_janitor.__file__).resolve()
