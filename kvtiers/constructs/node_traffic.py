"""Security-group rules between the two kinds of worker nodes.

HyperPod nodes (and the control plane's ENIs) carry the project security group, which allows all traffic within
itself (EFA needs it; the HyperPod reference templates do the same). The managed system node group carries the
security group EKS creates for the cluster, which allows only itself. Nothing joins the two, so every path between
a pod on a system node and a pod on a HyperPod node is listed here, one port at a time, with its reason; the
README's node traffic matrix is the intended result and a test evaluates the synthesized rules against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from aws_cdk import aws_ec2 as ec2
from constructs import Construct


@dataclass(frozen=True)
class PortRule:
    protocol: Literal["tcp", "udp"]
    port: int
    reason: str
    """Who talks to whom and why; becomes the rule's description."""
    to_port: int | None = None
    """Last port of a range. Default: ``port`` alone."""

    def __post_init__(self) -> None:
        if not 0 < self.port <= self.last_port < 65536:
            raise ValueError(f"PortRule {self.reason!r}: bad port range {self.port}-{self.last_port}")

    @property
    def last_port(self) -> int:
        return self.to_port if self.to_port is not None else self.port


def allow_ingress(
    scope: Construct, id: str, rule: PortRule, *, group_id: str, source_group_id: str
) -> ec2.CfnSecurityGroupIngress:
    """One ``AWS::EC2::SecurityGroupIngress`` for ``rule``, from one security group to another."""
    return ec2.CfnSecurityGroupIngress(
        scope,
        id,
        group_id=group_id,
        source_security_group_id=source_group_id,
        ip_protocol=rule.protocol,
        from_port=rule.port,
        to_port=rule.last_port,
        description=rule.reason,
    )


@dataclass(frozen=True)
class NodeTrafficProps:
    hyperpod_security_group: ec2.ISecurityGroup
    """The group on the HyperPod nodes (and on the control plane's ENIs)."""
    system_security_group_id: str
    """The EKS-created cluster security group, on the managed node groups (``Cluster.cluster_security_group_id``)."""
    system_to_hyperpod: tuple[PortRule, ...] = ()
    """Ports on HyperPod nodes opened to pods on system nodes. Default: none."""
    hyperpod_to_system: tuple[PortRule, ...] = ()
    """Ports on system nodes opened to pods on HyperPod nodes. Default: none."""


class NodeTraffic(Construct):
    """One ``AWS::EC2::SecurityGroupIngress`` per rule, so that ``cdk diff`` shows each opened port on its own."""

    def __init__(self, scope: Construct, id: str, *, props: NodeTrafficProps) -> None:
        super().__init__(scope, id)
        hyperpod = props.hyperpod_security_group.security_group_id
        for direction, rules, group, source in (
            ("ToHyperPod", props.system_to_hyperpod, hyperpod, props.system_security_group_id),
            ("ToSystem", props.hyperpod_to_system, props.system_security_group_id, hyperpod),
        ):
            for rule in rules:
                allow_ingress(
                    self,
                    f"{direction}{rule.protocol.capitalize()}{rule.port}",
                    rule,
                    group_id=group,
                    source_group_id=source,
                )
