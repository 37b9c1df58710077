"""One cdk8s Chart per self-managed endpoint (one EKS manifest): engines, LMCache config and router.

The serving Namespace and the Curvine L2 claim are created by the storage chart, which the app orders first.
"""

from __future__ import annotations

import cdk8s
from constructs import Construct

from kvtiers.k8s_charts.serving.endpoint import EngineDeployment
from kvtiers.k8s_charts.serving.props import ServingProps
from kvtiers.k8s_charts.serving.router import Router


class ServingChart(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, props: ServingProps) -> None:
        super().__init__(scope, id, namespace=props.namespace, disable_resource_name_hashes=True)
        self.props = props
        self.engine = EngineDeployment(self, "Engine", props=props)
        self.router = Router(self, "Router", props=props)

    @property
    def engine_service_account_name(self) -> str:
        """Subject of the EKS Pod Identity association that reads the S3 weights."""
        return self.props.engine.service_account_name
