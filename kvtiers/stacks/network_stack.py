"""``<env>-network``: the VPC, subnets and security group (changes rarely; other stacks import from it)."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from kvtiers.config.schema import Environment, ExistingVpc
from kvtiers.constructs.network import ExistingVpcProps, HyperPodNetwork, NewVpcProps


def network_props(env: Environment) -> NewVpcProps | ExistingVpcProps:
    net = env.network
    if isinstance(net, ExistingVpc):
        return ExistingVpcProps(
            vpc_id=net.vpc_id,
            cidr=net.cidr,
            private_subnet_ids=net.private_subnet_ids,
            availability_zones=net.availability_zones,
            hyperpod_subnet_id=net.hyperpod_subnet_id,
            hyperpod_availability_zone=net.hyperpod_availability_zone,
            security_group_id=net.security_group_id,
        )
    return NewVpcProps(
        hyperpod_az_id=net.hyperpod_az_id,
        cidr=net.cidr,
        availability_zones=net.availability_zones,
        hyperpod_subnet_cidr=net.hyperpod_subnet_cidr,
        nat_gateways=net.nat_gateways,
    )


class NetworkStack(cdk.Stack):
    def __init__(self, scope: Construct, id: str, *, environment: Environment, **kwargs) -> None:
        self._zones = list(environment.network.availability_zones)
        super().__init__(scope, id, **kwargs)
        self.network = HyperPodNetwork(self, "Network", props=network_props(environment))

    @property
    def availability_zones(self) -> list[str]:
        # The zones come from the environment file: no synth-time lookup, the same template for every account.
        return self._zones
