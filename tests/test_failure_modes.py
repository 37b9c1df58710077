"""docs/failure-modes.md covers every failure class the project promises to handle, and everything it names exists:
each automatic behaviour's test (so ``make test`` fails when one is renamed or removed), each alert in the rendered
rules, each runbook in docs/runbooks.md."""

from __future__ import annotations

import re

import pytest

from kvtiers.config import load_environment
from kvtiers.observability import rules as r
from tests.conftest import CONFIG_DIR, ROOT
from tests.contract_docs import existing_tests, named_tests

DOC = ROOT / "docs" / "failure-modes.md"
CLASSES = (
    "A GPU node replaced or lost",
    "A Curvine worker lost",
    "A master lost or the leader changing",
    "Every master lost",
    "The L2 full",
    "An L2 read error",
    "The FUSE process gone (CSI node plugin restart)",
    "A router lost",
    "An endpoint's secret not delivered",
    "An engine crash or out-of-memory",
    "An L2 namespace gone stale",
    "Kyverno down",
    "The metrics path broken",
)
FIELDS = ("Clients see", "kvtiers by itself", "Alert", "Runbook")


def sections() -> dict[str, dict[str, str]]:
    """Heading -> field -> text (a field runs from its ``- **Name:**`` bullet to the next bullet)."""
    out: dict[str, dict[str, str]] = {}
    for block in DOC.read_text().split("\n## ")[1:]:
        heading, _, body = block.partition("\n")
        fields = re.findall(r"^- \*\*(.+?):\*\* (.*?)(?=^- \*\*|\Z)", body, re.MULTILINE | re.DOTALL)
        out[heading.strip()] = {name: " ".join(text.split()) for name, text in fields}
    return out


def rendered_alerts() -> set[str]:
    names = set()
    for env_name in ("dev", "prod"):
        env = load_environment(CONFIG_DIR / f"{env_name}.yaml")
        names |= {rule["alert"] for g in r.rule_groups(env)["groups"] for rule in g["rules"] if "alert" in rule}
    return names


def readme_headings() -> set[str]:
    return {
        m.group(1).strip()
        for m in re.finditer(r"^#{2,4} (.+)$", (ROOT / "docs" / "runbooks.md").read_text(), re.MULTILINE)
    }


def test_every_failure_class_has_a_section_with_every_field():
    found = sections()
    assert list(found) == list(CLASSES), "one section per failure class, in this order"
    for heading, fields in found.items():
        missing = [f for f in FIELDS if not fields.get(f)]
        assert not missing, f"{heading}: no {missing}"


@pytest.mark.parametrize("heading", CLASSES)
def test_each_automatic_behaviour_names_tests_that_exist(heading):
    named = named_tests(sections()[heading]["kvtiers by itself"])
    assert named, f"{heading}: name the test that injects the fault"
    assert not named - existing_tests(), f"{heading}: no such test {sorted(named - existing_tests())}"


def test_every_named_alert_is_rendered_and_every_alert_is_in_the_catalogue():
    alerts = rendered_alerts()
    named = {a for fields in sections().values() for a in re.findall(r"`(Kvtiers\w+)`", fields["Alert"])}
    assert not named - alerts, sorted(named - alerts)
    assert not alerts - named, f"alerts no failure class names: {sorted(alerts - named)}"


@pytest.mark.parametrize("heading", CLASSES)
def test_each_runbook_step_is_a_readme_section(heading):
    quoted = re.findall(r'"([^"]+)"', sections()[heading]["Runbook"])
    assert set(quoted) & readme_headings(), f"{heading}: name a section of docs/runbooks.md, got {quoted}"
