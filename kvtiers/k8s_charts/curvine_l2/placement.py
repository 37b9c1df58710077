"""What the Curvine charts put on HyperPod nodes, as :mod:`kvtiers.placement` workloads: the requests the charts
render (each container's :class:`~kvtiers.k8s_charts.curvine_l2.props.Resources`, requests = limits), the groups
their node affinity allows and how their rules spread them. ``tests/test_placement_rendered.py`` reads the rendered
objects independently and holds them equal."""

from __future__ import annotations

from kvtiers.k8s_charts.curvine_l2.charts import CSI_CONTROLLER_TMP_GIB
from kvtiers.k8s_charts.curvine_l2.props import CurvineCluster, Resources
from kvtiers.k8s_charts.names import (
    CURVINE_CSI_CONTROLLER,
    CURVINE_CSI_NODE,
    CURVINE_JANITOR,
    CURVINE_MASTER,
    CURVINE_WORKER,
)
from kvtiers.placement import MIB_PER_GIB, NodeResources, Workload, pod

CSI_NODE_SIDECARS = 2
"""node-driver-registrar and liveness-probe beside the node plugin."""
CSI_CONTROLLER_SIDECARS = 2
"""csi-provisioner and liveness-probe beside the controller plugin."""


def _pod(*containers: Resources, nvme_gb: int = 0, disk_gib: int = 0) -> NodeResources:
    return pod(
        cpu_millis=sum(c.millicpu for c in containers),
        memory_mib=sum(c.memory_gib for c in containers) * MIB_PER_GIB,
        nvme_gb=nvme_gb,
        disk_gib=disk_gib,
    )


def curvine_workloads(cluster: CurvineCluster) -> tuple[Workload, ...]:
    """Every Curvine pod on HyperPod nodes: the CSI node plugin on every node, a worker (and its NVMe cache) on every
    node of the worker groups, the masters one to a node there, and the CSI controller on any node unless it is
    required off them (``controller_off_hyperpod``)."""
    r = cluster.resources
    ns = cluster.namespace
    workers = cluster.worker_group_names
    every = cluster.hyperpod_groups
    sidecar = r.sidecar
    controller = Workload(
        name=f"Deployment {cluster.namespace}/{CURVINE_CSI_CONTROLLER}",
        groups=every,
        spread="any_node",
        pod=_pod(r.csi_controller, *(sidecar,) * CSI_CONTROLLER_SIDECARS, disk_gib=CSI_CONTROLLER_TMP_GIB),
    )
    return (
        Workload(
            name=f"DaemonSet {ns}/{CURVINE_CSI_NODE}",
            groups=every,
            spread="every_node",
            pod=_pod(cluster.csi_node_plugin_resources, *(sidecar,) * CSI_NODE_SIDECARS),
        ),
        Workload(
            name=f"DaemonSet {ns}/{CURVINE_WORKER}",
            groups=workers,
            spread="every_node",
            # The NVMe check init container asks less than the worker, so the worker's requests are the pod's.
            pod=_pod(r.worker, nvme_gb=cluster.capacity_gb + cluster.reserved_gb),
        ),
        Workload(
            name=f"StatefulSet {ns}/{CURVINE_MASTER}",
            groups=workers,
            spread="one_per_node",
            replicas=cluster.masters,
            pod=_pod(r.master),
        ),
        *(() if cluster.controller_off_hyperpod else (controller,)),
    )


def janitor_workload(cluster: CurvineCluster, *, serving_namespace: str) -> Workload:
    """The L2 janitor (one replica, on any HyperPod node)."""
    return Workload(
        name=f"Deployment {serving_namespace}/{CURVINE_JANITOR}",
        groups=cluster.hyperpod_groups,
        spread="any_node",
        pod=_pod(cluster.resources.sidecar),
    )
