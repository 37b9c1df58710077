"""What an operator endpoint puts on HyperPod nodes, as a :mod:`kvtiers.placement` workload: its workers at the
requests of ``spec.worker.resources``, on every group of its instance type (the operator places by
``instanceType``, not by group).

The operator's own additions to the worker pod are not public (its code is closed): an nginx sidecar whenever metrics
are on (AWS's request-limits page) and, for Hugging Face weights, a download init container. Their requests are not
counted; only a real cluster shows them (``docs/placement-contract.md``).
"""

from __future__ import annotations

from collections.abc import Mapping

from kvtiers.k8s_charts.hyperpod_operator.endpoint import OperatorEndpoint
from kvtiers.placement import MIB_PER_GIB, Workload, pod


def operator_workload(endpoint: OperatorEndpoint, *, group_types: Mapping[str, str]) -> Workload:
    """The endpoint's worker pods on the groups (name -> instance type) of its instance type."""
    return Workload(
        name=f"InferenceEndpointConfig {endpoint.namespace}/{endpoint.object_name}",
        groups=tuple(g for g, t in group_types.items() if t == endpoint.instance_type),
        spread="gpu_bound",
        replicas=endpoint.replicas,
        pod=pod(
            cpu_millis=endpoint.cpu * 1000,
            memory_mib=endpoint.memory_gib * MIB_PER_GIB,
            gpus=endpoint.gpus,
        ),
        source="the InferenceEndpointConfig's spec.worker.resources (operator sidecars not public)",
        engines_of=endpoint.name,
    )
