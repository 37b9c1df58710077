"""The Curvine L2 charts' inputs from the environment config."""

from __future__ import annotations

from typing import cast

from constructs import Construct

from kvtiers.config.schema import Environment
from kvtiers.constructs.journal_volumes import CurvineJournalVolumes
from kvtiers.k8s_charts.curvine_l2 import (
    CurvineCluster,
    CurvineEviction,
    CurvineImages,
    CurvinePorts,
    CurvineResources,
    CurvineStorageChart,
    MasterVolumeIds,
    Resources,
    Toleration,
)
from kvtiers.k8s_charts.curvine_l2.props import TaintEffect


def curvine_ports(env: Environment) -> CurvinePorts:
    return CurvinePorts(**env.curvine.ports.model_dump())


def hyperpod_tolerations(env: Environment) -> tuple[Toleration, ...]:
    """:attr:`~kvtiers.config.schema.HyperPod.taint_tolerations` (one per distinct custom taint), typed."""
    return tuple(
        Toleration(key=t["key"], value=t.get("value"), effect=cast("TaintEffect", t["effect"]))
        for t in env.hyperpod.taint_tolerations
    )


def curvine_cluster(env: Environment, *, journal_volumes: CurvineJournalVolumes) -> CurvineCluster:
    """``journal_volumes``: the platform's EBS volumes of the masters (their IDs are deploy-time tokens)."""
    c = env.curvine
    return CurvineCluster(
        master_volumes=tuple(
            MasterVolumeIds(meta_volume_id=v.meta.volume_id, journal_volume_id=v.journal.volume_id)
            for v in journal_volumes.volumes
        ),
        availability_zone=journal_volumes.availability_zone,
        hyperpod_groups=tuple(g.name for g in env.hyperpod.instance_groups),
        worker_nodes=env.sizing.curvine_workers,
        worker_groups=None if c.worker_group is None else (c.worker_group,),
        namespace=c.namespace,
        cluster_id=c.cluster_id,
        meta_volume_gib=c.master.meta_volume_gib,
        journal_volume_gib=c.master.journal_volume_gib,
        audit_log=c.master.audit_log,
        tolerations=hyperpod_tolerations(env),
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


def curvine_storage_chart(
    scope: Construct, id: str, *, env: Environment, cluster: CurvineCluster
) -> CurvineStorageChart:
    """The StorageClass, the L2 claim in the serving namespace and the janitor (in the engine image)."""
    return CurvineStorageChart(
        scope,
        id,
        cluster=cluster,
        serving_namespace=env.serving.namespace,
        janitor_image=env.serving.images.vllm_image,
        claim_name=env.serving.l2_claim_name,
        claim_size_gib=env.serving.l2_claim_size_gib,
        janitor_interval_seconds=env.curvine.eviction.janitor_interval_seconds,
    )
