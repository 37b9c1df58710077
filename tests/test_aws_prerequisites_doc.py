"""docs/aws-prerequisites.md: every row names a test that exists, or says only an AWS account can show it."""

from __future__ import annotations

from tests.conftest import ROOT
from tests.contract_docs import existing_tests, named_tests

DOC = ROOT / "docs" / "aws-prerequisites.md"


def rows() -> list[list[str]]:
    lines = [line for line in DOC.read_text().splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]


def test_every_row_names_an_existing_test_or_says_aws_account_only():
    existing = existing_tests()
    assert len(rows()) >= 20
    for requirement, source, where, test in rows():
        named = named_tests(test)
        assert named or "AWS account only" in test, requirement
        missing = sorted(set(named) - existing)
        assert not missing, f"{requirement}: no such test {missing}"
        assert source, requirement
