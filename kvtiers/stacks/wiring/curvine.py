"""The Curvine L2's inputs from the environment config."""

from __future__ import annotations

from typing import cast

from constructs import Construct

from kvtiers.catalog.platform_defaults import MasterCount
from kvtiers.config import model
from kvtiers.config.schema import Environment
from kvtiers.constructs.curvine import CurvineL2
from kvtiers.constructs.eks_cluster import EksCluster
from kvtiers.constructs.hyperpod_cluster import HyperPodCluster
from kvtiers.constructs.network import HyperPodNetwork


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
        # The file's int as given: the construct refuses a count that is not an odd Raft quorum.
        masters=cast(MasterCount, master.replicas),
        worker_groups=None if c.worker_group is None else (c.worker_group,),
        settings=model.curvine_settings(env),
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
