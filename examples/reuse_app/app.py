#!/usr/bin/env python3
"""A separate CDK app that reuses kvtiers' constructs from the installed package.

A team adds its own vLLM + LMCache endpoint to a cluster someone else deployed: the EKS cluster and its kubectl
provider are imported by attributes, the Curvine L2 is imported by the attributes of its claim (name, namespace,
mount path, hash seed), and the model weights come from the team's own S3 prefix with a prefix-scoped role.
Nothing here reads a kvtiers environment file.
"""

from __future__ import annotations

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from kvtiers.constructs.model_access import ModelReadAccess
from kvtiers.k8s_charts.l2 import L2Volume
from kvtiers.k8s_charts.names import engine_service_account_name
from kvtiers.k8s_charts.serving import Engine, Router, S3Weights, ServingChart

ACCOUNT, REGION = "333333333333", "us-east-1"


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
        # The Curvine L2 that the platform team runs, imported by the attributes of its claim.
        namespace, hash_seed = "serving", "42"
        l2 = L2Volume(claim_name="curvine-l2", mount_path="/mnt/curvine/l2cache")
        name = "team-llama8b"
        # Defaults for the rest (image, TP, dtype, L1...): the pod's memory and model disk are sized from them, and
        # the chart derives the endpoint's L2 directory from the model, image and hash seed.
        engine = Engine(
            model="meta-llama/Llama-3.1-8B-Instruct",
            weights=S3Weights(bucket="team-models", prefix="llama-3.1-8b-instruct"),
            instance_group="g6e-mid",
            l1_gib=32,
            extra_args=("--max-num-seqs", "128"),
        )
        access = ModelReadAccess(
            self,
            "Weights",
            cluster=cluster,
            namespace=namespace,
            service_account=engine_service_account_name(name),
            bucket="team-models",
            prefix="llama-3.1-8b-instruct",
        )
        chart = ServingChart(
            cdk8s.App(),
            name,
            name=name,
            namespace=namespace,
            engine=engine,
            router=Router(routing="prefixaware", replicas=1),
            hash_seed=hash_seed,
            l2=l2,
        )
        manifest = eks.KubernetesManifest(self, "Endpoint", cluster=cluster, manifest=chart.to_json(), overwrite=True)
        manifest.node.add_dependency(access)


app = cdk.App()
TeamEndpointStack(app, "team-endpoint", env=cdk.Environment(account=ACCOUNT, region=REGION))
app.synth()
