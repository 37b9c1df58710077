"""`kvtiers top` against a local fake Prometheus HTTP API: values, rendering, SigV4, and the error paths."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from kvtiers.cli.main import app
from kvtiers.cli.top import PrometheusClient, TopError, snapshot
from kvtiers.observability import rules as r
from tests.conftest import CONFIG_DIR
from tests.fakes.prometheus import FakePrometheus

runner = CliRunner()
E = {"endpoint": "qwen2-7b"}
RESULTS = {
    r.PROMPT_TOKENS: [(E, 1000.0)],
    r.L0_TOKENS: [(E, 300.0)],
    r.L1_TOKENS: [({**E, "derived": "true"}, 300.0)],
    r.L2_TOKENS: [({**E, "derived": "true"}, 200.0)],
    r.RECOMPUTED_TOKENS: [(E, 200.0)],
    r.TTFT_P50: [(E, 0.287)],
    r.TTFT_P95: [(E, 0.774)],
    r.QUEUE: [(E, 2.0)],
    r.L2_USED_RATIO: [({}, 0.42)],
    r.L2_USED_BYTES: [({}, 420 * 2**30)],
    r.L2_CAPACITY_BYTES: [({}, 1000 * 2**30)],
    r.L2_EVICTED_BYTES: [({}, 0.0)],
}


def top(*args):
    return runner.invoke(app, ["top", *args])


def test_once_json_reports_each_tier_per_endpoint():
    with FakePrometheus(RESULTS) as prom:
        result = top("--url", prom.url, "--once", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["endpoints"]["qwen2-7b"] == {
        "prompt": 1000.0,
        "L0": 300.0,
        "L1": 300.0,
        "L2": 200.0,
        "recomputed": 200.0,
        "l2_hit_ratio": None,
        "ttft_p50": 0.287,
        "ttft_p95": 0.774,
        "queue": 2.0,
    }
    assert data["l2"]["used_ratio"] == 0.42
    assert set(prom.queries) == set(RESULTS) | {r.L2_HIT_RATIO}


def test_the_table_shows_shares_and_latencies(monkeypatch):
    from kvtiers.cli import output

    monkeypatch.setattr(output.console, "width", 200)
    with FakePrometheus(RESULTS) as prom:
        result = top("--url", prom.url, "--once")
    assert result.exit_code == 0, result.output
    for text in ("qwen2-7b", "300 (30%)", "200 (20%)", "287 ms", "774 ms", "42.0%", "420.0 GiB"):
        assert text in result.stdout, text


def test_endpoints_of_the_environment_are_listed_before_they_have_data():
    with FakePrometheus({r.L2_USED_RATIO: [({}, 0.1)]}) as prom:
        result = top("--url", prom.url, "--once", "--json", "-c", str(CONFIG_DIR / "dev.yaml"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["endpoints"]["qwen2-7b"]["L0"] is None


def test_no_data_is_an_error_with_a_hint():
    with FakePrometheus({}) as prom:
        result = top("--url", prom.url, "--once")
    assert result.exit_code == 1
    assert "no kvtiers:* series" in result.stderr and "observability.enabled" in result.stderr


def test_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = top("--url", f"http://127.0.0.1:{port}", "--once")
    assert result.exit_code == 2 and "cannot reach" in result.stderr


def test_auth_failure_names_the_permission(monkeypatch):
    with FakePrometheus(RESULTS, require_sigv4="us-east-1") as prom:
        result = top("--url", prom.url, "--once")
    assert result.exit_code == 2
    assert "authentication failed (HTTP 403)" in result.stderr and "aps:QueryMetrics" in result.stderr


def test_sigv4_signed_queries_are_accepted(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with FakePrometheus(RESULTS, require_sigv4="us-east-1") as prom:
        snap = snapshot(PrometheusClient(prom.url + "/workspaces/ws-1/", region="us-east-1"))
        assert all(a.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") for a in prom.authorizations)
    assert snap.endpoints["qwen2-7b"]["L2"] == 200.0


def test_an_amp_url_is_signed_for_its_region():
    client = PrometheusClient("https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1/")
    assert client.sign and client.region == "eu-west-1"
    assert not PrometheusClient("http://localhost:9090").sign


def test_a_failing_query_is_reported():
    with FakePrometheus(RESULTS) as prom, pytest.raises(TopError, match="bad_data: parse error"):
        PrometheusClient(prom.url).query("bad(")
