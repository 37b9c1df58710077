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

import aws_cdk as cdk
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

import kvtiers.checks as check
from kvtiers.constructs.eks_cluster import ClusterLike
from kvtiers.constructs.node_traffic import PortRule, allow_ingress

COLLECTOR_USER = "aps-collector-user"
"""The Kubernetes user the collector's access entry maps to; the RBAC objects bind it (AWS managed-collector docs)."""
SERVICE = "aps.amazonaws.com"


class Observability(Construct):
    """Metrics of one EKS cluster into a workspace, with rules and alerts.

    Attributes: ``workspace``, ``scraper``, ``rules``, ``topic``, ``key``, ``security_group`` (the collector's
    ENIs) and ``query_policy``.

    :param scope: the parent construct.
    :param id: the construct id.
    :param cluster: the EKS cluster to scrape; its cluster security group (system nodes and the control plane's
        ENIs) gets the ``to_system`` rules.
    :param vpc: the cluster's VPC.
    :param subnets: at least two subnets in two AZs, for the collector's ENIs.
    :param hyperpod_security_group: the security group of the HyperPod nodes; it gets the ``to_hyperpod`` rules.
    :param scrape_configuration: the collector's Prometheus scrape configuration (YAML).
    :param rule_groups: the workspace's recording and alert rules (Prometheus rule-file YAML).
    :param alertmanager_definition: ``(topic_arn) -> YAML``: the alert manager definition for the topic this
        construct creates.
    :param environment_name: the workspace alias and a prefix of the descriptions.
    :param to_hyperpod: ports on the HyperPod nodes the collector scrapes, one rule per port. @default none
    :param to_system: ports on the system nodes and control plane the collector reaches, one rule per port.
        @default none
    :param alert_topic_name: name of the alert topic. @default a CloudFormation-generated name
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        hyperpod_security_group: ec2.ISecurityGroup,
        scrape_configuration: str,
        rule_groups: str,
        alertmanager_definition: Callable[[str], str],
        environment_name: str,
        to_hyperpod: Sequence[PortRule] = (),
        to_system: Sequence[PortRule] = (),
        alert_topic_name: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        if len(subnets) < 2:
            raise ValueError(f"Observability: subnets needs at least two subnets in two AZs, got {len(subnets)}")
        for name, rules in (("to_hyperpod", to_hyperpod), ("to_system", to_system)):
            check.distinct("Observability", f"{name} ports", [rule.port for rule in rules])
        stack = cdk.Stack.of(self)
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            description=f"{environment_name}: metrics workspace and alert topic",
        )
        # The workspace's alert manager publishes to the encrypted topic as the AMP service, and SNS calls KMS on its
        # behalf. The statement is the one AMP documents for an SSE topic ("Giving Amazon Managed Service for
        # Prometheus permission to send alert messages to your Amazon SNS topic"): no aws:SourceAccount or
        # aws:SourceArn condition, which the KMS request made on the service's behalf need not carry (AWS documents
        # exactly that for EventBridge and encrypted topics); a condition it lacks would drop every alert silently.
        # The key encrypts only this topic, and the topic policy below keeps AMP's confused-deputy conditions.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AlertManagerPublishesEncrypted",
                actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                principals=[iam.ServicePrincipal(SERVICE)],
                resources=["*"],
            )
        )
        # The workspace keeps AMP's own encryption at rest (an AWS-owned key): a customer-managed key would need a
        # source and target role configuration on the managed collector to write to it. The key encrypts the
        # alert topic.
        self.workspace = aps.CfnWorkspace(self, "Workspace", alias=environment_name)
        self.topic = sns.Topic(self, "AlertTopic", topic_name=alert_topic_name, master_key=self.key, enforce_ssl=True)
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
        self.workspace.alert_manager_definition = alertmanager_definition(self.topic.topic_arn)
        self.rules = aps.CfnRuleGroupsNamespace(
            self, "Rules", name="kvtiers", workspace=self.workspace.attr_arn, data=rule_groups
        )

        self.security_group = ec2.SecurityGroup(
            self,
            "ScraperSecurityGroup",
            vpc=vpc,
            allow_all_outbound=False,
            description=f"{environment_name}: managed metrics collector ENIs",
        )
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "remote write to the workspace and the Kubernetes API"
        )
        for direction, rules, group_id in (
            ("Hyperpod", to_hyperpod, hyperpod_security_group.security_group_id),
            ("System", to_system, cluster.cluster_security_group_id),
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
            alias=f"{environment_name}-eks",
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=cluster.cluster_arn,
                    subnet_ids=[s.subnet_id for s in subnets],
                    security_group_ids=[self.security_group.security_group_id],
                )
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(workspace_arn=self.workspace.attr_arn)
            ),
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                # Plain YAML: the resource handler encodes it (its CloudFormation example passes the text).
                configuration_blob=scrape_configuration
            ),
        )
        # No access entry here: with API authentication, Amazon Managed Service for Prometheus creates the
        # collector's entry itself (as COLLECTOR_USER) when the scraper is created, and a second one would fail.
        # The Kubernetes RBAC for that user is the workloads stack's ScraperRbacChart.
        # For Grafana, `kvtiers top` and scripts: read-only queries of this workspace, nothing else.
        self.query_policy = iam.ManagedPolicy(
            self,
            "QueryPolicy",
            description=f"{environment_name}: query the metrics workspace",
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
