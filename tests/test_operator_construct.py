"""InferenceOperator construct: add-ons pinned and ordered, IAM trust, TLS bucket, configuration JSON."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Match, Template
from aws_cdk.lambda_layer_kubectl_v33 import KubectlV33Layer

from kvtiers.config.schema import OperatorAddonVersions
from kvtiers.constructs.inference_operator import (
    EXECUTION_ROLE_PREFIX,
    OPERATOR_ADDON,
    InferenceOperator,
    InferenceOperatorProps,
)

VERSIONS = OperatorAddonVersions()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("op"), nag=False)


def _build(tmp, nag):
    from cdk_nag import AwsSolutionsChecks

    app = cdk.App(outdir=str(tmp / "cdk.out"))
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "OpTest", env=cdk.Environment(account="111122223333", region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=1)
    cluster = eks.Cluster(
        stack, "Cluster", version=eks.KubernetesVersion.V1_33, vpc=vpc,
        kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV33Layer(stack, "Kubectl")),
    )
    op = InferenceOperator(stack, "Operator", props=InferenceOperatorProps(
        cluster=cluster, hyperpod_cluster_arn="arn:aws:sagemaker:us-east-1:111122223333:cluster/abc",
        name="dev", vpc_id=vpc.vpc_id, region="us-east-1",
        operator_version=VERSIONS.inference_operator, cert_manager_version=VERSIONS.cert_manager,
        s3_csi_version=VERSIONS.s3_csi_driver, fsx_csi_version=VERSIONS.fsx_csi_driver,
        metrics_server_version=VERSIONS.metrics_server, kyverno_chart_version="3.5.2",
        model_buckets=("my-models",),
    ))
    op.add_kyverno()
    if nag:
        try:
            app.synth()
        except RuntimeError:  # the bare cluster's own findings fail validation; ours are checked below
            pass
        return Path(app.outdir) / "validation-report.json"
    return op, Template.from_stack(stack), stack, None


def _addons(template):
    return {r["Properties"]["AddonName"]: (lid, r) for lid, r in template.find_resources("AWS::EKS::Addon").items()}


def test_addons_pinned_and_ordered(built):
    _, template, _, _ = built
    addons = _addons(template)
    expected = {
        OPERATOR_ADDON: VERSIONS.inference_operator, "cert-manager": VERSIONS.cert_manager,
        "aws-mountpoint-s3-csi-driver": VERSIONS.s3_csi_driver, "aws-fsx-csi-driver": VERSIONS.fsx_csi_driver,
        "metrics-server": VERSIONS.metrics_server,
    }
    for name, version in expected.items():
        assert addons[name][1]["Properties"]["AddonVersion"] == version
    depends = set(addons[OPERATOR_ADDON][1].get("DependsOn", []))
    for name in expected:
        if name != OPERATOR_ADDON:
            assert addons[name][0] in depends, name
    assert "ServiceAccountRoleArn" in addons["aws-mountpoint-s3-csi-driver"][1]["Properties"]


def test_configuration_values_json(built):
    op, template, stack, _ = built
    config = json.loads(op.configuration_json())
    assert {"executionRoleArn", "tlsCertificateS3Bucket", "hyperpodClusterArn", "alb", "keda"} <= set(config)
    assert config["keda"]["auth"]["aws"]["irsa"]["enabled"] is True
    assert config["alb"]["serviceAccount"]["create"] is True
    raw = stack.resolve(_addons(template)[OPERATOR_ADDON][1]["Properties"]["ConfigurationValues"])
    assert raw  # Fn::Join with the role ARNs / bucket name


def test_execution_role(built):
    _, template, _, _ = built
    roles = [r for r in template.find_resources("AWS::IAM::Role").values()
             if str(r["Properties"].get("RoleName", "")).startswith(EXECUTION_ROLE_PREFIX)]
    assert len(roles) == 1
    props = roles[0]["Properties"]
    assert props["RoleName"] == f"{EXECUTION_ROLE_PREFIX}-dev-us-east-1"
    text = json.dumps(props)
    assert "AmazonSageMakerHyperPodInferenceAccess" in text
    assert "sagemaker.amazonaws.com" in text
    assert "sts:AssumeRoleWithWebIdentity" in text


def test_irsa_subjects(built):
    _, template, _, _ = built
    subjects = json.dumps(template.find_resources("AWS::CloudFormation::CustomResource")) + json.dumps(
        template.to_json())
    for sa in ("hyperpod-inference-system:hyperpod-inference-controller-manager",
               "hyperpod-inference-system:keda-operator",
               "hyperpod-inference-system:aws-load-balancer-controller",
               "kube-system:s3-csi-driver-sa"):
        assert f"system:serviceaccount:{sa}" in subjects, sa


def test_tls_bucket(built):
    _, template, _, _ = built
    template.has_resource_properties("AWS::S3::Bucket", {
        "VersioningConfiguration": {"Status": "Enabled"},
        "BucketEncryption": Match.any_value(),
        "PublicAccessBlockConfiguration": {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                           "IgnorePublicAcls": True, "RestrictPublicBuckets": True},
    })
    policies = json.dumps(template.find_resources("AWS::S3::BucketPolicy"))
    assert "aws:SecureTransport" in policies


def test_kyverno_after_operator(built):
    _, template, _, _ = built
    charts = {lid: r for lid, r in template.to_json()["Resources"].items() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"}
    (chart,) = charts.values()
    props = chart["Properties"]
    assert props["Chart"] == "kyverno" and props["Version"] == "3.5.2"
    assert props["Repository"] == "https://kyverno.github.io/kyverno/" and props["Namespace"] == "kyverno"
    op_id = _addons(template)[OPERATOR_ADDON][0]
    assert op_id in chart.get("DependsOn", [])


def test_no_unacknowledged_nag_findings_on_operator(tmp_path):
    report = _build(tmp_path, nag=True)
    assert report.exists()
    text = report.read_text()
    assert "AwsSolutions" in text  # the plugin ran (the bare cluster has findings of its own)
    assert "/Operator/" not in text, [l for l in text.splitlines() if "/Operator/" in l][:5]
