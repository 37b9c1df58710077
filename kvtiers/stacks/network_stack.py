"""``<env>-network``: the VPC, subnets and security group (changes rarely; other stacks import from it)."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from kvtiers.config.schema import Environment
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.stacks.wiring import platform as wiring


class NetworkStack(cdk.Stack):
    def __init__(self, scope: Construct, id: str, *, environment: Environment, **kwargs: Any) -> None:
        vpc = wiring.network_vpc(environment)
        self._zones = list(vpc.availability_zones)
        super().__init__(scope, id, **kwargs)
        self.network = HyperPodNetwork(self, "Network", vpc=vpc)

    @property
    def availability_zones(self) -> list[str]:
        # The zones come from the environment file: no synth-time lookup, the same template for every account.
        return self._zones
