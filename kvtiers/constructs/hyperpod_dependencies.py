"""The HyperPod dependency Helm chart (health-monitoring agent, device plugins, deep health checks, ...).

HyperPod requires it on the EKS cluster *before* the HyperPod cluster is created. It is published only inside the
aws/sagemaker-hyperpod-cli git repository, so ``make hyperpod-chart`` fetches it at a pinned revision into
``vendor/`` and this construct deploys that folder as a chart asset. Without the folder the construct deploys
nothing and says so (a synth warning): the environment then relies on a chart installed outside CDK.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

RELEASE = "hyperpod-dependencies"
NAMESPACE = "kube-system"


@dataclass(frozen=True)
class HyperPodDependenciesProps:
    cluster: eks.ICluster
    region: str
    chart_dir: Path | None = None
    """Local copy of ``helm_chart/HyperPodHelmChart`` with its ``charts/`` vendored. Default: none, so the chart is
    treated as installed outside CDK."""


class HyperPodDependencies(Construct):
    """Deploys the chart when ``chart_dir`` exists. ``chart`` is the ``HelmChart`` or ``None``."""

    def __init__(self, scope: Construct, id: str, *, props: HyperPodDependenciesProps) -> None:
        super().__init__(scope, id)
        self.chart: eks.HelmChart | None = None
        if props.chart_dir is None or not (props.chart_dir / "Chart.yaml").is_file():
            cdk.Annotations.of(self).add_warning_v2(
                "kvtiers:hyperpod-chart-external",
                "HyperPod dependency chart not vendored (run `make hyperpod-chart`); the stack assumes it is "
                "installed on the EKS cluster before the HyperPod cluster is created.",
            )
            return
        asset = s3_assets.Asset(self, "ChartAsset", path=str(props.chart_dir))
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=props.cluster,
            chart_asset=asset,
            release=RELEASE,
            namespace=NAMESPACE,
            create_namespace=False,
            atomic=True,
            wait=False,
            timeout=cdk.Duration.minutes(10),
            # Subchart values are keyed by the subchart name, not the enable flag (sagemaker-hyperpod-cli#289).
            values={"health-monitoring-agent": {"region": props.region}, "global": {"region": props.region}},
        )

    @property
    def installed_by_cdk(self) -> bool:
        return self.chart is not None
