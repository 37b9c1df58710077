"""cdk-nag AwsSolutions runs at synth (through ``Validations``); every shipped environment synthesizes with no
unacknowledged finding, and every acknowledgment carries a reason."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks

from kvtiers.config import load_environment
from kvtiers.constructs import (
    CoreAddonVersions,
    EksCluster,
    HyperPodCluster,
    HyperPodDependencies,
    HyperPodNetwork,
    InstanceGroup,
    ModelReadAccess,
    NewVpcOptions,
)
from kvtiers.constructs.hyperpod_inference import InferenceOperator, OperatorAddonVersions
from kvtiers.stacks import nag
from kvtiers.stacks.deploy_graph import build_deploy_graph
from tests.synth import ROOT, cdk_context, synth
from tests.test_constructs_unit import ADDONS, OPERATOR_ADDONS, chart_dir


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


def test_a_non_default_bootstrap_qualifier_passes_nag(tmp_path):
    """The CDK asset bucket in the findings is named by the stacks' synthesizer, not by the default qualifier."""
    app = cdk.App(
        context=cdk_context(),
        outdir=str(tmp_path / "out"),
        default_stack_synthesizer=cdk.DefaultStackSynthesizer(qualifier="kvt0test"),
    )
    graph = build_deploy_graph(app, load_environment(ROOT / "config/dev.yaml"), review=True, nag=True)
    app.synth()
    template = (tmp_path / "out" / f"{graph.platform.stack_name}.template.json").read_text()
    assert "cdk-kvt0test-assets-" in template and "hnb659fds" not in template
    plugins = {p["pluginName"]: p for p in report(type("R", (), {"outdir": tmp_path / "out"}))["pluginReports"]}
    assert "AwsSolutions" not in plugins or plugins["AwsSolutions"]["conclusion"] == "success"


def test_acknowledgments_follow_the_constructs_not_their_logical_ids(tmp_path):
    """The platform constructs under other construct ids (so other hashed logical IDs), in an
    environment-agnostic stack: the acknowledgments derived from them still cover every finding."""
    (tmp_path / "chart").mkdir()
    app = cdk.App(outdir=str(tmp_path / "out"))
    stack = cdk.Stack(app, "TeamGpu")
    network = HyperPodNetwork(
        stack, "Net", vpc=NewVpcOptions(hyperpod_az_id="use1-az4", availability_zones=("us-east-1c", "us-east-1d"))
    )
    kubernetes = EksCluster(
        stack,
        "Kubernetes",
        vpc=network.vpc,
        subnets=network.eks_subnets,
        security_group=network.security_group,
        addons=CoreAddonVersions(**ADDONS),
    )
    dependencies = HyperPodDependencies(stack, "Deps", cluster=kubernetes, chart_dir=chart_dir(tmp_path / "chart"))
    gpus = HyperPodCluster(
        stack,
        "Gpus",
        eks_cluster=kubernetes,
        dependencies=dependencies,
        subnet=network.hyperpod_subnet,
        security_group=network.security_group,
        instance_groups=(InstanceGroup(name="gpu", instance_type="ml.g6e.xlarge", count=1),),
    )
    operator = InferenceOperator(
        stack,
        "Operator",
        cluster=kubernetes,
        hyperpod_cluster_arn=gpus.cluster_arn,
        environment_name="team",
        addons=OperatorAddonVersions(**OPERATOR_ADDONS),
        kyverno_chart_version="3.5.2",
        model_buckets=("team-models",),
    )
    access = ModelReadAccess(
        stack,
        "Weights",
        cluster=kubernetes.cluster,
        namespace="serving",
        service_account="engine",
        bucket="team-models",
        prefix="llama",
    )
    nag.acknowledge_network(network)
    nag.acknowledge_eks(kubernetes)
    nag.acknowledge_dependency_chart(kubernetes, dependencies)
    nag.acknowledge_hyperpod(gpus)
    nag.acknowledge_inference_operator(operator)
    nag.acknowledge_model_access(access)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    plugins = {p["pluginName"]: p for p in report(type("R", (), {"outdir": tmp_path / "out"}))["pluginReports"]}
    assert "AwsSolutions" not in plugins or plugins["AwsSolutions"]["conclusion"] == "success"
