"""docs/operator-contract.md: every behaviour names a test that exists (or says only a live cluster shows it), and
it cites the versions the schema pins."""

from __future__ import annotations

from kvtiers.config.schema import InferenceOperator
from kvtiers.k8s_charts import operator_addons
from tests.conftest import ROOT
from tests.contract_docs import defined_tests, existing_tests, named_tests

DOC = ROOT / "docs" / "operator-contract.md"


def behaviour_rows() -> list[list[str]]:
    rows, section = [], ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            section = "behaviours" if "behaviours relied on" in line else ""
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        is_row = line.startswith("| ") and not line.startswith("| ---") and len(cells) == 3
        if is_row and section == "behaviours" and cells[0] != "behaviour":
            rows.append(cells)
    return rows


def test_every_behaviour_names_an_existing_test_or_says_live_cluster_only():
    existing = existing_tests()
    rows = behaviour_rows()
    assert len(rows) >= 14
    for behaviour, source, test in rows:
        named = named_tests(test)
        assert named or "live cluster only" in test, behaviour
        assert not set(named) - existing, f"{behaviour[:60]}: no such test {sorted(set(named) - existing)}"
        assert source, behaviour


def test_every_policy_test_is_in_the_contract():
    missing = defined_tests(ROOT / "tests" / "test_hyperpod_operator_policy.py") - named_tests(DOC.read_text())
    assert not missing, sorted(missing)


def test_the_contract_cites_the_pinned_versions():
    text, defaults = DOC.read_text(), InferenceOperator()
    assert f"`{defaults.addons.inference_operator}`" in text
    assert f"chart `{defaults.kyverno_chart_version}`" in text
    # every add-on version whose CRD fields the code knows is one the contract says it read
    for version in operator_addons.ADDON_SPEC_FIELDS:
        assert f"`{version}`" in text
