"""Read-only access to model weights in S3 for one Kubernetes service account, through EKS Pod Identity.

The role may list only the weights' prefix and read only objects below it; nothing else in the bucket.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_iam as iam
from constructs import Construct

import kvtiers.checks as check
from kvtiers.constructs.eks_cluster import ClusterLike, pod_identity_association, pod_identity_role

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"


def list_prefix_statement(bucket: str, prefix: str) -> iam.PolicyStatement:
    """``s3:ListBucket`` of ``bucket`` below ``prefix`` only (what ``aws s3 sync`` of the prefix lists)."""
    return iam.PolicyStatement(
        sid="ListWeightsPrefix",
        actions=["s3:ListBucket"],
        resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{bucket}"],
        conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}},
    )


class ModelReadAccess(Construct):
    """A Pod Identity role that reads one prefix of one bucket, bound to one service account.

    Attributes: ``role``, ``association`` (binds the role to the service account) and ``weights_arn`` (the ARN
    pattern of the objects the role may read).

    :param scope: the parent construct.
    :param id: the construct id.
    :param cluster: the EKS cluster of the service account.
    :param namespace: the Kubernetes namespace of the service account.
    :param service_account: the service account the role is handed to.
    :param bucket: the bucket with the weights.
    :param prefix: key prefix of the weights, without leading or trailing slash.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        namespace: str,
        service_account: str,
        bucket: str,
        prefix: str,
    ) -> None:
        super().__init__(scope, id)
        if not prefix or prefix.startswith("/") or prefix.endswith("/"):
            raise ValueError(f"ModelReadAccess: prefix {prefix!r} must not be empty or start or end with '/'")
        check.matches("ModelReadAccess", "namespace", namespace, DNS1123_LABEL, "a Kubernetes namespace name")
        bucket_arn = f"arn:{cdk.Aws.PARTITION}:s3:::{bucket}"
        self.weights_arn = f"{bucket_arn}/{prefix}/*"
        self.role = pod_identity_role(
            self, "Role", cluster=cluster, description=f"read model weights s3://{bucket}/{prefix}/"
        )
        self.role.add_to_policy(list_prefix_statement(bucket, prefix))
        self.role.add_to_policy(
            iam.PolicyStatement(sid="ReadWeights", actions=["s3:GetObject"], resources=[self.weights_arn])
        )
        self._cluster, self._namespace = cluster, namespace
        self.association = self._bind("Association", service_account)

    def _bind(self, id: str, service_account: str) -> eks_l1.CfnPodIdentityAssociation:
        check.matches(
            "ModelReadAccess",
            "service_account",
            service_account,
            DNS1123_SUBDOMAIN,
            "a Kubernetes service account name",
        )
        return pod_identity_association(
            self,
            id,
            cluster_name=self._cluster.cluster_name,
            namespace=self._namespace,
            service_account=service_account,
            role=self.role,
        )
