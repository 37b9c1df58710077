"""The metrics collection in the deploy graph: on in prod (workspace, collector, rules, alerts, RBAC), off in dev."""

from __future__ import annotations

import pytest
import yaml

from kvtiers.config import ConfigError, load_environment
from kvtiers.constructs.observability import COLLECTOR_USER
from kvtiers.observability.rules import rules_yaml
from kvtiers.observability.scrape import scrape_configuration
from tests.conftest import CONFIG_DIR


def resources(synthesized, stack, kind):
    template = synthesized.template_json(stack)
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def test_prod_collects_into_a_workspace_with_rules_and_alerts(prod_synth):
    env = load_environment(CONFIG_DIR / "prod.yaml")
    platform = prod_synth.graph.platform
    (workspace,) = resources(prod_synth, platform, "AWS::APS::Workspace")
    # AMP's own encryption at rest: a customer-managed key would need a role configuration on the collector.
    assert "KmsKeyArn" not in workspace
    assert "sns_configs" in str(workspace["AlertManagerDefinition"])
    (scraper,) = resources(prod_synth, platform, "AWS::APS::Scraper")
    # Plain YAML: the AWS::APS::Scraper handler encodes it itself.
    assert scraper["ScrapeConfiguration"]["ConfigurationBlob"] == scrape_configuration(env)
    assert len(scraper["Source"]["EksConfiguration"]["SubnetIds"]) == 2
    (rules,) = resources(prod_synth, platform, "AWS::APS::RuleGroupsNamespace")
    assert rules["Data"] == rules_yaml(env)
    (topic,) = resources(prod_synth, platform, "AWS::SNS::Topic")
    assert topic["TopicName"] == "kvtiers-prod-alerts" and "KmsMasterKeyId" in topic
    # AMP creates the collector's access entry itself (API authentication): a second one would fail the stack.
    assert not [
        e for e in resources(prod_synth, platform, "AWS::EKS::AccessEntry") if e.get("Username") == COLLECTOR_USER
    ]
    (policy,) = [
        p
        for p in resources(prod_synth, platform, "AWS::IAM::ManagedPolicy")
        if "aps:QueryMetrics" in str(p["PolicyDocument"])
    ]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Resource"] == {
        "Fn::GetAtt": [
            next(
                iter(
                    k
                    for k, r in prod_synth.template_json(platform)["Resources"].items()
                    if r["Type"] == "AWS::APS::Workspace"
                )
            ),
            "Arn",
        ]
    }
    rbac = prod_synth.graph.workloads.chart_objects["MetricsCollectorRbac"]
    bindings = [o for o in rbac if o["kind"] == "RoleBinding"]
    assert {b["metadata"]["namespace"] for b in bindings} == {env.serving.namespace, env.curvine.namespace}
    assert all(
        b["subjects"] == [{"kind": "User", "name": COLLECTOR_USER, "apiGroup": "rbac.authorization.k8s.io"}]
        for b in bindings
    )
    (role,) = [o for o in rbac if o["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def test_the_alert_manager_sends_to_the_environments_topic(prod_synth):
    (workspace,) = resources(prod_synth, prod_synth.graph.platform, "AWS::APS::Workspace")
    definition = workspace["AlertManagerDefinition"]
    text = "".join(part if isinstance(part, str) else "TOPIC" for part in definition["Fn::Join"][1])
    config = yaml.safe_load(yaml.safe_load(text)["alertmanager_config"])
    receivers = {receiver["name"]: receiver["sns_configs"] for receiver in config["receivers"]}
    topic = {"topic_arn": "TOPIC", "sigv4": {"region": "us-east-1"}}
    # every alert, and the watchdog on its own route with an attribute a dead-man's switch filters on
    assert receivers == {
        "sns": [{**topic, "attributes": {"environment": "kvtiers-prod"}}],
        "sns-watchdog": [{**topic, "attributes": {"environment": "kvtiers-prod", "watchdog": "true"}}],
    }


def test_dev_has_no_collection(dev_synth):
    for stack in dev_synth.graph.stacks:
        template = dev_synth.template_json(stack)
        assert not [r for r in template["Resources"].values() if r["Type"].startswith("AWS::APS::")]
    assert "MetricsCollectorRbac" not in dev_synth.graph.workloads.chart_objects


def test_the_full_threshold_must_be_above_the_eviction_watermark(tmp_path):
    raw = yaml.safe_load((CONFIG_DIR / "prod.yaml").read_text())
    raw["observability"]["l2_nearly_full_ratio"] = 0.8
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="must be above curvine.eviction.high_watermark 0.85"):
        load_environment(path)


def test_the_alert_key_lets_amp_publish_to_the_encrypted_topic_as_amp_documents(prod_synth):
    # AMP, "Giving Amazon Managed Service for Prometheus permission to send alert messages to your Amazon SNS topic":
    # the topic policy carries aws:SourceArn (the workspace) and aws:SourceAccount; the key policy of an SSE topic
    # grants aps.amazonaws.com kms:GenerateDataKey* and kms:Decrypt without them. A source condition in the key
    # policy the KMS request made on AMP's behalf may not carry would drop every alert without an error.
    resources = prod_synth.template_json(prod_synth.graph.platform)["Resources"]
    topic_id, topic = next((k, r) for k, r in resources.items() if r["Type"] == "AWS::SNS::Topic")
    key = resources[topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]]
    (statement,) = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Principal") == {"Service": "aps.amazonaws.com"}
    ]
    assert set(statement["Action"]) == {"kms:GenerateDataKey*", "kms:Decrypt"} and "Condition" not in statement
    topic_policy = next(
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::SNS::TopicPolicy" and {"Ref": topic_id} in r["Properties"]["Topics"]
    )
    (publish,) = [
        s for s in topic_policy["PolicyDocument"]["Statement"] if s.get("Principal") == {"Service": "aps.amazonaws.com"}
    ]
    assert set(publish["Condition"]) == {"ArnEquals", "StringEquals"}
    assert (
        "aws:SourceArn" in publish["Condition"]["ArnEquals"]
        and "aws:SourceAccount" in publish["Condition"]["StringEquals"]
    )
