"""docs/operator-contract.md: every behaviour names a test that exists (or says only a live cluster shows it), and
it cites the versions the schema pins."""

from __future__ import annotations

import ast
import re

from kvtiers.config.schema import InferenceOperator
from kvtiers.k8s_charts.hyperpod_operator import contract
from tests.conftest import ROOT

DOC = ROOT / "docs" / "operator-contract.md"


def _test_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        names |= {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
    return names


def behaviour_rows() -> list[list[str]]:
    rows, section = [], ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            section = "behaviours" if "behaviours relied on" in line else ""
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and not line.startswith("| ---") and len(cells) == 3 and section == "behaviours":
            if cells[0] != "behaviour":
                rows.append(cells)
    return rows


def test_every_behaviour_names_an_existing_test_or_says_live_cluster_only():
    existing = _test_names()
    rows = behaviour_rows()
    assert len(rows) >= 14
    for behaviour, source, test in rows:
        named = re.findall(r"`(test_[a-z0-9_]+)`", test)
        assert named or "live cluster only" in test, behaviour
        assert not set(named) - existing, f"{behaviour[:60]}: no such test {sorted(set(named) - existing)}"
        assert source, behaviour


def test_every_policy_test_is_in_the_contract():
    tree = ast.parse((ROOT / "tests" / "test_hyperpod_operator_policy.py").read_text())
    tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    missing = tests - set(re.findall(r"`(test_[a-z0-9_]+)`", DOC.read_text()))
    assert not missing, sorted(missing)


def test_the_contract_cites_the_pinned_versions():
    text, defaults = DOC.read_text(), InferenceOperator()
    assert f"`{defaults.addons.inference_operator}`" in text
    assert f"chart `{defaults.kyverno_chart_version}`" in text
    # every add-on version whose CRD fields the code knows is one the contract says it read
    for version in contract.ADDON_SPEC_FIELDS:
        assert f"`{version}`" in text
