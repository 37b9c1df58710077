"""The pods EKS and HyperPod put on HyperPod nodes, and what the kubelet keeps for itself, from their sources at the
pinned versions (``docs/placement-contract.md`` cites each file and line).

Two kinds: DaemonSets, one pod on every node they select; and controllers (Deployments) that no node affinity keeps
off a HyperPod node, which may all land on one node of a group that no taint protects (a NoSchedule or NoExecute
taint such as ``kvtiers.io/dedicated`` keeps them off: none tolerates it). Each pod asks the sum of its containers'
requests (no init container asks more); one whose chart asks for nothing still takes one of the node's pods. A
HyperPod node's kubelet settings are not public: the reserve here is the EKS-optimized AMI's (nodeadm), which only a
real node's ``status.allocatable`` confirms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvtiers.catalog.instance_types import InstanceType
from kvtiers.placement import KubeletReserve, NodeResources, Workload, pod


@dataclass(frozen=True, kw_only=True)
class NodeAgent:
    """A DaemonSet of EKS or HyperPod on HyperPod nodes.

    :param name: ``DaemonSet <namespace>/<name>``.
    :param pod: one pod's requests.
    :param source: the chart or manifest and version its requests come from.
    :param instance_types: the instance types its node affinity selects. @default every G6e type
    :param replicas: a controller's pods, which may land on any node of a group no taint protects. @default None (a
        DaemonSet)
    """

    name: str
    pod: NodeResources
    source: str
    instance_types: frozenset[str] | None = None
    replicas: int | None = None

    def workload(self, groups: Mapping[str, GroupFacts]) -> Workload | None:
        """Its pods on ``groups``, or None when it lands on none of them."""
        selected = tuple(
            name
            for name, facts in groups.items()
            if (self.instance_types is None or facts.instance_type in self.instance_types)
            and (self.replicas is None or not facts.repels_controllers)
        )
        if not selected:
            return None
        if self.replicas is None:
            return Workload(name=self.name, groups=selected, spread="every_node", pod=self.pod, source=self.source)
        return Workload(
            name=self.name, groups=selected, spread="any_node", replicas=self.replicas, pod=self.pod, source=self.source
        )


@dataclass(frozen=True)
class GroupFacts:
    """What decides whether an agent lands on a group."""

    instance_type: str
    repels_controllers: bool
    """A NoSchedule or NoExecute taint of the group's own, which no EKS or HyperPod controller tolerates."""


def _agent(
    name: str,
    source: str,
    *,
    cpu_millis: int = 0,
    memory_mib: int = 0,
    instance_types: frozenset[str] | None = None,
    replicas: int | None = None,
) -> NodeAgent:
    return NodeAgent(
        name=name,
        pod=pod(cpu_millis=cpu_millis, memory_mib=memory_mib),
        source=source,
        instance_types=instance_types,
        replicas=replicas,
    )


EKS_CORE_AGENTS = (
    _agent(
        "DaemonSet kube-system/aws-node",
        "amazon-vpc-cni-k8s v1.21.1 (aws-node and aws-eks-nodeagent 25m each; the init container's 25m is no more)",
        cpu_millis=50,
    ),
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

HYPERPOD_CHART_CONTROLLERS = (
    _agent("Deployment kubeflow/training-operator", "sagemaker-hyperpod-cli 011ca927 (no requests)", replicas=1),
    _agent("Deployment mpi-operator/mpi-operator", "sagemaker-hyperpod-cli 011ca927 (resources {})", replicas=1),
)
"""The dependency chart's controllers: no node affinity, no requests, a pod each."""

NODE_AGENTS = (*EKS_CORE_AGENTS, *HYPERPOD_CHART_AGENTS, *HYPERPOD_CHART_CONTROLLERS)
"""What every HyperPod cluster runs on its nodes (registered by :class:`~kvtiers.constructs.HyperPodCluster`)."""

EBS_CSI_NODE = _agent(
    "DaemonSet kube-system/ebs-csi-node",
    "aws-ebs-csi-driver 1.50.1 chart (3 containers x 10m, 40Mi)",
    cpu_millis=30,
    memory_mib=120,
)
"""The EBS CSI add-on's node plugin (registered by :class:`~kvtiers.constructs.curvine.CurvineL2`, which adds it)."""

EBS_CSI_CONTROLLER = _agent(
    "Deployment kube-system/ebs-csi-controller",
    "aws-ebs-csi-driver 1.50.1 chart (ebs-plugin, provisioner, attacher, resizer, liveness-probe x 10m, 40Mi; no "
    "snapshotter without the snapshot CRDs)",
    cpu_millis=50,
    memory_mib=200,
    replicas=2,
)
"""The EBS CSI add-on's controller, which tolerates only ``CriticalAddonsOnly`` and NoExecute for 300 s."""

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

OPERATOR_CONTROLLERS = (
    _agent(
        "Deployment hyperpod-inference-system/hyperpod-inference-controller-manager",
        "sagemaker-hyperpod-cli 011ca927 inference-operator config/manager/manager.yaml (10m, 64Mi)",
        cpu_millis=10,
        memory_mib=64,
        replicas=1,
    ),
    *(
        _agent(
            f"Deployment hyperpod-inference-system/{name}",
            "kedacore/charts keda 2.17.1 values (100m, 100Mi)",
            cpu_millis=100,
            memory_mib=100,
            replicas=1,
        )
        for name in ("keda-operator", "keda-operator-metrics-apiserver", "keda-admission-webhooks")
    ),
    _agent(
        "Deployment hyperpod-inference-system/hyperpod-inference-alb",
        "aws-load-balancer-controller chart 1.13.2 (resources {})",
        replicas=2,
    ),
    _agent(
        "Deployment kube-system/metrics-server",
        "metrics-server chart 3.12.2 (100m, 200Mi)",
        cpu_millis=100,
        memory_mib=200,
        replicas=1,
    ),
    *(
        _agent(f"Deployment cert-manager/{name}", "cert-manager v1.18.2 chart (resources {})", replicas=1)
        for name in ("cert-manager", "cert-manager-webhook", "cert-manager-cainjector")
    ),
)
"""The controllers of the Inference Operator add-on and its prerequisites (the add-on path runs the operator's
controller, KEDA and its load balancer controller: awslabs/awsome-distributed-ai#947), with the requests of the
charts the add-ons package; not public for the add-ons themselves."""


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


def kubelet_reserve(instance: InstanceType, *, threads_per_core: int, max_pods: int | None = None) -> KubeletReserve:
    """nodeadm's reserve for ``instance``: CPU over the vCPUs the node has at ``threads_per_core``, memory from its
    maximum pods (``max_pods``, by default the VPC CNI's ENI formula, ``instance.max_pods``)."""
    pods = instance.max_pods if max_pods is None else max_pods
    cores = instance.vcpus * threads_per_core // 2
    cpu = 0.0
    left = cores
    for count, millis in _CPU_RESERVE_STEPS:
        used = min(left, count)
        cpu += used * millis
        left -= used
    cpu += left * _CPU_RESERVE_REST
    return KubeletReserve(
        max_pods=pods,
        cpu_millis=int(cpu),
        memory_mib=KUBE_RESERVED_MIB_PER_POD * pods + KUBE_RESERVED_BASE_MIB,
        memory_overhead_fraction=VM_MEMORY_OVERHEAD_FRACTION,
        eviction_memory_mib=EVICTION_MEMORY_MIB,
        eviction_disk_fraction=EVICTION_DISK_FRACTION,
        disk_gib=KUBE_RESERVED_DISK_GIB,
    )
