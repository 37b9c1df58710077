"""``kvtiers top``: the recorded per-tier numbers of every endpoint from a Prometheus-compatible query API.

An Amazon Managed Service for Prometheus URL (``https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/``)
is signed with SigV4 (service ``aps``) through botocore; any other URL (a port-forwarded Prometheus) is queried
plainly. Only ``/api/v1/query`` is used, one instant query per recorded series (kvtiers/observability/rules.py).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from kvtiers.observability import rules as r
from kvtiers.observability.scrape import ENDPOINT

AMP_HOST = re.compile(r"^aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com$")
ENDPOINT_SERIES = {
    "prompt": r.PROMPT_TOKENS,
    **{k: v for k, v in r.TIER_SERIES.items()},
    "l2_hit_ratio": r.L2_HIT_RATIO,
    "ttft_p50": r.TTFT_P50,
    "ttft_p95": r.TTFT_P95,
    "queue": r.QUEUE,
}
L2_SERIES = {
    "used_ratio": r.L2_USED_RATIO,
    "used_bytes": r.L2_USED_BYTES,
    "capacity_bytes": r.L2_CAPACITY_BYTES,
    "evicted_bytes_per_s": r.L2_EVICTED_BYTES,
}


class TopError(Exception):
    """The query API could not be used (unreachable, refused credentials, not a Prometheus API)."""


@dataclass
class Snapshot:
    endpoints: dict[str, dict[str, float | None]] = field(default_factory=dict)
    l2: dict[str, float | None] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not any(v is not None for e in self.endpoints.values() for v in e.values()) and not any(
            v is not None for v in self.l2.values()
        )

    def as_dict(self) -> dict[str, Any]:
        return {"endpoints": self.endpoints, "l2": self.l2}


class PrometheusClient:
    def __init__(self, url: str, *, region: str | None = None, profile: str | None = None, timeout: float = 10.0):
        self.base = url.rstrip("/") + "/"
        host = urllib.parse.urlparse(self.base).hostname or ""
        match = AMP_HOST.match(host)
        self.region = region or (match.group(1) if match else None)
        self.sign = match is not None or region is not None
        self.profile, self.timeout = profile, timeout
        self._credentials = None

    def _signed_headers(self, url: str) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.session import Session

        if self._credentials is None:
            session = Session(profile=self.profile)
            self._credentials = session.get_credentials()
            if self._credentials is None:
                raise TopError("no AWS credentials found to sign the query (SigV4, service aps)")
        request = AWSRequest(method="GET", url=url)
        SigV4Auth(self._credentials.get_frozen_credentials(), "aps", self.region).add_auth(request)
        return dict(request.headers.items())

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        url = self.base + "api/v1/query?" + urllib.parse.urlencode({"query": expr})
        headers = self._signed_headers(url) if self.sign else {}
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self.timeout) as resp:
                body = json.loads(resp.read().decode())
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")[:200]
            if exc.code in (401, 403):
                raise TopError(
                    f"authentication failed (HTTP {exc.code}) at {self.base}: {text} (AMP: credentials "
                    "need aps:QueryMetrics on the workspace, the stack's QueryPolicyArn output)"
                ) from None
            try:
                error = json.loads(text)
                raise TopError(f"query {expr!r} failed: {error['errorType']}: {error['error']}") from None
            except (ValueError, KeyError, TypeError):
                raise TopError(f"HTTP {exc.code} from {self.base}: {text}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TopError(f"cannot reach {self.base}: {reason} (kubectl port-forward running? URL right?)") from None
        except ValueError:
            raise TopError(f"{self.base} did not answer with Prometheus JSON") from None
        if body.get("status") != "success":
            raise TopError(f"query {expr!r} failed: {body.get('errorType')}: {body.get('error')}")
        out = []
        for sample in body.get("data", {}).get("result", []):
            try:
                out.append((sample.get("metric", {}), float(sample["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        return out


def snapshot(client: PrometheusClient, endpoint_names: list[str] | None = None) -> Snapshot:
    snap = Snapshot()
    for name in endpoint_names or []:
        snap.endpoints[name] = {key: None for key in ENDPOINT_SERIES}
    for key, series in ENDPOINT_SERIES.items():
        for labels, value in client.query(series):
            endpoint = labels.get(ENDPOINT)
            if endpoint:
                snap.endpoints.setdefault(endpoint, {k: None for k in ENDPOINT_SERIES})[key] = value
    for key, series in L2_SERIES.items():
        results = client.query(series)
        snap.l2[key] = results[0][1] if results else None
    return snap


def _fmt(value: float | None, kind: str) -> str:
    from kvtiers.cli.output import human_bytes

    if value is None:
        return "-"
    if kind == "pct":
        return f"{value * 100:.1f}%"
    if kind == "s":
        return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
    if kind == "bytes":
        return human_bytes(value)
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def render(snap: Snapshot):
    from rich.console import Group

    from kvtiers.cli.output import table

    rows = []
    for name, v in sorted(snap.endpoints.items()):
        prompt = v.get("prompt")

        def share(key: str, v: dict = v, prompt: float | None = prompt) -> str:
            value = v.get(key)
            if value is None:
                return "-"
            return _fmt(value, "n") + (f" ({value / prompt * 100:.0f}%)" if prompt else "")

        rows.append(
            [
                name,
                _fmt(prompt, "n"),
                share("L0"),
                share("L1"),
                share("L2"),
                share("recomputed"),
                _fmt(v.get("ttft_p50"), "s"),
                _fmt(v.get("ttft_p95"), "s"),
                _fmt(v.get("queue"), "n"),
            ]
        )
    endpoints = table(
        "prompt tokens/s by tier (L1, L2 derived), last 5 minutes",
        ["endpoint", "prompt", "L0", "L1", "L2", "recomputed", "TTFT p50", "TTFT p95", "queue"],
        rows,
        right=set(range(1, 9)),
    )
    l2 = snap.l2
    shared = table(
        "Curvine L2 (shared)",
        ["used", "used bytes", "capacity", "evicted/s"],
        [
            [
                _fmt(l2.get("used_ratio"), "pct"),
                _fmt(l2.get("used_bytes"), "bytes"),
                _fmt(l2.get("capacity_bytes"), "bytes"),
                _fmt(l2.get("evicted_bytes_per_s"), "bytes"),
            ]
        ],
    )
    return Group(endpoints, shared)
