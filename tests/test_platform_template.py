"""Fine-grained assertions on the network and platform templates of the dev and prod environments."""

from __future__ import annotations

import json

from aws_cdk.assertions import Match


def props_of(template_json: dict, resource_type: str) -> list[dict]:
    return [r.get("Properties", {}) for r in template_json["Resources"].values() if r["Type"] == resource_type]


# --------------------------------------------------------------------------------------------------- network


def test_new_vpc_has_private_subnets_nat_and_s3_gateway(dev_synth):
    net = dev_synth.template(dev_synth.graph.network)
    net.resource_count_is("AWS::EC2::NatGateway", 1)
    net.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.192.0.0/16"})
    net.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcEndpointType": "Gateway", "ServiceName": Match.object_like({"Fn::Join": Match.any_value()})},
    )
    net.has_resource_properties(
        "AWS::EC2::Subnet",
        {"AvailabilityZoneId": "use1-az2", "CidrBlock": "10.192.64.0/18"},
    )
    subnets = props_of(dev_synth.template_json(dev_synth.graph.network), "AWS::EC2::Subnet")
    hyperpod = [s for s in subnets if "AvailabilityZoneId" in s]
    assert len(hyperpod) == 1 and "AvailabilityZone" not in hyperpod[0]


def test_hyperpod_subnet_routes_through_nat_and_is_in_the_s3_endpoint(dev_synth):
    template = dev_synth.template_json(dev_synth.graph.network)
    resources = template["Resources"]
    hyperpod_subnet = next(
        k for k, r in resources.items() if r["Type"] == "AWS::EC2::Subnet" and "AvailabilityZoneId" in r["Properties"]
    )
    association = next(
        r
        for r in resources.values()
        if r["Type"] == "AWS::EC2::SubnetRouteTableAssociation"
        and r["Properties"]["SubnetId"] == {"Ref": hyperpod_subnet}
    )
    table = association["Properties"]["RouteTableId"]["Ref"]
    routes = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::EC2::Route"]
    assert any(r["RouteTableId"] == {"Ref": table} and "NatGatewayId" in r for r in routes)
    endpoint = next(r for r in resources.values() if r["Type"] == "AWS::EC2::VPCEndpoint")
    assert {"Ref": table} in endpoint["Properties"]["RouteTableIds"]


def test_security_group_allows_itself_and_fsx_lustre(dev_synth):
    template = dev_synth.template_json(dev_synth.graph.network)
    group = next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::EC2::SecurityGroup")
    ingress = props_of(template, "AWS::EC2::SecurityGroupIngress")
    from_self = [r for r in ingress if r["SourceSecurityGroupId"] == {"Fn::GetAtt": [group, "GroupId"]}]
    assert {"IpProtocol": "-1"}.items() <= next(r for r in from_self if r["IpProtocol"] == "-1").items()
    ports = {(r.get("FromPort"), r.get("ToPort")) for r in from_self if r["IpProtocol"] == "tcp"}
    assert ports == {(988, 988), (1018, 1023)}
    egress = template["Resources"][group]["Properties"]["SecurityGroupEgress"]
    assert egress == [
        {"CidrIp": "0.0.0.0/0", "Description": "Allow all outbound traffic by default", "IpProtocol": "-1"}
    ]
    # EFA: an explicit outbound rule to the group itself (HyperPod prerequisites, the reference templates).
    (to_itself,) = props_of(template, "AWS::EC2::SecurityGroupEgress")
    assert to_itself["IpProtocol"] == "-1"
    assert to_itself["GroupId"] == to_itself["DestinationSecurityGroupId"] == {"Fn::GetAtt": [group, "GroupId"]}


# --------------------------------------------------------------------------------------------------- EKS


def test_eks_cluster_version_logging_access_and_no_auto_mode(dev_synth):
    platform = dev_synth.template(dev_synth.graph.platform)
    platform.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "Name": "kvtiers-dev",
            "Version": "1.34",
            "AccessConfig": {"AuthenticationMode": "API"},
            "BootstrapSelfManagedAddons": False,
            "Logging": {
                "ClusterLogging": {"EnabledTypes": [{"Type": "api"}, {"Type": "audit"}, {"Type": "authenticator"}]}
            },
            "ResourcesVpcConfig": Match.object_like({"EndpointPrivateAccess": True, "EndpointPublicAccess": False}),
            "EncryptionConfig": [Match.object_like({"Resources": ["secrets"]})],
        },
    )
    cluster = props_of(dev_synth.template_json(dev_synth.graph.platform), "AWS::EKS::Cluster")[0]
    assert "ComputeConfig" not in cluster or cluster["ComputeConfig"].get("Enabled") is False


def test_core_addons_are_pinned(dev_synth, dev_env):
    addons = {p["AddonName"]: p for p in props_of(dev_synth.template_json(dev_synth.graph.platform), "AWS::EKS::Addon")}
    versions = dev_env.eks.addons
    assert addons["vpc-cni"]["AddonVersion"] == versions.vpc_cni
    assert addons["coredns"]["AddonVersion"] == versions.coredns
    assert addons["kube-proxy"]["AddonVersion"] == versions.kube_proxy
    assert addons["eks-pod-identity-agent"]["AddonVersion"] == versions.eks_pod_identity_agent
    assert addons["aws-ebs-csi-driver"]["AddonVersion"] == versions.aws_ebs_csi_driver
    assert all(a["ResolveConflicts"] == "OVERWRITE" for a in addons.values())


def test_kubectl_provider_uses_the_v34_layer(dev_synth):
    platform = dev_synth.template(dev_synth.graph.platform)
    platform.has_resource_properties(
        "AWS::Lambda::LayerVersion", {"Description": Match.string_like_regexp("kubectl 1.34")}
    )


def test_system_nodegroup(dev_synth):
    dev_synth.template(dev_synth.graph.platform).has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "AmiType": "AL2023_x86_64_STANDARD",
            "InstanceTypes": ["m7i.xlarge"],
            "ScalingConfig": Match.object_like({"DesiredSize": 2}),
        },
    )


def test_admin_access_entries_and_private_endpoint_in_prod(prod_synth):
    platform = prod_synth.template(prod_synth.graph.platform)
    platform.has_resource_properties(
        "AWS::EKS::AccessEntry",
        {
            "PrincipalArn": "arn:aws:iam::222222222222:role/platform-admins",
            "AccessPolicies": [
                {
                    "AccessScope": {"Type": "cluster"},
                    "PolicyArn": {
                        "Fn::Join": [
                            "",
                            [
                                "arn:",
                                {"Ref": "AWS::Partition"},
                                ":eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                            ],
                        ]
                    },
                }
            ],
        },
    )
    platform.has_resource_properties(
        "AWS::EKS::Cluster",
        {"ResourcesVpcConfig": Match.object_like({"EndpointPrivateAccess": True, "EndpointPublicAccess": False})},
    )


# --------------------------------------------------------------------------------------------------- HyperPod


def test_hyperpod_cluster_properties(dev_synth):
    platform = dev_synth.template(dev_synth.graph.platform)
    platform.has_resource_properties(
        "AWS::SageMaker::Cluster",
        {
            "ClusterName": "kvtiers-dev",
            "Orchestrator": {"Eks": {"ClusterArn": {"Fn::GetAtt": [Match.string_like_regexp("^EksCluster"), "Arn"]}}},
            "NodeRecovery": "Automatic",
            "NodeProvisioningMode": "Continuous",
            "TieredStorageConfig": {"Mode": "Enable", "InstanceMemoryAllocationPercentage": 20},
            "VpcConfig": {"SecurityGroupIds": [Match.any_value()], "Subnets": [Match.any_value()]},
            "InstanceGroups": [
                {
                    "InstanceGroupName": "g6e-serving",
                    "InstanceType": "ml.g6e.12xlarge",
                    "InstanceCount": 2,
                    "ThreadsPerCore": 2,
                    "ExecutionRole": {"Fn::GetAtt": [Match.string_like_regexp("^HyperPodExecutionRole"), "Arn"]},
                    "LifeCycleConfig": {"OnCreate": "on_create.sh", "SourceS3Uri": Match.any_value()},
                    "OnStartDeepHealthChecks": ["InstanceStress", "InstanceConnectivity"],
                    "InstanceStorageConfigs": [
                        {
                            "EbsVolumeConfig": {
                                "VolumeSizeInGB": 500,
                                "VolumeKmsKeyId": {"Fn::GetAtt": [Match.string_like_regexp("^HyperPodKey"), "Arn"]},
                            }
                        }
                    ],
                    "KubernetesConfig": {"Labels": {"kvtiers.io/role": "serving"}},
                }
            ],
        },
    )


def test_prod_groups_carry_labels_and_deep_health_checks_without_taints(prod_synth):
    cluster = props_of(prod_synth.template_json(prod_synth.graph.platform), "AWS::SageMaker::Cluster")[0]
    large = next(g for g in cluster["InstanceGroups"] if g["InstanceGroupName"] == "g6e-large")
    assert large["InstanceType"] == "ml.g6e.48xlarge" and large["InstanceCount"] == 2
    assert large["KubernetesConfig"] == {"Labels": {"kvtiers.io/role": "serving"}}
    assert large["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert large["InstanceStorageConfigs"][0]["EbsVolumeConfig"]["VolumeSizeInGB"] == 1000


def test_groups_without_efa_run_only_the_deep_health_checks_their_type_supports(prod_synth):
    """SageMaker AI developer guide, "Deep health checks": the cluster-level NCCL test (``InstanceConnectivity``)
    needs multi-node GPU communication, EFA on G6e; ml.g6e.2xlarge has none."""
    cluster = props_of(prod_synth.template_json(prod_synth.graph.platform), "AWS::SageMaker::Cluster")[0]
    checks = {g["InstanceType"]: g.get("OnStartDeepHealthChecks") for g in cluster["InstanceGroups"]}
    assert checks["ml.g6e.2xlarge"] == ["InstanceStress"]
    assert checks["ml.g6e.12xlarge"] == ["InstanceStress", "InstanceConnectivity"]


def test_hyperpod_cluster_is_created_after_its_prerequisites(dev_synth):
    resources = dev_synth.template_json(dev_synth.graph.platform)["Resources"]
    cluster = next(r for r in resources.values() if r["Type"] == "AWS::SageMaker::Cluster")
    depends = set(cluster["DependsOn"])
    by_name = {k: r for k, r in resources.items()}
    kinds = {by_name[d]["Type"] for d in depends}
    assert "Custom::CDKBucketDeployment" in kinds
    addons = {by_name[d]["Properties"]["AddonName"] for d in depends if by_name[d]["Type"] == "AWS::EKS::Addon"}
    assert addons == {"vpc-cni", "kube-proxy", "eks-pod-identity-agent"}


def test_execution_role_trusts_sagemaker_with_the_instance_policy(dev_synth):
    platform = dev_synth.template(dev_synth.graph.platform)
    platform.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}}
                ],
                "Version": "2012-10-17",
            },
            "ManagedPolicyArns": [
                {
                    "Fn::Join": [
                        "",
                        [
                            "arn:",
                            {"Ref": "AWS::Partition"},
                            ":iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy",
                        ],
                    ]
                }
            ],
        },
    )


def test_lifecycle_bucket_is_sagemaker_prefixed_encrypted_versioned_private_and_tls_only(dev_synth):
    template = dev_synth.template_json(dev_synth.graph.platform)
    bucket = props_of(template, "AWS::S3::Bucket")[0]
    assert bucket["BucketName"].startswith("sagemaker-")
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    sse = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert sse["SSEAlgorithm"] == "aws:kms"
    policy = props_of(template, "AWS::S3::BucketPolicy")[0]["PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in policy)


def test_lifecycle_script_is_the_projects_own(dev_synth):
    deployment = props_of(dev_synth.template_json(dev_synth.graph.platform), "Custom::CDKBucketDeployment")[0]
    assert deployment["DestinationBucketKeyPrefix"] == "lifecycle"
    cluster = props_of(dev_synth.template_json(dev_synth.graph.platform), "AWS::SageMaker::Cluster")[0]
    uri = json.dumps(cluster["InstanceGroups"][0]["LifeCycleConfig"]["SourceS3Uri"])
    assert "s3://" in uri and "/lifecycle" in uri
