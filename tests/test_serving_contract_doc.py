"""docs/serving-contract.md: every row names an upstream file and a test that exists (or says it needs a cluster)."""

from __future__ import annotations

from tests.conftest import ROOT
from tests.contract_docs import existing_tests, named_tests

DOC = ROOT / "docs" / "serving-contract.md"


def test_every_row_names_an_existing_test():
    existing = existing_tests()
    # The contract table is the first one; the sections after it have their own columns.
    table = DOC.read_text().split("\n## ", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]
    assert len(rows) >= 10
    for fact, source, test in rows:
        named = named_tests(test)
        assert named or "AWS account only" in test, fact
        assert not sorted(set(named) - existing), f"{fact}: no such test {sorted(set(named) - existing)}"
        assert "@" in source, f"{fact}: name the upstream version"
