"""Read-only access to model weights in S3 for one Kubernetes service account, through EKS Pod Identity.

The role may list only the weights' prefix and read only objects below it; nothing else in the bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtiers.constructs.eks_cluster import pod_identity_role


@dataclass(frozen=True)
class ModelReadAccessProps:
    cluster: eks.ICluster
    namespace: str
    service_account: str
    bucket: str
    prefix: str
    """Key prefix of the weights, without leading or trailing slash."""


class ModelReadAccess(Construct):
    """``role`` is the Pod Identity role; ``association`` binds it to the service account."""

    def __init__(self, scope: Construct, id: str, *, props: ModelReadAccessProps) -> None:
        super().__init__(scope, id)
        if props.prefix.startswith("/") or props.prefix.endswith("/") or not props.prefix:
            raise ValueError(f"ModelReadAccessProps.prefix {props.prefix!r} must not be empty or start/end with '/'")
        bucket_arn = f"arn:{cdk.Aws.PARTITION}:s3:::{props.bucket}"
        self.role = pod_identity_role(self, "Role", f"read model weights s3://{props.bucket}/{props.prefix}/")
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ListWeightsPrefix",
                actions=["s3:ListBucket"],
                resources=[bucket_arn],
                conditions={"StringLike": {"s3:prefix": [props.prefix, f"{props.prefix}/*"]}},
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadWeights", actions=["s3:GetObject"], resources=[f"{bucket_arn}/{props.prefix}/*"]
            )
        )
        self.weights_resource = f"arn:<AWS::Partition>:s3:::{props.bucket}/{props.prefix}/*"
        """The object wildcard as cdk-nag names it in its IAM5 finding."""
        self.association = eks_l1.CfnPodIdentityAssociation(
            self,
            "Association",
            cluster_name=props.cluster.cluster_name,
            namespace=props.namespace,
            service_account=props.service_account,
            role_arn=self.role.role_arn,
        )
