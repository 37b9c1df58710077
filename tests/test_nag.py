"""cdk-nag AwsSolutions runs at synth (through ``Validations``); every shipped environment synthesizes with no
unacknowledged finding, and every acknowledgment carries a reason."""

from __future__ import annotations

import json

import pytest

from tests.synth import ROOT, synth


def report(result) -> dict:
    return json.loads((result.outdir / "validation-report.json").read_text())


@pytest.mark.parametrize("synthesized", ["dev_synth", "prod_synth"])
def test_no_unacknowledged_aws_solutions_findings(request, synthesized):
    # The fixture's synth ran with the AwsSolutions plugin: it would have raised on any finding. The report only
    # lists a plugin that found something, so a clean run shows no AwsSolutions entry at all.
    plugins = {p["pluginName"]: p for p in report(request.getfixturevalue(synthesized))["pluginReports"]}
    assert "AwsSolutions" not in plugins or plugins["AwsSolutions"]["conclusion"] == "success"
    assert plugins["CloudFormation Validate"]["conclusion"] == "success"
    assert plugins["CloudFormation Validate"]["violations"] == []


def test_an_unacknowledged_finding_fails_synth(tmp_path, monkeypatch):
    """Without the project's acknowledgments cdk-nag's findings fail the synth (the check can fail)."""
    from kvtiers.stacks import deploy_graph

    monkeypatch.setattr(deploy_graph, "acknowledge_findings", lambda graph: None)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        synth(ROOT / "config/dev.yaml", tmp_path / "out", nag=True)
    violations = report(type("R", (), {"outdir": tmp_path / "out"}))["pluginReports"]
    nag = next(p for p in violations if p["pluginName"] == "AwsSolutions")
    assert any(v["ruleName"] == "AwsSolutions-S1" for v in nag["violations"])
