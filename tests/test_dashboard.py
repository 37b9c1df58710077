"""The committed Grafana dashboards are generated from the code, one row per endpoint, reading recorded series only."""

from __future__ import annotations

import json
import subprocess
import sys

import promql_parser as pp
import pytest

from kvtiers.config import load_environment
from kvtiers.observability import rules as r
from tests.conftest import CONFIG_DIR, ROOT
from tests.test_observability_rules import selectors


def test_committed_dashboards_are_fresh():
    result = subprocess.run(
        [sys.executable, "tools/dashboards.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_one_row_per_endpoint_and_only_recorded_series(name):
    env = load_environment(CONFIG_DIR / f"{name}.yaml")
    board = json.loads((ROOT / "dashboards" / f"{name}.json").read_text())
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert [row.split(" ")[0] for row in rows[:-1]] == [e.name for e in env.serving.endpoints]
    assert rows[-1].startswith("Curvine L2")
    recorded = {rule["record"] for g in r.rule_groups(env)["groups"] for rule in g["rules"] if "record" in rule}
    for panel in board["panels"]:
        for target in panel.get("targets", ()):
            assert set(selectors(pp.parse(target["expr"]))) <= recorded, target["expr"]
    tiers = [p for p in board["panels"] if p["title"] == "Prompt tokens/s by tier"]
    assert len(tiers) == len(env.serving.endpoints)
    assert [t["legendFormat"] for t in tiers[0]["targets"]] == ["L0", "L1 (derived)", "L2 (derived)", "recomputed"]
