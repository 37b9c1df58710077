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
from typing import Literal, cast

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

import kvtiers.checks as check

IpProtocol = Literal["tcp", "udp"]
TO_HYPERPOD = "ToHyperPod"
TO_SYSTEM = "ToSystem"


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


class NodeTraffic(Construct):
    """One ``AWS::EC2::SecurityGroupIngress`` per port between the HyperPod nodes' and the system nodes' security
    groups, so that ``cdk diff`` shows each opened port on its own.

    :class:`~kvtiers.constructs.eks_cluster.EksCluster` creates one when it has a system node group, and each
    construct that deploys a component adds the ports that component needs (:meth:`allow_to_hyperpod`,
    :meth:`allow_to_system`): the rules come from the component, never from a list kept elsewhere. Components that
    share a port share its rule, whose description lists every reason.

    :param scope: the parent construct.
    :param id: the construct id.
    :param hyperpod_security_group: the group on the HyperPod nodes (and on the control plane's ENIs).
    :param system_security_group_id: the EKS-created cluster security group, on the managed node groups
        (``Cluster.cluster_security_group_id``).
    :param system_to_hyperpod: ports on HyperPod nodes opened to pods on system nodes. @default none
    :param hyperpod_to_system: ports on system nodes opened to pods on HyperPod nodes. @default none
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
        self._groups = {
            TO_HYPERPOD: (hyperpod_security_group.security_group_id, system_security_group_id),
            TO_SYSTEM: (system_security_group_id, hyperpod_security_group.security_group_id),
        }
        self._rules: dict[tuple[str, str, int], tuple[ec2.CfnSecurityGroupIngress, list[str]]] = {}
        for rule in system_to_hyperpod:
            self.allow_to_hyperpod(rule)
        for rule in hyperpod_to_system:
            self.allow_to_system(rule)

    def allow_to_hyperpod(self, rule: PortRule) -> None:
        """Open ``rule`` on the HyperPod nodes to pods on the system nodes."""
        self._allow(TO_HYPERPOD, rule)

    def allow_to_system(self, rule: PortRule) -> None:
        """Open ``rule`` on the system nodes to pods on the HyperPod nodes."""
        self._allow(TO_SYSTEM, rule)

    def _allow(self, direction: str, rule: PortRule) -> None:
        # One resource per protocol and first port: its logical ID is named by them, so that a deployed rule keeps
        # its ID (a new ID for the same rule would fail: EC2 refuses a duplicate rule before the old one is gone).
        key = (direction, rule.protocol, rule.port)
        if key not in self._rules:
            group, source = self._groups[direction]
            ingress = allow_ingress(
                self,
                f"{direction}{rule.protocol.capitalize()}{rule.port}",
                rule,
                group_id=group,
                source_group_id=source,
            )
            self._rules[key] = (ingress, [rule.reason])
            return
        ingress, reasons = self._rules[key]
        # A wider range of the same first port (kvaware endpoints of several tensor-parallel sizes) widens the rule.
        ingress.to_port = max(int(cast(int, ingress.to_port)), rule.last_port)
        if rule.reason not in reasons:
            reasons.append(rule.reason)
            ingress.description = "; ".join(reasons)
