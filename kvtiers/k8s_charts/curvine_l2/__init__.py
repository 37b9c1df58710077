"""The Curvine L2 (masters on EBS, workers on NVMe, CSI, StorageClass + claim) as cdk8s charts."""

from kvtiers.k8s_charts.curvine_l2.charts import CurvineCsiChart, CurvineMasterChart, CurvineStorageChart, CurvineWorkerChart
from kvtiers.k8s_charts.curvine_l2.props import CurvineProps, Resources

__all__ = ["CurvineCsiChart", "CurvineMasterChart", "CurvineProps", "CurvineStorageChart", "CurvineWorkerChart", "Resources"]
