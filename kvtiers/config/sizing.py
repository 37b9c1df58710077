"""Derived facts of an environment: memory budgets, GPU placement, cache capacity per tier and the L2 decision.

This module holds the sizing model's constants and the types of its results. The schema computes the results once,
when an :class:`~kvtiers.config.schema.Environment` is validated (a config whose pods do not fit is invalid), so
nothing here needs the schema. Synth-time validation, the charts (pod memory requests and limits, LMCache's L1 size)
and ``kvtiers plan`` all read the :class:`EnvironmentSizing` built there.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1000**3
ACTIVATION_RESERVE_GIB = 2
"""GPU memory per GPU that vLLM keeps for activations and CUDA graphs beyond the weights (an estimate)."""


@dataclass(frozen=True)
class EndpointSizing:
    name: str
    model: str
    kv_bytes_per_token: int
    weight_bytes: int
    gpus_per_replica: int
    l0_tokens: int
    """GPU prefix-cache capacity per replica after weights at the configured utilization."""
    l1_bytes: int
    """LMCache L1 pool per replica: ``l1_gib`` per GPU worker."""
    l1_tokens: int
    l2_enabled: bool
    l2_reason: str
    pod_memory_gib: int
    """Pod memory request = limit: the L1 pool + vLLM itself + the memory-backed /dev/shm."""
    pods_per_node: int
    """Replicas per node when spread evenly over the group's nodes."""
    vllm_host_gib: int = 0
    """vLLM's host memory in the pod: ``vllm_overhead_gib`` plus ``VLLM_HOST_GIB_PER_EXTRA_RANK`` per extra GPU."""
    model_disk_gib: int = 0
    """Size limit of the pod's model directory (node ephemeral storage)."""


@dataclass(frozen=True)
class NodeBudget:
    group: str
    instance_type: str
    memory_gib: int
    tiered_storage_gib: float
    reserved_gib: int
    curvine_gib: int
    pods_gib: int
    """Endpoint pods on the fullest node: its GPUs given to the pods with the most host memory per GPU."""
    gpus: int
    gpus_used: int
    """GPUs per node the endpoints need, spread evenly over the group's nodes."""

    @property
    def free_gib(self) -> float:
        return self.memory_gib - self.tiered_storage_gib - self.reserved_gib - self.curvine_gib - self.pods_gib


@dataclass(frozen=True)
class EnvironmentSizing:
    endpoints: tuple[EndpointSizing, ...]
    nodes: tuple[NodeBudget, ...]
    l2_capacity_bytes: int
    """Usable Curvine capacity across workers (up to the eviction high watermark)."""
    curvine_workers: int

    def endpoint(self, name: str) -> EndpointSizing:
        return next(e for e in self.endpoints if e.name == name)

    def l2_tokens(self, endpoint: str) -> int:
        return self.l2_capacity_bytes // self.endpoint(endpoint).kv_bytes_per_token
