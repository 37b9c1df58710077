"""docs/serving-contract.md: every row names an upstream file and a test that exists (or says it needs a cluster)."""

from __future__ import annotations

from tests.conftest import ROOT
from tests.contract_docs import existing_tests, named_tests

DOC = ROOT / "docs" / "serving-contract.md"


def test_every_row_names_an_existing_test():
    existing = existing_tests()
    lines = DOC.read_text().splitlines()
    # every table's rows, without its header (the line above a "| ---" line) and the separator
    headers = {i - 1 for i, line in enumerate(lines) if line.startswith("| ---")}
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for i, line in enumerate(lines)
        if line.startswith("| ") and not line.startswith("| ---") and i not in headers
    ]
    assert len(rows) >= 10
    for row in rows:
        # the version table (fact, source, test) and the L2 read-failure table (..., test last)
        fact, source, test = row[0], row[1], row[-1]
        named = named_tests(test)
        assert named or "AWS account only" in test, fact
        assert not sorted(set(named) - existing), f"{fact}: no such test {sorted(set(named) - existing)}"
        assert "@" in source, f"{fact}: name the upstream version"
