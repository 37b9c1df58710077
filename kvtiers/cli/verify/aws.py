"""HyperPod checks through boto3 (``describe_cluster``, ``list_cluster_nodes`` with its paginator)."""

from __future__ import annotations

from collections import Counter

from botocore.exceptions import BotoCoreError, ClientError

from kvtiers.cli.verify.result import CheckResult, failed, passed
from kvtiers.config.schema import HyperPod

AREA = "hyperpod"


def describe(sagemaker, hyperpod: HyperPod) -> dict | CheckResult:
    """The DescribeCluster response, or the failed check that says why there is none."""
    try:
        return sagemaker.describe_cluster(ClusterName=hyperpod.cluster_name)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        return failed(
            AREA,
            "cluster exists",
            f"describe_cluster {hyperpod.cluster_name}: {err.get('Code')}: {err.get('Message')}",
            "check the region, your AWS credentials and that the platform stack deployed the cluster",
        )
    except BotoCoreError as exc:
        return failed(AREA, "cluster exists", f"describe_cluster: {exc}", "check AWS credentials and network")


def check_status(cluster: dict) -> CheckResult:
    status = cluster.get("ClusterStatus")
    if status == "InService":
        return passed(AREA, "cluster InService", f"{cluster.get('ClusterName')} is InService")
    message = f"; {cluster['FailureMessage']}" if cluster.get("FailureMessage") else ""
    return failed(
        AREA,
        "cluster InService",
        f"status {status}{message}",
        "aws sagemaker describe-cluster --cluster-name <name>; wait if Creating/Updating, else read FailureMessage",
    )


def check_tiered_storage(cluster: dict, hyperpod: HyperPod) -> CheckResult:
    want = hyperpod.tiered_storage
    got = cluster.get("TieredStorageConfig") or {}
    mode, pct = got.get("Mode"), got.get("InstanceMemoryAllocationPercentage")
    if not want.enabled:
        if mode in (None, "Disable"):
            return passed(AREA, "tiered storage", "disabled, as configured")
        return failed(AREA, "tiered storage", f"Mode {mode} but the config disables it", "redeploy the platform stack")
    if mode == "Enable" and pct == want.memory_percentage:
        return passed(AREA, "tiered storage", f"enabled at {pct} % of node memory")
    shown = "absent" if not got else f"Mode {mode}, {pct} %"
    return failed(
        AREA,
        "tiered storage",
        f"expected Enable at {want.memory_percentage} %, cluster reports {shown}",
        "TieredStorageConfig on the cluster (cdk diff the platform stack; "
        "aws sagemaker describe-cluster --query TieredStorageConfig)",
    )


def check_node_recovery(cluster: dict, hyperpod: HyperPod) -> CheckResult:
    got = cluster.get("NodeRecovery")
    if got == hyperpod.node_recovery:
        return passed(AREA, "node recovery", f"{got}")
    return failed(
        AREA,
        "node recovery",
        f"expected {hyperpod.node_recovery}, cluster reports {got or 'nothing'}",
        "NodeRecovery on the cluster (cdk diff the platform stack)",
    )


def check_instance_groups(cluster: dict, hyperpod: HyperPod) -> list[CheckResult]:
    actual = {g.get("InstanceGroupName"): g for g in cluster.get("InstanceGroups") or []}
    results = []
    for group in hyperpod.instance_groups:
        name = f"instance group {group.name}"
        got = actual.get(group.name)
        if got is None:
            results.append(
                failed(AREA, name, f"missing (cluster has {sorted(actual) or 'none'})", "cdk diff the platform stack")
            )
            continue
        current, target = got.get("CurrentCount"), got.get("TargetCount")
        status = got.get("Status")
        problems = []
        if target != group.count:
            problems.append(f"target {target}, config {group.count}")
        if current != target:
            problems.append(f"{current} of {target} instances")
        if status not in (None, "InService"):
            problems.append(f"status {status}")
        if problems:
            results.append(
                failed(
                    AREA,
                    name,
                    "; ".join(problems),
                    "capacity for the instance type in the subnet's AZ, or deep health checks still running "
                    "(aws sagemaker list-cluster-nodes)",
                )
            )
        else:
            results.append(passed(AREA, name, f"{current}/{target} {got.get('InstanceType', group.instance_type)}"))
    return results


def list_nodes(sagemaker, cluster_name: str) -> list[dict]:
    nodes: list[dict] = []
    for page in sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=cluster_name):
        nodes.extend(page.get("ClusterNodeSummaries") or [])
    return nodes


def check_nodes(sagemaker, hyperpod: HyperPod) -> CheckResult:
    try:
        nodes = list_nodes(sagemaker, hyperpod.cluster_name)
    except (ClientError, BotoCoreError) as exc:
        return failed(AREA, "nodes Running", f"list_cluster_nodes: {exc}", "check AWS credentials and permissions")
    expected = sum(g.count for g in hyperpod.instance_groups)
    not_running = [
        f"{n.get('InstanceId')} ({n.get('InstanceGroupName')}): {n.get('InstanceStatus', {}).get('Status')}"
        + (f" {n['InstanceStatus']['Message']}" if n.get("InstanceStatus", {}).get("Message") else "")
        for n in nodes
        if n.get("InstanceStatus", {}).get("Status") != "Running"
    ]
    per_group = Counter(n.get("InstanceGroupName") for n in nodes)
    if not_running:
        return failed(
            AREA,
            "nodes Running",
            f"{len(not_running)} of {len(nodes)} not Running: " + "; ".join(not_running[:5]),
            "aws sagemaker describe-cluster-node --node-id <id>; node recovery replaces failed nodes",
        )
    if len(nodes) != expected:
        return failed(
            AREA,
            "nodes Running",
            f"{len(nodes)} nodes ({dict(per_group)}), config expects {expected}",
            "instances still provisioning, or capacity shortage (aws sagemaker list-cluster-nodes)",
        )
    return passed(AREA, "nodes Running", f"{len(nodes)}/{expected} nodes Running")


def check_hyperpod(sagemaker, hyperpod: HyperPod) -> list[CheckResult]:
    cluster = describe(sagemaker, hyperpod)
    if isinstance(cluster, CheckResult):
        return [cluster]
    return [
        check_status(cluster),
        check_tiered_storage(cluster, hyperpod),
        check_node_recovery(cluster, hyperpod),
        *check_instance_groups(cluster, hyperpod),
        check_nodes(sagemaker, hyperpod),
    ]


INVOKE_NAME = "invocation through the operator's router"


def check_operator_invocation(runtime, env, endpoint) -> CheckResult:
    """One completion through the operator endpoint's SageMaker endpoint, the path clients use: SageMaker, the
    operator's ALB and its intelligent router, then a model pod. Calling the pods directly would skip the router."""
    import json

    from kvtiers.config.model import operator_endpoint

    area = f"endpoint:{endpoint.name}"
    name = operator_endpoint(env, endpoint.name).object_name
    hint = (
        f"aws sagemaker describe-endpoint --endpoint-name {name}; kubectl -n {env.serving.namespace} get ingress; "
        "the operator add-on's load balancer controller logs (hyperpod-inference-system)"
    )
    if runtime is None:
        return failed(area, INVOKE_NAME, "no sagemaker-runtime client", hint)
    prompt = "kvtiers verify"
    body = (
        {"model": endpoint.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1}
        if endpoint.api == "chat"
        else {"model": endpoint.model, "prompt": prompt, "max_tokens": 1}
    )
    try:
        response = runtime.invoke_endpoint(
            EndpointName=name, ContentType="application/json", Accept="application/json", Body=json.dumps(body)
        )
        answer = json.loads(response["Body"].read())
    except ClientError as exc:
        err = exc.response.get("Error", {})
        return failed(area, INVOKE_NAME, f"invoke_endpoint {name}: {err.get('Code')}: {err.get('Message')}", hint)
    except (BotoCoreError, ValueError) as exc:
        return failed(area, INVOKE_NAME, f"invoke_endpoint {name}: {exc}", hint)
    if not answer.get("choices"):
        return failed(area, INVOKE_NAME, f"invoke_endpoint {name}: no choices in {str(answer)[:200]}", hint)
    return passed(area, INVOKE_NAME, f"SageMaker endpoint {name} answered through the operator's router")
