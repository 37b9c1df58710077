"""The Curvine L2 (masters on EBS, workers on NVMe, CSI, StorageClass + claim) as cdk8s charts."""

from kvtiers.k8s_charts.curvine_l2.charts import (
    CurvineCsiChart,
    CurvineMasterChart,
    CurvineStorageChart,
    CurvineWorkerChart,
)
from kvtiers.k8s_charts.curvine_l2.props import CurvinePort, CurvineProps, Resources, port_table

__all__ = [
    "CurvineCsiChart",
    "CurvineMasterChart",
    "CurvinePort",
    "CurvineProps",
    "CurvineStorageChart",
    "CurvineWorkerChart",
    "Resources",
    "port_table",
]
