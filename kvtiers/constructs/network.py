"""The network HyperPod-on-EKS needs: private subnets with NAT egress, one HyperPod subnet in the AZ that has the
GPU capacity (chosen by AZ *ID*, because AZ names are shuffled per account), an S3 gateway endpoint, and a security
group open to itself (EFA needs all traffic both ways) with the FSx for Lustre ports.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

FSX_LUSTRE_PORTS = (ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023))


@dataclass(frozen=True)
class NewVpcProps:
    """Create a VPC."""

    hyperpod_az_id: str
    """AZ ID of the HyperPod subnet (for example ``use1-az2``)."""
    cidr: str = "10.192.0.0/16"
    """VPC CIDR. Default: a /16, room for the /24 EKS subnets and a large HyperPod subnet."""
    availability_zones: tuple[str, ...] = ("us-east-1a", "us-east-1b")
    """AZ names for the EKS subnets. Default: two us-east-1 zones (EKS needs two)."""
    hyperpod_subnet_cidr: str = "10.192.64.0/18"
    """Default: a /18, because every HyperPod pod takes a VPC IP through the VPC CNI."""
    nat_gateways: int = 1
    """Default: one NAT gateway (cost); two for AZ-independent egress."""


@dataclass(frozen=True)
class ExistingVpcProps:
    """Import an existing VPC by IDs (no synth-time lookups)."""

    vpc_id: str
    cidr: str
    private_subnet_ids: tuple[str, ...]
    availability_zones: tuple[str, ...]
    hyperpod_subnet_id: str
    hyperpod_availability_zone: str
    security_group_id: str | None = None
    """Default: none, so a security group with the EFA and FSx rules is created."""


class HyperPodNetwork(Construct):
    """VPC, EKS subnets, the HyperPod subnet and the shared security group.

    Attributes: ``vpc``, ``eks_subnets``, ``hyperpod_subnet``, ``hyperpod_availability_zone`` (AZ *name* of the
    HyperPod subnet, a deploy-time value for a new VPC) and ``security_group``.
    """

    def __init__(self, scope: Construct, id: str, *, props: NewVpcProps | ExistingVpcProps) -> None:
        super().__init__(scope, id)
        if isinstance(props, NewVpcProps):
            self._create(props)
        else:
            self._import(props)

    def _create(self, props: NewVpcProps) -> None:
        if len(props.availability_zones) < 2:
            raise ValueError("NewVpcProps.availability_zones needs at least two AZs (an EKS requirement)")
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(props.cidr),
            availability_zones=list(props.availability_zones),
            nat_gateways=props.nat_gateways,
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
            cidr_block=props.hyperpod_subnet_cidr,
            # Replaced below by the AZ ID: the L2 subnet only takes a name, HyperPod capacity is pinned by ID.
            availability_zone=props.availability_zones[0],
        )
        cfn_subnet: ec2.CfnSubnet = subnet.node.default_child  # type: ignore[assignment]
        cfn_subnet.add_property_deletion_override("AvailabilityZone")
        cfn_subnet.add_property_override("AvailabilityZoneId", props.hyperpod_az_id)
        nat = self.vpc.public_subnets[0].node.find_child("NATGateway")
        subnet.add_default_nat_route(nat.ref)  # type: ignore[attr-defined]
        cdk.Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")
        self.hyperpod_subnet: ec2.ISubnet = subnet
        self.hyperpod_availability_zone = cfn_subnet.attr_availability_zone
        self.vpc.add_gateway_endpoint(
            "S3",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnets=[*self.vpc.private_subnets, subnet])],
        )
        self.security_group = self._security_group()

    def _import(self, props: ExistingVpcProps) -> None:
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=props.vpc_id,
            vpc_cidr_block=props.cidr,
            availability_zones=list(props.availability_zones),
            private_subnet_ids=list(props.private_subnet_ids),
        )
        self.eks_subnets = list(self.vpc.private_subnets)
        self.hyperpod_subnet = ec2.Subnet.from_subnet_attributes(
            self,
            "HyperPodSubnet",
            subnet_id=props.hyperpod_subnet_id,
            availability_zone=props.hyperpod_availability_zone,
        )
        self.hyperpod_availability_zone = props.hyperpod_availability_zone
        if props.security_group_id:
            self.security_group = ec2.SecurityGroup.from_security_group_id(
                self, "SecurityGroup", props.security_group_id, mutable=False
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
