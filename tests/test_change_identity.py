"""``kvtiers diff`` names a deploy that EKS Pod Identity would fail: an association of a ServiceAccount that moves to
another logical ID (CloudFormation creates before it deletes; EKS keeps one association per ServiceAccount), or two
associations of one ServiceAccount in one synth."""

from __future__ import annotations

import copy

import yaml

from kvtiers.change.identity import association_conflicts
from kvtiers.change.manifests import load_templates
from tests.conftest import CONFIG_DIR
from tests.synth import synth


def association(account: str, role: str) -> dict:
    return {
        "Type": "AWS::EKS::PodIdentityAssociation",
        "Properties": {
            "ClusterName": {"Ref": "Cluster"},
            "Namespace": "serving",
            "ServiceAccount": account,
            "RoleArn": {"Fn::GetAtt": [role, "Arn"]},
        },
    }


def test_a_moved_or_doubled_association_is_a_failed_deploy_and_an_unchanged_one_is_not():
    before = {"workloads": {"Resources": {"SecretsAssociation0": association("ep-router", "SecretsRole")}}}
    same = copy.deepcopy(before)
    same["workloads"]["Resources"]["SecretsAssociation0"]["Properties"]["RoleArn"] = "arn:aws:iam::1:role/other"
    assert association_conflicts(before, same) == ()
    moved = {"workloads": {"Resources": {"ModelAccessAssociation": association("ep-router", "ModelRole")}}}
    (problem,) = association_conflicts(before, moved)
    assert "serving/ep-router" in problem and "SecretsAssociation0 to ModelAccessAssociation" in problem
    doubled = {"workloads": {"Resources": {**before["workloads"]["Resources"], **moved["workloads"]["Resources"]}}}
    assert any("2 Pod Identity associations" in p for p in association_conflicts(before, doubled))
    other_account = {"workloads": {"Resources": {"A": association("ep-engine", "ModelRole")}}}
    assert association_conflicts(before, other_account) == ()


def test_turning_a_kvaware_s3_endpoints_api_key_off_is_reported_before_it_fails(tmp_path):
    """prod's kvaware endpoint reads S3 weights: its router's association belongs to the secrets access while the
    endpoint has a key, and to the weights access without one."""
    raw = yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text())
    endpoint = next(e for e in raw["serving"]["endpoints"] if e.get("routing") == "kvaware")
    endpoint["api_key"] = False
    (tmp_path / "prod.yaml").write_text(yaml.safe_dump(raw))
    before = load_templates(synth(CONFIG_DIR / "prod.yaml", tmp_path / "before").outdir)
    after = load_templates(synth(tmp_path / "prod.yaml", tmp_path / "after").outdir)
    router = f"{endpoint['name']}-router"
    assert any(f"serving/{router}'s Pod Identity association moves" in p for p in association_conflicts(before, after))
    assert association_conflicts(before, before) == ()
