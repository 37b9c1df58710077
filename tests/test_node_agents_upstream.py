"""The agents and controllers the placement model counts on HyperPod nodes, against their charts at the pinned
versions (read from the upstream mirrors: ``make upstream-mirrors``; without them these skip and are counted)."""

from __future__ import annotations

import re

import yaml

from kvtiers.config.schema import DependencyChart
from kvtiers.node_agents import EBS_CSI_CONTROLLER, EBS_CSI_NODE, HYPERPOD_CHART_AGENTS
from tests.upstream import MIRRORED, require_upstream

CHART_REVISION = DependencyChart().revision
HYPERPOD_CHART = f"aws/sagemaker-hyperpod-cli@{CHART_REVISION}:helm_chart/HyperPodHelmChart"
EBS_CHART = "kubernetes-sigs/aws-ebs-csi-driver@helm-chart-aws-ebs-csi-driver-2.50.1:charts/aws-ebs-csi-driver"


def agent(suffix: str):
    return next(a for a in HYPERPOD_CHART_AGENTS if a.name.endswith(suffix))


def test_the_mirrored_chart_is_the_revision_the_app_deploys():
    assert MIRRORED["aws/sagemaker-hyperpod-cli"][0] == CHART_REVISION


def test_the_health_monitoring_agent_asks_what_the_model_counts_on_every_g6e():
    template = require_upstream(
        f"{HYPERPOD_CHART}/charts/health-monitoring-agent/templates/health-monitoring-agent.yaml"
    )
    # The first DaemonSet is the NVIDIA one (the second selects Inferentia and Trainium types only).
    nvidia = template.split("kind: DaemonSet", 2)[1]
    requests = re.search(r"requests:\s*\n\s*cpu: (\S+)\s*\n\s*memory: (\S+)", nvidia)
    assert requests is not None
    cpu, memory = requests.groups()
    expected = agent("health-monitoring-agent").pod
    assert (int(cpu.removesuffix("m")), int(memory.removesuffix("Mi"))) == (expected.cpu_millis, expected.memory_mib)
    assert all(f"- ml.g6e.{size}" in nvidia for size in ("2xlarge", "12xlarge", "48xlarge"))


def test_the_efa_plugin_lands_on_the_g6e_sizes_the_chart_lists():
    values = yaml.safe_load(require_upstream(f"{HYPERPOD_CHART}/values.yaml"))
    listed = {t for t in values["aws-efa-k8s-device-plugin"]["supportedInstanceLabels"]["values"] if ".g6e." in t}
    assert listed == agent("aws-efa-k8s-device-plugin").instance_types


def test_the_device_plugins_are_the_chart_versions_the_model_cites():
    chart = yaml.safe_load(require_upstream(f"{HYPERPOD_CHART}/Chart.yaml"))
    versions = {d["name"]: d["version"] for d in chart["dependencies"]}
    assert versions["nvidia-device-plugin"] in agent("nvidia-device-plugin").source
    assert versions["aws-efa-k8s-device-plugin"] in agent("aws-efa-k8s-device-plugin").source


def test_the_ebs_csi_node_and_controller_ask_what_the_model_counts():
    values = yaml.safe_load(require_upstream(f"{EBS_CHART}/values.yaml"))
    node, controller = values["node"], values["controller"]
    per_container = (int(node["resources"]["requests"]["cpu"].removesuffix("m")), 40)
    assert node["resources"]["requests"] == {"cpu": "10m", "memory": "40Mi"} == controller["resources"]["requests"]
    # The node plugin: ebs-plugin, node-driver-registrar, liveness-probe; the controller: ebs-plugin, provisioner,
    # attacher, resizer, liveness-probe (the snapshotter only where the snapshot CRDs are).
    assert (EBS_CSI_NODE.pod.cpu_millis, EBS_CSI_NODE.pod.memory_mib) == (3 * per_container[0], 3 * per_container[1])
    assert (EBS_CSI_CONTROLLER.pod.cpu_millis, EBS_CSI_CONTROLLER.pod.memory_mib) == (
        5 * per_container[0],
        5 * per_container[1],
    )
    assert EBS_CSI_CONTROLLER.replicas == controller["replicaCount"]
    template = require_upstream(f"{EBS_CHART}/templates/controller.yaml")
    assert values["sidecars"]["snapshotter"]["forceEnable"] is False
    assert 'APIVersions.Has "snapshot.storage.k8s.io/v1"' in template
