"""Metrics for one environment: an Amazon Managed Service for Prometheus workspace (AMP's own encryption at rest), its
managed collector for the EKS cluster, the rule groups, and the alert manager publishing to an encrypted SNS topic.

Why the managed collector and not the HyperPod observability add-on: the add-on installs its own collectors for
cluster, node, GPU and EFA metrics into a workspace it manages, with its own dashboards; it has no place for the
targets kvtiers needs (vLLM and LMCache on the engine port, the router, the Curvine masters and workers) and would
put its own agents on the GPU nodes. The managed collector is agentless, takes a plain Prometheus scrape
configuration (kvtiers/observability/scrape.py), and is one CloudFormation resource that ``cdk diff`` shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from kvtiers.constructs.node_traffic import PortRule, allow_ingress

COLLECTOR_USER = "aps-collector-user"
"""The Kubernetes user the collector's access entry maps to; the RBAC objects bind it (AWS managed-collector docs)."""
SERVICE = "aps.amazonaws.com"


@dataclass(frozen=True)
class ObservabilityProps:
    cluster_name: str
    cluster_arn: str
    vpc: ec2.IVpc
    subnets: Sequence[ec2.ISubnet]
    """At least two subnets in two AZs (the collector's ENIs)."""
    hyperpod_security_group: ec2.ISecurityGroup
    system_security_group_id: str
    """The EKS cluster security group (system nodes and the control plane's ENIs)."""
    to_hyperpod: tuple[PortRule, ...]
    to_system: tuple[PortRule, ...]
    scrape_configuration: str
    rule_groups: str
    alert_topic_name: str
    alertmanager_definition: Callable[[str], str]
    """``(topic_arn) -> YAML``: the alert manager definition for the topic this construct creates."""
    environment_name: str


class Observability(Construct):
    """Attributes: ``workspace``, ``scraper``, ``topic``, ``key``, ``security_group``, ``query_policy``."""

    def __init__(self, scope: Construct, id: str, *, props: ObservabilityProps) -> None:
        super().__init__(scope, id)
        stack = cdk.Stack.of(self)
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            description=f"{props.environment_name}: metrics workspace and alert topic",
        )
        # The workspace's alert manager publishes to the encrypted topic as the AMP service.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                principals=[iam.ServicePrincipal(SERVICE)],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            )
        )
        # The workspace keeps AMP's own encryption at rest (an AWS-owned key): a customer-managed key would need a
        # source and target role configuration on the managed collector to write to it. The key encrypts the
        # alert topic.
        self.workspace = aps.CfnWorkspace(self, "Workspace", alias=props.environment_name)
        self.topic = sns.Topic(
            self, "AlertTopic", topic_name=props.alert_topic_name, master_key=self.key, enforce_ssl=True
        )
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["sns:Publish", "sns:GetTopicAttributes"],
                principals=[iam.ServicePrincipal(SERVICE)],
                resources=[self.topic.topic_arn],
                conditions={
                    "ArnEquals": {"aws:SourceArn": self.workspace.attr_arn},
                    "StringEquals": {"aws:SourceAccount": stack.account},
                },
            )
        )
        self.workspace.alert_manager_definition = props.alertmanager_definition(self.topic.topic_arn)
        self.rules = aps.CfnRuleGroupsNamespace(
            self, "Rules", name="kvtiers", workspace=self.workspace.attr_arn, data=props.rule_groups
        )

        self.security_group = ec2.SecurityGroup(
            self,
            "ScraperSecurityGroup",
            vpc=props.vpc,
            allow_all_outbound=False,
            description=f"{props.environment_name}: managed metrics collector ENIs",
        )
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "remote write to the workspace and the Kubernetes API"
        )
        for direction, rules, group_id in (
            ("Hyperpod", props.to_hyperpod, props.hyperpod_security_group.security_group_id),
            ("System", props.to_system, props.system_security_group_id),
        ):
            for rule in rules:
                allow_ingress(
                    self,
                    f"ScrapeTo{direction}{rule.port}",
                    rule,
                    group_id=group_id,
                    source_group_id=self.security_group.security_group_id,
                )
                ec2.CfnSecurityGroupEgress(
                    self,
                    f"ScrapeFrom{direction}{rule.port}",
                    group_id=self.security_group.security_group_id,
                    ip_protocol=rule.protocol,
                    destination_security_group_id=group_id,
                    from_port=rule.port,
                    to_port=rule.last_port,
                    description=rule.reason,
                )

        self.scraper = aps.CfnScraper(
            self,
            "Scraper",
            alias=f"{props.environment_name}-eks",
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=props.cluster_arn,
                    subnet_ids=[s.subnet_id for s in props.subnets],
                    security_group_ids=[self.security_group.security_group_id],
                )
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(workspace_arn=self.workspace.attr_arn)
            ),
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                # Plain YAML: the resource handler encodes it (its CloudFormation example passes the text).
                configuration_blob=props.scrape_configuration
            ),
        )
        # No access entry here: with API authentication, Amazon Managed Service for Prometheus creates the
        # collector's entry itself (as COLLECTOR_USER) when the scraper is created, and a second one would fail.
        # The Kubernetes RBAC for that user is the workloads stack's ScraperRbacChart.
        # For Grafana, `kvtiers top` and scripts: read-only queries of this workspace, nothing else.
        self.query_policy = iam.ManagedPolicy(
            self,
            "QueryPolicy",
            description=f"{props.environment_name}: query the metrics workspace",
            statements=[
                iam.PolicyStatement(
                    actions=["aps:QueryMetrics", "aps:GetLabels", "aps:GetSeries", "aps:GetMetricMetadata"],
                    resources=[self.workspace.attr_arn],
                )
            ],
        )
        cdk.CfnOutput(
            self,
            "PrometheusEndpoint",
            value=self.workspace.attr_prometheus_endpoint,
            description="Prometheus-compatible query URL (SigV4, service aps): kvtiers top --url",
        )
        cdk.CfnOutput(self, "QueryPolicyArn", value=self.query_policy.managed_policy_arn)
