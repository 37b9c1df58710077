"""What a synth costs, counted instead of timed (a count does not change with the machine's load): every round trip
between Python and jsii's Node.js process is a few hundred microseconds at least, and every test that synthesizes pays
them. Each chart is rendered once (its objects are reused for the manifest, the per-object YAML and the tests); the
round trips grow linearly with the endpoints (a check that resolves every manifest for every manifest would not); a
synth of the default environment stays within a budget. ``make bench-synth`` times it against a bare CDK app."""

from __future__ import annotations

import collections

import cdk8s
import pytest
from jsii._kernel.providers import process

from tests.conftest import CONFIG_DIR
from tests.synth import synth
from tools.bench_synth import endpoints_variant

DEV_ROUND_TRIPS = 760
"""Budget of jsii round trips for a synth of config/dev.yaml (without cdk-nag, in a process that has synthesized
before): 659 when it was set, about 800 before the placement aspect stopped reading node paths through jsii and the
acknowledgments stopped asking for ``Validations.of`` once per rule; 720 while a synth made 713; issue 36 gave each
router a role of its own (``RouterAccess``: a role, its policy and the Pod Identity trust conditions on the cluster's
ARN; 731) and the operator's policies more rules (739).
Raise it only for new constructs, with the count in the commit message; first look for jsii calls made per construct
or per object in a loop."""


class Counted:
    """Counts the requests Python sends to jsii's kernel, callbacks' answers included, and each chart's renders."""

    def __init__(self) -> None:
        self.requests: collections.Counter[str] = collections.Counter()
        self.renders: collections.Counter[int] = collections.Counter()

    @property
    def round_trips(self) -> int:
        # Loading an assembly happens once per process, whichever test synthesizes first.
        return sum(n for kind, n in self.requests.items() if kind != "LoadRequest")


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """Synthesize dev (twice: the first warms the process's caches of jsii values), prod and dev variants with 1, 2
    and 4 endpoints; each one's counts."""
    folder = tmp_path_factory.mktemp("cost")
    current = Counted()
    send, to_json = process._NodeProcess.send, cdk8s.Chart.to_json

    def counting_send(self, request, response_type):
        current.requests[type(request).__name__] += 1
        return send(self, request, response_type)

    def counting_to_json(self):
        current.renders[id(self)] += 1
        return to_json(self)

    results: dict[str, tuple[Counted, object]] = {}
    process._NodeProcess.send = counting_send
    cdk8s.Chart.to_json = counting_to_json
    try:
        for name, config in [
            ("warm-up", CONFIG_DIR / "dev.yaml"),
            ("dev", CONFIG_DIR / "dev.yaml"),
            ("prod", CONFIG_DIR / "prod.yaml"),
            *((f"{n} endpoints", endpoints_variant(n, folder)) for n in (1, 2, 4)),
        ]:
            current = Counted()
            results[name] = (current, synth(config, folder / name / "cdk.out"))
    finally:
        process._NodeProcess.send = send
        cdk8s.Chart.to_json = to_json
    return results


@pytest.mark.parametrize("name", ["dev", "prod", "1 endpoints", "4 endpoints"])
def test_each_chart_is_rendered_once_per_synth(counted, name):
    counts, synthesized = counted[name]
    charts = synthesized.graph.workloads.charts
    assert counts.renders, "no chart was rendered: the counting no longer sees cdk8s.Chart.to_json"
    assert max(counts.renders.values()) == 1, "a chart was rendered more than once in one synth"
    assert sum(counts.renders.values()) == len(charts), sorted(charts)


def test_round_trips_grow_linearly_with_the_endpoints(counted):
    one, two, four = (counted[f"{n} endpoints"][0].round_trips for n in (1, 2, 4))
    first, next_two = two - one, (four - two) / 2
    assert first > 0
    # A check over every pair of manifests (or every manifest for each endpoint) grows faster than this.
    assert abs(next_two - first) <= 5, (
        f"round trips per added endpoint: {first} for the 2nd, {next_two} for the 3rd-4th"
    )


def test_a_dev_synth_stays_within_its_round_trip_budget(counted):
    counts = counted["dev"][0]
    assert counts.round_trips <= DEV_ROUND_TRIPS, dict(counts.requests)
