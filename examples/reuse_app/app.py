#!/usr/bin/env python3
"""A separate CDK app that reuses kvtiers' constructs from the installed package.

A team adds its own vLLM + LMCache endpoint to a cluster someone else deployed: the EKS cluster and its kubectl
provider are imported by attributes, the Curvine L2 is imported by the attributes of its claim (name, namespace,
mount path, hash seed), and the model weights come from the team's own S3 prefix with a prefix-scoped role.
Nothing here reads a kvtiers environment file.
"""

from __future__ import annotations

from dataclasses import replace

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from kvtiers.config.versions import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE, engine_release
from kvtiers.constructs.model_access import ModelReadAccess
from kvtiers.k8s_charts.l2 import L2Namespace, L2Volume
from kvtiers.k8s_charts.names import engine_service_account_name
from kvtiers.k8s_charts.serving import Engine, LMCache, Router, S3Weights, ServingChart

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
        engine = Engine(
            model="meta-llama/Llama-3.1-8B-Instruct",
            weights=S3Weights(bucket="team-models", prefix="llama-3.1-8b-instruct"),
            image=DEFAULT_ENGINE_IMAGE,
            model_sync_image="public.ecr.aws/aws-cli/aws-cli:2.31.3",
            instance_group="g6e-mid",
            replicas=2,
            tensor_parallel_size=1,
            dtype="bfloat16",
            max_model_len=16384,
            gpu_memory_utilization=0.9,
            cpu=8,
            memory_gib=64,
            shm_gib=8,
            startup_timeout_seconds=1800,
        )
        lmcache = LMCache(max_local_cpu_size_gib=32)
        # Everything that decides the KV bytes: the endpoint's directory on the shared L2.
        directory = L2Namespace(
            model=engine.model,
            revision="unpinned",
            dtype=engine.dtype,
            kv_dtype=engine.dtype,
            tensor_parallel_size=engine.tensor_parallel_size,
            chunk_size=lmcache.chunk_size,
            lmcache_version=engine_release(engine.image).lmcache,
            serde=lmcache.remote_serde,
            hash_seed=hash_seed,
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
            router=Router(image=DEFAULT_ROUTER_IMAGE, routing="prefixaware", replicas=1),
            lmcache=replace(lmcache, remote_url=l2.remote_url(directory)),
            hash_seed=hash_seed,
            l2=l2,
        )
        manifest = eks.KubernetesManifest(self, "Endpoint", cluster=cluster, manifest=chart.to_json(), overwrite=True)
        manifest.node.add_dependency(access)


app = cdk.App()
TeamEndpointStack(app, "team-endpoint", env=cdk.Environment(account=ACCOUNT, region=REGION))
app.synth()
