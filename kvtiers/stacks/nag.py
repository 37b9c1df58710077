"""cdk-nag AwsSolutions findings the project accepts, each with its reason, in one place.

Acknowledgments are attached to the narrowest construct that carries the finding. Most are on resources that
aws-cdk-lib creates for us (the kubectl provider, the bucket-deployment Lambda) whose policies we do not write.

A finding names a resource the way cdk-nag writes the resolved CloudFormation value (``<LogicalId.Arn>/*``,
``arn:<AWS::Partition>:...``). Those names are derived here from the construct that owns the resource, never
written out, so that no acknowledgment depends on a hashed logical ID, the bootstrap qualifier, the account or the
region.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3_assets as s3_assets
from constructs import IConstruct

from kvtiers.constructs.eks_cluster import EksCluster
from kvtiers.constructs.endpoint_secrets import EndpointSecretAccess
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster
from kvtiers.constructs.hyperpod_dependencies import HyperPodDependencies
from kvtiers.constructs.model_access import ModelReadAccess
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.constructs.router_access import RouterAccess

if TYPE_CHECKING:
    from kvtiers.constructs.hyperpod_inference import InferenceOperator


def acknowledge(scope: IConstruct, reason: str, *rules: str) -> None:
    validations = cdk.Validations.of(scope)  # one jsii round trip for all the rules
    for rule in rules:
        validations.acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


def managed_policy(name: str) -> str:
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]"


def flattened(scope: IConstruct, value: Any) -> str:
    """``value`` resolved in ``scope``'s stack and written as cdk-nag writes it in a finding."""
    return _flat(cdk.Stack.of(scope).resolve(value))


def _flat(node: Any) -> str:
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict) and len(node) == 1:
        ((function, argument),) = node.items()
        if function == "Fn::Join":
            delimiter, parts = argument
            return str(delimiter).join(_flat(part) for part in parts)
        if function in ("Fn::Sub", "Fn::ImportValue"):
            return _flat(argument)
        if function == "Fn::GetAtt":
            return f"<{_flat(argument[0])}.{_flat(argument[1])}>"
        if function == "Ref":
            return f"<{_flat(argument)}>"
    return json.dumps(node, separators=(",", ":"))


def wildcard_resource(scope: IConstruct, arn: str) -> str:
    """The IAM5 finding of a wildcard resource ``arn`` (a token or a string) of a policy in ``scope``'s stack."""
    return f"AwsSolutions-IAM5[Resource::{flattened(scope, arn)}]"


def asset_objects(asset: s3_assets.Asset) -> str:
    """The IAM5 finding of the objects in the bucket ``asset`` is published to (the bootstrap stack's, named by the
    stack's synthesizer)."""
    return wildcard_resource(asset, asset.bucket.arn_for_objects("*"))


def conditional_managed_policies(role: iam.IRole, name: str) -> list[str]:
    """The IAM4 findings of the AWS managed policy ``name`` where ``role`` attaches it under a condition (cdk-nag
    writes a conditional ARN as the JSON of its ``Fn::If``, which names the condition's logical ID)."""
    cfn_role = cast(iam.CfnRole, role.node.default_child)
    arns = cdk.Stack.of(role).resolve(cfn_role.managed_policy_arns) or []
    return [
        f"AwsSolutions-IAM4[Policy::{_flat(arn)}]"
        for arn in arns
        if isinstance(arn, dict) and "Fn::If" in arn and f":iam::aws:policy/{name}" in _flat(arn)
    ]


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
ASSET_READS = (
    "AwsSolutions-IAM5[Action::s3:GetBucket*]",
    "AwsSolutions-IAM5[Action::s3:GetObject*]",
    "AwsSolutions-IAM5[Action::s3:List*]",
)


def acknowledge_network(network: HyperPodNetwork) -> None:
    acknowledge(
        network,
        "the EKS subnets' AZ names come from the environment file on purpose: deterministic synth, no lookups",
        "CloudFormation-Validate::W3010",
    )


def _kubectl_provider(cluster: EksCluster) -> eks.IKubectlProvider:
    provider = cluster.cluster.kubectl_provider
    if provider is None:
        raise ValueError(f"{cluster.node.path}: the cluster has no kubectl provider")
    return provider


def acknowledge_eks(cluster: EksCluster) -> None:
    kubectl = _kubectl_provider(cluster)
    handler_role = kubectl.role
    assert handler_role is not None, "the kubectl provider has a handler role"
    handler = cast(lambda_.Function, handler_role.node.scope)
    acknowledge(
        kubectl,
        CDK_PROVIDED,
        *LAMBDA_BASICS,
        *conditional_managed_policies(handler_role, "AmazonElasticContainerRegistryPublicReadOnly"),
        wildcard_resource(kubectl, f"{handler.function_arn}:*"),
    )
    acknowledge(
        cluster.cluster.role,
        "AmazonEKSClusterPolicy is the policy EKS documents for the cluster service role",
        managed_policy("AmazonEKSClusterPolicy"),
    )
    if cluster.system_nodegroup is not None:
        acknowledge(
            cluster.system_nodegroup.role,
            "the three managed policies EKS documents for managed node groups",
            managed_policy("AmazonEKSWorkerNodePolicy"),
            managed_policy("AmazonEKS_CNI_Policy"),
            managed_policy("AmazonEC2ContainerRegistryReadOnly"),
        )


def acknowledge_dependency_chart(cluster: EksCluster, dependencies: HyperPodDependencies) -> None:
    acknowledge(
        _kubectl_provider(cluster),
        CDK_PROVIDED + "; the read grant lets the Helm handler fetch the vendored HyperPod dependency chart from "
        "the CDK asset bucket (aws_eks_v2.HelmChart with chart_asset)",
        *ASSET_READS,
        asset_objects(dependencies.chart_asset),
    )


def acknowledge_hyperpod(hyperpod: HyperPodCluster) -> None:
    lifecycle_objects = wildcard_resource(hyperpod, hyperpod.lifecycle_bucket.arn_for_objects("*"))
    acknowledge(
        hyperpod.execution_role,
        "AmazonSageMakerClusterInstanceRolePolicy is required by HyperPod for instance-group roles",
        managed_policy("AmazonSageMakerClusterInstanceRolePolicy"),
    )
    acknowledge(
        hyperpod.execution_role,
        "ecr:GetAuthorizationToken has no resource scope; image repositories are public or per-account and "
        "pulled by any node; cloudwatch:DescribeAlarms (read-only alarm metadata for an AMI update's automatic "
        "rollback) sees composite alarms only when scoped to *; read-only S3/KMS actions come from grant_read on the "
        "lifecycle bucket and its key",
        "AwsSolutions-IAM5[Resource::*]",
        *ASSET_READS,
        lifecycle_objects,
    )
    stack = cdk.Stack.of(hyperpod)
    acknowledge(
        hyperpod.execution_role,
        "HyperPod and the VPC CNI create, attach, share (network interface permissions) and tag ENIs whose IDs exist "
        "only at run time, on HyperPod nodes whose instance IDs HyperPod assigns; scoped to this account and region "
        "(and the subnet and security group for the actions that take them), as the HyperPod reference templates do. "
        "Detaching also names HyperPod's instances, which live in a SageMaker service account: any account's "
        "instance in this region, with this account's network interfaces only",
        *(
            wildcard_resource(hyperpod, stack.format_arn(service="ec2", resource=kind, resource_name="*"))
            for kind in ("instance", "network-interface")
        ),
        wildcard_resource(
            hyperpod, stack.format_arn(service="ec2", resource="instance", resource_name="*", account="*")
        ),
    )
    acknowledge(
        hyperpod.lifecycle_bucket,
        "holds only the project's own lifecycle script, written by CDK; versioned, and reads are in CloudTrail",
        "AwsSolutions-S1",
    )
    deployment = hyperpod.lifecycle_deployment
    # The bucket deployment's Lambda is a singleton of the stack; its role's scope is that function.
    handler = deployment.handler_role.node.scope
    assert handler is not None, "the bucket deployment's role belongs to its handler"
    scripts = next(c for c in deployment.node.find_all() if isinstance(c, s3_assets.Asset))
    acknowledge(
        handler,
        CDK_PROVIDED + "; it copies the lifecycle scripts from the CDK asset bucket into the lifecycle bucket",
        *LAMBDA_BASICS,
        *ASSET_READS,
        "AwsSolutions-IAM5[Action::s3:Abort*]",
        "AwsSolutions-IAM5[Action::s3:DeleteObject*]",
        lifecycle_objects,
        asset_objects(scripts),
        "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
        "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
    )


def acknowledge_ebs_csi_role(role: iam.IRole) -> None:
    acknowledge(
        role,
        "AmazonEBSCSIDriverPolicy is the policy the EBS CSI add-on documents; its KMS wildcards come from "
        "grant_encrypt_decrypt on the journal volumes' own key",
        managed_policy("service-role/AmazonEBSCSIDriverPolicy"),
        "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
        "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
    )


def acknowledge_inference_operator(operator: InferenceOperator) -> None:
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
        *(f"AwsSolutions-IAM5[Action::s3:{a}*]" for a in ("Abort", "DeleteObject", "GetBucket", "GetObject", "List")),
        wildcard_resource(operator, operator.tls_bucket.arn_for_objects("*")),
    )
    acknowledge(
        operator.keda_role, "CloudWatch metric reads have no resource-level scope", "AwsSolutions-IAM5[Resource::*]"
    )
    acknowledge(
        operator.s3_csi_role,
        "read-only GetObject in the model buckets the environment names (Mountpoint mounts whole buckets)",
        *(wildcard_resource(operator, arn) for arn in operator.model_object_arns),
    )
    acknowledge(
        operator.alb_role,
        "the AWS Load Balancer Controller's own least-privilege policy: describe calls take no resource; load "
        "balancers, target groups, listeners and security groups are created with and changed only under the "
        "elbv2.k8s.aws/cluster tag the controller sets (their IDs exist only at run time); scoped to this account and "
        "region (kvtiers/constructs/load_balancer_controller.py)",
        "AwsSolutions-IAM5[Resource::*]",
        *(
            wildcard_resource(operator, f"arn:{cdk.Aws.PARTITION}:{kind}")
            for kind in (
                f"ec2:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:security-group/*",
                *(
                    f"elasticloadbalancing:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:{resource}"
                    for resource in (
                        "targetgroup/*/*",
                        "loadbalancer/net/*/*",
                        "loadbalancer/app/*/*",
                        "listener/net/*/*/*",
                        "listener/app/*/*/*",
                        "listener-rule/net/*/*/*",
                        "listener-rule/app/*/*/*",
                    )
                ),
            )
        ),
    )


def acknowledge_endpoint_secrets(access: EndpointSecretAccess) -> None:
    if access.api_key is not None:
        acknowledge(
            access.api_key,
            "an endpoint's API key rotates by the runbook (docs/runbooks.md, Rotate an endpoint's API key): vLLM and "
            "the router read keys only when they start, so a new key needs an ordered restart of engines and routers "
            "with old and new key accepted together, which a Secrets Manager rotation Lambda cannot do",
            "AwsSolutions-SMG4",
        )


def acknowledge_router_access(access: RouterAccess) -> None:
    if access.tokenizer_arns:
        acknowledge(
            access.role,
            "read-only GetObject on the tokenizer files a kvaware router copies from the weights' prefix (name "
            "patterns such as tokenizer*, which the copy's filters match the same way); no weights",
            *(wildcard_resource(access, arn) for arn in access.tokenizer_arns),
        )


def acknowledge_model_access(access: ModelReadAccess) -> None:
    acknowledge(
        access.role,
        "read-only GetObject on the objects below one model prefix: the weights are many files",
        wildcard_resource(access, access.weights_arn),
    )
