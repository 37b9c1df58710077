"""Recording and alert rules: every expression parses (promql-parser), every metric name is in the catalogue with its
upstream source, and Prometheus's own rule engine (promtool test rules, tests/promtool.py) gives the expected
numbers and alerts on synthetic series, including series that are absent."""

from __future__ import annotations

import promql_parser as pp
import pytest

from kvtiers.config import load_environment, model
from kvtiers.observability import metrics as m
from kvtiers.observability import rules as r
from tests.conftest import CONFIG_DIR
from tests.promtool import RuleTest, counter, gauge, rounded, run_rule_tests
from tests.upstream import require_upstream

ENVIRONMENTS = {name: load_environment(CONFIG_DIR / f"{name}.yaml") for name in ("dev", "prod")}


def all_rules(env):
    return [rule for group in r.rule_groups(env)["groups"] for rule in group["rules"]]


def selectors(node) -> list[str]:
    """Every series name an expression reads."""
    if isinstance(node, pp.VectorSelector):
        return [node.name]
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector.name]
    children = []
    for attr in ("expr", "lhs", "rhs"):
        if hasattr(node, attr) and getattr(node, attr) is not None:
            children.append(getattr(node, attr))
    children += list(getattr(node, "args", None) or [])
    return [name for child in children for name in selectors(child)]


@pytest.mark.parametrize("env_name", ENVIRONMENTS)
def test_every_rule_parses_and_reads_only_catalogued_or_recorded_series(env_name):
    env = ENVIRONMENTS[env_name]
    rules = all_rules(env)
    recorded = {rule["record"] for rule in rules if "record" in rule}
    exposed = m.exposed_names()
    seen = set()
    for rule in rules:
        for name in selectors(pp.parse(rule["expr"])):
            assert name in recorded or name in exposed, f"{name} in {rule['expr']} is neither recorded nor catalogued"
            seen.add(name)
    assert {
        m.PREFIX_CACHE_HITS.name,
        m.EXTERNAL_PREFIX_CACHE_HITS.name,
        m.LMCACHE_REMOTE_READ_BYTES.name,
        m.TTFT.series("_bucket"),
        m.CURVINE_FS_USED.name,
        m.JANITOR_FREED_BYTES.name,
        m.JANITOR_LAST_SUCCESS.name,
        m.KVAWARE_REGISTERED_WORKERS.name,
        "up",
    } <= seen


def test_derived_splits_are_labelled_and_alerts_cover_what_an_operator_acts_on():
    rules = all_rules(ENVIRONMENTS["prod"])
    derived = {rule["record"] for rule in rules if rule.get("labels", {}).get("derived") == "true" and "record" in rule}
    assert derived == {r.L1_TOKENS, r.L2_TOKENS, r.L2_HIT_RATIO}
    alerts = [rule for rule in rules if "alert" in rule]
    assert {a["alert"] for a in alerts} == {
        "KvtiersL2NearlyFull",
        "KvtiersL2AboveHighWatermark",
        "KvtiersL2JanitorDown",
        "KvtiersL2JanitorFailing",
        "KvtiersCurvineMasterDown",
        "KvtiersCurvineWorkerDown",
        "KvtiersEngineDown",
        "KvtiersRouterDown",
        "KvtiersKvawareEnginesUnregistered",
        "KvtiersTTFTHigh",
        "KvtiersL2HitRateCollapsed",
        "KvtiersL2UnreadableChunks",
        "KvtiersL2Stalled",
        "KvtiersL2WrongMount",
        "KvtiersEngineDegraded",
        "KvtiersMetricsCollectorDown",
        "KvtiersWatchdog",
        "KvtiersCurvineNoLeader",
        "KvtiersL2JanitorLostCheckSkipped",
        "KvtiersL2JanitorDeleteFailures",
        "KvtiersL2UseStampsFailing",
    }
    ttft = {a["labels"]["endpoint"] for a in alerts if a["alert"] == "KvtiersTTFTHigh"}
    assert ttft == {e.name for e in ENVIRONMENTS["prod"].serving.endpoints}
    collapse = [a for a in alerts if a["alert"] == "KvtiersL2HitRateCollapsed"]
    assert collapse and all(a["labels"]["derived"] == "true" for a in collapse)


# ------------------------------------------------------------------------------------- upstream metric names


@pytest.mark.parametrize(
    "metric",
    [c for c in m.CATALOGUE if c.source != m.PROMETHEUS_SOURCE],
    ids=lambda c: f"{c.registered}@{c.source.split(':')[-1]}",
)
def test_each_catalogued_metric_is_registered_in_its_pinned_source(metric):
    text = require_upstream(metric.source)
    assert f'"{metric.registered}"' in text, f"{metric.registered} is not registered in {metric.source}"


# ------------------------------------------------------------------------------------- evaluation

HOURS = 7
STEPS = HOURS * 120  # 30-second samples, long enough for the 6-hour windows
AT = f"{HOURS}h"


def engine_series(
    env,
    endpoint: str,
    *,
    queries=1000.0,
    l0=300.0,
    lmcache=500.0,
    l2_tokens=200.0,
    l2_after: float | None = None,
    used=900.0,
    capacity=1000.0,
) -> RuleTest:
    """Two engine pods of ``endpoint`` sharing its traffic, a router reusing vLLM's gauge name, a Curvine leader
    and a follower reporting 0, every master up and one worker down."""
    sized = model.sizing(env).endpoint(endpoint)
    test = RuleTest()
    labels = {"component": "engine", "endpoint": endpoint}
    for pod in ("a", "b"):
        test.add(m.PREFIX_CACHE_QUERIES.name, counter(queries / 2, STEPS), pod=pod, **labels)
        test.add(m.PREFIX_CACHE_HITS.name, counter(l0 / 2, STEPS), pod=pod, **labels)
        test.add(m.EXTERNAL_PREFIX_CACHE_HITS.name, counter(lmcache / 2, STEPS), pod=pod, **labels)
        read = l2_tokens * sized.kv_bytes_per_token / 2
        later = None if l2_after is None else l2_after * sized.kv_bytes_per_token / 2
        test.add(
            m.LMCACHE_REMOTE_READ_BYTES.name,
            counter(read, STEPS, then=later, from_step=STEPS - 60 if later is not None else None),
            pod=pod,
            **labels,
        )
        test.add(m.REQUESTS_WAITING.name, gauge(3, STEPS), pod=pod, **labels)
    # the router reuses vLLM's gauge name: it must not count
    test.add(m.REQUESTS_WAITING.name, gauge(50, STEPS), component="router", endpoint=endpoint)
    for le, per_second in (("0.25", 10.0), ("0.5", 50.0), ("1", 90.0), ("+Inf", 100.0)):
        test.add(m.TTFT.series("_bucket"), counter(per_second, STEPS), le=le, **labels)
    for pod, factor in (("curvine-master-0", 1.0), ("curvine-master-1", 0.0)):
        master = {"component": "curvine-master", "pod": pod}
        test.add(m.CURVINE_FS_USED.name, gauge(used * factor, STEPS), **master)
        test.add(m.CURVINE_CAPACITY.name, gauge(capacity * factor, STEPS), **master)
    for i in range(env.curvine.master.replicas):
        test.add("up", gauge(1, STEPS), component="curvine-master", pod=f"curvine-master-{i}")
    test.add("up", gauge(0, STEPS), component="curvine-worker", pod="curvine-worker-x")
    janitor = {"component": "l2-janitor", "pod": "curvine-l2-janitor-0"}
    test.add(m.JANITOR_FREED_BYTES.name, counter(4096.0, STEPS), reason="watermark", **janitor)
    test.add(m.JANITOR_FREED_BYTES.name, counter(512.0, STEPS), reason="lost", **janitor)
    return test


def test_tier_split_per_endpoint(tmp_path):
    env = ENVIRONMENTS["prod"]
    test = engine_series(env, "qwen25-32b")
    e = {"endpoint": "qwen25-32b"}
    derived = {**e, "derived": "true"}
    for series, labels, expected in (
        (r.PROMPT_TOKENS, e, 1000),
        (r.L0_TOKENS, e, 300),
        (r.LMCACHE_TOKENS, e, 500),
        (r.L2_TOKENS, derived, 200),
        (r.L1_TOKENS, derived, 300),
        (r.RECOMPUTED_TOKENS, e, 200),
        (r.L2_HIT_RATIO, derived, 0.2),
        (r.QUEUE, e, 6),  # the router's 50 is not an engine's queue
        (r.TTFT_P50, e, 0.5),
        (r.TTFT_P95, e, 1.0),  # rank 95 lies in the (1, +Inf] bucket
    ):
        test.expect(rounded(f'{series}{{endpoint="qwen25-32b"}}'), AT, [(labels, expected)])
    test.expect(rounded(r.L2_USED_RATIO), AT, [({}, 0.9)])
    # what the janitor deleted, by reason (not Curvine's eviction counter)
    test.expect(rounded(r.L2_EVICTED_BYTES), AT, [({}, 4096)])
    test.expect(rounded(r.L2_LOST_BYTES), AT, [({}, 512)])
    test.expect_firing("KvtiersL2NearlyFull", AT, [])
    test.expect_firing("KvtiersCurvineMasterDown", AT, [])
    test.expect_firing("KvtiersCurvineWorkerDown", AT, [{"severity": "page"}])
    test.expect_firing("KvtiersL2HitRateCollapsed", AT, [])
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


def test_recomputed_never_goes_negative_and_l1_is_all_of_lmcache_without_l2(tmp_path):
    env = ENVIRONMENTS["dev"]
    endpoint = env.serving.endpoints[0].name
    test = engine_series(env, endpoint, queries=100.0, l0=80.0, lmcache=40.0, l2_tokens=0.0)
    test.expect(rounded(f'{r.RECOMPUTED_TOKENS}{{endpoint="{endpoint}"}}'), AT, [({"endpoint": endpoint}, 0)])
    test.expect(
        rounded(f'{r.L1_TOKENS}{{endpoint="{endpoint}"}}'), AT, [({"endpoint": endpoint, "derived": "true"}, 40)]
    )
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


def with_ttft_threshold(env, seconds: float):
    endpoints = tuple(e.model_copy(update={"ttft_p95_alert_seconds": seconds}) for e in env.serving.endpoints)
    return env.model_copy(update={"serving": env.serving.model_copy(update={"endpoints": endpoints})})


def test_alerts_fire_on_a_full_l2_a_collapsed_hit_rate_and_slow_ttft(tmp_path):
    env = ENVIRONMENTS["prod"]
    test = engine_series(env, "qwen25-32b", used=980.0, l2_tokens=200.0, l2_after=10.0)
    test.expect_firing("KvtiersL2NearlyFull", AT, [{"severity": "warning"}])
    test.expect_firing(
        "KvtiersL2HitRateCollapsed", AT, [{"severity": "warning", "endpoint": "qwen25-32b", "derived": "true"}]
    )
    # TTFT p95 of 1 s: not above the default 2 s ...
    test.expect_firing("KvtiersTTFTHigh", AT, [])
    (tmp_path / "default").mkdir()
    run_rule_tests(tmp_path / "default", r.rule_groups(env), [test])
    # ... above a threshold of 0.5 s
    slow = engine_series(env, "qwen25-32b")
    slow.expect_firing("KvtiersTTFTHigh", AT, [{"severity": "warning", "endpoint": "qwen25-32b"}])
    (tmp_path / "slow").mkdir()
    run_rule_tests(tmp_path / "slow", r.rule_groups(with_ttft_threshold(env, 0.5)), [slow])


def test_the_l2_guard_alerts_fire_on_deleted_chunks_and_stalls_per_endpoint(tmp_path):
    env = ENVIRONMENTS["prod"]
    test = engine_series(env, "qwen25-32b")
    labels = {"component": "engine", "endpoint": "qwen25-32b"}
    # 2 unreadable chunks per hour from one pod, a stall every 10 minutes from the other; "intact" (no L1 buffer)
    # and "missing" (the janitor was first) are no alert
    test.add(m.L2_LOAD_FAILURES.name, counter(2 / 3600, STEPS), pod="a", reason="unreadable", **labels)
    test.add(m.L2_LOAD_FAILURES.name, counter(50 / 3600, STEPS), pod="a", reason="intact", **labels)
    test.add(m.L2_LOAD_FAILURES.name, counter(50 / 3600, STEPS), pod="b", reason="missing", **labels)
    test.add(m.L2_BREAKER_TRIPS.name, counter(1 / 600, STEPS), pod="b", **labels)
    test.expect_firing("KvtiersL2UnreadableChunks", AT, [{"severity": "warning", "endpoint": "qwen25-32b"}])
    # 2 per hour over 15 minutes
    test.expect(
        rounded('sum by (endpoint) (increase(kvtiers_l2_load_failures_total{reason="unreadable"}[15m]))'),
        AT,
        [({"endpoint": "qwen25-32b"}, 0.5)],
    )
    test.expect_firing("KvtiersL2Stalled", AT, [{"severity": "warning", "endpoint": "qwen25-32b"}])
    quiet = engine_series(env, "qwen25-32b")
    quiet.add(m.L2_LOAD_FAILURES.name, counter(50 / 3600, STEPS), pod="a", reason="intact", **labels)
    quiet.expect_firing("KvtiersL2UnreadableChunks", AT, [])
    run_rule_tests(tmp_path, r.rule_groups(env), [test, quiet])


@pytest.mark.parametrize("workers_up, fires", [(None, True), (1, True), ("all", False)])
def test_the_worker_alert_counts_against_the_deployed_workers(tmp_path, workers_up, fires):
    """A worker pod that is gone has no `up` series: the alert compares with the environment's worker count."""
    env = ENVIRONMENTS["prod"]
    test = engine_series(env, "qwen25-32b")
    test.drop(lambda series: 'component="curvine-worker"' in series)
    count = {None: 0, 1: 1, "all": model.sizing(env).curvine_workers}[workers_up]
    for i in range(count):
        test.add("up", gauge(1, STEPS), component="curvine-worker", pod=f"curvine-worker-{i}")
    # the same labels whether one worker or all of them are gone
    test.expect_firing("KvtiersCurvineWorkerDown", AT, [{"severity": "page"}] if fires else [])
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


# ------------------------------------------------------------------------------------- availability

SHORT = 240  # two hours of 30-second samples: long enough for every `for:` of these alerts
LATER = "2h"


def pods_up(test: RuleTest, component: str, endpoint: str, count: int) -> None:
    for i in range(count):
        test.add("up", gauge(1, SHORT), component=component, endpoint=endpoint, pod=f"{component}-{i}")


@pytest.mark.parametrize("engines, routers", [(0, 1), (1, 1), (2, 0), (2, 1)])
def test_engine_and_router_down_count_against_what_the_endpoint_deploys(tmp_path, engines, routers):
    """An endpoint whose pods are all gone has no series at all: the alert still fires, with the same labels."""
    env = ENVIRONMENTS["prod"]
    endpoint = next(e for e in env.serving.endpoints if e.name == "llama31-70b")
    assert (endpoint.replicas, endpoint.router_replicas) == (2, 1)
    test = RuleTest()
    pods_up(test, "engine", endpoint.name, engines)
    pods_up(test, "router", endpoint.name, routers)
    test.add("up", gauge(0, SHORT), component="engine", endpoint=endpoint.name, pod="engine-crashing")
    page = {"severity": "page", "endpoint": endpoint.name}
    # two replicas: one engine missing is what a rollout or drain allows; none at all pages
    test.expect_firing("KvtiersEngineDown", LATER, [page] if engines == 0 else [], endpoint=endpoint.name)
    warning = {"severity": "warning", "endpoint": endpoint.name}
    test.expect_firing("KvtiersEngineDegraded", LATER, [warning] if engines < 2 else [], endpoint=endpoint.name)
    test.expect_firing("KvtiersRouterDown", LATER, [page] if routers < 1 else [], endpoint=endpoint.name)
    test.expect(
        rounded(f'{r.ENGINES_UP}{{endpoint="{endpoint.name}"}}'), LATER, [({"endpoint": endpoint.name}, engines)]
    )
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


def test_an_operator_endpoint_has_an_engine_alert_and_no_router_alert(tmp_path):
    """The Inference Operator runs its own router, which kvtiers does not scrape."""
    env = ENVIRONMENTS["prod"]
    test = RuleTest()
    test.expect_firing(
        "KvtiersEngineDown", LATER, [{"severity": "page", "endpoint": e.name} for e in env.serving.endpoints]
    )
    test.expect_firing(
        "KvtiersRouterDown",
        LATER,
        [{"severity": "page", "endpoint": e.name} for e in env.serving.endpoints if e.serving == "self_managed"],
    )
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


@pytest.mark.parametrize("registered, router_series, fires", [(16, True, False), (8, True, True), (0, False, True)])
def test_kvaware_alert_fires_when_registered_workers_fall_below_the_engines(tmp_path, registered, router_series, fires):
    """Two engines of tensor parallelism 8 register 16 LMCache workers with the router's controller; fewer (or a
    router without the series) means kvaware routes those engines' prefixes blind."""
    env = ENVIRONMENTS["prod"]
    name = "llama31-70b"
    test = RuleTest()
    pods_up(test, "engine", name, 2)
    pods_up(test, "router", name, 1)
    if router_series:
        test.add(
            m.KVAWARE_REGISTERED_WORKERS.name,
            gauge(registered, SHORT),
            component="router",
            endpoint=name,
            role="controller",
        )
    test.expect_firing(
        "KvtiersKvawareEnginesUnregistered", LATER, [{"severity": "warning", "endpoint": name}] if fires else []
    )
    if router_series:
        test.expect(rounded(f'{r.KVAWARE_REGISTERED}{{endpoint="{name}"}}'), LATER, [({"endpoint": name}, registered)])
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


@pytest.mark.parametrize(
    "janitor_up, last_success_ago, used, fires",
    [
        (True, 300, 0.80, set()),
        (False, None, 0.80, {"KvtiersL2JanitorDown"}),
        (True, 4000, 0.80, {"KvtiersL2JanitorFailing"}),
        (True, None, 0.80, {"KvtiersL2JanitorFailing"}),  # never succeeded since it started
        (True, 300, 0.90, {"KvtiersL2AboveHighWatermark"}),
    ],
)
def test_janitor_alerts_fire_when_it_is_gone_failing_or_the_l2_stays_above_the_high_watermark(
    tmp_path, janitor_up, last_success_ago, used, fires
):
    env = ENVIRONMENTS["prod"]
    assert env.curvine.eviction.high_watermark == 0.85 and env.curvine.eviction.janitor_interval_seconds == 600
    test = RuleTest()
    janitor = {"component": "l2-janitor", "pod": "curvine-l2-janitor-0"}
    if janitor_up:
        test.add("up", gauge(1, SHORT), **janitor)
        # the gauge as the janitor serves it: the Unix time of its last good run, 0 before the first
        success = 0 if last_success_ago is None else 7200 - last_success_ago
        test.add(m.JANITOR_LAST_SUCCESS.name, gauge(success, SHORT), **janitor)
    master = {"component": "curvine-master", "pod": "curvine-master-0"}
    test.add(m.CURVINE_FS_USED.name, gauge(used * 1000, SHORT), **master)
    test.add(m.CURVINE_CAPACITY.name, gauge(1000, SHORT), **master)
    for alert in ("KvtiersL2JanitorDown", "KvtiersL2JanitorFailing", "KvtiersL2AboveHighWatermark"):
        test.expect_firing(alert, LATER, [{"severity": "warning"}] if alert in fires else [])
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


def test_a_rollout_of_a_large_model_neither_pages_nor_warns_but_a_lasting_shortfall_warns(tmp_path):
    """llama31-70b, two replicas, startup budget 1,800 s: the old pod stops at 40 min, the new one is scraped as down
    while it loads (vLLM serves /metrics only after loading) for 25 min, then is up. One engine short for as long
    as the startup budget (and a margin) allows is a rollout, not an outage."""
    env = ENVIRONMENTS["prod"]
    name = "llama31-70b"
    endpoint = next(e for e in env.serving.endpoints if e.name == name)
    assert endpoint.replicas == 2 and endpoint.startup_timeout_seconds == 1800
    test = RuleTest()
    engine = {"component": "engine", "endpoint": name}
    test.add("up", gauge(1, SHORT), pod="engine-a", **engine)
    test.add("up", "1x80", pod="engine-b-old", **engine)
    test.add("up", "_x80 0x50 1x109", pod="engine-b-new", **engine)
    pods_up(test, "router", name, 1)
    for at in ("60m", LATER):
        test.expect_firing("KvtiersEngineDown", at, [], endpoint=name)
        test.expect_firing("KvtiersEngineDegraded", at, [], endpoint=name)
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


@pytest.mark.parametrize("collector", [False, True])
def test_a_broken_collector_is_one_alert_and_the_watchdog_always_fires(tmp_path, collector):
    """No ``up`` series at all: the collector (or its path to the workspace) is broken, not every target; the
    per-target alerts that fire meanwhile are inhibited by the alert manager (test_alertmanager_inhibits_...)."""
    env = ENVIRONMENTS["prod"]
    test = RuleTest()
    if collector:
        test.add("up", gauge(0, SHORT), component="engine", endpoint="llama31-70b", pod="engine-a")
    test.expect_firing("KvtiersMetricsCollectorDown", LATER, [] if collector else [{"severity": "page"}])
    test.expect_firing("KvtiersWatchdog", LATER, [{"severity": "none"}])
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


def test_alertmanager_inhibits_the_per_target_alerts_while_the_collector_is_down_and_routes_the_watchdog():
    import yaml

    from kvtiers.observability.alertmanager import alertmanager_definition

    outer = yaml.safe_load(alertmanager_definition("arn:aws:sns:us-east-1:111111111111:t", "us-east-1", "prod"))
    config = yaml.safe_load(outer["alertmanager_config"])
    (inhibit,) = config["inhibit_rules"]
    assert inhibit["source_matchers"] == ['alertname="KvtiersMetricsCollectorDown"']
    (target,) = inhibit["target_matchers"]
    inhibited = target.split("=~", 1)[1].strip('"')
    import re

    rules = {rule["alert"] for rule in all_rules(ENVIRONMENTS["prod"]) if "alert" in rule}
    needs_series = {
        "KvtiersEngineDown",
        "KvtiersEngineDegraded",
        "KvtiersRouterDown",
        "KvtiersCurvineMasterDown",
        "KvtiersCurvineWorkerDown",
        "KvtiersCurvineNoLeader",
        "KvtiersL2JanitorDown",
        "KvtiersL2JanitorFailing",
        "KvtiersKvawareEnginesUnregistered",
    }
    assert needs_series <= rules
    assert {alert for alert in rules if re.fullmatch(inhibited, alert)} == needs_series
    (watchdog,) = [route for route in config["route"]["routes"] if 'alertname="KvtiersWatchdog"' in route["matchers"]]
    receiver = next(rc for rc in config["receivers"] if rc["name"] == watchdog["receiver"])
    assert receiver["sns_configs"][0]["attributes"]["watchdog"] == "true"
    assert watchdog["repeat_interval"] == "5m"


@pytest.mark.parametrize("live, fires", [(None, True), (0, True), (2, True), (3, False)])
def test_masters_up_without_a_leader_that_sees_every_worker_alert(tmp_path, live, fires):
    """Every master answers /metrics but none is the leader (a standby reports worker_num{tag="live"} 0), or the
    leader misses workers: Curvine v0.4.1's master_metrics.rs sets the gauge from its own worker map."""
    env = ENVIRONMENTS["prod"]
    assert model.sizing(env).curvine_workers == 3
    test = RuleTest()
    for i in range(env.curvine.master.replicas):
        master = {"component": "curvine-master", "pod": f"curvine-master-{i}"}
        test.add("up", gauge(1, SHORT), **master)
        if live is not None:
            test.add(m.CURVINE_WORKER_NUM.name, gauge(live if i == 0 else 0, SHORT), tag="live", **master)
            test.add(m.CURVINE_WORKER_NUM.name, gauge(0, SHORT), tag="lost", **master)
    test.expect_firing("KvtiersCurvineNoLeader", LATER, [{"severity": "warning"}] if fires else [])
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


@pytest.mark.parametrize(
    "checked, skipped, delete_failures, fires",
    [
        ("not_needed", "workers_missing", 0, set()),
        (None, "workers_missing", 0, {"KvtiersL2JanitorLostCheckSkipped"}),
        (None, "no_leader", 0, {"KvtiersL2JanitorLostCheckSkipped"}),
        ("done", None, 2, {"KvtiersL2JanitorDeleteFailures"}),
    ],
)
def test_janitor_alerts_fire_on_skipped_lost_checks_and_failed_deletions(
    tmp_path, checked, skipped, delete_failures, fires
):
    env = ENVIRONMENTS["prod"]
    test = RuleTest()
    janitor = {"component": "l2-janitor", "pod": "curvine-l2-janitor-0"}
    test.add("up", gauge(1, SHORT), **janitor)
    test.add(m.JANITOR_LAST_SUCCESS.name, gauge(7000, SHORT), **janitor)
    for outcome in ("done", "no_leader", "workers_missing", "not_needed"):
        per_run = 1 / 600 if outcome in (checked, skipped) else 0
        test.add(m.JANITOR_LOST_SCANS.name, counter(per_run, SHORT), outcome=outcome, **janitor)
    test.add(m.JANITOR_DELETE_FAILURES.name, counter(delete_failures / 600, SHORT), **janitor)
    for alert in ("KvtiersL2JanitorLostCheckSkipped", "KvtiersL2JanitorDeleteFailures", "KvtiersL2JanitorFailing"):
        test.expect_firing(alert, LATER, [{"severity": "warning"}] if alert in fires else [])
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


def test_refused_use_stamps_warn_per_endpoint(tmp_path):
    env = ENVIRONMENTS["prod"]
    test = RuleTest()
    labels = {"component": "engine", "endpoint": "qwen25-32b", "pod": "a"}
    test.add(m.L2_USE_STAMP_FAILURES.name, counter(1.0, SHORT), errno="EPERM", **labels)
    test.add(m.L2_USE_STAMP_FAILURES.name, counter(0.0, SHORT), errno="EPERM", **{**labels, "endpoint": "other"})
    test.expect_firing("KvtiersL2UseStampsFailing", LATER, [{"severity": "warning", "endpoint": "qwen25-32b"}])
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


def test_an_engine_whose_l2_shows_another_directory_warns_per_endpoint(tmp_path):
    env = ENVIRONMENTS["prod"]
    test = RuleTest()
    labels = {"component": "engine", "endpoint": "qwen25-32b", "pod": "a"}
    test.add(m.L2_WRONG_MOUNTS.name, counter(1.0, SHORT), **labels)
    test.add(m.L2_WRONG_MOUNTS.name, counter(0.0, SHORT), **{**labels, "endpoint": "other"})
    test.expect_firing("KvtiersL2WrongMount", LATER, [{"severity": "warning", "endpoint": "qwen25-32b"}])
    run_rule_tests(tmp_path, r.rule_groups(env), [test])


def test_the_alertmanager_definition_does_not_depend_on_how_long_the_topics_token_is():
    """At synth the topic ARN is a CDK token whose text length depends on how many tokens the process made before;
    the definition must be the same text around it, or synth output (and the golden templates) would shift with it."""
    from kvtiers.observability.alertmanager import alertmanager_definition

    short, long = "${Token[TOKEN.9]}", "${Token[TOKEN.123456]}"
    assert alertmanager_definition(short, "us-east-1", "prod").replace(short, long) == alertmanager_definition(
        long, "us-east-1", "prod"
    )
