"""The network HyperPod-on-EKS needs: private subnets with NAT egress, one HyperPod subnet in the AZ that has the
GPU capacity (chosen by AZ *ID*, because AZ names are shuffled per account), an S3 gateway endpoint, and a security
group open to itself (EFA needs all traffic both ways) with the FSx for Lustre ports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

import kvtiers.checks as check
from kvtiers.catalog.platform_defaults import (
    AZ_ID_PATTERN,
    EKS_AVAILABILITY_ZONES,
    HYPERPOD_SUBNET_CIDR,
    NAT_GATEWAYS,
    VPC_CIDR,
)

FSX_LUSTRE_PORTS = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))


@dataclass(frozen=True, kw_only=True)
class NewVpcOptions:
    """A VPC to create: private EKS subnets with NAT egress in each zone, and one HyperPod subnet.

    :param hyperpod_az_id: AZ *ID* of the HyperPod subnet (for example ``use1-az2``): where the GPU capacity is.
        IDs, not names, because names are shuffled per account.
    :param cidr: the VPC CIDR. @default ``10.192.0.0/16``, room for the /24 EKS subnets and a large HyperPod subnet
    :param availability_zones: at least two distinct AZ names for the EKS subnets (EKS needs two). @default
        ``("us-east-1a", "us-east-1b")``
    :param hyperpod_subnet_cidr: the HyperPod subnet, inside ``cidr``. @default ``10.192.64.0/18``, large because
        every HyperPod pod takes a VPC IP through the VPC CNI
    :param nat_gateways: NAT gateways, at least one (the HyperPod subnet's egress) and at most one per zone.
        @default 1 (cost); two for AZ-independent egress
    """

    hyperpod_az_id: str
    cidr: str = VPC_CIDR
    availability_zones: Sequence[str] = EKS_AVAILABILITY_ZONES
    hyperpod_subnet_cidr: str = HYPERPOD_SUBNET_CIDR
    nat_gateways: int = NAT_GATEWAYS

    def __post_init__(self) -> None:
        owner = "NewVpcOptions"
        check.matches(owner, "hyperpod_az_id", self.hyperpod_az_id, AZ_ID_PATTERN, "an AZ ID such as 'use1-az2'")
        vpc = check.ipv4_network(owner, "cidr", self.cidr)
        subnet = check.ipv4_network(owner, "hyperpod_subnet_cidr", self.hyperpod_subnet_cidr)
        if not subnet.subnet_of(vpc):
            raise ValueError(f"{owner}: hyperpod_subnet_cidr {subnet} is not inside cidr {vpc}")
        if len(self.availability_zones) < 2:
            raise ValueError(f"{owner}: availability_zones needs at least two AZs (an EKS requirement)")
        check.distinct(owner, "availability_zones", self.availability_zones)
        check.in_range(owner, "nat_gateways", self.nat_gateways, 1, len(self.availability_zones))


@dataclass(frozen=True, kw_only=True)
class ExistingVpcAttributes:
    """An existing VPC, imported by IDs (no synth-time lookups).

    :param vpc_id: the VPC ID.
    :param cidr: the VPC's primary IPv4 CIDR.
    :param private_subnet_ids: private subnets (with NAT egress) for EKS, at least two.
    :param availability_zones: AZ names of ``private_subnet_ids``, one per subnet, in the same order.
    :param hyperpod_subnet_id: the HyperPod subnet.
    :param hyperpod_availability_zone: AZ name of the HyperPod subnet.
    :param security_group_id: the security group of EKS and HyperPod. @default none: one with the EFA and FSx rules
        is created
    :param private_subnet_cidrs: CIDRs of ``private_subnet_ids``, in the same order: where the control plane's ENIs,
        and so the API server's pod proxy, are. The NetworkPolicies admit the proxy from them; a router's
        ``client_cidrs`` narrower than the VPC needs them. @default none: those rules admit the whole VPC
    :param hyperpod_subnet_cidr: the HyperPod subnet's CIDR, inside ``cidr``: the only peers Curvine's masters
        admit by address (host-network workers and FUSE clients). @default none: the whole VPC
    :param load_balancer_subnet_cidrs: CIDRs of every subnet the Inference Operator's internal ALB may have its
        addresses in (its target type is ``ip``: requests and health checks come from them), inside ``cidr``: the
        subnets tagged ``kubernetes.io/role/internal-elb``, dedicated load-balancer subnets included. The operator's
        pods admit their invocation and proxy ports from them. @default none: the whole VPC, because which subnets
        of an imported VPC carry the tag (and may gain it later) is not known at synth, and the EKS and HyperPod
        subnets alone would drop an ALB placed in subnets of its own
    """

    vpc_id: str
    cidr: str
    private_subnet_ids: Sequence[str]
    availability_zones: Sequence[str]
    hyperpod_subnet_id: str
    hyperpod_availability_zone: str
    security_group_id: str | None = None
    private_subnet_cidrs: Sequence[str] | None = None
    hyperpod_subnet_cidr: str | None = None
    load_balancer_subnet_cidrs: Sequence[str] | None = None

    def __post_init__(self) -> None:
        owner = "ExistingVpcAttributes"
        if not check.unresolved(self.cidr):
            check.ipv4_network(owner, "cidr", self.cidr)
        if len(self.private_subnet_ids) < 2:
            raise ValueError(f"{owner}: private_subnet_ids needs at least two subnets (an EKS requirement)")
        if len(self.availability_zones) != len(self.private_subnet_ids):
            raise ValueError(f"{owner}: availability_zones must list one AZ per entry of private_subnet_ids")
        if self.private_subnet_cidrs is not None:
            if len(self.private_subnet_cidrs) != len(self.private_subnet_ids):
                raise ValueError(f"{owner}: private_subnet_cidrs must list one CIDR per entry of private_subnet_ids")
            for cidr in self.private_subnet_cidrs:
                check.ipv4_network(owner, "private_subnet_cidrs", cidr)
        if self.hyperpod_subnet_cidr is not None:
            subnet = check.ipv4_network(owner, "hyperpod_subnet_cidr", self.hyperpod_subnet_cidr)
            if not check.unresolved(self.cidr) and not subnet.subnet_of(check.ipv4_network(owner, "cidr", self.cidr)):
                raise ValueError(f"{owner}: hyperpod_subnet_cidr {subnet} is not inside cidr {self.cidr}")
        if self.load_balancer_subnet_cidrs is not None:
            if isinstance(self.load_balancer_subnet_cidrs, str) or not self.load_balancer_subnet_cidrs:
                raise ValueError(
                    f"{owner}: load_balancer_subnet_cidrs must be a non-empty list of IPv4 CIDRs; leave it None for "
                    "the whole VPC"
                )
            for cidr in self.load_balancer_subnet_cidrs:
                subnet = check.ipv4_network(owner, "load_balancer_subnet_cidrs", cidr)
                if not check.unresolved(self.cidr) and not subnet.subnet_of(
                    check.ipv4_network(owner, "cidr", self.cidr)
                ):
                    raise ValueError(f"{owner}: load_balancer_subnet_cidrs {subnet} is not inside cidr {self.cidr}")


class HyperPodNetwork(Construct):
    """VPC, EKS subnets, the HyperPod subnet and the shared security group (all traffic within itself, for EFA,
    and the FSx for Lustre ports).

    Attributes: ``vpc``, ``cidr`` (the VPC's IPv4 CIDR as given, known at synth where ``vpc.vpc_cidr_block`` of a
    new VPC is not), ``eks_subnets``, ``hyperpod_subnet``, ``hyperpod_availability_zone`` (AZ *name* of the HyperPod
    subnet, a deploy-time value for a new VPC), ``hyperpod_subnet_cidr`` (None when an imported VPC does not give it),
    ``control_plane_cidrs`` (the EKS subnets' CIDRs, () when an imported VPC does not give them),
    ``load_balancer_subnet_cidrs`` (where the Inference Operator's internal ALB can have its addresses: in a new VPC
    the EKS subnets and the HyperPod subnet, which carries the ``kubernetes.io/role/internal-elb`` tag; in an imported
    one ``ExistingVpcAttributes.load_balancer_subnet_cidrs``; () when unknown at synth, for the whole VPC) and
    ``security_group``.

    :param scope: the parent construct.
    :param id: the construct id.
    :param vpc: a VPC to create (:class:`NewVpcOptions`) or to import (:class:`ExistingVpcAttributes`).
    """

    def __init__(self, scope: Construct, id: str, *, vpc: NewVpcOptions | ExistingVpcAttributes) -> None:
        super().__init__(scope, id)
        self.vpc: ec2.IVpc
        self.eks_subnets: list[ec2.ISubnet]
        self.hyperpod_subnet: ec2.ISubnet
        self.hyperpod_availability_zone: str
        self.security_group: ec2.ISecurityGroup
        self.hyperpod_subnet_cidr: str | None
        self.load_balancer_subnet_cidrs: tuple[str, ...]
        self.cidr = vpc.cidr
        if isinstance(vpc, NewVpcOptions):
            self._create(vpc)
        else:
            self._import(vpc)

    @property
    def control_plane_cidrs(self) -> tuple[str, ...]:
        """The EKS subnets' CIDRs (the control plane's ENIs, where the API server's pod proxy connects from), or ()
        for imported subnets whose CIDRs were not given."""
        try:
            cidrs = tuple(s.ipv4_cidr_block for s in self.eks_subnets)
        except RuntimeError:  # jsii: an imported subnet without its CIDR
            return ()
        return () if any(check.unresolved(c) for c in cidrs) else cidrs

    def _create(self, options: NewVpcOptions) -> None:
        self.hyperpod_subnet_cidr = options.hyperpod_subnet_cidr
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(options.cidr),
            availability_zones=list(options.availability_zones),
            nat_gateways=options.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(name="eks", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=24),
            ],
            flow_logs={"all": ec2.FlowLogOptions(traffic_type=ec2.FlowLogTrafficType.REJECT)},
        )
        self.eks_subnets = list(self.vpc.private_subnets)
        subnet = ec2.PrivateSubnet(
            self,
            "HyperPodSubnet",
            vpc_id=self.vpc.vpc_id,
            cidr_block=options.hyperpod_subnet_cidr,
            # Replaced below by the AZ ID: the L2 subnet only takes a name, HyperPod capacity is pinned by ID.
            availability_zone=options.availability_zones[0],
        )
        cfn_subnet = cast(ec2.CfnSubnet, subnet.node.default_child)
        cfn_subnet.add_property_deletion_override("AvailabilityZone")
        cfn_subnet.add_property_override("AvailabilityZoneId", options.hyperpod_az_id)
        nat = cast(ec2.CfnNatGateway, self.vpc.public_subnets[0].node.find_child("NATGateway"))
        subnet.add_default_nat_route(nat.ref)
        cdk.Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")
        self.hyperpod_subnet = subnet
        # The tagged subnet and the cluster's subnets (which the operator records for its SageMaker endpoint); none
        # (the whole VPC) if the EKS subnets' CIDRs are not known at synth.
        eks = self.control_plane_cidrs
        self.load_balancer_subnet_cidrs = (*eks, options.hyperpod_subnet_cidr) if eks else ()
        self.hyperpod_availability_zone = cfn_subnet.attr_availability_zone
        self.vpc.add_gateway_endpoint(
            "S3",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnets=[*self.vpc.private_subnets, subnet])],
        )
        self.security_group = self._security_group()

    def _import(self, attributes: ExistingVpcAttributes) -> None:
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=attributes.vpc_id,
            vpc_cidr_block=attributes.cidr,
            availability_zones=list(attributes.availability_zones),
            private_subnet_ids=list(attributes.private_subnet_ids),
            private_subnet_ipv4_cidr_blocks=(
                list(attributes.private_subnet_cidrs) if attributes.private_subnet_cidrs is not None else None
            ),
        )
        self.eks_subnets = list(self.vpc.private_subnets)
        self.hyperpod_subnet = ec2.Subnet.from_subnet_attributes(
            self,
            "HyperPodSubnet",
            subnet_id=attributes.hyperpod_subnet_id,
            availability_zone=attributes.hyperpod_availability_zone,
            ipv4_cidr_block=attributes.hyperpod_subnet_cidr,
        )
        self.hyperpod_subnet_cidr = attributes.hyperpod_subnet_cidr
        self.load_balancer_subnet_cidrs = tuple(attributes.load_balancer_subnet_cidrs or ())
        self.hyperpod_availability_zone = attributes.hyperpod_availability_zone
        if attributes.security_group_id:
            self.security_group = ec2.SecurityGroup.from_security_group_id(
                self, "SecurityGroup", attributes.security_group_id, mutable=False
            )
        else:
            self.security_group = self._security_group()

    def _security_group(self) -> ec2.SecurityGroup:
        group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=self.vpc,
            description="EKS and HyperPod nodes: all traffic within the group (EFA), FSx for Lustre",
            # Images, AWS APIs and model downloads through the NAT gateway.
            allow_all_outbound=True,
        )
        group.add_ingress_rule(group, ec2.Port.all_traffic(), "all traffic within the group (EFA)")
        # EFA also needs an outbound rule naming the group itself (HyperPod prerequisites; every reference template
        # has it). A resource of its own: CDK drops peer egress rules while allow_all_outbound is on.
        ec2.CfnSecurityGroupEgress(
            self,
            "EgressToItself",
            group_id=group.security_group_id,
            destination_security_group_id=group.security_group_id,
            ip_protocol="-1",
            description="all traffic within the group (EFA)",
        )
        for port in FSX_LUSTRE_PORTS:
            group.add_ingress_rule(group, port, "FSx for Lustre")
        return group
