"""A stand-in for the HyperPod dependency chart, generated in the folder layout of a ``make hyperpod-chart``
checkout, so that CI synthesizes, lints and nag-checks the vendored path without the network.

The device-plugin subcharts read their tolerations from the same values path as the pinned upstream charts (NVIDIA
k8s-device-plugin v0.16.1 ``templates/daemonset-device-plugin.yml``: ``.Values.tolerations``; aws/eks-charts
``aws-efa-k8s-device-plugin`` v0.5.20 ``templates/daemonset.yaml``: a fixed ``CriticalAddonsOnly`` plus
``.Values.tolerations``); the health-monitoring agent tolerates everything in its template, as upstream does. The
templates are written here from those facts, not copied.
"""

from __future__ import annotations

from pathlib import Path

from kvtiers.constructs.hyperpod_dependencies import CHART_PATH

REVISION = "011ca927123e02b35a399935bbb3ab1905fe33c7"

DAEMONSET = """apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {name}
  namespace: kube-system
spec:
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: plugin
          image: example.invalid/{name}:stand-in
      tolerations:
{tolerations}
"""
FROM_VALUES = "        {{- with .Values.tolerations }}\n        {{- toYaml . | nindent 8 }}\n        {{- end }}"
SUBCHARTS = {
    "nvidia-device-plugin": FROM_VALUES,
    "aws-efa-k8s-device-plugin": "        - key: CriticalAddonsOnly\n          operator: Exists\n" + FROM_VALUES,
    "health-monitoring-agent": "        - operator: Exists\n          effect: NoSchedule\n        - operator: Exists\n          effect: NoExecute",
}


def write_stand_in_checkout(root: Path, revision: str = REVISION) -> Path:
    """Write ``root/.git/HEAD`` and the chart below ``root``; returns the chart folder."""
    (root / ".git").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "HEAD").write_text(revision + "\n")
    chart = root / CHART_PATH
    dependencies = "".join(
        f"  - name: {name}\n    version: 0.1.0\n    repository: file://charts/{name}\n" for name in SUBCHARTS
    )
    (chart / "charts").mkdir(parents=True, exist_ok=True)
    (chart / "Chart.yaml").write_text(
        f"apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\ndependencies:\n{dependencies}"
    )
    (chart / "values.yaml").write_text("global:\n  region: ''\n")
    for name, tolerations in SUBCHARTS.items():
        sub = chart / "charts" / name
        (sub / "templates").mkdir(parents=True, exist_ok=True)
        (sub / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: 0.1.0\n")
        (sub / "values.yaml").write_text("tolerations: []\n")
        (sub / "templates" / "daemonset.yaml").write_text(DAEMONSET.format(name=name, tolerations=tolerations))
    return chart
