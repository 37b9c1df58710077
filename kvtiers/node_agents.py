"""The pods EKS and HyperPod run on every HyperPod node, and what the kubelet keeps for itself, from their sources at
the pinned versions (``docs/placement-contract.md`` cites each file and line).

Each agent's pod is the sum of its containers' requests (none has an init container that asks more). Agents whose
chart asks for nothing still take one of the node's pods. A HyperPod node's kubelet settings are not public: the
reserve here is the EKS-optimized AMI's (nodeadm), which only a real node's ``status.allocatable`` confirms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvtiers.instance_types import InstanceType
from kvtiers.placement import KubeletReserve, NodeResources, Workload, pod

EVERY_G6E: frozenset[str] | None = None


@dataclass(frozen=True, kw_only=True)
class NodeAgent:
    """A DaemonSet of EKS or HyperPod on HyperPod nodes.

    :param name: ``DaemonSet <namespace>/<name>``.
    :param pod: one pod's requests.
    :param source: the chart or manifest and version its requests come from.
    :param instance_types: the instance types its node affinity selects. @default every G6e type
    """

    name: str
    pod: NodeResources
    source: str
    instance_types: frozenset[str] | None = EVERY_G6E

    def workload(self, groups: Mapping[str, str]) -> Workload | None:
        """Its pods on ``groups`` (group name -> instance type), or None when it selects none of them."""
        selected = tuple(g for g, t in groups.items() if self.instance_types is None or t in self.instance_types)
        if not selected:
            return None
        return Workload(name=self.name, groups=selected, spread="every_node", pod=self.pod, source=self.source)


def _agent(name: str, source: str, *, cpu_millis: int = 0, memory_mib: int = 0, **kw: frozenset[str]) -> NodeAgent:
    return NodeAgent(name=name, pod=pod(cpu_millis=cpu_millis, memory_mib=memory_mib), source=source, **kw)


EKS_CORE_AGENTS = (
    _agent("DaemonSet kube-system/aws-node", "amazon-vpc-cni-k8s v1.21.1 (3 containers x 25m)", cpu_millis=75),
    _agent("DaemonSet kube-system/kube-proxy", "EKS kube-proxy manifest (100m)", cpu_millis=100),
    _agent("DaemonSet kube-system/eks-pod-identity-agent", "eks-pod-identity-agent chart (no requests)"),
)
"""The add-ons HyperPod needs on every node (``EksCluster`` installs them; an imported cluster has them too)."""

HYPERPOD_CHART_AGENTS = (
    _agent(
        "DaemonSet aws-hyperpod/health-monitoring-agent",
        "sagemaker-hyperpod-cli 011ca927 health-monitoring-agent (500m, 512Mi)",
        cpu_millis=500,
        memory_mib=512,
    ),
    _agent("DaemonSet kube-system/nvidia-device-plugin", "NVIDIA k8s-device-plugin 0.16.1 (no requests)"),
    _agent(
        "DaemonSet kube-system/aws-efa-k8s-device-plugin",
        "eks-charts aws-efa-k8s-device-plugin v0.5.20 (10m, 20Mi), on the EFA sizes HyperPod's values list",
        cpu_millis=10,
        memory_mib=20,
        instance_types=frozenset(
            {"ml.g6e.8xlarge", "ml.g6e.12xlarge", "ml.g6e.16xlarge", "ml.g6e.24xlarge", "ml.g6e.48xlarge"}
        ),
    ),
)
"""The HyperPod dependency chart's DaemonSets on G6e nodes."""

NODE_AGENTS = (*EKS_CORE_AGENTS, *HYPERPOD_CHART_AGENTS)
"""What every HyperPod cluster runs on its nodes (registered by :class:`~kvtiers.constructs.HyperPodCluster`)."""

EBS_CSI_NODE = _agent(
    "DaemonSet kube-system/ebs-csi-node",
    "aws-ebs-csi-driver 1.50.1 chart (3 containers x 10m, 40Mi)",
    cpu_millis=30,
    memory_mib=120,
)
"""The EBS CSI add-on's node plugin (registered by :class:`~kvtiers.constructs.curvine.CurvineL2`, which adds it)."""

SECRETS_STORE_AGENTS = (
    _agent(
        "DaemonSet kube-system/secrets-store-csi-driver",
        "secrets-store-csi-driver 1.6.0 chart (50m, 100Mi + 2 x 10m, 20Mi)",
        cpu_millis=70,
        memory_mib=140,
    ),
    _agent(
        "DaemonSet kube-system/secrets-store-csi-driver-provider-aws",
        "secrets-store-csi-driver-provider-aws 3.1.1 chart (50m, 100Mi)",
        cpu_millis=50,
        memory_mib=100,
    ),
)
"""ASCP's DaemonSets (registered by the endpoints that mount secrets)."""

OPERATOR_AGENTS = (
    _agent(
        "DaemonSet kube-system/s3-csi-node",
        "mountpoint-s3-csi-driver 1.14.1 chart (3 containers x 10m, 40Mi)",
        cpu_millis=30,
        memory_mib=120,
    ),
    _agent(
        "DaemonSet kube-system/fsx-csi-node",
        "aws-fsx-csi-driver 1.7.0 chart 1.14.0 (10m, 40Mi + 2 x 10m, 32Mi)",
        cpu_millis=30,
        memory_mib=104,
    ),
)
"""The CSI node plugins the Inference Operator's prerequisites add (registered by the operator endpoints)."""


# nodeadm's kubelet reserve (awslabs/amazon-eks-ami v20260724, nodeadm/internal/kubelet/config.go).
_CPU_RESERVE_STEPS = ((1, 60), (1, 10), (2, 5))
"""(cores, millicores each): 6 % of the first core, 1 % of the second, 0.5 % of the third and fourth."""
_CPU_RESERVE_REST = 2.5
"""0.25 % of every further core."""
VM_MEMORY_OVERHEAD_FRACTION = 0.075
"""The kernel's and firmware's share of an instance's memory: Karpenter's default ``vmMemoryOverheadPercent``, with
which its published allocatable memory of every G6e size equals nodeadm's (aws/karpenter-provider-aws
``website/content/en/preview/reference/instance-types.md``)."""
KUBE_RESERVED_MIB_PER_POD = 11
KUBE_RESERVED_BASE_MIB = 255
EVICTION_MEMORY_MIB = 100
EVICTION_DISK_FRACTION = 0.10
"""``nodefs.available`` 10 %: the kubelet evicts before its disk is this full."""
KUBE_RESERVED_DISK_GIB = 1


def kubelet_reserve(instance: InstanceType, *, threads_per_core: int) -> KubeletReserve:
    """nodeadm's reserve for ``instance``: CPU over the vCPUs the node has at ``threads_per_core``, memory from its
    maximum pods (the VPC CNI's ENI formula, ``instance.max_pods``)."""
    cores = instance.vcpus * threads_per_core // 2
    cpu = 0.0
    left = cores
    for count, millis in _CPU_RESERVE_STEPS:
        used = min(left, count)
        cpu += used * millis
        left -= used
    cpu += left * _CPU_RESERVE_REST
    return KubeletReserve(
        max_pods=instance.max_pods,
        cpu_millis=int(cpu),
        memory_mib=KUBE_RESERVED_MIB_PER_POD * instance.max_pods + KUBE_RESERVED_BASE_MIB,
        memory_overhead_fraction=VM_MEMORY_OVERHEAD_FRACTION,
        eviction_memory_mib=EVICTION_MEMORY_MIB,
        eviction_disk_fraction=EVICTION_DISK_FRACTION,
        disk_gib=KUBE_RESERVED_DISK_GIB,
    )
