"""cfn-lint over every synthesized template of every shipped environment: no errors, no warnings beyond the
ignored rules below."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

IGNORED = {
    "W3005": "aws-cdk-lib adds DependsOn entries that a GetAtt already implies (in its own constructs)",
    "W3010": "the EKS subnets' AZ names come from the environment file on purpose (deterministic synth)",
}


@pytest.mark.parametrize("synthesized", ["dev_synth", "prod_synth"])
def test_templates_pass_cfn_lint(request, synthesized):
    result = request.getfixturevalue(synthesized)
    region = result.graph.platform.region
    command = [
        str(Path(sys.executable).with_name("cfn-lint")),
        "--format",
        "parseable",
        "--regions",
        region,
        "--ignore-checks",
        *IGNORED,
        "--",
        *map(str, result.templates),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.stdout.strip() == "" and run.returncode == 0, run.stdout + run.stderr


def test_cfn_lint_catches_a_bad_hyperpod_cluster(tmp_path):
    """The linter knows AWS::SageMaker::Cluster, so a wrong tiered-storage mode fails (the check can fail)."""
    bad = tmp_path / "bad.template.json"
    bad.write_text(
        '{"Resources": {"C": {"Type": "AWS::SageMaker::Cluster", "Properties": {'
        '"TieredStorageConfig": {"Mode": "Enabled"}, "InstanceGroups": [{"InstanceGroupName": "g", '
        '"InstanceType": "ml.g6e.12xlarge", "InstanceCount": 1, "ThreadsPerCore": 3, "ExecutionRole": '
        '"arn:aws:iam::111111111111:role/r", "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-b/l", "OnCreate": "x"}}]}}}}'
    )
    run = subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), "--format", "parseable", "--", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode & 2, run.stdout
    assert "E3030" in run.stdout and "E3034" in run.stdout
