"""The Pod Identity role of one endpoint's router, apart from its engines' weights role.

A router reads no weights. It needs AWS only for the secrets its pods mount (the endpoint grants those) and, as a
``kvaware`` router over S3 weights, for the tokenizer files its init container copies from the weights' prefix
(``kvtiers.k8s_charts.serving.router.TokenizerCopy``): the role may list that prefix and read those files, nothing
else of the bucket.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtiers.constructs.eks_cluster import ClusterLike, pod_identity_role
from kvtiers.constructs.model_access import list_prefix_statement
from kvtiers.k8s_charts.serving.router import TOKENIZER_FILES
from kvtiers.k8s_charts.vllm import S3Weights


class RouterAccess(Construct):
    """A router's own Pod Identity role (the caller binds the router's service account to it).

    Attributes: ``role`` and ``tokenizer_arns`` (the object ARN patterns the role may read; empty without
    ``tokenizer_weights``).

    :param scope: the parent construct.
    :param id: the construct id.
    :param cluster: the EKS cluster of the router.
    :param description: what the role is for (the endpoint's name).
    :param tokenizer_weights: the S3 weights whose tokenizer files the router copies (a ``kvaware`` router).
        @default None: no S3 access
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterLike,
        description: str,
        tokenizer_weights: S3Weights | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.role = pod_identity_role(self, "Role", cluster=cluster, description=description)
        self.tokenizer_arns: list[str] = []
        if tokenizer_weights is not None:
            bucket, prefix = tokenizer_weights.bucket, tokenizer_weights.prefix
            # `aws s3 sync --exclude '*' --include <pattern>` matches the key below the prefix with `*` crossing
            # '/', as an IAM resource pattern does: the same files.
            self.tokenizer_arns = [
                f"arn:{cdk.Aws.PARTITION}:s3:::{bucket}/{prefix}/{pattern}" for pattern in TOKENIZER_FILES
            ]
            self.role.add_to_policy(list_prefix_statement(bucket, prefix))
            self.role.add_to_policy(
                iam.PolicyStatement(sid="ReadTokenizer", actions=["s3:GetObject"], resources=self.tokenizer_arns)
            )
