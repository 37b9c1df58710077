"""Recording and alert rules, generated from the environment, as Prometheus rule-file YAML (what an Amazon Managed
Service for Prometheus rule groups namespace takes).

Per endpoint (label ``endpoint``), over 5 minutes:
- prompt tokens, and how they were served: from L0 (vLLM's GPU prefix cache hits), from LMCache (L1 + L2: vLLM's
  KV-connector hits), recomputed (the rest);
- L1 versus L2 (``derived="true"``): LMCache 0.3.11 counts bytes read from its remote backend (the Curvine L2) but
  has no per-backend hit counter, so L2 tokens are remote bytes read divided by the endpoint's KV bytes per token
  from the sizing, and L1 tokens are LMCache's hits minus those;
- time to first token p50/p95 (vLLM's histogram), engine queue length (requests waiting).
The L2 is one Curvine namespace shared by every endpoint: its use and what the janitor freed are cluster-wide series.
Per endpoint also the engine and router targets up and, for kvaware, the workers registered with the router's
controller, so that an endpoint whose pods are all gone shows (and alerts) as zero, not as no data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from kvtiers.config import model
from kvtiers.config.schema import Endpoint, Environment
from kvtiers.observability import metrics as m
from kvtiers.observability.scrape import (
    COMPONENT,
    CURVINE_MASTER,
    CURVINE_WORKER,
    ENDPOINT,
    ENGINE,
    L2_JANITOR,
    ROUTER,
)

WINDOW = "5m"
BY = f"sum by ({ENDPOINT})"
ENGINES = f'{{{COMPONENT}="{ENGINE}"}}'
MASTERS = f'{{{COMPONENT}="{CURVINE_MASTER}"}}'
JANITOR = f'{{{COMPONENT}="{L2_JANITOR}"}}'

# Recorded series: the names the dashboard and `kvtiers top` read.
PROMPT_TOKENS = "kvtiers:prompt_tokens:rate5m"
L0_TOKENS = "kvtiers:l0_hit_tokens:rate5m"
LMCACHE_TOKENS = "kvtiers:lmcache_hit_tokens:rate5m"
L1_TOKENS = "kvtiers:l1_hit_tokens:rate5m"
L2_TOKENS = "kvtiers:l2_hit_tokens:rate5m"
RECOMPUTED_TOKENS = "kvtiers:recomputed_tokens:rate5m"
L2_HIT_RATIO = "kvtiers:l2_hit_ratio:rate5m"
TTFT_P50 = "kvtiers:ttft_seconds:p50_5m"
TTFT_P95 = "kvtiers:ttft_seconds:p95_5m"
QUEUE = "kvtiers:queue_length"
L2_USED_BYTES = "kvtiers:l2_used_bytes"
L2_CAPACITY_BYTES = "kvtiers:l2_capacity_bytes"
L2_USED_RATIO = "kvtiers:l2_used_ratio"
L2_EVICTED_BYTES = "kvtiers:l2_evicted_bytes:rate5m"
"""Bytes per second the janitor deleted to keep the L2 below its high watermark."""
L2_LOST_BYTES = "kvtiers:l2_lost_bytes_removed:rate5m"
"""Bytes per second of files the janitor deleted because no live worker held a block of them."""
ENGINES_UP = "kvtiers:engines_up"
ROUTERS_UP = "kvtiers:routers_up"
KVAWARE_REGISTERED = "kvtiers:kvaware_registered_workers"
TIER_SERIES = {"L0": L0_TOKENS, "L1": L1_TOKENS, "L2": L2_TOKENS, "recomputed": RECOMPUTED_TOKENS}
"""Where each prompt token came from, in display order."""
DERIVED = {"derived": "true"}


@dataclass(frozen=True)
class Rule:
    expr: str
    record: str | None = None
    alert: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    for_: str | None = None
    annotations: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        out: dict = {"record": self.record} if self.record else {"alert": self.alert}
        out["expr"] = self.expr
        if self.for_:
            out["for"] = self.for_
        if self.labels:
            out["labels"] = dict(self.labels)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


def rate(metric: m.Metric | str, selector: str = ENGINES, window: str = WINDOW) -> str:
    name = metric if isinstance(metric, str) else metric.name
    return f"{BY} (rate({name}{selector}[{window}]))"


def tier_rules(env: Environment) -> list[Rule]:
    rules = [
        Rule(rate(m.PREFIX_CACHE_QUERIES), record=PROMPT_TOKENS),
        Rule(rate(m.PREFIX_CACHE_HITS), record=L0_TOKENS),
        Rule(rate(m.EXTERNAL_PREFIX_CACHE_HITS), record=LMCACHE_TOKENS),
        Rule(f"clamp_min({PROMPT_TOKENS} - {L0_TOKENS} - {LMCACHE_TOKENS}, 0)", record=RECOMPUTED_TOKENS),
    ]
    for endpoint, sized in model.sized_endpoints(env):
        if not sized.l2_enabled:
            continue
        selector = f'{{{COMPONENT}="{ENGINE}",{ENDPOINT}="{endpoint.name}"}}'
        rules.append(
            Rule(
                f"{rate(m.LMCACHE_REMOTE_READ_BYTES, selector)} / {sized.kv_bytes_per_token}",
                record=L2_TOKENS,
                labels=dict(DERIVED),
            )
        )
    rules += [
        Rule(
            f"clamp_min({LMCACHE_TOKENS} - ignoring(derived) {L2_TOKENS}, 0) or {LMCACHE_TOKENS}",
            record=L1_TOKENS,
            labels=dict(DERIVED),
        ),
        Rule(f"{L2_TOKENS} / ignoring(derived) ({PROMPT_TOKENS} > 0)", record=L2_HIT_RATIO, labels=dict(DERIVED)),
        Rule(
            f"histogram_quantile(0.5, sum by ({ENDPOINT}, le) (rate({m.TTFT.series('_bucket')}{ENGINES}[{WINDOW}])))",
            record=TTFT_P50,
        ),
        Rule(
            f"histogram_quantile(0.95, sum by ({ENDPOINT}, le) (rate({m.TTFT.series('_bucket')}{ENGINES}[{WINDOW}])))",
            record=TTFT_P95,
        ),
        Rule(f"{BY} ({m.REQUESTS_WAITING.name}{ENGINES})", record=QUEUE),
        Rule(f"{BY} ({m.UP.name}{ENGINES})", record=ENGINES_UP),
        Rule(f'{BY} ({m.UP.name}{{{COMPONENT}="{ROUTER}"}})', record=ROUTERS_UP),
        Rule(
            f'max by ({ENDPOINT}) ({m.KVAWARE_REGISTERED_WORKERS.name}{{{COMPONENT}="{ROUTER}"}})',
            record=KVAWARE_REGISTERED,
        ),
    ]
    return rules


def l2_rules() -> list[Rule]:
    # Every master reports the cluster's figures; the maximum is the leader's (followers may lag or report 0).
    return [
        Rule(f"max({m.CURVINE_FS_USED.name}{MASTERS})", record=L2_USED_BYTES),
        Rule(f"max({m.CURVINE_CAPACITY.name}{MASTERS})", record=L2_CAPACITY_BYTES),
        Rule(f"{L2_USED_BYTES} / ({L2_CAPACITY_BYTES} > 0)", record=L2_USED_RATIO),
        # What the janitor deleted (not Curvine's eviction counters: at v0.4.1 they count files never deleted).
        Rule(
            f'sum(rate({m.JANITOR_FREED_BYTES.name}{{{COMPONENT}="{L2_JANITOR}",reason="watermark"}}[{WINDOW}]))',
            record=L2_EVICTED_BYTES,
        ),
        Rule(
            f'sum(rate({m.JANITOR_FREED_BYTES.name}{{{COMPONENT}="{L2_JANITOR}",reason="lost"}}[{WINDOW}]))',
            record=L2_LOST_BYTES,
        ),
    ]


INHIBITED_WHILE_COLLECTOR_DOWN = (
    "KvtiersEngineDown",
    "KvtiersEngineDegraded",
    "KvtiersRouterDown",
    "KvtiersCurvineMasterDown",
    "KvtiersCurvineWorkerDown",
    "KvtiersCurvineNoLeader",
    "KvtiersL2JanitorDown",
    "KvtiersL2JanitorFailing",
    "KvtiersKvawareEnginesUnregistered",
)
"""Alerts that fire on missing series: with no ``up`` series at all the collector is broken, not every target, so the
alert manager inhibits these while ``KvtiersMetricsCollectorDown`` fires (``alertmanager.py``)."""
WATCHDOG = "KvtiersWatchdog"


def metrics_path_alerts() -> list[Rule]:
    """The metrics path itself: a collector that sends nothing, and a dead-man's switch for everything after it (the
    workspace's ruler, its alert manager, SNS): an alert that always fires, which an external check expects to hear
    every few minutes."""
    return [
        Rule(
            f"absent({m.UP.name})",
            alert="KvtiersMetricsCollectorDown",
            for_="5m",
            labels={"severity": "page"},
            annotations={
                "summary": "No target's scrape reaches the workspace (no up series at all)",
                "description": "The collector or its path to Amazon Managed Service for Prometheus is broken, not the "
                "targets: the per-target down alerts are inhibited meanwhile. docs/failure-modes.md, the metrics "
                "path broken.",
            },
        ),
        Rule(
            "vector(1)",
            alert=WATCHDOG,
            labels={"severity": "none"},
            annotations={
                "summary": "Always firing: the alerting path works",
                "description": "Routed on its own (SNS attribute watchdog=true) every 5 minutes to an external "
                "dead-man's switch, which must alert when it stops arriving.",
            },
        ),
    ]


def alert_rules(env: Environment) -> list[Rule]:
    obs = env.observability
    page = {"severity": "page"}
    rules = [
        *metrics_path_alerts(),
        Rule(
            f"{L2_USED_RATIO} > {obs.l2_nearly_full_ratio}",
            alert="KvtiersL2NearlyFull",
            for_="15m",
            labels={"severity": "warning"},
            annotations={
                "summary": "The Curvine L2 is {{ $value | humanizePercentage }} full",
                "description": f"Eviction (high watermark {env.curvine.eviction.high_watermark}) is not "
                "keeping up: raise curvine.worker.capacity_gb or lower curvine.eviction.janitor_interval_seconds.",
            },
        ),
        # Counted against what the environment deploys: a pod that is gone or Pending has no `up` series at all.
        Rule(
            _fewer_up(MASTERS, env.curvine.master.replicas),
            alert="KvtiersCurvineMasterDown",
            for_="5m",
            labels=dict(page),
            annotations={
                "summary": f"{{{{ $value }}}} of {env.curvine.master.replicas} Curvine master(s) answer /metrics",
                "description": "Without a master leader the L2 is unavailable: engines recompute what they cannot "
                "read, and the L2 guard stops a stalled L2 call after the LMCache timeout and skips the L2 for a "
                "while (KvtiersL2Stalled). docs/failure-modes.md, a master lost.",
            },
        ),
        Rule(
            _fewer_up(f'{{{COMPONENT}="{CURVINE_WORKER}"}}', model.sizing(env).curvine_workers),
            alert="KvtiersCurvineWorkerDown",
            for_="5m",
            labels=dict(page),
            annotations={
                "summary": f"{{{{ $value }}}} of {model.sizing(env).curvine_workers} Curvine worker(s) answer /metrics",
                "description": "A missing worker's node L2 blocks are unreadable; its writes go remote. "
                "docs/failure-modes.md, a Curvine worker lost.",
            },
        ),
        Rule(
            f'(max({m.CURVINE_WORKER_NUM.name}{{{COMPONENT}="{CURVINE_MASTER}",tag="live"}}) or vector(0)) '
            f"< {model.sizing(env).curvine_workers}",
            alert="KvtiersCurvineNoLeader",
            for_="5m",
            labels={"severity": "warning"},
            annotations={
                "summary": f"No Curvine master counts {model.sizing(env).curvine_workers} live workers "
                "(the leader's count: {{ $value }})",
                "description": "Either no master is the Raft leader (standbys report 0; the L2 is unavailable) or "
                "the leader misses workers. docs/failure-modes.md, every master lost; README, Raft recovery.",
            },
        ),
        *janitor_alerts(env),
    ]
    for endpoint, sized in model.sized_endpoints(env):
        rules += availability_alerts(endpoint, ranks=sized.gpus_per_replica)
    if any(sized.l2_enabled for _, sized in model.sized_endpoints(env)):
        rules += l2_guard_alerts()
    for endpoint, sized in model.sized_endpoints(env):
        name = endpoint.name
        rules.append(
            Rule(
                f'{TTFT_P95}{{{ENDPOINT}="{name}"}} > {endpoint.ttft_p95_alert_seconds:g}',
                alert="KvtiersTTFTHigh",
                for_="10m",
                labels={"severity": "warning", ENDPOINT: name},
                annotations={
                    "summary": f"{name}: TTFT p95 {{{{ $value }}}}s above {endpoint.ttft_p95_alert_seconds:g}s"
                },
            )
        )
        if sized.l2_enabled:
            selector = f'{{{COMPONENT}="{ENGINE}",{ENDPOINT}="{name}"}}'
            now = (
                f"({rate(m.LMCACHE_REMOTE_READ_BYTES, selector, '15m')} / "
                f"{rate(m.PREFIX_CACHE_QUERIES, selector, '15m')})"
            )
            before = (
                f"({rate(m.LMCACHE_REMOTE_READ_BYTES, selector, '6h')} / "
                f"{rate(m.PREFIX_CACHE_QUERIES, selector, '6h')})"
            )
            rules.append(
                Rule(
                    f"{now} < {obs.l2_hit_collapse_ratio} * {before} and {before} > 0",
                    alert="KvtiersL2HitRateCollapsed",
                    for_="15m",
                    labels={"severity": "warning", ENDPOINT: name, **DERIVED},
                    annotations={
                        "summary": f"{name}: L2 hit rate fell below {obs.l2_hit_collapse_ratio:g}x its 6-hour level",
                        "description": "Check the L2 mount (kvtiers verify), PYTHONHASHSEED and the "
                        "Curvine workers; derived from LMCache's remote bytes read per prompt token.",
                    },
                )
            )
    return rules


BROKEN_CHUNK_REASONS = ("unreadable", "truncated", "corrupt")
"""``kvtiers_l2_load_failures_total`` reasons for which the guard deleted the chunk file."""


def l2_guard_alerts() -> list[Rule]:
    """What the engines' L2 guard reports (kvtiers/k8s_charts/kvtiers_l2_guard.py): chunks it deleted because they
    could not be read, and an L2 that stalled. Both cost recomputes, never wrong output; both need a person when
    they persist."""
    broken = "|".join(BROKEN_CHUNK_REASONS)
    failures = f'{m.L2_LOAD_FAILURES.name}{{{COMPONENT}="{ENGINE}",reason=~"{broken}"}}'
    trips = f"{m.L2_BREAKER_TRIPS.name}{ENGINES}"
    return [
        Rule(
            f"{BY} (increase({failures}[15m])) > 0",
            alert="KvtiersL2UnreadableChunks",
            labels={"severity": "warning"},
            annotations={
                "summary": "{{ $labels.endpoint }}: {{ $value }} L2 chunk(s) could not be read in 15 minutes",
                "description": "The engines recomputed them and deleted the files (stored again on the next "
                "request). Expected once after a Curvine worker's node was replaced; if it persists, check the "
                "workers' disks and `kvtiers verify` (docs/runbooks.md, L2 read failures).",
            },
        ),
        Rule(
            f"{BY} (increase({m.L2_USE_STAMP_FAILURES.name}{ENGINES}[1h])) > 0",
            alert="KvtiersL2UseStampsFailing",
            labels={"severity": "warning"},
            annotations={
                "summary": "{{ $labels.endpoint }}: {{ $value }} use stamps refused by the L2 mount in an hour",
                "description": "The janitor then evicts those chunks by their write time (hot shared prefixes "
                "first). EPERM: the engine's user may not set times on Curvine's FUSE (root or the owner only).",
            },
        ),
        Rule(
            f"{BY} (increase({m.L2_WRONG_MOUNTS.name}{ENGINES}[10m])) > 0",
            alert="KvtiersL2WrongMount",
            labels={"severity": "warning"},
            annotations={
                "summary": "{{ $labels.endpoint }}: an engine's L2 directory shows another path than its own",
                "description": "After a Curvine FUSE restart a subPath mount can show the claim's root; the engine "
                "skips the L2 (recompute, never another endpoint's chunks) until it is right. Delete the engine pod "
                "so the kubelet mounts it again (a restarted container alone can loop on 'failed to prepare "
                "subPath', kubernetes#139123).",
            },
        ),
        Rule(
            f"{BY} (increase({trips}[10m])) > 0",
            alert="KvtiersL2Stalled",
            labels={"severity": "warning"},
            annotations={
                "summary": "{{ $labels.endpoint }}: an L2 call stalled past the LMCache timeout",
                "description": "The engines skip the L2 for 30 s after each stall (recompute instead). Check the "
                "Curvine CSI node plugin (FUSE) and the masters on the engines' nodes.",
            },
        ),
    ]


def janitor_alerts(env: Environment) -> list[Rule]:
    """The L2 janitor is the L2's only eviction and its only cleanup after a lost worker: its absence, its failing
    runs and an L2 that stays above the high watermark each need a person."""
    interval = env.curvine.eviction.janitor_interval_seconds
    high = env.curvine.eviction.high_watermark
    scans = m.JANITOR_LOST_SCANS.name
    return [
        Rule(
            _fewer_up(JANITOR, 1),
            alert="KvtiersL2JanitorDown",
            for_="10m",
            labels={"severity": "warning"},
            annotations={
                "summary": "The Curvine L2 janitor answers no scrape",
                "description": "Nothing evicts the L2 or removes a lost worker's files while it is gone: "
                "kubectl -n <serving ns> describe deploy/curvine-l2-janitor (a HyperPod node with the L2 mount).",
            },
        ),
        Rule(
            f"time() - max({m.JANITOR_LAST_SUCCESS.name}{JANITOR}) > {3 * interval}",
            alert="KvtiersL2JanitorFailing",
            for_="10m",
            labels={"severity": "warning"},
            annotations={
                "summary": f"No successful L2 janitor run for {{{{ $value | humanizeDuration }}}} (interval {interval}s)",
                "description": "Its log says why (kubectl -n <serving ns> logs deploy/curvine-l2-janitor): an "
                "unreadable or hung L2 mount (Curvine FUSE restart runbook).",
            },
        ),
        Rule(
            f'sum(increase({scans}{{{COMPONENT}="{L2_JANITOR}",outcome=~"no_leader|workers_missing"}}[1h])) > 0 '
            f'unless sum(increase({scans}{{{COMPONENT}="{L2_JANITOR}",outcome=~"done|not_needed"}}[1h])) > 0',
            alert="KvtiersL2JanitorLostCheckSkipped",
            labels={"severity": "warning"},
            annotations={
                "summary": "The L2 janitor has not checked for a lost worker's files for an hour",
                "description": "No master says it is the leader, or the leader counts fewer live workers than "
                "deployed (a node not replaced?): unreadable files stay until the check runs again. Its log says "
                "which; see KvtiersCurvineNoLeader and KvtiersCurvineWorkerDown.",
            },
        ),
        Rule(
            f"sum(increase({m.JANITOR_DELETE_FAILURES.name}{JANITOR}[30m])) > 0",
            alert="KvtiersL2JanitorDeleteFailures",
            labels={"severity": "warning"},
            annotations={
                "summary": "The L2 janitor could not delete {{ $value }} chunk file(s) in 30 minutes",
                "description": "Eviction and lost-file cleanup fall behind: check its log and the L2 mount "
                "(the janitor runs as root; a permission error means the mount's check_permission settings changed).",
            },
        ),
        Rule(
            f"{L2_USED_RATIO} > {high}",
            alert="KvtiersL2AboveHighWatermark",
            for_="30m",
            labels={"severity": "warning"},
            annotations={
                "summary": f"The Curvine L2 has stayed above its high watermark {high} for 30 minutes",
                "description": "The janitor should bring it to the low watermark every run: check "
                "KvtiersL2JanitorFailing and its log, then the L2 capacity (curvine.worker.capacity_gb).",
            },
        ),
    ]


def availability_alerts(endpoint: Endpoint, *, ranks: int) -> list[Rule]:
    """Per endpoint: its engines (and, self-managed, its router) answer scrapes as many times as the environment
    deploys them; a kvaware router's controller knows every rank of every engine that is up. Each is true of an
    endpoint that has no pods left at all, which no latency or hit-rate alert can see."""
    name = endpoint.name
    labels = {"severity": "page", ENDPOINT: name}
    engines = f'{{{COMPONENT}="{ENGINE}",{ENDPOINT}="{name}"}}'
    # A rollout or drain takes one engine at a time, and a loading engine serves no /metrics for up to its startup
    # budget: one short pages only when the endpoint has no other engine; a shortfall that outlasts the startup
    # budget (and a margin for scheduling and the old pod's drain) warns.
    paging_below = max(endpoint.replicas - 1, 1)
    rules = [
        Rule(
            _fewer_up(engines, paging_below),
            alert="KvtiersEngineDown",
            for_="5m",
            labels=dict(labels),
            annotations={
                "summary": f"{name}: {{{{ $value }}}} of {endpoint.replicas} engine(s) answer /metrics",
                "description": "Fewer than a rollout or drain leaves; with none, every request to the endpoint fails. "
                "docs/failure-modes.md, an engine crash or out-of-memory.",
            },
        ),
        Rule(
            _fewer_up(engines, endpoint.replicas),
            alert="KvtiersEngineDegraded",
            for_=f"{endpoint.startup_timeout_seconds + STARTUP_MARGIN_SECONDS}s",
            labels={"severity": "warning", ENDPOINT: name},
            annotations={
                "summary": f"{name}: {{{{ $value }}}} of {endpoint.replicas} engine(s) answer /metrics, for longer "
                "than an engine takes to start",
                "description": "Capacity is short (higher latency, no failures while one serves): a pod Pending, "
                "crash-looping or stuck loading. kubectl -n <serving ns> get pods; docs/failure-modes.md.",
            },
        ),
    ]
    if endpoint.serving != "self_managed":
        return rules  # the Inference Operator runs its own router, which kvtiers does not scrape
    router = f'{{{COMPONENT}="{ROUTER}",{ENDPOINT}="{name}"}}'
    rules.append(
        Rule(
            _fewer_up(router, endpoint.router_replicas),
            alert="KvtiersRouterDown",
            for_="5m",
            labels=dict(labels),
            annotations={
                "summary": f"{name}: {{{{ $value }}}} of {endpoint.router_replicas} router(s) answer /metrics",
                "description": "The router is the endpoint's entry: with none, clients get connection errors. "
                "docs/failure-modes.md, a router lost.",
            },
        )
    )
    if endpoint.routing == "kvaware":
        registered = f"{m.KVAWARE_REGISTERED_WORKERS.name}{router}"
        rules.append(
            Rule(
                f"(max({registered}) or vector(0)) < sum({m.UP.name}{engines}) * {ranks}",
                alert="KvtiersKvawareEnginesUnregistered",
                for_="5m",
                labels={"severity": "warning", ENDPOINT: name},
                annotations={
                    "summary": f"{name}: {{{{ $value }}}} LMCache workers registered with the kvaware router, "
                    f"fewer than the engines up x {ranks} ranks",
                    "description": "kvaware then routes those engines' cached prefixes by load (misses). Check the "
                    "engines' LMCache controller settings and the router's log; kvtiers verify checks it.",
                },
            )
        )
    return rules


STARTUP_MARGIN_SECONDS = 300
"""Added to an endpoint's startup budget before a missing engine warns: scheduling, image start, the old pod's drain."""


def rule_groups(env: Environment) -> dict:
    interval = f"{env.observability.scrape_interval_seconds}s"
    return {
        "groups": [
            {"name": "kvtiers-tiers", "interval": interval, "rules": [r.to_dict() for r in tier_rules(env)]},
            {"name": "kvtiers-l2", "interval": interval, "rules": [r.to_dict() for r in l2_rules()]},
            {"name": "kvtiers-alerts", "interval": interval, "rules": [r.to_dict() for r in alert_rules(env)]},
        ]
    }


def rules_yaml(env: Environment) -> str:
    return yaml.safe_dump(rule_groups(env), sort_keys=False, width=1000)


def _fewer_up(selector: str, expected: int) -> str:
    """Fewer than ``expected`` targets up, including none at all: the count is 0 when no series exists, so the alert
    has the same labels (its rule's) whether some or all targets are gone."""
    return f"(sum({m.UP.name}{selector}) or vector(0)) < {expected}"
