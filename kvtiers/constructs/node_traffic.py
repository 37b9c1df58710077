"""Security-group rules between the two kinds of worker nodes.

HyperPod nodes (and the control plane's ENIs) carry the project security group, which allows all traffic within
itself (EFA needs it; the HyperPod reference templates do the same). The managed system node group carries the
security group EKS creates for the cluster, which allows only itself. Nothing joins the two, so every path between
a pod on a system node and a pod on a HyperPod node is listed here, one port at a time, with its reason; the
node traffic matrix in docs/security.md is the intended result and a test evaluates the synthesized rules against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

import kvtiers.constructs._checks as check

IpProtocol = Literal["tcp", "udp"]


@dataclass(frozen=True, kw_only=True)
class PortRule:
    """One port (or port range) opened from one security group to another.

    :param protocol: ``"tcp"`` or ``"udp"``.
    :param port: the port, or the first port of a range.
    :param reason: who talks to whom and why; becomes the rule's description.
    :param to_port: the last port of a range. @default ``port`` alone
    """

    protocol: IpProtocol
    port: int
    reason: str
    to_port: int | None = None

    def __post_init__(self) -> None:
        check.one_of(f"PortRule {self.reason!r}", "protocol", self.protocol, IpProtocol)
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


def check_one_rule_per_port(owner: str, name: str, rules: Sequence[PortRule]) -> None:
    """Each rule is its own resource, named by protocol and first port: two rules for one port would collide."""
    check.distinct(owner, f"{name} (protocol, port)", [(rule.protocol, rule.port) for rule in rules])


class NodeTraffic(Construct):
    """One ``AWS::EC2::SecurityGroupIngress`` per rule between the HyperPod nodes' and the system nodes' security
    groups, so that ``cdk diff`` shows each opened port on its own.

    :param scope: the parent construct.
    :param id: the construct id.
    :param hyperpod_security_group: the group on the HyperPod nodes (and on the control plane's ENIs).
    :param system_security_group_id: the EKS-created cluster security group, on the managed node groups
        (``Cluster.cluster_security_group_id``).
    :param system_to_hyperpod: ports on HyperPod nodes opened to pods on system nodes, one rule per protocol and
        first port. @default none
    :param hyperpod_to_system: ports on system nodes opened to pods on HyperPod nodes, one rule per protocol and
        first port. @default none
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        hyperpod_security_group: ec2.ISecurityGroup,
        system_security_group_id: str,
        system_to_hyperpod: Sequence[PortRule] = (),
        hyperpod_to_system: Sequence[PortRule] = (),
    ) -> None:
        super().__init__(scope, id)
        check_one_rule_per_port("NodeTraffic", "system_to_hyperpod", system_to_hyperpod)
        check_one_rule_per_port("NodeTraffic", "hyperpod_to_system", hyperpod_to_system)
        hyperpod = hyperpod_security_group.security_group_id
        for direction, rules, group, source in (
            ("ToHyperPod", system_to_hyperpod, hyperpod, system_security_group_id),
            ("ToSystem", hyperpod_to_system, system_security_group_id, hyperpod),
        ):
            for rule in rules:
                allow_ingress(
                    self,
                    f"{direction}{rule.protocol.capitalize()}{rule.port}",
                    rule,
                    group_id=group,
                    source_group_id=source,
                )
