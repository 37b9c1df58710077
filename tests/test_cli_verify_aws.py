"""HyperPod checks: moto where it covers SageMaker (g5, no tiered storage), botocore Stubber for G6e + tiered storage."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from kvtiers.cli.verify import aws

NAME = "kvtiers-dev"
ARN = "arn:aws:sagemaker:us-east-1:111111111111:cluster/abcdef123456"
LAUNCH = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def cluster(**overrides) -> dict:
    body = {
        "ClusterArn": ARN,
        "ClusterName": NAME,
        "ClusterStatus": "InService",
        "InstanceGroups": [
            {
                "InstanceGroupName": "g6e-serving",
                "InstanceType": "ml.g6e.12xlarge",
                "CurrentCount": 2,
                "TargetCount": 2,
                "Status": "InService",
            }
        ],
        "TieredStorageConfig": {"Mode": "Enable", "InstanceMemoryAllocationPercentage": 20},
        "NodeRecovery": "Automatic",
    }
    body.update(overrides)
    return body


def node(i: int, state: str = "Running", message: str | None = None) -> dict:
    status = {"Status": state}
    if message:
        status["Message"] = message
    return {
        "InstanceGroupName": "g6e-serving",
        "InstanceId": f"i-0{i}",
        "InstanceType": "ml.g6e.12xlarge",
        "LaunchTime": LAUNCH,
        "InstanceStatus": status,
    }


@pytest.fixture
def stubbed():
    client = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def run(stubbed, dev_env, described: dict, pages: list[list[dict]] | None = None):
    client, stub = stubbed
    stub.add_response("describe_cluster", described, {"ClusterName": NAME})
    pages = [[node(0), node(1)]] if pages is None else pages
    for i, page in enumerate(pages):
        response = {"ClusterNodeSummaries": page}
        params = {"ClusterName": NAME}
        if i:
            params["NextToken"] = f"t{i}"
        if i < len(pages) - 1:
            response["NextToken"] = f"t{i + 1}"
        stub.add_response("list_cluster_nodes", response, params)
    return {r.name: r for r in aws.check_hyperpod(client, dev_env.hyperpod)}


def test_healthy_g6e_cluster_with_tiered_storage(stubbed, dev_env):
    results = run(stubbed, dev_env, cluster(), pages=[[node(0)], [node(1)]])  # two pages: the paginator is used
    assert all(r.ok for r in results.values()), results
    assert results["tiered storage"].detail == "enabled at 20 % of node memory"
    assert results["nodes Running"].detail == "2/2 nodes Running"
    assert "ml.g6e.12xlarge" in results["instance group g6e-serving"].detail


def test_not_in_service(stubbed, dev_env):
    results = run(stubbed, dev_env, cluster(ClusterStatus="Failed", FailureMessage="capacity"))
    check = results["cluster InService"]
    assert not check.ok and "Failed; capacity" in check.detail and check.hint


@pytest.mark.parametrize(
    ("tiered", "expect"),
    [
        ({"Mode": "Enable", "InstanceMemoryAllocationPercentage": 30}, "Mode Enable, 30 %"),
        ({"Mode": "Disable"}, "Mode Disable"),
        (None, "absent"),
    ],
)
def test_tiered_storage_mismatch(stubbed, dev_env, tiered, expect):
    described = cluster()
    if tiered is None:
        del described["TieredStorageConfig"]
    else:
        described["TieredStorageConfig"] = tiered
    check = run(stubbed, dev_env, described)["tiered storage"]
    assert not check.ok and expect in check.detail and "TieredStorageConfig" in check.hint


def test_node_recovery_mismatch(stubbed, dev_env):
    check = run(stubbed, dev_env, cluster(NodeRecovery="None"))["node recovery"]
    assert not check.ok and "expected Automatic" in check.detail


def test_instance_group_below_target(stubbed, dev_env):
    groups = [
        {
            "InstanceGroupName": "g6e-serving",
            "InstanceType": "ml.g6e.12xlarge",
            "CurrentCount": 1,
            "TargetCount": 2,
            "Status": "Updating",
        }
    ]
    check = run(stubbed, dev_env, cluster(InstanceGroups=groups))["instance group g6e-serving"]
    assert not check.ok and "1 of 2 instances" in check.detail and "status Updating" in check.detail


def test_instance_group_missing(stubbed, dev_env):
    groups = [{"InstanceGroupName": "other", "InstanceType": "ml.g6e.12xlarge", "CurrentCount": 2, "TargetCount": 2}]
    check = run(stubbed, dev_env, cluster(InstanceGroups=groups))["instance group g6e-serving"]
    assert not check.ok and "missing" in check.detail


def test_node_not_running(stubbed, dev_env):
    check = run(stubbed, dev_env, cluster(), pages=[[node(0), node(1, "Failure", "GPU health check failed")]])[
        "nodes Running"
    ]
    assert not check.ok and "i-01 (g6e-serving): Failure GPU health check failed" in check.detail


def test_too_few_nodes(stubbed, dev_env):
    check = run(stubbed, dev_env, cluster(), pages=[[node(0)]])["nodes Running"]
    assert not check.ok and "config expects 2" in check.detail


def test_cluster_not_found(stubbed, dev_env):
    client, stub = stubbed
    stub.add_client_error("describe_cluster", "ResourceNotFound", "Cluster kvtiers-dev not found")
    [result] = aws.check_hyperpod(client, dev_env.hyperpod)
    assert not result.ok and "ResourceNotFound" in result.detail and "region" in result.hint


def test_with_moto(dev_env):
    """moto covers create/describe/list_cluster_nodes, but only for non-G6e types and without tiered storage."""
    with mock_aws():
        client = boto3.client("sagemaker", region_name="us-east-1")
        client.create_cluster(
            ClusterName=NAME,
            InstanceGroups=[
                {
                    "InstanceCount": 2,
                    "InstanceGroupName": "g6e-serving",
                    "InstanceType": "ml.g5.12xlarge",
                    "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/x", "OnCreate": "on_create.sh"},
                    "ExecutionRole": "arn:aws:iam::123456789012:role/r",
                    "ThreadsPerCore": 1,
                }
            ],
        )
        results = {r.name: r for r in aws.check_hyperpod(client, dev_env.hyperpod)}
    assert results["cluster InService"].ok
    assert results["instance group g6e-serving"].ok
    assert results["nodes Running"].ok and results["nodes Running"].detail == "2/2 nodes Running"
    # moto drops TieredStorageConfig and NodeRecovery: exactly what a cluster without them looks like
    assert not results["tiered storage"].ok and "absent" in results["tiered storage"].detail
    assert not results["node recovery"].ok
