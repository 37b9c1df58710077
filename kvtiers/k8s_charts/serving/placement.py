"""What one endpoint puts on HyperPod nodes, as :mod:`kvtiers.placement` workloads: its engines (the vLLM
container's requests as the chart renders them: its init container asks less; and the node disk of its emptyDirs)
and, unless they are required off the HyperPod nodes, its routers (whose tokenizer copy asks less than the router)."""

from __future__ import annotations

import math

from kvtiers.k8s_charts.names import engine_name, router_name
from kvtiers.k8s_charts.serving.endpoint import ENGINE_WRITABLE
from kvtiers.k8s_charts.serving.props import Engine, Router
from kvtiers.k8s_charts.serving.router import ROUTER_RESOURCES, ROUTER_WRITABLE
from kvtiers.placement import MIB_PER_GIB, Workload, mebibytes, millicores, pod


def engine_disk_gib(engine: Engine) -> int:
    """Node disk the engine pod's emptyDirs may fill: the model copy and every writable path."""
    scratch_mib = sum(mebibytes(limit) for _path, limit, _why in ENGINE_WRITABLE.values())
    return engine.sizing.model_disk_gib + math.ceil(scratch_mib / MIB_PER_GIB)


def engine_workload(endpoint: str, engine: Engine, *, namespace: str) -> Workload:
    """The endpoint's engine Deployment on its instance group."""
    return Workload(
        name=f"Deployment {namespace}/{engine_name(endpoint)}",
        groups=(engine.instance_group,),
        spread="gpu_bound",
        replicas=engine.replicas,
        # The Deployment's topology spread on the node name (maxSkew 1, DoNotSchedule).
        spread_evenly=True,
        engines_of=endpoint,
        pod=pod(
            cpu_millis=engine.cpu * 1000,
            memory_mib=engine.sizing.memory_gib * MIB_PER_GIB,
            gpus=engine.gpus,
            disk_gib=engine_disk_gib(engine),
        ),
    )


def router_workload(endpoint: str, router: Router, *, namespace: str, groups: tuple[str, ...]) -> Workload | None:
    """The endpoint's routers on any node of ``groups`` (the HyperPod groups), or None when they must run off them."""
    if router.off_hyperpod_required:
        return None
    scratch_mib = sum(mebibytes(limit) for _path, limit in ROUTER_WRITABLE.values())
    return Workload(
        name=f"Deployment {namespace}/{router_name(endpoint)}",
        groups=groups,
        spread="any_node",
        replicas=router.replica_count,
        pod=pod(
            cpu_millis=millicores(ROUTER_RESOURCES["cpu"]),
            memory_mib=math.ceil(mebibytes(ROUTER_RESOURCES["memory"])),
            disk_gib=math.ceil(scratch_mib / MIB_PER_GIB),
        ),
    )
