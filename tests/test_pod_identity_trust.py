"""Every Pod Identity role kvtiers creates trusts EKS Pod Identity only for this account and this cluster: the
confused-deputy guard (``aws:SourceAccount``) and the cluster session tag EKS Pod Identity sets on every session
(``aws:RequestTag/eks-cluster-arn``, EKS User Guide "Create IAM role with trust policy required by EKS Pod Identity"
and "Grant Pods access to AWS resources based on tags"), on the synthesized templates of both example environments."""

from __future__ import annotations

import json

import pytest

POD_IDENTITY = "pods.eks.amazonaws.com"


def _pod_identity_statements(synth) -> list[tuple[str, dict]]:
    found = []
    for path in synth.templates:
        for logical_id, resource in json.loads(path.read_text())["Resources"].items():
            if resource["Type"] != "AWS::IAM::Role":
                continue
            for statement in resource["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
                if statement.get("Principal", {}).get("Service") == POD_IDENTITY:
                    found.append((f"{path.name} {logical_id}", statement))
    return found


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_every_pod_identity_role_trusts_only_this_account_and_this_cluster(env_name, request):
    synth = request.getfixturevalue(f"{env_name}_synth")
    statements = _pod_identity_statements(synth)
    assert len(statements) >= 3  # the EBS CSI driver's, and per endpoint the engines' and the router's
    for name, statement in statements:
        assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"], name
        condition = statement.get("Condition", {}).get("StringEquals", {})
        assert condition.get("aws:SourceAccount") == synth.graph.environment.account, (name, statement)
        # The EKS cluster's ARN: the cluster resource's attribute, or its export into the workloads stack.
        cluster_arn = json.dumps(condition.get("aws:RequestTag/eks-cluster-arn"))
        assert "EksCluster" in cluster_arn and "Arn" in cluster_arn, (name, cluster_arn)
