"""The Curvine L2's inputs from the environment config."""

from __future__ import annotations

from constructs import Construct

from kvtiers.config.schema import Environment
from kvtiers.constructs.curvine import CurvineL2
from kvtiers.constructs.eks_cluster import EksCluster
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster
from kvtiers.constructs.network import HyperPodNetwork
from kvtiers.k8s_charts.curvine_l2 import (
    CurvineEviction,
    CurvineImages,
    CurvinePorts,
    CurvineResources,
    CurvineSettings,
    Resources,
)


def curvine_ports(env: Environment) -> CurvinePorts:
    return CurvinePorts(**env.curvine.ports.model_dump())


def curvine_settings(env: Environment) -> CurvineSettings:
    c = env.curvine
    return CurvineSettings(
        namespace=c.namespace,
        cluster_id=c.cluster_id,
        meta_volume_gib=c.master.meta_volume_gib,
        journal_volume_gib=c.master.journal_volume_gib,
        audit_log=c.master.audit_log,
        nvme_mount=c.worker.nvme_mount,
        data_dir=c.worker.data_dir,
        capacity_gb=c.worker.capacity_gb,
        reserved_gb=c.worker.reserved_gb,
        block_size=c.block_size,
        fs_path=c.fs_path,
        eviction=CurvineEviction(
            high_watermark=c.eviction.high_watermark, low_watermark=c.eviction.low_watermark, policy=c.eviction.policy
        ),
        ports=curvine_ports(env),
        images=CurvineImages(**c.images.model_dump()),
        resources=CurvineResources(
            **{name: Resources(cpu=size.cpu, memory_gib=size.memory_gib) for name, size in c.resources}
        ),
    )


def curvine_l2(
    scope: Construct,
    id: str,
    env: Environment,
    *,
    eks: EksCluster,
    hyperpod: HyperPodCluster,
    network: HyperPodNetwork,
    manifests_scope: Construct,
) -> CurvineL2:
    """The environment's Curvine L2: its volumes and EBS CSI in ``scope``, its manifests in ``manifests_scope``."""
    c = env.curvine
    master = c.master
    return CurvineL2(
        scope,
        id,
        eks_cluster=eks,
        hyperpod=hyperpod,
        network=network,
        masters=master.replicas,
        worker_groups=None if c.worker_group is None else (c.worker_group,),
        settings=curvine_settings(env),
        volume_iops=master.volume_iops,
        volume_throughput_mibps=master.volume_throughput_mibps,
        snapshot_on_delete=master.snapshot_on_delete,
        ebs_csi_driver_version=env.eks.addons.aws_ebs_csi_driver,
        serving_namespace=env.serving.namespace,
        claim_name=env.serving.l2_claim_name,
        claim_size_gib=env.serving.l2_claim_size_gib,
        mount_path=env.serving.l2_mount_path,
        hash_seed=env.serving.hash_seed,
        janitor_image=env.serving.images.vllm_image,
        janitor_interval_seconds=c.eviction.janitor_interval_seconds,
        operator_endpoints=any(e.serving == "operator" for e in env.serving.endpoints),
        manifests_scope=manifests_scope,
    )
