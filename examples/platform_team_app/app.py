#!/usr/bin/env python3
"""A platform team's app built from kvtiers' constructs alone, in two stacks.

``platform``: an existing VPC imported by its attributes (with its subnet CIDRs, which the NetworkPolicies name),
the EKS cluster, the HyperPod cluster (the dependency chart installed outside this app), the Curvine L2 with its
NetworkPolicies, the serving-secrets key and the HyperPod Inference Operator.

``team``: what another team's stack holds: the L2 and the HyperPod cluster imported by their attributes (as a
separate app would), a self-managed endpoint with its API key and an operator endpoint, each with its own
NetworkPolicies. Nothing here reads a kvtiers environment file.
"""

from __future__ import annotations

import aws_cdk as cdk

from kvtiers.constructs import (
    CurvineL2,
    EksCluster,
    ExistingVpcAttributes,
    HyperPodCluster,
    HyperPodNetwork,
    InstanceGroup,
    OperatorServingEndpoint,
    SecretsStoreCsi,
    ServingEndpoint,
)
from kvtiers.constructs.hyperpod_inference import InferenceOperator
from kvtiers.k8s_charts.secrets import EndpointSecrets
from kvtiers.k8s_charts.serving import Engine, Router, S3Weights

ACCOUNT, REGION = "444444444444", "us-east-1"
GROUPS = (
    InstanceGroup(name="g6e-serving", instance_type="ml.g6e.12xlarge", count=2),
    InstanceGroup(name="g6e-small", instance_type="ml.g6e.2xlarge", count=1),
)
HASH_SEED = "7"


class PlatformStack(cdk.Stack):
    def __init__(self, scope, id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        self.network = HyperPodNetwork(
            self,
            "Network",
            vpc=ExistingVpcAttributes(
                vpc_id="vpc-0a1b2c3d4e5f60718",
                cidr="10.50.0.0/16",
                private_subnet_ids=("subnet-0a1b2c3d4e5f60711", "subnet-0a1b2c3d4e5f60712"),
                private_subnet_cidrs=("10.50.0.0/24", "10.50.1.0/24"),
                availability_zones=("us-east-1a", "us-east-1b"),
                hyperpod_subnet_id="subnet-0a1b2c3d4e5f60713",
                hyperpod_subnet_cidr="10.50.64.0/18",
                hyperpod_availability_zone="us-east-1b",
            ),
        )
        self.eks = EksCluster(
            self,
            "Eks",
            vpc=self.network.vpc,
            subnets=self.network.eks_subnets,
            security_group=self.network.security_group,
            service_ipv4_cidr="172.20.0.0/16",
        )
        self.hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            eks_cluster=self.eks,
            subnet=self.network.hyperpod_subnet,
            security_group=self.network.security_group,
            instance_groups=GROUPS,
            external_dependency_chart=True,
            tiered_storage_enabled=False,
        )
        self.l2 = CurvineL2(
            self,
            "L2",
            eks_cluster=self.eks,
            hyperpod=self.hyperpod,
            network=self.network,
            masters=1,
            worker_groups=("g6e-serving",),
            hash_seed=HASH_SEED,
            operator_endpoints=True,
        )
        self.secrets_store = SecretsStoreCsi(
            self, "SecretsStore", eks_cluster=self.eks, key_alias="alias/platform/serving-secrets"
        )
        self.operator = InferenceOperator(
            self,
            "InferenceOperator",
            cluster=self.eks,
            hyperpod_cluster_arn=self.hyperpod.cluster_arn,
            environment_name="platform",
            model_buckets=("team-models",),
        )


class TeamStack(cdk.Stack):
    def __init__(self, scope, id: str, *, platform: PlatformStack, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        # As another team's app would: the HyperPod cluster and the L2 by their attributes.
        hyperpod = HyperPodCluster.from_hyperpod_cluster_attributes(
            self, "HyperPod", cluster_arn=platform.hyperpod.cluster_arn, instance_groups=GROUPS
        )
        l2 = CurvineL2.from_curvine_l2_attributes(
            self,
            "L2",
            serving_namespace="serving",
            hash_seed=HASH_SEED,
            hyperpod=hyperpod,
            serving_namespace_enforce="privileged",
        )
        ServingEndpoint(
            self,
            "Chat",
            eks_cluster=platform.eks,
            name="team-chat",
            engine=Engine(
                model="meta-llama/Llama-3.1-8B-Instruct",
                weights=S3Weights(bucket="team-models", prefix="llama-3.1-8b-instruct"),
                instance_group="g6e-serving",
                replicas=2,
                l1_gib=32,
            ),
            router=Router(routing="prefixaware", client_cidrs=("10.50.8.0/24",)),
            l2=l2,
            secrets=EndpointSecrets(region=REGION, api_key_secret="team/chat/api-key"),
            secrets_store=platform.secrets_store,
            network=platform.network,
        )
        OperatorServingEndpoint(
            self,
            "Batch",
            eks_cluster=platform.eks,
            operator=platform.operator,
            name="team-batch",
            engine=Engine(
                model="Qwen/Qwen2-7B-Instruct",
                weights=S3Weights(bucket="team-models", prefix="qwen2-7b-instruct"),
                instance_group="g6e-small",
                replicas=1,
                l1_gib=16,
                cpu=4,
            ),
            routing="prefixaware",
            l2=l2,
            network=platform.network,
        )


app = cdk.App()
environment = cdk.Environment(account=ACCOUNT, region=REGION)
platform = PlatformStack(app, "platform", env=environment)
TeamStack(app, "team", platform=platform, env=environment)
app.synth()
