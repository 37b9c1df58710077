"""Synth is deterministic, and the logical IDs of stateful resources never change (a changed ID means
CloudFormation replaces the resource: a new cluster, an empty bucket, a fresh journal volume)."""

from __future__ import annotations

import re

from tests.synth import synth

LOCKED_LOGICAL_IDS = {
    "network": {
        "NetworkVpc7FB7348F": "AWS::EC2::VPC",
        "NetworkHyperPodSubnet6B13587E": "AWS::EC2::Subnet",
    },
    "platform": {
        "EksClusterB2BDED5B": "AWS::EKS::Cluster",
        "EksSecretsKey89C78FFD": "AWS::KMS::Key",
        "HyperPodCluster11759092": "AWS::SageMaker::Cluster",
        "HyperPodKeyBEB2AEB5": "AWS::KMS::Key",
        "HyperPodLifecycleBucket47A602DB": "AWS::S3::Bucket",
        "CurvineL2JournalKey4DA529F1": "AWS::KMS::Key",
        "CurvineL2JournalMaster0Meta1A2AB226": "AWS::EC2::Volume",
        "CurvineL2JournalMaster0Journal23EC5F57": "AWS::EC2::Volume",
    },
}

PROD_LOCKED_LOGICAL_IDS = {
    "workloads": {
        # The operator endpoint's IDs carry its fingerprint: a new fingerprint is a new endpoint (on purpose), but the
        # same fingerprint under another ID would be created and then deleted by the old ID's cleanup (one name).
        "OperatorQwen27bChatOperatorEndpointQwen27bChat2c006a16EF0BC64D": "Custom::AWSCDK-EKS-KubernetesResource",
        "OperatorQwen27bChatL2PolicyQwen27bChat2c006a163E3A41AC": "Custom::AWSCDK-EKS-KubernetesResource",
        "OperatorQwen27bChatL2PolicyReadyQwen27bChat2c006a167A41AB35": "Custom::AWSCDK-EKS-KubernetesObjectValue",
    },
}


def assert_locked(synthesized, locked: dict[str, dict[str, str]]) -> None:
    graph = synthesized.graph
    for stack_key, expected in locked.items():
        resources = synthesized.template_json(getattr(graph, stack_key))["Resources"]
        for logical_id, kind in expected.items():
            assert logical_id in resources, (
                f"{stack_key}: {logical_id} ({kind}) was renamed: CloudFormation would replace it"
            )
            assert resources[logical_id]["Type"] == kind


def test_stateful_logical_ids_are_locked(dev_synth):
    assert_locked(dev_synth, LOCKED_LOGICAL_IDS)


def test_the_operator_endpoints_logical_ids_are_locked(prod_synth):
    assert_locked(prod_synth, PROD_LOCKED_LOGICAL_IDS)


def test_journal_volumes_keep_their_ids_for_three_masters(prod_synth):
    resources = prod_synth.template_json(prod_synth.graph.platform)["Resources"]
    volumes = sorted(k for k, r in resources.items() if r["Type"] == "AWS::EC2::Volume")
    assert [re.match(r"CurvineL2JournalMaster(\d)(Meta|Journal)[0-9A-F]{8}$", v).groups() for v in volumes] == [
        (str(i), kind) for i in range(3) for kind in ("Journal", "Meta")
    ]
    assert all(resources[v]["DeletionPolicy"] == "Snapshot" for v in volumes)


def test_two_synths_of_the_same_config_are_identical(dev_synth, tmp_path):
    again = synth("config/dev.yaml", tmp_path / "again", nag=True)
    first = {p.name: p.read_text() for p in dev_synth.templates}
    second = {p.name: p.read_text() for p in again.templates}
    assert first.keys() == second.keys()
    for name, text in first.items():
        assert text == second[name], f"{name} differs between two synths of the same config"


def test_every_kubernetes_object_is_written_as_yaml_and_deterministically(dev_synth, tmp_path):
    import yaml

    files = sorted((dev_synth.outdir / "k8s").rglob("*.yaml"))
    objects = [obj for chart in dev_synth.graph.workloads.charts.values() for obj in chart.to_json()]
    assert len(files) == len(objects) > 0
    for path in files:
        obj = yaml.safe_load(path.read_text())
        assert path.name.startswith(obj["kind"].lower() + "-")
        assert "${Token[" not in path.read_text(), f"{path} holds an unresolved token"
    again = synth("config/dev.yaml", tmp_path / "again", nag=False)
    for path in files:
        twin = again.outdir / path.relative_to(dev_synth.outdir)
        assert twin.read_text() == path.read_text()
