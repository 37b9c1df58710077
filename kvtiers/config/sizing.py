"""Derived facts of an environment's endpoints: cache capacity per tier, pod memory and the L2 decision.

This module holds the sizing model's constants and the types of its results. The schema computes the results once,
when an :class:`~kvtiers.config.schema.Environment` is validated, so nothing here needs the schema. Whether the pods
fit their nodes is not a fact of the file: the HyperPod cluster's placement (:mod:`kvtiers.placement`) checks it at
synth, and ``kvtiers plan`` reads it there.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1000**3


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
    vllm_host_gib: int = 0
    """vLLM's host memory in the pod: ``vllm_overhead_gib`` plus ``VLLM_HOST_GIB_PER_EXTRA_RANK`` per extra GPU."""
    model_disk_gib: int = 0
    """Size limit of the pod's model directory (node ephemeral storage)."""


@dataclass(frozen=True)
class EnvironmentSizing:
    endpoints: tuple[EndpointSizing, ...]
    l2_capacity_bytes: int
    """Usable Curvine capacity across workers (up to the eviction high watermark)."""
    curvine_workers: int

    def endpoint(self, name: str) -> EndpointSizing:
        return next(e for e in self.endpoints if e.name == name)

    def l2_tokens(self, endpoint: str) -> int:
        return self.l2_capacity_bytes // self.endpoint(endpoint).kv_bytes_per_token
