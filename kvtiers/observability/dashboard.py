"""The Grafana dashboard for one environment, generated from the recorded series (rules.py): one row per endpoint
with where its prompt tokens came from (L0, L1, L2, recomputed; L1/L2 derived), its TTFT p50/p95 against its alert
threshold, its queue, and its engines and routers up (with a kvaware router, the LMCache workers registered with it);
one row for the shared Curvine L2 (used, capacity, and what the janitor freed)."""

from __future__ import annotations

from kvtiers.config import model
from kvtiers.config.schema import Environment
from kvtiers.observability import rules as r
from kvtiers.observability.scrape import ENDPOINT

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24


def _panel(
    panel_id: int,
    title: str,
    targets: list[tuple[str, str]],
    x: int,
    y: int,
    w: int,
    unit: str,
    kind: str = "timeseries",
    stacked: bool = False,
    threshold: float | None = None,
) -> dict:
    defaults: dict = {"unit": unit}
    if threshold is not None:
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": "green", "value": None}, {"color": "red", "value": threshold}],
        }
    custom = {"stacking": {"mode": "normal"}, "fillOpacity": 60} if stacked else {}
    if threshold is not None and kind == "timeseries":
        custom["thresholdsStyle"] = {"mode": "line"}
    if custom:
        defaults["custom"] = custom
    return {
        "id": panel_id,
        "type": kind,
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": 8},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "datasource": DATASOURCE}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _row(panel_id: int, title: str, y: int) -> dict:
    return {
        "id": panel_id,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": WIDTH, "h": 1},
        "panels": [],
    }


def dashboard(env: Environment) -> dict:
    panels: list[dict] = []
    y, next_id = 0, 1
    for endpoint, sized in model.sized_endpoints(env):
        sel = f'{{{ENDPOINT}="{endpoint.name}"}}'
        l2 = "L2 on" if sized.l2_enabled else "L2 off"
        panels.append(_row(next_id, f"{endpoint.name} ({endpoint.serving}, {l2})", y))
        tiers = [
            (f"{series}{sel}", tier + (" (derived)" if tier in ("L1", "L2") else ""))
            for tier, series in r.TIER_SERIES.items()
        ]
        panels.append(_panel(next_id + 1, "Prompt tokens/s by tier", tiers, 0, y + 1, 8, "short", stacked=True))
        panels.append(
            _panel(
                next_id + 2,
                "Time to first token",
                [(f"{r.TTFT_P50}{sel}", "p50"), (f"{r.TTFT_P95}{sel}", "p95")],
                8,
                y + 1,
                7,
                "s",
                threshold=endpoint.ttft_p95_alert_seconds,
            )
        )
        panels.append(
            _panel(next_id + 3, "Queue (requests waiting)", [(f"{r.QUEUE}{sel}", "waiting")], 15, y + 1, 4, "short")
        )
        up = [(f"{r.ENGINES_UP}{sel}", "engines")]
        if endpoint.serving == "self_managed":
            up.append((f"{r.ROUTERS_UP}{sel}", "routers"))
            if endpoint.routing == "kvaware":
                up.append((f"{r.KVAWARE_REGISTERED}{sel}", "LMCache workers registered"))
        panels.append(_panel(next_id + 4, "Pods up", up, 19, y + 1, 5, "short"))
        y, next_id = y + 9, next_id + 5
    panels.append(_row(next_id, "Curvine L2 (shared by every endpoint)", y))
    panels.append(
        _panel(
            next_id + 1,
            "L2 used",
            [(r.L2_USED_RATIO, "used")],
            0,
            y + 1,
            8,
            "percentunit",
            kind="gauge",
            threshold=env.observability.l2_nearly_full_ratio,
        )
    )
    panels.append(
        _panel(
            next_id + 2,
            "L2 bytes",
            [(r.L2_USED_BYTES, "used"), (r.L2_CAPACITY_BYTES, "capacity")],
            8,
            y + 1,
            8,
            "bytes",
        )
    )
    panels.append(
        _panel(
            next_id + 3,
            "L2 freed by the janitor",
            [(r.L2_EVICTED_BYTES, "evicted (watermark)"), (r.L2_LOST_BYTES, "unreadable (lost worker)")],
            16,
            y + 1,
            8,
            "Bps",
        )
    )
    return {
        "uid": env.name[:40],
        "title": f"{env.name}: KV-cache tiers",
        "tags": ["kvtiers"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "templating": {
            "list": [{"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"}]
        },
        "panels": panels,
    }
