"""The Curvine L2 (masters on EBS, workers on NVMe, CSI, StorageClass + claim) as cdk8s charts."""

from kvtiers.k8s_charts.curvine_l2.charts import (
    CurvineCsiChart,
    CurvineMasterChart,
    CurvineStorageChart,
    CurvineWorkerChart,
)
from kvtiers.k8s_charts.curvine_l2.props import (
    CurvineCluster,
    CurvineEviction,
    CurvineImages,
    CurvinePort,
    CurvinePorts,
    CurvineResources,
    CurvineSettings,
    MasterVolumeIds,
    Resources,
    port_table,
)
from kvtiers.k8s_charts.tolerations import Toleration

__all__ = [
    "CurvineCluster",
    "CurvineCsiChart",
    "CurvineEviction",
    "CurvineImages",
    "CurvineMasterChart",
    "CurvinePort",
    "CurvinePorts",
    "CurvineResources",
    "CurvineSettings",
    "CurvineStorageChart",
    "CurvineWorkerChart",
    "MasterVolumeIds",
    "Resources",
    "Toleration",
    "port_table",
]
