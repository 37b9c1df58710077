"""The HyperPod dependency Helm chart (health-monitoring agent, device plugins, deep-health-check RBAC, ...).

HyperPod requires it on the EKS cluster *before* the HyperPod cluster is created: without the health-monitoring
agent there is no automatic node recovery, without the NVIDIA device plugin no node offers ``nvidia.com/gpu``. It
is published only inside the aws/sagemaker-hyperpod-cli git repository (with subcharts from external Helm
repositories), so ``make hyperpod-chart`` fetches it at a pinned commit into ``vendor/`` and this construct deploys
that folder as a chart asset.
"""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import yaml
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from kvtiers.constructs.eks_cluster import ClusterLike, EksCluster, kubernetes_cluster
from kvtiers.k8s_charts.tolerations import Toleration

RELEASE = "hyperpod-dependencies"
NAMESPACE = "kube-system"
CHART_REPOSITORY = "https://github.com/aws/sagemaker-hyperpod-cli"
CHART_PATH = Path("helm_chart") / "HyperPodHelmChart"
"""Where the chart lives in :data:`CHART_REPOSITORY`."""

HEALTH_TAINT = {
    "key": "sagemaker.amazonaws.com/node-health-status",
    "operator": "Equal",
    "value": "Unschedulable",
    "effect": "NoSchedule",
}
DEVICE_PLUGIN_TOLERATIONS: dict[str, tuple[dict[str, str], ...]] = {
    # The parent chart's own values at the pinned commit (``helm_chart/HyperPodHelmChart/values.yaml``). Helm
    # replaces lists, so extra tolerations are appended to these, never given alone.
    "nvidia-device-plugin": ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, HEALTH_TAINT),
    "aws-efa-k8s-device-plugin": (
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
        HEALTH_TAINT,
    ),
}
"""Subcharts whose DaemonSets must run on every GPU node and read ``<subchart>.tolerations`` (the NVIDIA chart
v0.16.1 ``templates/daemonset-device-plugin.yml``; aws/eks-charts ``aws-efa-k8s-device-plugin`` v0.5.20
``templates/daemonset.yaml``). The health-monitoring agent tolerates every taint in its own template."""


def chart_values(region: str, tolerations: Sequence[Toleration]) -> dict[str, Any]:
    """Values for the dependency chart: the region for the health-monitoring agent's image, and every custom taint
    tolerated by the device plugins."""
    # Subchart values are keyed by the subchart name, not the enable flag (sagemaker-hyperpod-cli#289).
    values: dict[str, Any] = {"health-monitoring-agent": {"region": region}, "global": {"region": region}}
    if tolerations:
        for subchart, defaults in DEVICE_PLUGIN_TOLERATIONS.items():
            values[subchart] = {"tolerations": [*defaults, *(t.to_dict() for t in tolerations)]}
    return values


class HyperPodDependencies(Construct):
    """Deploys the vendored chart as a chart asset.

    Attributes: ``chart`` (the ``HelmChart`` the HyperPod cluster must depend on), ``chart_asset`` and
    ``tolerations``.

    :param scope: the parent construct.
    :param id: the construct id.
    :param cluster: the EKS cluster to install the chart on. Given the :class:`EksCluster` construct, the chart comes
        after the networking add-ons and the system node group its controllers run on.
    :param chart_dir: a local copy of ``helm_chart/HyperPodHelmChart`` with its ``charts/`` resolved
        (``helm dependency update``); must hold ``Chart.yaml``.
    :param region: the region of the health-monitoring agent's image. @default the stack's region
    :param tolerations: tolerations of the custom taints of the HyperPod groups; the
        device plugins get them on top of their own, so that tainted GPU nodes still offer ``nvidia.com/gpu``.
        @default none (no custom taints)
    :param wait: wait until the chart's controllers (training and MPI operators) are ready, and roll back otherwise.
        Needs a node for them before HyperPod's nodes exist (the system node group): without one the install would
        wait for nodes that HyperPod creates only after it. @default wait when ``cluster`` is an :class:`EksCluster`
        with a system node group or an imported cluster (which has its own nodes); not for an :class:`EksCluster`
        without one
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: EksCluster | ClusterLike,
        chart_dir: Path,
        region: str | None = None,
        tolerations: Sequence[Toleration] = (),
        wait: bool | None = None,
    ) -> None:
        super().__init__(scope, id)
        _check_resolved(chart_dir)
        self.tolerations = tuple(tolerations)
        eks_cluster = cluster if isinstance(cluster, EksCluster) else None
        if wait is None:
            wait = eks_cluster is None or eks_cluster.system_nodegroup is not None
        self.chart_asset = s3_assets.Asset(self, "ChartAsset", path=str(chart_dir))
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=kubernetes_cluster(cluster),
            chart_asset=self.chart_asset,
            release=RELEASE,
            namespace=NAMESPACE,
            create_namespace=False,
            # Helm 4 (the kubectl layer's) waits whenever it is atomic.
            atomic=wait,
            wait=wait,
            timeout=cdk.Duration.minutes(10),
            values=chart_values(region if region is not None else cdk.Stack.of(self).region, tolerations),
        )
        if eks_cluster is not None:
            # Its controllers need a node with pod networking before HyperPod's nodes exist.
            for prerequisite in (
                eks_cluster.addons["vpc-cni"],
                eks_cluster.addons["kube-proxy"],
                eks_cluster.system_nodegroup,
            ):
                if prerequisite is not None:
                    self.node.add_dependency(prerequisite)


def _check_resolved(chart_dir: Path) -> None:
    """Helm installs a chart only when every dependency its ``Chart.yaml`` lists is a chart loaded from ``charts/``
    (by the name in that subchart's own ``Chart.yaml``), whatever the dependency's ``condition``: Helm's
    ``checkDependencies`` (``pkg/action/install.go``) fails with "found in Chart.yaml, but missing in charts/
    directory". An unresolved copy would fail only after the EKS cluster exists."""
    chart_yaml = chart_dir / "Chart.yaml"
    if not chart_yaml.is_file():
        raise ValueError(f"HyperPodDependencies: chart_dir {chart_dir} has no Chart.yaml")
    metadata = yaml.safe_load(chart_yaml.read_text()) or {}
    loaded = _subchart_names(chart_dir / "charts")
    missing = [d["name"] for d in metadata.get("dependencies") or () if d["name"] not in loaded]
    if missing:
        raise ValueError(
            f"HyperPodDependencies: chart_dir {chart_dir}: Chart.yaml lists dependencies missing from charts/ "
            f"({', '.join(missing)}), and Helm refuses to install such a chart; resolve them first (helm dependency "
            "update)"
        )


def _subchart_names(charts: Path) -> set[str]:
    """The names of the charts Helm's loader finds in ``charts/``: each directory's and each ``.tgz`` archive's own
    ``Chart.yaml`` (an archive holds one top-level directory)."""
    names: set[str] = set()
    for entry in charts.iterdir() if charts.is_dir() else ():
        if (entry / "Chart.yaml").is_file():
            names.add((yaml.safe_load((entry / "Chart.yaml").read_text()) or {}).get("name", ""))
        elif entry.suffix == ".tgz" and entry.is_file():
            with tarfile.open(entry) as archive:
                member = next(
                    (m for m in archive.getmembers() if m.name.count("/") == 1 and m.name.endswith("/Chart.yaml")), None
                )
                content = archive.extractfile(member) if member is not None else None
                if content is not None:
                    names.add((yaml.safe_load(content.read()) or {}).get("name", ""))
    return names
