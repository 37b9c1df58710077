"""Recording and alert rules: every expression parses (promql-parser), every metric name is in the catalogue with its
upstream source, and the rate/ratio forms give the expected numbers on synthetic series (tests/promql_eval.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import promql_parser as pp
import pytest

from kvtiers.config import load_environment
from kvtiers.config.versions import DEFAULT_ENGINE_IMAGE, engine_release
from kvtiers.observability import metrics as m
from kvtiers.observability import rules as r
from tests.conftest import CONFIG_DIR, ROOT
from tests.promql_eval import World, run_rules, value
from tests.upstream import ENGINE, vllm_source

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
        m.CURVINE_EVICTION_BYTES.name,
        "up",
    } <= seen


def test_derived_splits_are_labelled_and_alerts_cover_what_an_operator_acts_on():
    rules = all_rules(ENVIRONMENTS["prod"])
    derived = {rule["record"] for rule in rules if rule.get("labels", {}).get("derived") == "true" and "record" in rule}
    assert derived == {r.L1_TOKENS, r.L2_TOKENS, r.L2_HIT_RATIO}
    alerts = [rule for rule in rules if "alert" in rule]
    assert {a["alert"] for a in alerts} == {
        "KvtiersL2NearlyFull",
        "KvtiersCurvineMasterDown",
        "KvtiersCurvineWorkerDown",
        "KvtiersTTFTHigh",
        "KvtiersL2HitRateCollapsed",
        "KvtiersL2UnreadableChunks",
        "KvtiersL2Stalled",
    }
    ttft = {a["labels"]["endpoint"] for a in alerts if a["alert"] == "KvtiersTTFTHigh"}
    assert ttft == {e.name for e in ENVIRONMENTS["prod"].serving.endpoints}
    collapse = [a for a in alerts if a["alert"] == "KvtiersL2HitRateCollapsed"]
    assert collapse and all(a["labels"]["derived"] == "true" for a in collapse)


# ------------------------------------------------------------------------------------- upstream metric names

LMCACHE_SITE = ROOT / f".venv-lmcache-{engine_release(DEFAULT_ENGINE_IMAGE).lmcache}" / "lib"


def upstream_text(source: str) -> str | None:
    """The source file a catalogue entry names, where it is on this machine: LMCache from the version the contract
    tests install; the others from bare git mirrors under ``$KVTIERS_UPSTREAM_MIRRORS`` (``<owner>+<repo>/repo``) or
    the engine image's vLLM wheel that ``make test`` downloads. ``None``: not available offline."""
    repo_tag, path = source.split(":", 1)
    if repo_tag == "kvtiers":
        return (ROOT / path).read_text()
    repo, tag = repo_tag.split("@")
    if repo == "LMCache/LMCache":
        found = list(LMCACHE_SITE.glob(f"python3*/site-packages/{path}"))
        return found[0].read_text() if found else None
    if repo == "vllm-project/vllm":
        assert tag == f"v{ENGINE.vllm}", f"{source} is not the engine image's vLLM {ENGINE.vllm}"
        return vllm_source(path)
    mirrors = os.environ.get("KVTIERS_UPSTREAM_MIRRORS")
    git_dir = Path(mirrors or "/nonexistent") / repo.replace("/", "+") / "repo"
    if git_dir.is_dir():
        shown = subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{tag}:{path}"], capture_output=True, text=True
        )
        return shown.stdout if shown.returncode == 0 else None
    return None


@pytest.mark.parametrize(
    "metric",
    [c for c in m.CATALOGUE if c.source != m.PROMETHEUS_SOURCE],
    ids=lambda c: f"{c.registered}@{c.source.split(':')[-1]}",
)
def test_each_catalogued_metric_is_registered_in_its_pinned_source(metric):
    text = upstream_text(metric.source)
    if text is None:
        if metric.source == m.LMCACHE_SOURCE:
            pytest.fail(f"LMCache is installed by `make test`; {metric.source} not found under {LMCACHE_SITE}")
        pytest.skip(f"{metric.source} not available offline (set KVTIERS_UPSTREAM_MIRRORS)")
    assert f'"{metric.registered}"' in text, f"{metric.registered} is not registered in {metric.source}"


# ------------------------------------------------------------------------------------- evaluation

T = 7 * 3600.0  # long enough for the 6-hour windows


def counter(per_second: float, until: float | None = None, after: float = 0.0):
    """A counter growing at ``per_second``, or at ``after`` from time ``until`` on."""

    def value(t):
        if until is None or t <= until:
            return per_second * t
        return per_second * until + after * (t - until)

    return value


def engine_world(
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
):
    sized = env.sizing.endpoint(endpoint)
    world = World()
    labels = {"component": "engine", "endpoint": endpoint}
    for pod in ("a", "b"):  # two engine pods, each half the traffic
        world.add(m.PREFIX_CACHE_QUERIES.name, counter(queries / 2), pod=pod, **labels)
        world.add(m.PREFIX_CACHE_HITS.name, counter(l0 / 2), pod=pod, **labels)
        world.add(m.EXTERNAL_PREFIX_CACHE_HITS.name, counter(lmcache / 2), pod=pod, **labels)
        read = l2_tokens * sized.kv_bytes_per_token / 2
        world.add(
            m.LMCACHE_REMOTE_READ_BYTES.name,
            counter(read, T - 1800, l2_after * sized.kv_bytes_per_token / 2) if l2_after is not None else counter(read),
            pod=pod,
            **labels,
        )
        world.add(m.REQUESTS_WAITING.name, 3.0, pod=pod, **labels)
    # the router reuses vLLM's gauge name: it must not count
    world.add(m.REQUESTS_WAITING.name, 50.0, component="router", endpoint=endpoint)
    for le, rate in (("0.25", 10.0), ("0.5", 50.0), ("1", 90.0), ("+Inf", 100.0)):
        world.add(m.TTFT.series("_bucket"), counter(rate), le=le, **labels)
    for pod, factor in (("curvine-master-0", 1.0), ("curvine-master-1", 0.0)):
        world.add(m.CURVINE_FS_USED.name, used * factor, component="curvine-master", pod=pod)
        world.add(m.CURVINE_CAPACITY.name, capacity * factor, component="curvine-master", pod=pod)
        world.add(m.CURVINE_EVICTION_BYTES.name, counter(4096.0 * factor), component="curvine-master", pod=pod)
    for i in range(env.curvine.master.replicas):
        world.add("up", 1.0, component="curvine-master", pod=f"curvine-master-{i}")
    world.add("up", 0.0, component="curvine-worker", pod="curvine-worker-x")
    return world


def test_tier_split_per_endpoint():
    env = ENVIRONMENTS["prod"]
    world = engine_world(env, "qwen25-32b")
    alerts = run_rules(world, r.rule_groups(env), T)
    e = {"endpoint": "qwen25-32b"}
    assert value(world, r.PROMPT_TOKENS, **e) == pytest.approx(1000)
    assert value(world, r.L0_TOKENS, **e) == pytest.approx(300)
    assert value(world, r.LMCACHE_TOKENS, **e) == pytest.approx(500)
    assert value(world, r.L2_TOKENS, **e, derived="true") == pytest.approx(200)
    assert value(world, r.L1_TOKENS, **e, derived="true") == pytest.approx(300)
    assert value(world, r.RECOMPUTED_TOKENS, **e) == pytest.approx(200)
    assert value(world, r.L2_HIT_RATIO, **e) == pytest.approx(0.2)
    assert value(world, r.QUEUE, **e) == pytest.approx(6)  # the router's 50 is not an engine's queue
    assert value(world, r.TTFT_P50, **e) == pytest.approx(0.5)
    assert value(world, r.TTFT_P95, **e) == pytest.approx(1.0 + 0.0)  # rank 95 lies in the (1, +Inf] bucket
    assert value(world, r.L2_USED_RATIO) == pytest.approx(0.9)
    assert value(world, r.L2_EVICTED_BYTES) == pytest.approx(4096)
    assert "KvtiersL2NearlyFull" not in {k for k, v in alerts.items() if v}
    assert alerts["KvtiersCurvineWorkerDown"] and not alerts["KvtiersCurvineMasterDown"]
    assert not alerts["KvtiersL2HitRateCollapsed"]


def test_recomputed_never_goes_negative_and_l1_is_all_of_lmcache_without_l2():
    env = ENVIRONMENTS["dev"]
    endpoint = env.serving.endpoints[0].name
    world = engine_world(env, endpoint, queries=100.0, l0=80.0, lmcache=40.0, l2_tokens=0.0)
    run_rules(world, r.rule_groups(env), T)
    assert value(world, r.RECOMPUTED_TOKENS, endpoint=endpoint) == 0
    assert value(world, r.L1_TOKENS, endpoint=endpoint) == pytest.approx(40)


def test_alerts_fire_on_a_full_l2_a_collapsed_hit_rate_and_slow_ttft():
    env = ENVIRONMENTS["prod"]
    world = engine_world(env, "qwen25-32b", used=980.0, l2_tokens=200.0, l2_after=10.0)
    alerts = run_rules(world, r.rule_groups(env), T)
    assert alerts["KvtiersL2NearlyFull"]
    collapsed = alerts["KvtiersL2HitRateCollapsed"]
    assert {dict(k)["endpoint"] for k in collapsed} == {"qwen25-32b"}
    # TTFT p95 of 1 s: above a threshold of 0.5 s, not above the default 2 s
    slow = env.model_copy(
        update={
            "serving": env.serving.model_copy(
                update={
                    "endpoints": tuple(
                        e.model_copy(update={"ttft_p95_alert_seconds": 0.5}) for e in env.serving.endpoints
                    )
                }
            )
        }
    )
    assert not any(dict(k).get("endpoint") == "qwen25-32b" for k in alerts["KvtiersTTFTHigh"])
    world = engine_world(env, "qwen25-32b")
    assert any(dict(k)["endpoint"] == "qwen25-32b" for k in run_rules(world, r.rule_groups(slow), T)["KvtiersTTFTHigh"])


def test_the_l2_guard_alerts_fire_on_deleted_chunks_and_stalls_per_endpoint():
    env = ENVIRONMENTS["prod"]
    world = engine_world(env, "qwen25-32b")
    labels = {"component": "engine", "endpoint": "qwen25-32b"}
    # 2 unreadable chunks per hour from one pod, a stall every 10 minutes from the other; "intact" (no L1 buffer)
    # and "missing" (the janitor was first) are no alert
    world.add(m.L2_LOAD_FAILURES.name, counter(2 / 3600), pod="a", reason="unreadable", **labels)
    world.add(m.L2_LOAD_FAILURES.name, counter(50 / 3600), pod="a", reason="intact", **labels)
    world.add(m.L2_LOAD_FAILURES.name, counter(50 / 3600), pod="b", reason="missing", **labels)
    world.add(m.L2_BREAKER_TRIPS.name, counter(1 / 600), pod="b", **labels)
    firing = run_rules(world, r.rule_groups(env), T)
    unreadable = firing["KvtiersL2UnreadableChunks"]
    assert [dict(k)["endpoint"] for k in unreadable] == ["qwen25-32b"]
    assert list(unreadable.values()) == [pytest.approx(0.5)]  # chunks in 15 minutes
    assert [dict(k)["endpoint"] for k in firing["KvtiersL2Stalled"]] == ["qwen25-32b"]
    quiet = engine_world(env, "qwen25-32b")
    quiet.add(m.L2_LOAD_FAILURES.name, counter(50 / 3600), pod="a", reason="intact", **labels)
    assert not run_rules(quiet, r.rule_groups(env), T).get("KvtiersL2UnreadableChunks")


@pytest.mark.parametrize("workers_up, fires", [(None, True), (1, True), ("all", False)])
def test_the_worker_alert_counts_against_the_deployed_workers(workers_up, fires):
    """A worker pod that is gone has no `up` series: the alert compares with the environment's worker count."""
    env = ENVIRONMENTS["prod"]
    world = engine_world(env, "qwen25-32b")
    world.series = [s for s in world.series if s.labels.get("component") != "curvine-worker"]
    count = {None: 0, 1: 1, "all": env.sizing.curvine_workers}[workers_up]
    for i in range(count):
        world.add("up", 1.0, component="curvine-worker", pod=f"curvine-worker-{i}")
    alerts = run_rules(world, r.rule_groups(env), T)
    assert bool(alerts["KvtiersCurvineWorkerDown"]) is fires
