#!/usr/bin/env python3
"""A separate CDK app that reuses kvtiers' constructs from the installed package.

A team adds its own vLLM + LMCache endpoint to a cluster the platform team deployed with kvtiers: the EKS cluster
and its kubectl provider, the HyperPod cluster, the Curvine L2 and the serving-secrets key are imported by their
attributes. ``ServingEndpoint`` then builds what the endpoint needs in that cluster: its own NetworkPolicies (the
platform's serving namespace denies everything by default), the Pod Identity role that reads the team's S3 prefix,
a generated API key, and its placement on the HyperPod group. Nothing here reads a kvtiers environment file.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from kvtiers.constructs import CurvineL2, HyperPodCluster, InstanceGroup, SecretsStoreCsi, ServingEndpoint
from kvtiers.k8s_charts.network_policies import ClusterNetwork
from kvtiers.k8s_charts.secrets import EndpointSecrets
from kvtiers.k8s_charts.serving import Engine, Router, S3Weights

ACCOUNT, REGION = "333333333333", "us-east-1"
ENDPOINT = "team-llama8b"


class TeamEndpointStack(cdk.Stack):
    def __init__(self, scope, id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        cluster = eks.Cluster.from_cluster_attributes(
            self,
            "SharedCluster",
            cluster_name="kvtiers-prod",
            kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
                self,
                "Kubectl",
                service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:kvtiers-prod-kubectl-provider",
                role=iam.Role.from_role_arn(self, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/kvtiers-prod-kubectl"),
            ),
        )
        # The groups as the platform team deployed them: the engines' placement is checked against them.
        hyperpod = HyperPodCluster.from_hyperpod_cluster_attributes(
            self,
            "SharedHyperPod",
            cluster_arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/kvtiersprod",
            instance_groups=[InstanceGroup(name="g6e-mid", instance_type="ml.g6e.12xlarge", count=2)],
        )
        l2 = CurvineL2.from_curvine_l2_attributes(
            self, "SharedL2", serving_namespace="serving", hash_seed="42", hyperpod=hyperpod
        )
        secrets_store = SecretsStoreCsi.from_secrets_store_attributes(
            self, "SharedSecretsKey", key_arn=f"arn:aws:kms:{REGION}:{ACCOUNT}:key/11111111-2222-3333-4444-555555555555"
        )
        ServingEndpoint(
            self,
            "Endpoint",
            eks_cluster=cluster,
            name=ENDPOINT,
            # Defaults for the rest (image, TP, dtype, L1...): the pod's memory and model disk are sized from them,
            # and the endpoint's L2 directory is derived from the model, image and the L2's hash seed.
            engine=Engine(
                model="meta-llama/Llama-3.1-8B-Instruct",
                weights=S3Weights(bucket="team-models", prefix="llama-3.1-8b-instruct"),
                instance_group="g6e-mid",
                l1_gib=32,
                extra_args=("--max-num-seqs", "128"),
            ),
            router=Router(routing="prefixaware", replicas=2),
            l2=l2,
            secrets=EndpointSecrets(region=REGION, api_key_secret=f"kvtiers/prod/{ENDPOINT}/api-key"),
            secrets_store=secrets_store,
            # The platform's VPC, its EKS subnets (where the API server's pod proxy connects from) and the
            # cluster's `kubernetes` Service address: the peers of the endpoint's NetworkPolicies.
            network=ClusterNetwork(
                node_cidr="10.200.0.0/16",
                api_service_ip="172.20.0.1",
                control_plane_cidrs=("10.200.2.0/24", "10.200.3.0/24"),
            ),
        )


app = cdk.App()
TeamEndpointStack(app, "team-endpoint", env=cdk.Environment(account=ACCOUNT, region=REGION))
app.synth()
