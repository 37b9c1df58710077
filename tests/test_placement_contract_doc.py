"""docs/placement-contract.md names only tests that exist, every upstream check of the node agents, and a source row
for every agent and controller the model counts."""

from __future__ import annotations

from kvtiers import node_agents
from tests.contract_docs import defined_tests, existing_tests, named_tests
from tests.synth import ROOT

DOC = ROOT / "docs" / "placement-contract.md"


def test_every_test_the_contract_names_exists():
    named = named_tests(DOC.read_text())
    assert named, "the contract names no test"
    assert not named - existing_tests(), sorted(named - existing_tests())


def test_every_upstream_check_of_the_agents_is_in_the_contract():
    upstream = defined_tests(ROOT / "tests" / "test_node_agents_upstream.py")
    missing = upstream - named_tests(DOC.read_text()) - {"test_the_mirrored_chart_is_the_revision_the_app_deploys"}
    assert not missing, sorted(missing)


def test_every_counted_agent_has_a_source_row():
    text = DOC.read_text()
    agents = (
        *node_agents.NODE_AGENTS,
        node_agents.EBS_CSI_NODE,
        node_agents.EBS_CSI_CONTROLLER,
        *node_agents.SECRETS_STORE_AGENTS,
        *node_agents.OPERATOR_AGENTS,
    )
    missing = [a.name for a in agents if f"`{a.name.rsplit('/', 1)[1]}`" not in text]
    assert not missing, missing
