"""The IAM rights of the AWS Load Balancer Controller that the Inference Operator add-on runs for its endpoints' ALB.

The actions and their scoping follow the controller's own least-privilege policy
(kubernetes-sigs/aws-load-balancer-controller ``docs/install/iam_policy.json``, v2.13, the controller of the
operator chart's ``aws-load-balancer-controller`` 1.13.2 subchart): describe calls on ``*`` (they take no resource);
everything that changes a load balancer, target group, listener or security group only on resources the controller
created itself, which it tags ``elbv2.k8s.aws/cluster`` (the ``Null`` conditions); creation only with that tag in the
request. WAF, Shield and Cognito are left out: the operator's Ingress uses none of them.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

CLUSTER_TAG = "elbv2.k8s.aws/cluster"
"""The tag the controller puts on everything it creates and later changes only if present."""
CREATED_BY_CONTROLLER = {"Null": {f"aws:ResourceTag/{CLUSTER_TAG}": "false"}}
TAGGED_AT_CREATION = {"Null": {f"aws:RequestTag/{CLUSTER_TAG}": "false"}}


def load_balancer_controller_statements() -> list[iam.PolicyStatement]:
    elb = [
        f"arn:{cdk.Aws.PARTITION}:elasticloadbalancing:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:{kind}"
        for kind in ("targetgroup/*/*", "loadbalancer/net/*/*", "loadbalancer/app/*/*")
    ]
    listeners = [
        f"arn:{cdk.Aws.PARTITION}:elasticloadbalancing:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:{kind}"
        for kind in ("listener/net/*/*/*", "listener/app/*/*/*", "listener-rule/net/*/*/*", "listener-rule/app/*/*/*")
    ]
    security_groups = [f"arn:{cdk.Aws.PARTITION}:ec2:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:security-group/*"]
    return [
        iam.PolicyStatement(
            sid="ElbServiceLinkedRole",
            actions=["iam:CreateServiceLinkedRole"],
            resources=["*"],
            conditions={"StringEquals": {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}},
        ),
        iam.PolicyStatement(
            sid="Describe",
            actions=[
                "ec2:DescribeAccountAttributes",
                "ec2:DescribeAddresses",
                "ec2:DescribeAvailabilityZones",
                "ec2:DescribeInternetGateways",
                "ec2:DescribeVpcs",
                "ec2:DescribeVpcPeeringConnections",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeInstances",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeTags",
                "ec2:DescribeRouteTables",
                "ec2:GetSecurityGroupsForVpc",
                "elasticloadbalancing:DescribeLoadBalancers",
                "elasticloadbalancing:DescribeLoadBalancerAttributes",
                "elasticloadbalancing:DescribeListeners",
                "elasticloadbalancing:DescribeListenerCertificates",
                "elasticloadbalancing:DescribeListenerAttributes",
                "elasticloadbalancing:DescribeSSLPolicies",
                "elasticloadbalancing:DescribeRules",
                "elasticloadbalancing:DescribeTargetGroups",
                "elasticloadbalancing:DescribeTargetGroupAttributes",
                "elasticloadbalancing:DescribeTargetHealth",
                "elasticloadbalancing:DescribeTags",
                "elasticloadbalancing:DescribeTrustStores",
                "elasticloadbalancing:DescribeCapacityReservation",
                "acm:ListCertificates",
                "acm:DescribeCertificate",
                "iam:ListServerCertificates",
                "iam:GetServerCertificate",
            ],
            resources=["*"],
        ),
        iam.PolicyStatement(sid="CreateSecurityGroup", actions=["ec2:CreateSecurityGroup"], resources=["*"]),
        iam.PolicyStatement(
            sid="TagSecurityGroupAtCreation",
            actions=["ec2:CreateTags"],
            resources=security_groups,
            conditions={"StringEquals": {"ec2:CreateAction": "CreateSecurityGroup"}, **TAGGED_AT_CREATION},
        ),
        iam.PolicyStatement(
            sid="OwnSecurityGroups",
            actions=[
                "ec2:CreateTags",
                "ec2:DeleteTags",
                "ec2:AuthorizeSecurityGroupIngress",
                "ec2:RevokeSecurityGroupIngress",
                "ec2:DeleteSecurityGroup",
            ],
            resources=security_groups,
            conditions=CREATED_BY_CONTROLLER,
        ),
        iam.PolicyStatement(
            sid="TargetSecurityGroupRules",
            # The controller opens the security group of each target pod's network interface to the ALB (the
            # HyperPod node group, the EKS cluster group): groups it did not create, which carry no tag
            # (aws-load-balancer-controller v2.13.4 pkg/networking/networking_manager.go resolveEndpointSGForENI;
            # its docs/install/iam_policy.json grants these two actions without a condition).
            actions=["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"],
            resources=security_groups,
        ),
        iam.PolicyStatement(
            sid="CreateTagged",
            actions=["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"],
            resources=["*"],
            conditions=TAGGED_AT_CREATION,
        ),
        iam.PolicyStatement(
            sid="TagAtCreation",
            actions=["elasticloadbalancing:AddTags"],
            resources=elb,
            conditions={
                "StringEquals": {"elasticloadbalancing:CreateAction": ["CreateTargetGroup", "CreateLoadBalancer"]},
                **TAGGED_AT_CREATION,
            },
        ),
        iam.PolicyStatement(
            sid="OwnLoadBalancersAndTargetGroups",
            actions=[
                "elasticloadbalancing:AddTags",
                "elasticloadbalancing:RemoveTags",
                "elasticloadbalancing:ModifyLoadBalancerAttributes",
                "elasticloadbalancing:SetIpAddressType",
                "elasticloadbalancing:SetSecurityGroups",
                "elasticloadbalancing:SetSubnets",
                "elasticloadbalancing:DeleteLoadBalancer",
                "elasticloadbalancing:ModifyTargetGroup",
                "elasticloadbalancing:ModifyTargetGroupAttributes",
                "elasticloadbalancing:DeleteTargetGroup",
                "elasticloadbalancing:ModifyListenerAttributes",
            ],
            resources=["*"],
            conditions=CREATED_BY_CONTROLLER,
        ),
        iam.PolicyStatement(
            sid="ListenersAndRules",
            actions=[
                "elasticloadbalancing:CreateListener",
                "elasticloadbalancing:DeleteListener",
                "elasticloadbalancing:CreateRule",
                "elasticloadbalancing:DeleteRule",
                "elasticloadbalancing:ModifyListener",
                "elasticloadbalancing:AddListenerCertificates",
                "elasticloadbalancing:RemoveListenerCertificates",
                "elasticloadbalancing:ModifyRule",
                "elasticloadbalancing:SetRulePriorities",
            ],
            resources=["*"],
        ),
        iam.PolicyStatement(
            sid="TagListeners",
            actions=["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"],
            resources=listeners,
        ),
        iam.PolicyStatement(
            sid="Targets",
            actions=["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"],
            resources=[
                f"arn:{cdk.Aws.PARTITION}:elasticloadbalancing:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:targetgroup/*/*"
            ],
        ),
    ]
