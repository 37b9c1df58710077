"""cdk-nag AwsSolutions findings the project accepts, each with its reason, in one place.

Acknowledgments are attached to the narrowest construct that carries the finding. Most are on resources that
aws-cdk-lib creates for us (the kubectl provider, the bucket-deployment Lambda) whose policies we do not write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aws_cdk as cdk
from constructs import IConstruct

if TYPE_CHECKING:
    from kvtiers.stacks.deploy_graph import DeployGraph


def acknowledge(scope: IConstruct, reason: str, *rules: str) -> None:
    for rule in rules:
        cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


def managed_policy(name: str) -> str:
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]"


CDK_PROVIDED = (
    "created by aws-cdk-lib (kubectl provider, custom-resource framework, bucket deployment); its policies and "
    "runtime are managed by aws-cdk-lib, pinned with the library version"
)
LAMBDA_BASICS = (
    managed_policy("service-role/AWSLambdaBasicExecutionRole"),
    managed_policy("service-role/AWSLambdaVPCAccessExecutionRole"),
    managed_policy("AmazonEC2ContainerRegistryReadOnly"),
    "AwsSolutions-L1",
)


def acknowledge_platform_findings(graph: DeployGraph) -> None:
    acknowledge(
        graph.network,
        "the EKS subnets' AZ names come from the environment file on purpose: deterministic synth, no lookups",
        "CloudFormation-Validate::W3010",
    )
    platform = graph.platform
    cluster = platform.eks.cluster
    # The CDK asset bucket's objects, which aws-cdk-lib's handlers read (default bootstrap qualifier).
    asset_objects = (
        f"AwsSolutions-IAM5[Resource::arn:aws:s3:::cdk-hnb659fds-assets-{platform.account}-{platform.region}/*]"
    )
    kubectl = cluster.node.find_child("KubectlProvider")
    acknowledge(
        kubectl,
        CDK_PROVIDED,
        *LAMBDA_BASICS,
        'AwsSolutions-IAM4[Policy::{"Fn::If":["EksClusterKubectlProviderHandlerHasEcrPublicC426D1A5",{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]',
        "AwsSolutions-IAM5[Resource::<EksClusterKubectlProviderHandlerDA75FB7A.Arn>:*]",
    )
    acknowledge(
        cluster.role,
        "AmazonEKSClusterPolicy is the policy EKS documents for the cluster service role",
        managed_policy("AmazonEKSClusterPolicy"),
    )
    if platform.eks.system_nodegroup is not None:
        acknowledge(
            platform.eks.system_nodegroup.role,
            "the three managed policies EKS documents for managed node groups",
            managed_policy("AmazonEKSWorkerNodePolicy"),
            managed_policy("AmazonEKS_CNI_Policy"),
            managed_policy("AmazonEC2ContainerRegistryReadOnly"),
        )
    if platform.hyperpod_dependencies is not None:
        acknowledge(
            kubectl,
            CDK_PROVIDED + "; the read grant lets the Helm handler fetch the vendored HyperPod dependency chart from "
            "the CDK asset bucket (aws_eks_v2.HelmChart with chart_asset)",
            "AwsSolutions-IAM5[Action::s3:GetBucket*]",
            "AwsSolutions-IAM5[Action::s3:GetObject*]",
            "AwsSolutions-IAM5[Action::s3:List*]",
            asset_objects,
        )
    hyperpod = platform.hyperpod
    if hyperpod is None:
        return
    acknowledge(
        hyperpod.execution_role,
        "AmazonSageMakerClusterInstanceRolePolicy is required by HyperPod for instance-group roles",
        managed_policy("AmazonSageMakerClusterInstanceRolePolicy"),
    )
    acknowledge(
        hyperpod.execution_role,
        "ecr:GetAuthorizationToken has no resource scope; image repositories are public or per-account and "
        "pulled by any node; read-only S3/KMS actions come from grant_read on the lifecycle bucket and its key",
        "AwsSolutions-IAM5[Resource::*]",
        "AwsSolutions-IAM5[Action::s3:GetBucket*]",
        "AwsSolutions-IAM5[Action::s3:GetObject*]",
        "AwsSolutions-IAM5[Action::s3:List*]",
        "AwsSolutions-IAM5[Resource::<HyperPodLifecycleBucket47A602DB.Arn>/*]",
    )
    acknowledge(
        hyperpod.execution_role,
        "the VPC CNI creates, attaches and tags ENIs whose IDs exist only at run time, on HyperPod nodes whose "
        "instance IDs are assigned by HyperPod; scoped to this account and region (and the subnet and security group "
        "for the actions that take them), as the HyperPod reference templates do",
        *(
            f"AwsSolutions-IAM5[Resource::arn:aws:ec2:{platform.region}:{platform.account}:{kind}/*]"
            for kind in ("instance", "network-interface")
        ),
    )
    acknowledge(
        hyperpod.lifecycle_bucket,
        "holds only the project's own lifecycle script, written by CDK; versioned, and reads are in CloudTrail",
        "AwsSolutions-S1",
    )
    deployment_handler = next(c for c in platform.node.children if c.node.id.startswith("Custom::CDKBucketDeployment"))
    acknowledge(
        deployment_handler,
        CDK_PROVIDED + "; it copies the lifecycle scripts from the CDK asset bucket into the lifecycle bucket",
        *LAMBDA_BASICS,
        "AwsSolutions-IAM5[Action::s3:GetBucket*]",
        "AwsSolutions-IAM5[Action::s3:GetObject*]",
        "AwsSolutions-IAM5[Action::s3:List*]",
        "AwsSolutions-IAM5[Action::s3:Abort*]",
        "AwsSolutions-IAM5[Action::s3:DeleteObject*]",
        "AwsSolutions-IAM5[Resource::<HyperPodLifecycleBucket47A602DB.Arn>/*]",
        asset_objects,
        "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
        "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
    )
    acknowledge(
        platform.ebs_csi_role,
        "AmazonEBSCSIDriverPolicy is the policy the EBS CSI add-on documents; its KMS wildcards come from "
        "grant_encrypt_decrypt on the journal volumes' own key",
        managed_policy("service-role/AmazonEBSCSIDriverPolicy"),
        "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
        "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
    )


def acknowledge_workload_findings(graph: DeployGraph) -> None:
    from kvtiers.constructs.model_access import ModelReadAccess

    for access in (c for c in graph.workloads.node.find_all() if isinstance(c, ModelReadAccess)):
        acknowledge(
            access.role,
            "read-only GetObject on the objects below one model prefix: the weights are many files",
            f"AwsSolutions-IAM5[Resource::{access.weights_resource}]",
        )
    operator = graph.platform.inference_operator
    if operator is not None:
        acknowledge(
            operator.tls_bucket,
            "holds only the operator's generated TLS certificates; versioned, TLS-only",
            "AwsSolutions-S1",
        )
        acknowledge(
            operator.execution_role,
            "AmazonSageMakerHyperPodInferenceAccess is the policy the operator add-on requires; the S3 wildcards "
            "come from grant_read_write on the operator's own TLS certificate bucket",
            managed_policy("AmazonSageMakerHyperPodInferenceAccess"),
            *(
                f"AwsSolutions-IAM5[Action::s3:{a}*]"
                for a in ("Abort", "DeleteObject", "GetBucket", "GetObject", "List")
            ),
            f"AwsSolutions-IAM5[Resource::<{graph.platform.get_logical_id(operator.tls_bucket.node.default_child)}.Arn>/*]",
        )
        acknowledge(
            operator.keda_role, "CloudWatch metric reads have no resource-level scope", "AwsSolutions-IAM5[Resource::*]"
        )
        acknowledge(
            operator.s3_csi_role,
            "read-only GetObject in the model buckets the environment names (Mountpoint mounts whole buckets)",
            *(
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{b}/*]"
                for b in graph.platform.operator_model_buckets
            ),
        )
